"""Replay of pixel observations that stores every frame once, as uint8 (Dopamine-style).

Only the newest frame of a stacked observation ``[stack * C, H, W]`` is stored; a sample rebuilds
both stacks with one `frame_stack_sample` call and the n-step return from the stored rewards and
flags. Each env owns a ring of ``capacity // num_envs`` slots; a sum tree
([`tritonrl.kernels.sumtree`][tritonrl.kernels.sumtree]) holds which slots are sampleable. See
docs/pages/pixels.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tritonrl.kernels.frame_stack import FLOAT_DTYPES, frame_stack_sample
from tritonrl.kernels.sumtree import (
    SumTree,
    geometry,
    leaves,
    leaves_for,
    new_sumtree,
    per_insert,
    per_sample,
    per_update,
    rebuild,
)
from tritonrl.kernels.validate import check_int, check_real
from tritonrl.toolkit.replay.buffer import ReplayBatch, ReplayBuffer
from tritonrl.toolkit.replay.frame_cursor import FrameCursor
from tritonrl.toolkit.replay.inputs import host_array, input_tensor, itemsize
from tritonrl.toolkit.replay.priorities import PrioritySchedule
from tritonrl.toolkit.replay.staging import Staging
from tritonrl.toolkit.replay.state import FORMAT, VERSION, check_config, load_tensors, read_meta

__all__ = ["FrameReplayBuffer", "PrioritizedFrameReplayBuffer"]


def _uint8_obs(name: str, value: Any, shape: tuple[int, ...]) -> torch.Tensor:
    """``value`` as a uint8 tensor of ``shape`` (not copied).

    Raises:
        TypeError: not uint8.
        ValueError: another shape.
    """
    t = value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))
    if t.dtype != torch.uint8:
        raise TypeError(
            f"{name} must be uint8 frames (a frame replay stores the env's bytes; pass its uint8 "
            f"observations, not a converted copy), got {t.dtype}"
        )
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")
    return t


class FrameReplayBuffer(ReplayBuffer):
    """Uniform replay of stacked uint8 frames, each frame stored once.

    Args:
        capacity: slots (frames), a multiple of ``num_envs``, at least ``stack + n_step`` per env;
            an episode end takes one slot more than its steps.
        obs_shape: ``(stack * C, H, W)``.
        stack: frames per observation (4 for Atari, 1 for MinAtar).
        obs_dtype: dtype of sampled observations: ``None`` -> ``training_dtype(device)``, or
            float32 / bfloat16.
        scale: multiplier of sampled frames (``1/255`` maps bytes to ``[0, 1]``).
        staging: ``"host"`` only.

    The other arguments are [`ReplayBuffer`][tritonrl.toolkit.replay.ReplayBuffer]'s. ``add`` assumes (does
    not check) a consistent stream: the next ``obs`` equals this ``next_obs`` where no episode ended,
    and stacks are zero-padded. ``sample`` is stratified, one transition per equal-count stratum.

    Raises:
        ValueError / TypeError: an argument is out of range or of the wrong type, or the storage
            does not fit in the device's free memory.
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        *,
        stack: int = 1,
        device: torch.device | str = "cpu",
        num_envs: int = 1,
        n_step: int = 1,
        gamma: float = 0.99,
        action_shape: tuple[int, ...] = (),
        action_dtype: torch.dtype = torch.int64,
        obs_dtype: torch.dtype | None = None,
        num_actions: int | Sequence[int] | None = None,
        scale: float = 1.0 / 255.0,
        staging: str = "host",
    ) -> None:
        self.stack = check_int("stack", stack, low=1)
        self.scale = check_real("scale", scale)
        super().__init__(
            capacity,
            obs_shape,
            device=device,
            num_envs=num_envs,
            n_step=n_step,
            gamma=gamma,
            action_shape=action_shape,
            action_dtype=action_dtype,
            obs_dtype=obs_dtype,
            staging=staging,
            num_actions=num_actions,
        )

    # ---- what differs from ReplayBuffer: the storage -------------------------------------------

    _checks_obs = False  # uint8 frames are always finite

    def _staging_class(self, staging: str) -> type[Staging] | None:
        if staging != "host":
            raise ValueError(
                f"staging={staging!r}: a frame replay has host staging only (add reads rewards and "
                "flags on the host; the n-step returns are computed when sampled)"
            )
        return None  # the slots and the cursor close the windows

    def _check_layout(self) -> None:
        if len(self.obs_shape) != 3 or self.obs_shape[0] % self.stack:
            raise ValueError(
                f"obs_shape must be (stack * C, H, W) with stack={self.stack}, got {self.obs_shape!r}"
            )
        capacity, num_envs = self._capacity, self.num_envs
        if capacity % num_envs:
            raise ValueError(f"capacity={capacity} must be a multiple of num_envs={num_envs}")
        self.ring = capacity // num_envs
        if self.ring < self.stack + self.n_step:
            raise ValueError(
                f"capacity={capacity} gives {self.ring} slots per env, fewer than stack + n_step = "
                f"{self.stack + self.n_step}"
            )
        self.frame_shape = (self.obs_shape[0] // self.stack, *self.obs_shape[1:])

    def _check_obs_dtype(self, obs_dtype: torch.dtype | None) -> None:
        if obs_dtype is not None and obs_dtype not in FLOAT_DTYPES:
            raise TypeError(f"obs_dtype must be None, torch.float32 or torch.bfloat16, got {obs_dtype!r}")

    def _allocate(self) -> None:
        """Allocate the slots, the cursor, the host mirror of valid slots and the slot tree."""
        N, dev, P = self._capacity, self.device, math.prod(self.frame_shape)
        self.frames = torch.zeros((N, P), dtype=torch.uint8, device=dev)
        self.depth = torch.zeros(N, dtype=torch.int32, device=dev)
        self.action = torch.zeros((N, *self.action_shape), dtype=self.action_dtype, device=dev)
        self.reward = torch.zeros(N, dtype=torch.float32, device=dev)
        self.terminated = torch.zeros(N, dtype=torch.bool, device=dev)
        self.truncated = torch.zeros(N, dtype=torch.bool, device=dev)
        self._cursor = FrameCursor.empty(self.num_envs)
        self._valid = np.zeros(N, dtype=np.bool_)  # host mirror of the tree's non-zero leaves
        self._tree = new_sumtree(N, dev)
        self._zero = torch.zeros(1, dtype=torch.float32, device=dev)
        acc = torch.float32 if dev.type == "mps" else torch.float64  # returns summed as host mode does
        self._acc_dtype = acc
        self._powers = torch.tensor([self.gamma ** float(j) for j in range(self.n_step)], dtype=acc).to(dev)
        self._discounts = torch.tensor(
            [self.gamma ** float(k) for k in range(self.n_step + 1)], dtype=torch.float64
        ).to(device=dev, dtype=torch.float32)
        self._offsets = torch.arange(self.n_step, device=dev)

    # ---- sizes ---------------------------------------------------------------------------------

    def _memory(self) -> dict[str, int]:
        return self.memory_bytes(
            self._capacity,
            self.obs_shape,
            stack=self.stack,
            action_shape=self.action_shape,
            action_dtype=self.action_dtype,
        )

    @classmethod
    def memory_bytes(
        cls,
        capacity: int,
        obs_shape: tuple[int, ...],
        *,
        stack: int = 1,
        action_shape: tuple[int, ...] = (),
        action_dtype: torch.dtype = torch.int64,
        **_: Any,
    ) -> dict[str, int]:
        """Bytes of the device tensors of these settings, by component (nothing is allocated)."""
        frame = math.prod(obs_shape) // stack
        g = geometry(leaves_for(capacity))
        return {
            "frames": capacity * frame,
            "depth": capacity * 4,
            "actions": capacity * math.prod(action_shape) * itemsize(action_dtype),
            "rewards and flags": capacity * 6,
            "slot tree": 4 * (g.sum_size + g.min_size + g.P) + 4 * 3,
        }

    @property
    def pending(self) -> int:
        """Started transitions whose n-step window is still open (a Python int)."""
        return sum(self._cursor.pending(e, self.n_step) for e in range(self.num_envs))

    def valid_indices(self) -> torch.Tensor:
        """int64 (CPU): the slot rows `sample` may return now, ascending."""
        return torch.from_numpy(np.flatnonzero(self._valid))

    # ---- ingestion -----------------------------------------------------------------------------

    def add(
        self,
        obs: Any,
        action: Any,
        reward: Any,
        next_obs: Any,
        terminated: Any,
        truncated: Any,
        *,
        check: bool = True,
    ) -> None:
        """Add one vector step: every argument has leading dim ``E = num_envs``.

        Args:
            obs: uint8 ``[E, *obs_shape]`` (its newest frame ``obs[:, -C:]`` is stored).
            action: ``[E, *action_shape]`` as ``action_dtype``.
            reward: ``[E]``, finite.
            next_obs: uint8 like ``obs``; the real final one at an episode end.
            terminated: ``[E]`` bool.
            truncated: ``[E]`` bool.
            check: check the values ([`inputs`][tritonrl.toolkit.replay.buffer.ReplayBuffer.inputs]).

        Raises:
            TypeError: non-uint8 observations or another wrong dtype.
            ValueError: a wrong shape, or a bad value (``check``, host inputs); nothing is added.
        """
        E, shape = self.num_envs, (self.num_envs, *self.obs_shape)
        obs_t = _uint8_obs("obs", obs, shape)
        next_t = _uint8_obs("next_obs", next_obs, shape)
        act_t = input_tensor("action", action, (E, *self.action_shape), self.action_dtype)
        if check:  # before the host reads below: their errors do not name the entry
            self._check_values("add", obs_t, act_t, reward, next_t)
        rew = host_array("reward", reward, (E,), "real")
        term = host_array("terminated", terminated, (E,), "bool")
        trunc = host_array("truncated", truncated, (E,), "bool")
        done = term | trunc
        rows, depths, ranges = self._cursor.advance(done, self.ring, self.stack, self.n_step)
        self._write(obs_t, next_t, act_t, rew, term, trunc, rows, depths)
        valid_on, valid_off = ranges
        self._set_leaves(valid_on, valid_off)
        self._steps += 1

    def extend(self, *args: Any, **kwargs: Any) -> None:
        """Not available: raises ``TypeError`` (one vector step per `add`)."""
        raise TypeError("a frame replay takes one vector step per add; it has no extend")

    def _write(
        self,
        obs: torch.Tensor,
        next_obs: torch.Tensor,
        action: torch.Tensor,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        rows: list[int],
        depths: list[int],
    ) -> None:
        """Write each env's step slot (``rows[:E]``) and its preview / final slot (``rows[E:]``)."""
        E, C, dev = self.num_envs, self.frame_shape[0], self.device
        idx = torch.tensor(rows, dtype=torch.int64).to(dev)
        newest = torch.cat([obs[:, -C:].reshape(E, -1), next_obs[:, -C:].reshape(E, -1)]).to(dev)
        self.frames.index_copy_(0, idx, newest)
        self.depth.index_copy_(0, idx, torch.tensor(depths, dtype=torch.int32).to(dev))
        self.action.index_copy_(0, idx[:E], action.to(device=dev, dtype=self.action_dtype))
        zeros = np.zeros(E, np.float32)
        r = np.concatenate([reward.astype(np.float32, copy=False), zeros])
        self.reward.index_copy_(0, idx, torch.from_numpy(r).to(dev))
        no = np.zeros(E, np.bool_)
        self.terminated.index_copy_(0, idx, torch.from_numpy(np.concatenate([terminated, no])).to(dev))
        self.truncated.index_copy_(0, idx, torch.from_numpy(np.concatenate([truncated, no])).to(dev))

    def _set_leaves(self, on: list[tuple[int, int]], off: list[tuple[int, int]]) -> None:
        """Clear the rows ``[a, b)`` of ``off``, then set those of ``on`` (a row may be in both)."""
        valid, tree = self._valid, self._tree
        gone = [(a, b) for a, b in off if valid[a:b].any()]
        if gone:
            keep = tree.max_priority.clone()
            tree.max_priority.zero_()  # a leaf of 0 ** 1 = 0: never sampled
            for a, b in gone:
                per_insert(tree, a, b - a, alpha=1.0)
                self._size -= int(np.count_nonzero(valid[a:b]))
                valid[a:b] = False
            tree.max_priority.copy_(keep)
        for a, b in on:
            self._fresh(a, b)
            self._size += b - a - int(np.count_nonzero(valid[a:b]))
            valid[a:b] = True

    def _fresh(self, a: int, b: int) -> None:
        """Leaves ``[a, b)`` of newly valid slots: 1 for uniform sampling."""
        per_insert(self._tree, a, b - a, alpha=1.0)  # max_priority stays 1: 1 ** 1

    # ---- sampling ------------------------------------------------------------------------------

    def _uniforms(self, batch_size: int, generator: torch.Generator | None) -> torch.Tensor:
        if generator is None:
            return torch.rand(batch_size, device=self.device)
        return torch.rand(batch_size, generator=generator, device=generator.device).to(self.device)

    def _draw(self, uniforms: torch.Tensor) -> torch.Tensor:
        """Slot rows of the tree's descents for ``uniforms``; a rounding miss takes the first valid slot."""
        tree, N = self._tree, self._capacity
        with np.errstate(divide="ignore", invalid="ignore"):  # unused weights over a min leaf of 0 (CPU)
            idx, _ = per_sample(tree, uniforms, 0.0, N)
            first, _ = per_sample(tree, self._zero, 0.0, N)
        return torch.where(leaves(tree).index_select(0, idx) > 0, idx, first)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> ReplayBatch:
        """``batch_size`` valid transitions, one per equal-count stratum (weights 1).

        Raises:
            ValueError: empty buffer, or ``batch_size`` not in ``[1, len(self)]``.
        """
        self._check_batch_size(batch_size)
        idx = self._draw(self._uniforms(batch_size, generator))
        return self._gather(idx, torch.ones(batch_size, device=self.device))

    def _gather(self, idx: torch.Tensor, weights: torch.Tensor) -> ReplayBatch:
        """Transitions starting at slot rows ``idx`` (int64 ``[B]``), both stacks in one gather."""
        B, n, ring = idx.shape[0], self.n_step, self.ring
        base = idx - idx.remainder(ring)
        window = base[:, None] + (idx.remainder(ring)[:, None] + self._offsets).remainder(ring)  # [B, n]
        flat = window.reshape(-1)
        r = self.reward.index_select(0, flat).view(B, n).to(self._acc_dtype)
        term = self.terminated.index_select(0, flat).view(B, n)
        done = term | self.truncated.index_select(0, flat).view(B, n)
        # alive[:, j]: no episode end in slots 0 .. j - 1 of the window
        alive = torch.ones(B, n, dtype=torch.bool, device=self.device)
        if n > 1:
            alive[:, 1:] = ~done[:, :-1].cumsum(1, dtype=torch.int32).bool()
        ret = r[:, 0] * self._powers[0]
        for j in range(1, n):  # sequential sum, zero terms included: host mode's rounding
            ret = ret + torch.where(alive[:, j], r[:, j] * self._powers[j], 0.0)
        k = alive.sum(1)  # steps used, 1 .. n
        last = k - 1
        term_end = term.gather(1, last[:, None]).squeeze(1)
        discount = torch.where(term_end, 0.0, self._discounts.index_select(0, k))
        next_rows = base + (idx.remainder(ring) + k).remainder(ring)
        stacks = frame_stack_sample(
            self.frames,
            self.depth,
            torch.cat([idx, next_rows]),
            ring=ring,
            stack=self.stack,
            dtype=self.obs_dtype,
            scale=self.scale,
        ).view(2 * B, *self.obs_shape)
        return ReplayBatch(
            obs=stacks[:B],
            action=self.action.index_select(0, idx),
            reward=ret.float(),
            next_obs=stacks[B:],
            discount=discount,
            indices=idx,
            weights=weights,
        )

    # ---- checkpoints ---------------------------------------------------------------------------

    def _config(self) -> dict[str, Any]:
        return {
            "kind": type(self).__name__,
            "capacity": self._capacity,
            "obs_shape": list(self.obs_shape),
            "stack": self.stack,
            "num_envs": self.num_envs,
            "n_step": self.n_step,
            "gamma": self.gamma,
            "action_shape": list(self.action_shape),
            "action_dtype": str(self.action_dtype).removeprefix("torch."),
        }

    def _storage(self) -> dict[str, torch.Tensor]:
        return {
            "frames": self.frames,
            "depth": self.depth,
            "action": self.action,
            "reward": self.reward,
            "terminated": self.terminated,
            "truncated": self.truncated,
        }

    def state_dict(self) -> dict[str, Any]:
        """The whole slot storage, ``valid`` (bool ``[N]``) and a JSON ``meta``."""
        sd: dict[str, Any] = dict(self._storage())
        sd["valid"] = torch.from_numpy(self._valid.copy())
        sd["meta"] = {
            "format": FORMAT,
            "version": VERSION,
            "config": self._config(),
            "size": self._size,
            "steps": self._steps,
            **self._cursor.to_meta(),
        }
        return sd

    def parse_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """Validate ``state`` and move its tensors to this buffer's device; changes nothing.

        Returns:
            the staged state, for `apply_state`.

        Raises:
            ValueError: not a frame-replay state of this configuration, or inconsistent.
        """
        meta = read_meta(state)
        check_config(meta.get("config"), self._config(), ("host",))
        N = self.capacity
        size = check_int("state meta 'size'", meta.get("size"), low=0, high=N)
        check_int("state meta 'steps'", meta.get("steps"), low=0)
        cursor = FrameCursor.from_meta(meta, self.num_envs, self.stack)
        spec = {k: (tuple(t.shape), t.dtype) for k, t in self._storage().items()}
        spec["valid"] = ((N,), torch.bool)
        out: dict[str, Any] = {"meta": meta, "cursor": cursor}
        out.update(load_tensors(state, spec, lambda key, dtype: (self.device, dtype)))
        if int(out["valid"].sum()) != size:
            raise ValueError(
                f"state counters disagree: size={size} but {int(out['valid'].sum())} valid slots"
            )
        depth = out["depth"]
        if bool(((depth < 0) | (depth > self.stack)).any()):
            raise ValueError(f"state depths must lie in [0, {self.stack}]")
        return out

    def apply_state(self, staged: dict[str, Any]) -> None:
        """Restore a staged state; the slot tree is rebuilt from the leaves, bit for bit."""
        for key, dst in self._storage().items():
            dst.copy_(staged[key])
        self._valid = staged["valid"].cpu().numpy().copy()
        N = self.capacity
        tree = new_sumtree(N, self.device)
        values = self._rebuild_leaves(staged).to(torch.float32)
        leaves(tree)[:N] = values
        tree.mins[:N] = values
        rebuild(tree)
        self._adopt_tree(tree, staged)
        self._cursor = staged["cursor"].copy()
        self._size = staged["meta"]["size"]
        self._steps = staged["meta"]["steps"]

    def _rebuild_leaves(self, staged: dict[str, Any]) -> torch.Tensor:
        """The leaf values of a staged state: 1 where valid (uniform)."""
        return staged["valid"].float()

    def _adopt_tree(self, tree: SumTree, staged: dict[str, Any]) -> None:
        self._tree = tree


class PrioritizedFrameReplayBuffer(PrioritySchedule, FrameReplayBuffer):
    """Proportional prioritized replay over the slots of a `FrameReplayBuffer`.

    A newly sampleable slot gets the running maximum priority, an overwritten one 0. Priority
    arguments as [`PrioritizedReplayBuffer`][tritonrl.toolkit.replay.PrioritizedReplayBuffer], the rest as
    `FrameReplayBuffer`.
    """

    def _fresh(self, a: int, b: int) -> None:
        per_insert(self._tree, a, b - a, alpha=self.alpha)

    def update_priorities(self, indices: Any, td_errors: Any) -> None:
        """Set ``p_i = |td_errors| + eps`` for slot rows ``indices``.

        Rows overwritten since they were sampled are skipped; bad batches change nothing and are counted.

        Raises:
            ValueError / TypeError: as ``PrioritizedReplayBuffer.update_priorities``.
        """
        batch = self._priority_batch(indices, td_errors, self._steps == 0)
        if batch is None:
            return
        idx, td = batch
        N = self._capacity
        idx = idx.to(device=self.device, dtype=torch.int64).contiguous()
        td = td.to(device=self.device).contiguous()
        # a row that is no longer valid goes to a slot never sampled (env 0's newest slot), zeroed after
        sink = self._cursor.top[0] % self.ring
        inside = (idx >= 0) & (idx < N)
        live = leaves(self._tree).index_select(0, idx.clamp(0, N - 1)) > 0
        idx = torch.where(inside, torch.where(live, idx, sink), -1)  # -1: rejected as out of range
        td = torch.where(live | ~inside, td, 0.0)  # a skipped row's error counts nowhere
        per_update(self._tree, idx, td, alpha=self.alpha, eps=self.eps, size=N)
        keep = self._tree.max_priority.clone()
        self._tree.max_priority.zero_()
        per_insert(self._tree, sink, 1, alpha=1.0)
        self._tree.max_priority.copy_(keep)
        if self.check_priorities:
            self.check()

    def check(self) -> None:
        """Raise ``ValueError`` if an `update_priorities` batch was rejected since the last check."""
        self._raise_rejected(f"[0, {self._capacity})")

    def priorities(self) -> torch.Tensor:
        """f32 copy of the ``N`` slots' leaves ``p ** alpha`` (0 where not sampleable)."""
        return leaves(self._tree)[: self._capacity].clone()

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> ReplayBatch:
        """``batch_size`` transitions, one per equal-mass stratum, with IS weights; advances ``beta``.

        Raises:
            ValueError: empty buffer, or ``batch_size`` not in ``[1, len(self)]``.
        """
        self._check_batch_size(batch_size)
        idx = self._draw(self._uniforms(batch_size, generator))
        leaf = leaves(self._tree)[: self._capacity]
        least = torch.where(leaf > 0, leaf, math.inf).amin()
        weights = leaf.index_select(0, idx).div_(least).pow_(-self.current_beta)
        self._sample_calls += 1
        return self._gather(idx, weights)

    def _state_leaves(self, staged: dict[str, Any]) -> int:
        return self._capacity  # every slot's leaf

    def _check_state_priorities(self, staged: dict[str, Any]) -> None:
        prio = staged["priorities"]
        if not bool(torch.isfinite(prio).all() & ((prio > 0) == staged["valid"]).all()):
            raise ValueError("state priorities must be finite, > 0 exactly where a slot is valid")

    def _rebuild_leaves(self, staged: dict[str, Any]) -> torch.Tensor:
        return staged["priorities"]

    def _adopt_tree(self, tree: SumTree, staged: dict[str, Any]) -> None:
        self._adopt_priorities(tree, staged)
        self._tree = tree
