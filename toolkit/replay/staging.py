"""The two staging strategies of `ReplayBuffer`.

`HostStaging` reads rewards and done flags on the host and commits a transition when its
n-step window closes; `DeviceStaging` reads nothing on the host and commits, every step,
the transitions that started ``n - 1`` steps earlier. A strategy writes into its buffer's storage
and advances its counters. See docs/pages/replay.md.
"""

from __future__ import annotations

import abc
import math
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from tritonrl.kernels.validate import check_int
from tritonrl.toolkit.replay.inputs import (
    as_numpy,
    device_vector,
    host_array,
    host_vector,
    input_tensor,
    kind_rule,
    leading_dims,
    with_step_dim,
)
from tritonrl.toolkit.replay.nstep import NStepState, schedule

if TYPE_CHECKING:
    from tritonrl.toolkit.replay.buffer import ReplayBuffer

__all__ = ["STAGINGS", "DeviceStaging", "HostStaging", "Staging", "staging_class"]

_SMALL = 64
"""Vector steps of at most this many observation entries are written through ``tolist()``."""
_REAL = (torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.uint8)
"""Reward dtypes of the small-step path (those numpy reads; ``bool`` is refused as a reward)."""

Spec = dict[str, tuple[tuple[int, ...], torch.dtype]]
"""State tensors by key: expected shape and stored dtype."""


class Staging(abc.ABC):
    """What a `ReplayBuffer` needs from its staging: ingestion, the pending count, its state."""

    name: ClassVar[str]
    config: ClassVar[dict[str, str]]
    """The buffer config's ``staging`` entry (absent for host staging, the default)."""

    def __init__(self, buf: ReplayBuffer) -> None:
        self.buf = buf
        E = buf.num_envs
        self.obs_full = torch.Size((E, *buf.obs_shape))  # the input shapes of one vector step
        self.act_full = torch.Size((E, *buf.action_shape))
        self.vec = torch.Size((E,))

    @staticmethod
    @abc.abstractmethod
    def memory_bytes(
        capacity: int, obs_item: int, act_item: int, num_envs: int, n_step: int
    ) -> dict[str, int]:
        """`ReplayBuffer.memory_bytes` with this staging (``*_item``: bytes per obs/action)."""

    @property
    @abc.abstractmethod
    def pending(self) -> int:
        """`ReplayBuffer.pending`."""

    @abc.abstractmethod
    def add(self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any, truncated: Any) -> None:
        """`ReplayBuffer.add`."""

    @abc.abstractmethod
    def extend(
        self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any, truncated: Any
    ) -> None:
        """`ReplayBuffer.extend`."""

    @abc.abstractmethod
    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The staging's tensors of `ReplayBuffer.state_dict`."""

    def state_meta(self) -> dict[str, Any]:
        """The staging's entries of the state's ``meta``."""
        return {}

    @classmethod
    @abc.abstractmethod
    def state_spec(cls, buf: ReplayBuffer, meta: dict[str, Any]) -> Spec:
        """The tensors a state saved with this staging holds for ``buf``, after checking its ``meta``.

        Raises:
            ValueError: a ``meta`` entry is invalid.
        """

    def load_target(self, key: str, dtype: torch.dtype) -> tuple[torch.device | str, torch.dtype]:
        """Device and dtype a saved tensor (stored as ``dtype``) is loaded into."""
        return self.buf.device, dtype

    def check_loaded(self, staged: dict[str, Any]) -> None:
        """Value checks of the loaded staging tensors; raises ``ValueError`` (none by default)."""
        return None

    @abc.abstractmethod
    def apply(self, staged: dict[str, Any] | None) -> None:
        """Restore from a state staged by `ReplayBuffer.parse_state`; ``None``: start empty."""


class HostStaging(Staging):
    """Host staging: the n-step windows are closed on the host (``K = n - 1`` steps wait)."""

    name = "host"
    config: ClassVar[dict[str, str]] = {}

    def __init__(self, buf: ReplayBuffer) -> None:
        super().__init__(buf)
        K, E, dev = buf.n_step - 1, buf.num_envs, buf.device
        self.obs = torch.zeros((K, E, *buf.obs_shape), dtype=buf.obs_dtype, device=dev)
        self.action = torch.zeros((K, E, *buf.action_shape), dtype=buf.action_dtype, device=dev)
        self.nstep = NStepState.empty(buf.n_step, E)
        self.obs_kind = kind_rule(buf.obs_dtype)[0]  # the dtype kinds input_tensor() accepts
        self.act_kind = kind_rule(buf.action_dtype)[0]
        self.views: tuple[np.ndarray, np.ndarray] | None = None
        if buf._views is not None:  # the buffer's storage has numpy views: so has the staging area
            self.views = (self.obs.numpy(), self.action.numpy())
        self.small = E * math.prod(buf.obs_shape) <= _SMALL
        """One-step adds of CPU tensors to storage with numpy views go through `_add_small`."""
        self.gamma32 = float(np.float32(buf.gamma))  # a discount as the f32 ring stores it

    @staticmethod
    def memory_bytes(
        capacity: int, obs_item: int, act_item: int, num_envs: int, n_step: int
    ) -> dict[str, int]:
        """``n - 1`` staged observations and actions per environment."""
        staged = (n_step - 1) * num_envs
        return {
            "observations": (2 * capacity + staged) * obs_item,
            "actions": (capacity + staged) * act_item,
            "rewards and discounts": capacity * 8,
        }

    @property
    def pending(self) -> int:
        """The started transitions whose n-step window is still open."""
        return int(self.nstep.pending.sum())

    def add(self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any, truncated: Any) -> None:
        if self.buf.n_step == 1 and self._add_one(obs, action, reward, next_obs, terminated, truncated):
            return
        E = self.buf.num_envs  # shapes named as add takes them, before extend adds a step dim
        for name, x, shape in (
            ("obs", obs, self.obs_full),
            ("action", action, self.act_full),
            ("reward", reward, (E,)),
            ("next_obs", next_obs, self.obs_full),
            ("terminated", terminated, (E,)),
            ("truncated", truncated, (E,)),
        ):
            got = tuple(x.shape) if isinstance(x, (torch.Tensor, np.ndarray)) else np.shape(x)
            if got != tuple(shape):
                raise ValueError(f"{name} must have shape {tuple(shape)}, got {got}")
        self.extend(*(with_step_dim(x) for x in (obs, action, reward, next_obs, terminated, truncated)))

    def _add_one(
        self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any, truncated: Any
    ) -> bool:
        """`add` straight into the ring in the common case; ``False`` (no change) otherwise."""
        buf = self.buf
        E, pos = buf.num_envs, buf._pos
        if pos + E > buf.capacity:
            return False
        T = torch.Tensor
        if not (type(obs) is T and type(next_obs) is T and type(action) is T):
            return False
        full = self.obs_full
        if obs.shape != full or next_obs.shape != full or action.shape != self.act_full:
            return False
        obs_kind = self.obs_kind
        if not (obs_kind(obs.dtype) and obs_kind(next_obs.dtype) and self.act_kind(action.dtype)):
            return False
        if self.small and buf._views is not None and type(reward) is T and type(terminated) is T:
            return type(truncated) is T and self._add_small(
                obs, action, reward, next_obs, terminated, truncated
            )
        rew, term, trunc = host_vector(reward), host_vector(terminated), host_vector(truncated)
        if rew is None or term is None or trunc is None:
            return False
        if rew.shape != (E,) or term.shape != (E,) or trunc.shape != (E,):
            return False
        if term.dtype != np.bool_ or trunc.dtype != np.bool_ or rew.dtype.kind not in "fiu":
            return False
        if rew.dtype.kind == "f" and not np.isfinite(rew).all():
            return False  # extend raises the error
        end = pos + E
        views = buf._views
        if views is not None:  # CPU storage numpy can address: plain array writes
            np_obs, np_next, np_act, np_rew, np_disc = views
            np_obs[pos:end] = as_numpy(obs)
            np_next[pos:end] = as_numpy(next_obs)
            np_act[pos:end] = as_numpy(action)
            np_rew[pos:end] = rew
            np.multiply(~term, np.float32(buf.gamma), out=np_disc[pos:end])
        else:  # copy_ casts and moves in one go (the one cast of the stored dtype)
            buf._obs[pos:end].copy_(obs)
            buf._next_obs[pos:end].copy_(next_obs)
            buf._action[pos:end].copy_(action)
            buf._reward[pos:end].copy_(torch.from_numpy(rew.astype(np.float32, copy=False)))
            disc = np.multiply(~term, np.float32(buf.gamma), dtype=np.float32)
            buf._discount[pos:end].copy_(torch.from_numpy(disc))
        buf._on_commit(pos, E)
        buf._advance(E)
        buf._steps += 1
        return True

    def _add_small(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
    ) -> bool:
        """`_add_one` for a few environments' CPU tensors through ``tolist()``; ``False`` otherwise."""
        buf = self.buf
        vec = self.vec
        if not (reward.is_cpu and terminated.is_cpu and truncated.is_cpu):
            return False
        if reward.shape != vec or terminated.shape != vec or truncated.shape != vec:
            return False
        if terminated.dtype is not torch.bool or truncated.dtype is not torch.bool:
            return False
        if reward.dtype not in _REAL or not (obs.is_cpu and next_obs.is_cpu and action.is_cpu):
            return False
        rew = reward.tolist()
        if reward.dtype.is_floating_point and not math.isfinite(sum(rew)):
            return False  # extend raises the error (or stores finite f64 rewards whose sum overflows)
        assert buf._views is not None  # checked by the caller
        np_obs, np_next, np_act, np_rew, np_disc = buf._views
        E, pos = buf.num_envs, buf._pos
        end = pos + E
        np_obs[pos:end] = obs.tolist()
        np_next[pos:end] = next_obs.tolist()
        np_act[pos:end] = action.tolist()
        np_rew[pos:end] = rew
        gamma = self.gamma32
        np_disc[pos:end] = [0.0 if done else gamma for done in terminated.tolist()]
        buf._on_commit(pos, E)
        buf._advance(E)
        buf._steps += 1
        return True

    def extend(
        self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any, truncated: Any
    ) -> None:
        buf = self.buf
        obs_t = input_tensor("obs", obs, tuple(leading_dims(obs)[:2]) + buf.obs_shape, buf.obs_dtype)
        T, E = obs_t.shape[0], buf.num_envs
        if obs_t.shape[1] != E:
            raise ValueError(f"obs must have shape {(T, E, *buf.obs_shape)}, got {tuple(obs_t.shape)}")
        next_t = input_tensor("next_obs", next_obs, (T, E, *buf.obs_shape), buf.obs_dtype)
        act_t = input_tensor("action", action, (T, E, *buf.action_shape), buf.action_dtype)
        rew = host_array("reward", reward, (T, E), "real")
        term = host_array("terminated", terminated, (T, E), "bool")
        trunc = host_array("truncated", truncated, (T, E), "bool")
        if T == 0:
            return
        commits, new_state = schedule(self.nstep, rew, term, trunc, buf.n_step, buf.gamma)
        if buf._views is not None and (buf.n_step == 1 or self.views is not None):
            self._write_numpy(commits, obs_t, act_t, next_t, T)
        else:
            self._write(commits, obs_t, act_t, next_t, T)
        self.nstep = new_state
        buf._steps += T

    def _write_numpy(
        self, commits: Any, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor, T: int
    ) -> None:
        """`_write` on the CPU through numpy views, with the same casts."""
        buf = self.buf
        E, K, C = buf.num_envs, buf.n_step - 1, buf.capacity
        assert buf._views is not None and (K == 0 or self.views is not None)  # checked by the caller
        np_obs, np_next, np_act, np_rew, np_disc = buf._views
        o = as_numpy(obs).astype(np_obs.dtype, copy=False)  # [T, E, *obs_shape] in the stored dtype
        a = as_numpy(action).astype(np_act.dtype, copy=False)
        nxt = as_numpy(next_obs).reshape(T * E, *buf.obs_shape)
        flat_o, flat_a = o.reshape(T * E, *buf.obs_shape), a.reshape(T * E, *buf.action_shape)
        m = len(commits.reward)
        skip = max(0, m - C)  # more commits than slots: only the last C survive
        count = m - skip
        if count > 0:
            start, end = commits.start[skip:], commits.end[skip:]
            if K and (start < K * E).any():  # some start in staging
                assert self.views is not None  # n-step buffers stage on the host
                stage_obs, stage_act = self.views
                src_o = np.concatenate([stage_obs.reshape(K * E, *buf.obs_shape), flat_o])
                src_a = np.concatenate([stage_act.reshape(K * E, *buf.action_shape), flat_a])
            else:
                src_o, src_a, start = flat_o, flat_a, start - K * E
            srcs = (src_o[start], src_a[start], nxt[end], commits.reward[skip:], commits.discount[skip:])
            pos = (buf._pos + skip) % C  # commit k goes to slot (pos + k) % C, skipped ones too
            first = min(count, C - pos)
            for dst, src in zip((np_obs, np_act, np_next, np_rew, np_disc), srcs, strict=True):
                dst[pos : pos + first] = src[:first]
                if count > first:
                    dst[: count - first] = src[first:]
            buf._on_commit(pos, count)
        buf._advance(m)
        if not K:
            return
        assert self.views is not None
        stage_obs, stage_act = self.views
        if T >= K:  # staging keeps the last K steps, oldest first
            stage_obs[:] = o[T - K :]
            stage_act[:] = a[T - K :]
        else:
            stage_obs[: K - T] = stage_obs[T:].copy()
            stage_act[: K - T] = stage_act[T:].copy()
            stage_obs[K - T :] = o
            stage_act[K - T :] = a

    def _write(
        self, commits: Any, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor, T: int
    ) -> None:
        """Copy the committed transitions into the ring and the open ones into staging."""
        buf = self.buf
        E, K, C, dev = buf.num_envs, buf.n_step - 1, buf.capacity, buf.device
        if K:  # gathers below: bring the inputs to the device in the stored dtype (the one cast)
            obs = obs.to(device=dev, dtype=buf.obs_dtype)
            action = action.to(device=dev, dtype=buf.action_dtype)
        flat_obs = obs.reshape(T * E, *buf.obs_shape)
        flat_act = action.reshape(T * E, *buf.action_shape)
        flat_next = next_obs.reshape(T * E, *buf.obs_shape)
        m = len(commits.reward)
        skip = max(0, m - C)  # more commits than slots: only the last C survive
        count = m - skip
        if count > 0:
            reward = torch.from_numpy(commits.reward[skip:]).to(dev)
            discount = torch.from_numpy(commits.discount[skip:]).to(dev)
            if commits.identity:  # copy_ below casts and moves in one go
                srcs = (flat_obs[skip:], flat_act[skip:], flat_next[skip:], reward, discount)
            else:
                start = torch.from_numpy(commits.start[skip:]).to(dev)
                end = torch.from_numpy(commits.end[skip:]).to(dev)
                if bool((commits.start[skip:] < K * E).any()):  # some start in staging
                    src_obs = torch.cat([self.obs.reshape(K * E, *buf.obs_shape), flat_obs])
                    src_act = torch.cat([self.action.reshape(K * E, *buf.action_shape), flat_act])
                else:
                    src_obs, src_act = flat_obs, flat_act
                    start = start - K * E
                next_src = flat_next.to(device=dev, dtype=buf.obs_dtype).index_select(0, end)
                srcs = (
                    src_obs.index_select(0, start),
                    src_act.index_select(0, start),
                    next_src,
                    reward,
                    discount,
                )
            dsts = (buf._obs, buf._action, buf._next_obs, buf._reward, buf._discount)
            pos = (buf._pos + skip) % C  # commit k goes to slot (pos + k) % C, skipped ones too
            first = min(count, C - pos)
            for dst, src in zip(dsts, srcs, strict=True):
                dst[pos : pos + first].copy_(src[:first])
                if count > first:
                    dst[: count - first].copy_(src[first:])
            buf._on_commit(pos, count)
        buf._advance(m)
        if K:  # staging keeps the last K steps, oldest first
            if T >= K:
                self.obs.copy_(obs[T - K :])
                self.action.copy_(action[T - K :])
            else:
                self.obs[: K - T] = self.obs[T:].clone()
                self.action[: K - T] = self.action[T:].clone()
                self.obs[K - T :].copy_(obs)
                self.action[K - T :].copy_(action)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """``stage_obs``, ``stage_action`` ``[n - 1, E, ...]``, ``nstep_pending`` and ``nstep_rewards``."""
        return {
            "stage_obs": self.obs,
            "stage_action": self.action,
            "nstep_pending": torch.from_numpy(self.nstep.pending.copy()),
            "nstep_rewards": torch.from_numpy(self.nstep.rewards.copy()),
        }

    @classmethod
    def state_spec(cls, buf: ReplayBuffer, meta: dict[str, Any]) -> Spec:
        K, E = buf.n_step - 1, buf.num_envs
        return {
            "stage_obs": ((K, E, *buf.obs_shape), buf.obs_dtype),
            "stage_action": ((K, E, *buf.action_shape), buf.action_dtype),
            "nstep_pending": ((E,), torch.int64),
            "nstep_rewards": ((K, E), torch.float64),
        }

    def load_target(self, key: str, dtype: torch.dtype) -> tuple[torch.device | str, torch.dtype]:
        """The n-step bookkeeping lives on the host."""
        return ("cpu" if key.startswith("nstep_") else self.buf.device), dtype

    def check_loaded(self, staged: dict[str, Any]) -> None:
        """Pending counts in ``[0, n - 1]``."""
        pending = staged["nstep_pending"].numpy()
        if (pending < 0).any() or (pending > self.buf.n_step - 1).any():
            raise ValueError(f"state has invalid pending counts {pending.tolist()}")

    def apply(self, staged: dict[str, Any] | None) -> None:
        if staged is None:  # saved in device mode: its staged steps are dropped
            self.obs.zero_()
            self.action.zero_()
            self.nstep = NStepState.empty(self.buf.n_step, self.buf.num_envs)
            return
        self.obs.copy_(staged["stage_obs"])
        self.action.copy_(staged["stage_action"])
        self.nstep = NStepState(
            staged["nstep_pending"].numpy().copy(), staged["nstep_rewards"].numpy().copy()
        )


_RING_KEYS = ("ring_obs", "ring_action", "ring_next_obs", "ring_reward", "ring_terminated", "ring_done")


class DeviceStaging(Staging):
    """Device staging: a ring of the last ``n`` steps of every field (none for one-step returns).

    Rewards are kept in f64 (f32 where the device has none) so that returns round as in host mode.
    """

    name = "device"
    config: ClassVar[dict[str, str]] = {"staging": "device"}

    def __init__(self, buf: ReplayBuffer) -> None:
        super().__init__(buf)
        E, dev, R = buf.num_envs, buf.device, buf.n_step if buf.n_step > 1 else 0
        self.acc_dtype = torch.float32 if dev.type == "mps" else torch.float64
        self.ring_obs = torch.zeros((R, E, *buf.obs_shape), dtype=buf.obs_dtype, device=dev)
        self.ring_next_obs = torch.zeros_like(self.ring_obs)
        self.ring_action = torch.zeros((R, E, *buf.action_shape), dtype=buf.action_dtype, device=dev)
        self.ring_reward = torch.zeros((R, E), dtype=self.acc_dtype, device=dev)
        self.ring_terminated = torch.zeros((R, E), dtype=torch.bool, device=dev)
        self.ring_done = torch.zeros((R, E), dtype=torch.bool, device=dev)
        self.stage_steps = 0  # steps in the ring since it was last emptied (warm-up below n - 1)
        self.env_index = torch.arange(E, device=dev)
        # discounts gamma**k, k = 0..n, computed in f64 and rounded once as host mode does
        self.discounts = torch.tensor(
            [buf.gamma ** float(k) for k in range(buf.n_step + 1)], dtype=torch.float64
        ).to(device=dev, dtype=torch.float32)

    @staticmethod
    def memory_bytes(
        capacity: int, obs_item: int, act_item: int, num_envs: int, n_step: int
    ) -> dict[str, int]:
        """``n`` staged observations, next observations and actions per environment, rewards, flags."""
        ring = (n_step if n_step > 1 else 0) * num_envs
        return {
            "observations": (2 * capacity + 2 * ring) * obs_item,
            "actions": (capacity + ring) * act_item,
            "rewards and discounts": capacity * 8 + ring * 10,
        }

    @property
    def pending(self) -> int:
        """``min(stage_steps, n - 1) * num_envs``, a Python int (nothing is read)."""
        return min(self.stage_steps, self.buf.n_step - 1) * self.buf.num_envs

    def extend(
        self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any, truncated: Any
    ) -> None:
        buf = self.buf
        obs_t = input_tensor("obs", obs, tuple(leading_dims(obs)[:2]) + buf.obs_shape, buf.obs_dtype)
        fields = (obs, action, reward, next_obs, terminated, truncated)
        for k in range(obs_t.shape[0]):  # checked per step; an error stops at that step
            self.add(*(x[k] if isinstance(x, torch.Tensor) else np.asarray(x)[k] for x in fields))

    def add(self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any, truncated: Any) -> None:
        """Stage one step and commit the ``E`` transitions that started ``n - 1`` steps ago.

        Metadata checks only, then fixed-shape tensor ops; returns are summed in host mode's order.
        """
        buf = self.buf
        E = buf.num_envs
        obs_t = input_tensor("obs", obs, tuple(self.obs_full), buf.obs_dtype)
        next_t = input_tensor("next_obs", next_obs, tuple(self.obs_full), buf.obs_dtype)
        act_t = input_tensor("action", action, tuple(self.act_full), buf.action_dtype)
        rew = device_vector("reward", reward, E, "real")
        term = device_vector("terminated", terminated, E, "bool")
        trunc = device_vector("truncated", truncated, E, "bool")
        dev, n = buf.device, buf.n_step
        buf._steps += 1
        if n == 1:  # one-step returns: commit straight from the inputs (copy_ casts and moves)
            term_d = term.to(device=dev)
            disc = torch.where(term_d, 0.0, self.discounts[1])
            self._commit(obs_t, act_t, rew, next_t, disc)
            return
        slot = self.stage_steps % n
        self.ring_obs[slot].copy_(obs_t)
        self.ring_action[slot].copy_(act_t)
        self.ring_next_obs[slot].copy_(next_t)
        self.ring_reward[slot].copy_(rew)
        self.ring_terminated[slot].copy_(term)
        torch.logical_or(self.ring_terminated[slot], trunc.to(device=dev), out=self.ring_done[slot])
        self.stage_steps += 1
        if self.stage_steps < n:  # warm-up: no window is full yet
            return
        first = self.stage_steps % n  # slot of the step n - 1 steps ago (the oldest)
        ret = self.ring_reward[first].clone()  # j = 0: weight gamma**0 = 1
        alive = ~self.ring_done[first]  # no episode end in the window's steps 0 .. j - 1
        k = torch.ones(E, dtype=torch.int64, device=dev)
        for j in range(1, n):
            s = (first + j) % n
            ret = ret + torch.where(alive, self.ring_reward[s] * (buf.gamma ** float(j)), 0.0)
            k = k + alive
            alive = alive & ~self.ring_done[s]
        end = ((k - 1 + first) % n) * E + self.env_index  # flat [n * E] index of the window's end
        terminated_end = self.ring_terminated.view(n * E).index_select(0, end)
        disc = torch.where(terminated_end, 0.0, self.discounts.index_select(0, k))
        boot = self.ring_next_obs.view(n * E, *buf.obs_shape).index_select(0, end)
        self._commit(self.ring_obs[first], self.ring_action[first], ret, boot, disc)

    def _commit(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        discount: torch.Tensor,
    ) -> None:
        """Write ``E`` transitions at the ring's position (of more than ``capacity``, the last survive)."""
        buf = self.buf
        E, C = buf.num_envs, buf.capacity
        skip = max(0, E - C)
        count = E - skip
        pos = (buf._pos + skip) % C
        first = min(count, C - pos)
        dsts = (buf._obs, buf._action, buf._reward, buf._next_obs, buf._discount)
        for dst, src in zip(dsts, (obs, action, reward, next_obs, discount), strict=True):
            dst[pos : pos + first].copy_(src[skip : skip + first])
            if count > first:
                dst[: count - first].copy_(src[skip + first :])
        buf._on_commit(pos, count)
        buf._advance(E)

    def _ring(self) -> tuple[torch.Tensor, ...]:
        """The staging ring's tensors, in the order of ``_RING_KEYS``."""
        return (
            self.ring_obs,
            self.ring_action,
            self.ring_next_obs,
            self.ring_reward,
            self.ring_terminated,
            self.ring_done,
        )

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The whole staging ring, ``ring_*`` tensors of ``[n, E, ...]``."""
        return dict(zip(_RING_KEYS, self._ring(), strict=True))

    def state_meta(self) -> dict[str, Any]:
        """``stage_steps``."""
        return {"stage_steps": self.stage_steps}

    @classmethod
    def state_spec(cls, buf: ReplayBuffer, meta: dict[str, Any]) -> Spec:
        check_int("state meta 'stage_steps'", meta.get("stage_steps"), low=0, high=meta["steps"])
        R, E = (buf.n_step if buf.n_step > 1 else 0), buf.num_envs
        return {
            "ring_obs": ((R, E, *buf.obs_shape), buf.obs_dtype),
            "ring_action": ((R, E, *buf.action_shape), buf.action_dtype),
            "ring_next_obs": ((R, E, *buf.obs_shape), buf.obs_dtype),
            "ring_reward": ((R, E), torch.float64),
            "ring_terminated": ((R, E), torch.bool),
            "ring_done": ((R, E), torch.bool),
        }

    def load_target(self, key: str, dtype: torch.dtype) -> tuple[torch.device | str, torch.dtype]:
        """Rewards in the accumulation dtype (f64, or f32 where the device has none)."""
        return self.buf.device, (self.acc_dtype if key == "ring_reward" else dtype)

    def apply(self, staged: dict[str, Any] | None) -> None:
        ring = self._ring()
        if staged is None:  # saved in host mode: its open windows are dropped
            for dst in ring:
                dst.zero_()
            self.stage_steps = 0
            return
        for key, dst in zip(_RING_KEYS, ring, strict=True):
            dst.copy_(staged[key])
        self.stage_steps = int(staged["meta"]["stage_steps"])


_CLASSES: dict[str, type[Staging]] = {cls.name: cls for cls in (HostStaging, DeviceStaging)}
STAGINGS = tuple(_CLASSES)
"""The staging modes of `ReplayBuffer` (``staging=``)."""


def staging_class(name: object) -> type[Staging]:
    """The strategy of staging mode ``name``.

    Raises:
        ValueError: not one of `STAGINGS`.
    """
    if name not in _CLASSES:
        raise ValueError(f"staging must be one of {STAGINGS}, got {name!r}")
    return _CLASSES[name]
