"""Uniform replay buffer on the training device, with n-step returns over parallel environments.

A preallocated ring of complete n-step transitions (`tritonrl.toolkit.replay.nstep`), each
field cast once when it enters; the n-step windows are closed by a staging strategy
(`tritonrl.toolkit.replay.staging`, ``"host"`` or ``"device"``) and saved states are checked
by `tritonrl.toolkit.replay.state`. See docs/pages/replay.md.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple

import torch
from tritonrl.kernels.validate import check_int
from tritonrl.toolkit.checks import InputGuard, check_memory
from tritonrl.toolkit.precision import dtype_or_default
from tritonrl.toolkit.replay.inputs import (
    NUMPY_DTYPES,
    action_rule,
    check_fraction,
    check_shape,
    integer_kind,
    itemsize,
)
from tritonrl.toolkit.replay.staging import STAGINGS, Staging, staging_class
from tritonrl.toolkit.replay.state import (
    FORMAT,
    VERSION,
    check_config,
    check_counters,
    load_tensors,
    read_file,
    read_meta,
    write_file,
)

__all__ = ["STAGINGS", "ReplayBatch", "ReplayBuffer"]

_STORAGE_KEYS = ("obs", "next_obs", "action", "reward", "discount")


class ReplayBatch(NamedTuple):
    """One sampled batch (``B`` transitions), every tensor on the buffer's device.

    Attributes:
        obs: ``[B, *obs_shape]`` in the observation dtype.
        action: ``[B, *action_shape]`` in ``action_dtype``.
        reward: f32 ``[B]``, n-step return ``sum_{j<k} gamma**j r_j``.
        next_obs: ``[B, *obs_shape]``, the observation ``k`` steps later.
        discount: f32 ``[B]``, ``gamma**k``, 0 where the episode terminated.
        indices: int64 ``[B]``, slots in the buffer (for ``update_priorities``).
        weights: f32 ``[B]``, importance weights (ones for the uniform buffer).
    """

    obs: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    next_obs: torch.Tensor
    discount: torch.Tensor
    indices: torch.Tensor
    weights: torch.Tensor


class ReplayBuffer:
    """Uniform replay: a device-resident ring of n-step transitions from ``num_envs`` environments.

    Args:
        capacity: transitions kept (the oldest are overwritten).
        num_envs: parallel environments (leading dim of ``add``).
        n_step: steps per return (1 = one-step TD).
        gamma: discount in ``[0, 1]``.
        action_shape: ``()`` for discrete actions.
        action_dtype: an integer dtype (discrete) or ``torch.float32`` (continuous).
        obs_dtype: ``None`` -> ``training_dtype(device)``; ``torch.uint8`` keeps image bytes.
        staging: ``"host"`` or ``"device"``: where the n-step windows are closed.
        num_actions: bound of integer actions (an int, or ``D`` counts for ``action_shape=(D,)``);
            ``None``: unchecked. Must be ``None`` for floating actions.

    Raises:
        ValueError / TypeError: an argument is out of range or of the wrong type, or the storage
            does not fit in the device's free memory.
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        *,
        device: torch.device | str = "cpu",
        num_envs: int = 1,
        n_step: int = 1,
        gamma: float = 0.99,
        action_shape: tuple[int, ...] = (),
        action_dtype: torch.dtype = torch.int64,
        obs_dtype: torch.dtype | None = None,
        staging: str = "host",
        num_actions: int | Sequence[int] | None = None,
    ) -> None:
        strategy = self._staging_class(staging)
        self.staging = staging
        self._capacity = check_int("capacity", capacity, low=1)
        self.obs_shape = check_shape("obs_shape", obs_shape)
        self.action_shape = check_shape("action_shape", action_shape)
        self.num_envs = check_int("num_envs", num_envs, low=1)
        self.n_step = check_int("n_step", n_step, low=1)
        self.gamma = check_fraction("gamma", gamma)
        self.device = torch.device(device)
        self._check_layout()
        if not isinstance(action_dtype, torch.dtype) or action_dtype == torch.bool or action_dtype.is_complex:
            raise TypeError(f"action_dtype must be an integer or floating torch.dtype, got {action_dtype!r}")
        self.action_dtype = action_dtype
        self._check_obs_dtype(obs_dtype)
        self.obs_dtype = dtype_or_default(obs_dtype, self.device)
        rule = action_rule(num_actions, self.action_shape, action_dtype)
        self.num_actions = tuple(num_actions) if isinstance(num_actions, Sequence) else num_actions
        """The action counts ``add`` checks integer actions against (``None``: unchecked)."""
        self.inputs = InputGuard(type(self).__name__, rule, where="buffer.inputs")
        """The value checks of ``add``/``extend`` (`tritonrl.toolkit.checks.InputGuard`):
        its ``mode`` (``"auto"``, ``"eager"``, ``"deferred"``) says when tensors on an
        accelerator are checked."""
        self._float_actions = action_dtype.is_floating_point
        check_memory(f"capacity={self._capacity}", self._memory(), self.device)
        self._size = 0  # sampleable transitions stored
        self._steps = 0  # vector steps added
        self._allocate()
        if strategy is not None:
            self._staging: Staging = strategy(self)

    # ---- what a subclass with another storage overrides (the frame replay) ---------------------

    _checks_obs: ClassVar[bool] = True
    """Whether ``add`` checks observations for NaN/inf (not for a store of uint8 frames)."""

    def _staging_class(self, staging: str) -> type[Staging] | None:
        """The staging strategy of ``staging`` (``None``: the storage closes its own windows)."""
        return staging_class(staging)

    def _check_layout(self) -> None:
        """Hook: refuse (``ValueError``) a layout the storage cannot hold."""

    def _check_obs_dtype(self, obs_dtype: torch.dtype | None) -> None:
        """Raise ``TypeError`` unless ``obs_dtype`` is ``None``, ``torch.uint8`` or floating."""
        if obs_dtype is not None and not (
            isinstance(obs_dtype, torch.dtype) and (obs_dtype == torch.uint8 or obs_dtype.is_floating_point)
        ):
            raise TypeError(f"obs_dtype must be None, torch.uint8 or a floating dtype, got {obs_dtype!r}")

    def _memory(self) -> dict[str, int]:
        """`memory_bytes` of this buffer's settings."""
        return self.memory_bytes(
            self._capacity,
            self.obs_shape,
            obs_dtype=self.obs_dtype,
            action_shape=self.action_shape,
            action_dtype=self.action_dtype,
            num_envs=self.num_envs,
            n_step=self.n_step,
            staging=self.staging,
        )

    def _allocate(self) -> None:
        """Allocate the ring of complete transitions on the device."""
        C, dev = self._capacity, self.device
        self._obs = torch.zeros((C, *self.obs_shape), dtype=self.obs_dtype, device=dev)
        self._next_obs = torch.zeros_like(self._obs)
        self._action = torch.zeros((C, *self.action_shape), dtype=self.action_dtype, device=dev)
        self._reward = torch.zeros(C, dtype=torch.float32, device=dev)
        self._discount = torch.zeros(C, dtype=torch.float32, device=dev)
        self._pos = 0  # next slot to write
        self._committed = 0  # complete transitions ever written
        # numpy views of CPU storage, for the numpy fast paths (add, sample)
        self._views: tuple[Any, ...] | None = None
        storage = (self._obs, self._next_obs, self._action, self._reward, self._discount)
        if dev.type == "cpu" and all(t.dtype in NUMPY_DTYPES for t in storage):
            self._views = tuple(t.numpy() for t in storage)  # the storage is never reassigned

    # ---- sizes ---------------------------------------------------------------------------------

    @classmethod
    def memory_bytes(
        cls,
        capacity: int,
        obs_shape: tuple[int, ...],
        *,
        obs_dtype: torch.dtype,
        action_shape: tuple[int, ...] = (),
        action_dtype: torch.dtype = torch.int64,
        num_envs: int = 1,
        n_step: int = 1,
        staging: str = "host",
    ) -> dict[str, int]:
        """Bytes a buffer of these settings allocates, by component (nothing is allocated).

        Raises:
            ValueError: an unknown ``staging``.
        """
        obs_item = math.prod(obs_shape) * itemsize(obs_dtype)
        act_item = math.prod(action_shape) * itemsize(action_dtype)
        return staging_class(staging).memory_bytes(capacity, obs_item, act_item, num_envs, n_step)

    @property
    def capacity(self) -> int:
        """Maximum number of stored transitions."""
        return self._capacity

    def __len__(self) -> int:
        """Complete transitions stored (pending n-step windows are not counted)."""
        return self._size

    @property
    def pending(self) -> int:
        """Started transitions not committed yet (not sampleable); a Python int, nothing is read."""
        return self._staging.pending

    @property
    def steps(self) -> int:
        """Vector steps added so far."""
        return self._steps

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
            obs: ``[E, *obs_shape]``, floating (or uint8 for a uint8 buffer), finite.
            action: ``[E, *action_shape]`` as ``action_dtype``; in ``[0, num_actions)`` or finite.
            reward: ``[E]``, finite.
            next_obs: like ``obs``; the real final observation at an episode end.
            terminated: ``[E]`` bool, no bootstrap.
            truncated: ``[E]`` bool, bootstrap from ``next_obs``.
            check: check the values (see [`inputs`][tritonrl.toolkit.replay.buffer.ReplayBuffer.inputs]);
                shapes and dtypes are always checked.

        Raises:
            ValueError / TypeError: wrong shape or dtype, or (host inputs, ``check``) a bad value,
                named with its first entry; nothing is added. Accelerator tensors raise later, in
                [`check_inputs`][tritonrl.toolkit.replay.buffer.ReplayBuffer.check_inputs].
        """
        if check:
            self._check_values("add", obs, action, reward, next_obs)
        self._staging.add(obs, action, reward, next_obs, terminated, truncated)

    def extend(
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
        """Add ``T`` vector steps at once (leading dims ``[T, num_envs]``), as ``T`` calls of `add`."""
        if check:
            self._check_values("extend", obs, action, reward, next_obs)
        self._staging.extend(obs, action, reward, next_obs, terminated, truncated)

    def _check_values(self, call: str, obs: Any, action: Any, reward: Any, next_obs: Any) -> None:
        """The value checks of `inputs` (wrong dtypes are left to the staging's ``TypeError``)."""
        g = self.inputs
        if self._checks_obs:
            g.obs(call, "obs", obs)
            g.obs(call, "next_obs", next_obs)
        g.reward(call, reward)
        if g.rule is not None and (self._float_actions or integer_kind(action)):
            g.action(call, action)

    def check_inputs(self) -> None:
        """Raise now if a deferred value check of ``add``/``extend`` failed (one host sync).

        Raises:
            ValueError: a non-finite or out-of-range value since the last check; it stays failed.
        """
        self.inputs.check()

    def _advance(self, count: int) -> None:
        """``count`` transitions were committed at the ring's position."""
        C = self._capacity
        self._pos = (self._pos + count) % C
        self._size = min(C, self._size + count)
        self._committed += count

    def _on_commit(self, pos: int, count: int) -> None:
        """Hook: slots ``pos .. pos + count - 1`` (mod capacity) now hold new transitions."""

    # ---- sampling ------------------------------------------------------------------------------

    def _check_batch_size(self, batch_size: int) -> None:
        check_int("batch_size", batch_size, low=1)
        if self._size == 0:
            raise ValueError("cannot sample from an empty buffer (no complete transition yet)")
        if batch_size > self._size:
            raise ValueError(f"batch_size={batch_size} exceeds the {self._size} transitions stored")

    def _gather(self, idx: torch.Tensor, weights: torch.Tensor) -> ReplayBatch:
        """Rows ``idx`` (int64 ``[B]``, in ``[0, len)``) of every field, as fresh tensors."""
        views = self._views
        if views is not None and not torch.compiler.is_compiling():
            i = idx.numpy()
            obs, next_obs, action, reward, discount = views
            return ReplayBatch(
                obs=torch.from_numpy(obs.take(i, 0)),
                action=torch.from_numpy(action.take(i, 0)),
                reward=torch.from_numpy(reward.take(i, 0)),
                next_obs=torch.from_numpy(next_obs.take(i, 0)),
                discount=torch.from_numpy(discount.take(i, 0)),
                indices=idx,
                weights=weights,
            )
        return ReplayBatch(
            obs=self._obs.index_select(0, idx),
            action=self._action.index_select(0, idx),
            reward=self._reward.index_select(0, idx),
            next_obs=self._next_obs.index_select(0, idx),
            discount=self._discount.index_select(0, idx),
            indices=idx,
            weights=weights,
        )

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> ReplayBatch:
        """``batch_size`` transitions drawn uniformly with replacement.

        Args:
            batch_size: 1 .. ``len(self)``.
            generator: the random source (may live on another device); ``None``: the default one.

        Raises:
            ValueError: empty buffer, or ``batch_size`` not in ``[1, len(self)]``.
        """
        self._check_batch_size(batch_size)
        gdev = self.device if generator is None else generator.device
        idx = torch.randint(self._size, (batch_size,), generator=generator, device=gdev)
        return self._gather(idx.to(self.device), torch.ones(batch_size, device=self.device))

    # ---- checkpoints ---------------------------------------------------------------------------

    def _config(self) -> dict[str, Any]:
        return {
            "kind": type(self).__name__,
            "capacity": self._capacity,
            "obs_shape": list(self.obs_shape),
            "num_envs": self.num_envs,
            "n_step": self.n_step,
            "gamma": self.gamma,
            "action_shape": list(self.action_shape),
            "action_dtype": str(self.action_dtype).removeprefix("torch."),
            **self._staging.config,  # host staging: no entry
        }

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: tensors (views of the stored part) and a JSON ``meta`` dict."""
        n = self._size
        sd: dict[str, Any] = {
            "obs": self._obs[:n],
            "next_obs": self._next_obs[:n],
            "action": self._action[:n],
            "reward": self._reward[:n],
            "discount": self._discount[:n],
        }
        sd.update(self._staging.state_tensors())
        sd["meta"] = {
            "format": FORMAT,
            "version": VERSION,
            "config": self._config(),
            "pos": self._pos,
            "size": self._size,
            "steps": self._steps,
            "committed": self._committed,
            **self._staging.state_meta(),
        }
        return sd

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from `state_dict`, from any device, dtype or staging mode.

        Raises:
            ValueError: not a replay-buffer state, or another configuration; the buffer is unchanged.
        """
        staged = self.parse_state(state)
        self.apply_state(staged)

    def parse_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """Validate ``state`` and convert it to this buffer's dtypes and device, touching nothing.

        Returns:
            the staged state, for [`apply_state`][tritonrl.toolkit.replay.buffer.ReplayBuffer.apply_state].

        Raises:
            ValueError: not a replay-buffer state, or another configuration.
        """
        meta = read_meta(state)
        saved_staging = check_config(meta.get("config"), self._config(), STAGINGS)
        check_counters(meta, self._capacity, self.num_envs)
        size = meta["size"]
        spec = {
            "obs": ((size, *self.obs_shape), self.obs_dtype),
            "next_obs": ((size, *self.obs_shape), self.obs_dtype),
            "action": ((size, *self.action_shape), self.action_dtype),
            "reward": ((size,), torch.float32),
            "discount": ((size,), torch.float32),
        }
        staging_spec = staging_class(saved_staging).state_spec(self, meta)  # checks its meta too
        same = saved_staging == self.staging
        if same:  # else the other staging's tensors are dropped
            spec.update(staging_spec)
        out: dict[str, Any] = {"meta": meta, "same_staging": same}
        out.update(load_tensors(state, spec, self._staging.load_target))
        if same:
            self._staging.check_loaded(out)
        return out

    def apply_state(self, staged: dict[str, Any]) -> None:
        """Restore a state staged by `parse_state` (no further checks)."""
        meta = staged["meta"]
        n = meta["size"]
        for key, dst in zip(
            _STORAGE_KEYS,
            (self._obs, self._next_obs, self._action, self._reward, self._discount),
            strict=True,
        ):
            dst[:n].copy_(staged[key])
        self._staging.apply(staged if staged.get("same_staging", True) else None)
        self._pos, self._size = meta["pos"], n
        self._steps, self._committed = int(meta["steps"]), int(meta["committed"])

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write `state_dict` to one safetensors file, atomically."""
        write_file(path, self.state_dict())

    def load(self, path: str | os.PathLike[str]) -> None:
        """Restore from a file written by `save`.

        Raises:
            FileNotFoundError: no such file.
            ValueError: truncated or foreign file, or another configuration; the buffer is unchanged.
        """
        self.load_state_dict(read_file(path))
