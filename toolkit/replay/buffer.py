"""Uniform replay buffer on the training device, with n-step returns over parallel environments.

Storage is a preallocated ring of *complete* n-step transitions (see :mod:`tritonrl.toolkit.replay.nstep`):
``obs``/``next_obs`` in the observation dtype (``training_dtype(device)``, or uint8 for images),
``action`` in ``action_dtype``, ``reward`` (the n-step return) and ``discount`` in f32. Each
field is cast exactly once, when it enters (``add``/``extend``); sampling only gathers.

Transitions whose n-step window is still open wait in a small staging area (``n - 1`` steps per
environment, on the device) and are neither counted by ``len()`` nor sampled.

Two staging modes (``staging=`` of the constructor) decide how the n-step windows are closed:

- ``"host"`` (default): rewards and done flags are read on the host (numpy arrays or CPU
  tensors, as gymnasium returns them; CUDA tensors cost one synchronisation per
  ``add``/``extend``); a transition is committed as soon as its window closes (``n`` steps or an
  episode end), pending ones wait in a staging area of ``n - 1`` steps per environment.
- ``"device"``: :meth:`ReplayBuffer.add` reads no tensor value on the host. Every argument may
  be a tensor on the buffer's device (host inputs are moved there); shapes are fixed: every
  vector step (after ``n - 1`` warm-up steps) commits exactly ``num_envs`` transitions, those
  that started ``n - 1`` steps earlier, each return cut at the first episode end in its window.
  The last ``n`` steps of every field wait in a device staging ring. Over a whole stream both
  modes store the same set of transitions (tested); they differ only in when (and so in which
  order) a transition whose window an episode end closed early enters the ring.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from tritonrl.toolkit.checkpoint import atomic_write_bytes
from tritonrl.toolkit.checks import check_memory
from tritonrl.toolkit.precision import training_dtype
from tritonrl.toolkit.replay.nstep import NStepState, schedule

__all__ = ["ReplayBatch", "ReplayBuffer"]

_FORMAT = "tritonrl.replay"
_VERSION = 1
STAGINGS = ("host", "device")
"""The staging modes of :class:`ReplayBuffer` (``staging=``)."""


class ReplayBatch(NamedTuple):
    """One sampled batch (``B`` transitions), every tensor on the buffer's device.

    Attributes:
        obs: ``[B, *obs_shape]`` in the observation dtype.
        action: ``[B, *action_shape]`` in ``action_dtype``.
        reward: f32 ``[B]``, n-step discounted return ``sum_{j<k} gamma**j r_j``.
        next_obs: ``[B, *obs_shape]``, the observation ``k`` steps later (the real final
            observation where the episode ended).
        discount: f32 ``[B]``, ``gamma**k`` for the ``k`` steps used, 0 where the episode terminated.
            TD target: ``reward + discount * Q(next_obs)``.
        indices: int64 ``[B]``, slots in the buffer (pass them to ``update_priorities``).
        weights: f32 ``[B]``, importance weights (ones for the uniform buffer).
    """

    obs: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    next_obs: torch.Tensor
    discount: torch.Tensor
    indices: torch.Tensor
    weights: torch.Tensor


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _shape(name: str, value: Any) -> tuple[int, ...]:
    try:
        shape = tuple(int(d) for d in value)
    except TypeError:
        raise TypeError(f"{name} must be a tuple of ints, got {value!r}") from None
    if any(d < 1 for d in shape):
        raise ValueError(f"{name} must have positive dimensions, got {value!r}")
    return shape


def _positive_int(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def _host(name: str, value: Any, shape: tuple[int, ...], kind: str) -> np.ndarray:
    """Read a reward / done array on the host and check its shape and dtype kind."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()  # a sync if the tensor lives on a GPU
        value = (value.float() if value.dtype in (torch.bfloat16, torch.float16) else value).numpy()
    arr = np.asarray(value)
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
    if kind == "bool" and arr.dtype != np.bool_:
        raise TypeError(f"{name} must be boolean, got dtype {arr.dtype}")
    if kind == "real":
        if arr.dtype == np.bool_ or arr.dtype.kind not in "fiu":
            raise TypeError(f"{name} must be a real number array, got dtype {arr.dtype}")
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            raise ValueError(f"{name} contains NaN or infinite values")
    return arr


def _tensor(name: str, value: Any, shape: tuple[int, ...], target: torch.dtype) -> torch.Tensor:
    """An input tensor (any device, not yet cast) after shape and dtype-kind checks."""
    t = value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")
    ok, want = _kind_rule(target)
    if not ok(t.dtype):
        raise TypeError(f"{name} must have {want} (stored as {target}), got {t.dtype}")
    return t


class ReplayBuffer:
    """Uniform replay: a device-resident ring of n-step transitions from ``num_envs`` environments.

    Args:
        capacity: transitions kept (the oldest are overwritten).
        obs_shape: shape of one observation.
        device: where everything is stored and sampled.
        num_envs: parallel environments; ``add`` takes one step of each (leading dim ``num_envs``).
        n_step: steps per return (1 = one-step TD).
        gamma: discount in ``[0, 1]``.
        action_shape: shape of one action (``()`` for discrete actions).
        action_dtype: an integer dtype (discrete) or ``torch.float32`` (continuous).
        obs_dtype: ``None`` -> ``training_dtype(device)``; ``torch.uint8`` keeps image bytes;
            another floating dtype is an explicit override for experiments.
        staging: ``"host"`` or ``"device"`` (see the module docstring): where the n-step windows
            are closed, and whether ``add`` reads rewards and done flags on the host.

    ``len()`` counts committed (sampleable) transitions in both modes; :attr:`pending` counts the
    started transitions not committed yet: in host mode the open windows, in device mode every
    start of the last ``n - 1`` steps (some of them may be complete already; they are committed at
    their fixed step).

    Raises:
        ValueError / TypeError: an argument is out of range or of the wrong type, or the storage
            cannot fit in the device's free memory (the message says how much it needs).
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
    ) -> None:
        if staging not in STAGINGS:
            raise ValueError(f"staging must be one of {STAGINGS}, got {staging!r}")
        self.staging = staging
        self._capacity = _positive_int("capacity", capacity)
        self.obs_shape = _shape("obs_shape", obs_shape)
        self.action_shape = _shape("action_shape", action_shape)
        self.num_envs = _positive_int("num_envs", num_envs)
        self.n_step = _positive_int("n_step", n_step)
        if not isinstance(gamma, (int, float)) or isinstance(gamma, bool) or not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be a number in [0, 1], got {gamma!r}")
        self.gamma = float(gamma)
        self.device = torch.device(device)
        if not isinstance(action_dtype, torch.dtype) or action_dtype == torch.bool or action_dtype.is_complex:
            raise TypeError(f"action_dtype must be an integer or floating torch.dtype, got {action_dtype!r}")
        self.action_dtype = action_dtype
        if obs_dtype is None:
            obs_dtype = training_dtype(self.device)
        elif not isinstance(obs_dtype, torch.dtype) or not (
            obs_dtype == torch.uint8 or obs_dtype.is_floating_point
        ):
            raise TypeError(f"obs_dtype must be None, torch.uint8 or a floating dtype, got {obs_dtype!r}")
        self.obs_dtype = obs_dtype
        check_memory(
            f"capacity={self._capacity}",
            self.memory_bytes(
                self._capacity,
                self.obs_shape,
                obs_dtype=obs_dtype,
                action_shape=self.action_shape,
                action_dtype=action_dtype,
                num_envs=self.num_envs,
                n_step=self.n_step,
                staging=staging,
            ),
            self.device,
        )
        C, dev = self._capacity, self.device
        self._obs = torch.zeros((C, *self.obs_shape), dtype=obs_dtype, device=dev)
        self._next_obs = torch.zeros_like(self._obs)
        self._action = torch.zeros((C, *self.action_shape), dtype=action_dtype, device=dev)
        self._reward = torch.zeros(C, dtype=torch.float32, device=dev)
        self._discount = torch.zeros(C, dtype=torch.float32, device=dev)
        K, E = self.n_step - 1, self.num_envs
        if staging == "device":
            K = 0  # the host staging area stays empty: the device ring replaces it
        self._stage_obs = torch.zeros((K, E, *self.obs_shape), dtype=obs_dtype, device=dev)
        self._stage_action = torch.zeros((K, E, *self.action_shape), dtype=action_dtype, device=dev)
        self._nstep = NStepState.empty(self.n_step, E)
        self._pos = 0  # next slot to write
        self._size = 0  # complete transitions stored
        self._steps = 0  # vector steps added
        self._committed = 0  # complete transitions ever written
        # for add()'s direct path: full input shapes, dtype-kind tests, numpy views of CPU storage
        self._obs_full = torch.Size((E, *self.obs_shape))
        self._act_full = torch.Size((E, *self.action_shape))
        self._obs_kind = _kind_rule(obs_dtype)[0]  # the dtype kinds _tensor() accepts
        self._act_kind = _kind_rule(action_dtype)[0]
        self._views: tuple[np.ndarray, ...] | None = None
        storage = (self._obs, self._next_obs, self._action, self._reward, self._discount)
        if dev.type == "cpu" and all(t.dtype in _NUMPY_DTYPES for t in storage):
            self._views = tuple(t.numpy() for t in storage)  # the storage is never reassigned
        self._stage_views: tuple[np.ndarray, np.ndarray] | None = None
        if self._views is not None:
            self._stage_views = (self._stage_obs.numpy(), self._stage_action.numpy())
        if staging == "device":
            self._init_ring()

    def _init_ring(self) -> None:
        """Device staging: a ring of the last ``R = n`` steps of every field (``R = 0`` for
        one-step returns, which commit straight from the inputs), written at slot
        ``stage_steps % R`` (a Python int); rewards are kept in f64 so that returns round once,
        as in host mode (f32 where the device has no f64)."""
        E, dev, R = self.num_envs, self.device, self.n_step if self.n_step > 1 else 0
        self._acc_dtype = torch.float32 if dev.type == "mps" else torch.float64
        self._ring_obs = torch.zeros((R, E, *self.obs_shape), dtype=self.obs_dtype, device=dev)
        self._ring_next_obs = torch.zeros_like(self._ring_obs)
        self._ring_action = torch.zeros((R, E, *self.action_shape), dtype=self.action_dtype, device=dev)
        self._ring_reward = torch.zeros((R, E), dtype=self._acc_dtype, device=dev)
        self._ring_terminated = torch.zeros((R, E), dtype=torch.bool, device=dev)
        self._ring_done = torch.zeros((R, E), dtype=torch.bool, device=dev)
        self._stage_steps = 0  # steps in the ring since it was last emptied (warm-up below n - 1)
        self._env_index = torch.arange(E, device=dev)
        # discounts gamma**k, k = 0..n, computed in f64 and rounded once as host mode does
        self._discounts = torch.tensor(
            [self.gamma ** float(k) for k in range(self.n_step + 1)], dtype=torch.float64
        ).to(device=dev, dtype=torch.float32)

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

        ``observations``: ``obs`` and ``next_obs`` rings plus the n-step staging area (host mode:
        ``n - 1`` observations per environment; device mode: ``n`` observations and ``n`` next
        observations); ``actions``; ``rewards and discounts`` (f32; device mode adds its f64
        rewards and two flags per staged step). Subclasses add their own parts.
        """
        obs_item = math.prod(obs_shape) * _itemsize(obs_dtype)
        act_item = math.prod(action_shape) * _itemsize(action_dtype)
        if staging == "device":
            ring = (n_step if n_step > 1 else 0) * num_envs
            return {
                "observations": (2 * capacity + 2 * ring) * obs_item,
                "actions": (capacity + ring) * act_item,
                "rewards and discounts": capacity * 8 + ring * 10,
            }
        staged = (n_step - 1) * num_envs
        return {
            "observations": (2 * capacity + staged) * obs_item,
            "actions": (capacity + staged) * act_item,
            "rewards and discounts": capacity * 8,
        }

    @property
    def capacity(self) -> int:
        """Maximum number of stored transitions."""
        return self._capacity

    def __len__(self) -> int:
        """Complete transitions stored (pending n-step windows are not counted)."""
        return self._size

    @property
    def pending(self) -> int:
        """Started transitions not committed yet (not sampleable): host mode, those whose n-step
        window is still open; device mode, every start of the last ``n - 1`` steps,
        ``min(stage_steps, n - 1) * num_envs`` (a Python int: nothing is read)."""
        if self.staging == "device":
            return min(self._stage_steps, self.n_step - 1) * self.num_envs
        return int(self._nstep.pending.sum())

    @property
    def steps(self) -> int:
        """Vector steps added so far."""
        return self._steps

    # ---- ingestion -----------------------------------------------------------------------------

    def add(self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any, truncated: Any) -> None:
        """Add one vector step: every argument has leading dim ``num_envs``.

        Args:
            obs: ``[E, *obs_shape]``, floating (or uint8 for a uint8 buffer), on any device.
            action: ``[E, *action_shape]``, integer or floating as ``action_dtype``.
            reward: ``[E]`` real numbers, finite.
            next_obs: like ``obs``: the real next observation (the final one at an episode end).
            terminated: ``[E]`` bool, the episode ended in a terminal state (no bootstrap).
            truncated: ``[E]`` bool, the episode was cut (bootstrap from ``next_obs``).

        Raises:
            ValueError / TypeError: wrong shape, dtype or non-finite reward; nothing is added.
                In device mode only shapes and dtypes are checked (a NaN reward is stored; the
                agents' input guards flag it on the device).
        """
        if self.staging == "device":
            self._add_device(obs, action, reward, next_obs, terminated, truncated)
            return
        if self.n_step == 1 and self._add_one(obs, action, reward, next_obs, terminated, truncated):
            return
        self.extend(*(_lead(x) for x in (obs, action, reward, next_obs, terminated, truncated)))

    def _add_one(
        self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any, truncated: Any
    ) -> bool:
        """The common case of :meth:`add`, written directly into the ring: one-step returns, tensor
        observations and actions of exactly the stored shapes and dtype kinds, host (CPU) rewards and
        flags, and no wrap-around. Returns ``False`` (nothing changed) for anything else, which
        :meth:`extend` then handles, with its errors."""
        E, pos = self.num_envs, self._pos
        if pos + E > self._capacity:
            return False
        T = torch.Tensor
        if not (type(obs) is T and type(next_obs) is T and type(action) is T):
            return False
        full = self._obs_full
        if obs.shape != full or next_obs.shape != full or action.shape != self._act_full:
            return False
        obs_kind = self._obs_kind
        if not (obs_kind(obs.dtype) and obs_kind(next_obs.dtype) and self._act_kind(action.dtype)):
            return False
        rew, term, trunc = _host_vec(reward), _host_vec(terminated), _host_vec(truncated)
        if rew is None or term is None or trunc is None:
            return False
        if rew.shape != (E,) or term.shape != (E,) or trunc.shape != (E,):
            return False
        if term.dtype != np.bool_ or trunc.dtype != np.bool_ or rew.dtype.kind not in "fiu":
            return False
        if rew.dtype.kind == "f" and not np.isfinite(rew).all():
            return False  # extend raises the error
        end = pos + E
        views = self._views
        if views is not None:  # CPU storage numpy can address: plain array writes
            np_obs, np_next, np_act, np_rew, np_disc = views
            np_obs[pos:end] = _np(obs)
            np_next[pos:end] = _np(next_obs)
            np_act[pos:end] = _np(action)
            np_rew[pos:end] = rew
            np.multiply(~term, np.float32(self.gamma), out=np_disc[pos:end])
        else:  # copy_ casts and moves in one go (the one cast of the stored dtype)
            self._obs[pos:end].copy_(obs)
            self._next_obs[pos:end].copy_(next_obs)
            self._action[pos:end].copy_(action)
            self._reward[pos:end].copy_(torch.from_numpy(rew.astype(np.float32, copy=False)))
            disc = np.multiply(~term, np.float32(self.gamma), dtype=np.float32)
            self._discount[pos:end].copy_(torch.from_numpy(disc))
        self._on_commit(pos, E)
        self._pos = end % self._capacity
        self._size = min(self._capacity, self._size + E)
        self._committed += E
        self._steps += 1
        return True

    def extend(
        self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any, truncated: Any
    ) -> None:
        """Add ``T`` vector steps at once: leading dims ``[T, num_envs]`` (step-major).

        Same result as ``T`` calls of :meth:`add`. Field rules and errors as in :meth:`add`.
        """
        if self.staging == "device":
            obs_t = _tensor("obs", obs, tuple(_dims(obs)[:2]) + self.obs_shape, self.obs_dtype)
            fields = (obs, action, reward, next_obs, terminated, truncated)
            for k in range(obs_t.shape[0]):  # checked per step; an error stops at that step
                self._add_device(*(x[k] if isinstance(x, torch.Tensor) else np.asarray(x)[k] for x in fields))
            return
        obs_t = _tensor("obs", obs, tuple(_dims(obs)[:2]) + self.obs_shape, self.obs_dtype)
        T, E = obs_t.shape[0], self.num_envs
        if obs_t.shape[1] != E:
            raise ValueError(f"obs must have shape {(T, E, *self.obs_shape)}, got {tuple(obs_t.shape)}")
        next_t = _tensor("next_obs", next_obs, (T, E, *self.obs_shape), self.obs_dtype)
        act_t = _tensor("action", action, (T, E, *self.action_shape), self.action_dtype)
        rew = _host("reward", reward, (T, E), "real")
        term = _host("terminated", terminated, (T, E), "bool")
        trunc = _host("truncated", truncated, (T, E), "bool")
        if T == 0:
            return
        commits, new_state = schedule(self._nstep, rew, term, trunc, self.n_step, self.gamma)
        self._write(commits, obs_t, act_t, next_t, T)
        self._nstep = new_state
        self._steps += T

    def _write_host(
        self, commits: Any, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor, T: int
    ) -> None:
        """:meth:`_write` for n-step buffers on the CPU, through numpy views of the ring and the
        staging area: the same gathers and copies (and casts to the stored dtypes) without a
        tensor op each."""
        E, K, C = self.num_envs, self.n_step - 1, self._capacity
        assert self._views is not None and self._stage_views is not None  # checked by the caller
        np_obs, np_next, np_act, np_rew, np_disc = self._views
        stage_obs, stage_act = self._stage_views
        o = _np(obs).astype(np_obs.dtype, copy=False)  # [T, E, *obs_shape] in the stored dtype
        a = _np(action).astype(np_act.dtype, copy=False)
        nxt = _np(next_obs).reshape(T * E, *self.obs_shape)
        flat_o, flat_a = o.reshape(T * E, *self.obs_shape), a.reshape(T * E, *self.action_shape)
        m = len(commits.reward)
        skip = max(0, m - C)  # more commits than slots: only the last C survive
        count = m - skip
        if count > 0:
            start, end = commits.start[skip:], commits.end[skip:]
            if (start < K * E).any():  # some start in staging
                src_o = np.concatenate([stage_obs.reshape(K * E, *self.obs_shape), flat_o])
                src_a = np.concatenate([stage_act.reshape(K * E, *self.action_shape), flat_a])
            else:
                src_o, src_a, start = flat_o, flat_a, start - K * E
            srcs = (src_o[start], src_a[start], nxt[end], commits.reward[skip:], commits.discount[skip:])
            pos = (self._pos + skip) % C  # commit k goes to slot (pos + k) % C, skipped ones too
            first = min(count, C - pos)
            for dst, src in zip((np_obs, np_act, np_next, np_rew, np_disc), srcs, strict=True):
                dst[pos : pos + first] = src[:first]
                if count > first:
                    dst[: count - first] = src[first:]
            self._on_commit(pos, count)
        self._pos = (self._pos + m) % C
        self._size = min(C, self._size + m)
        self._committed += m
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
        E, K, C, dev = self.num_envs, self.n_step - 1, self._capacity, self.device
        if K and self._stage_views is not None:
            self._write_host(commits, obs, action, next_obs, T)
            return
        if K:  # gathers below: bring the inputs to the device in the stored dtype (the one cast)
            obs = obs.to(device=dev, dtype=self.obs_dtype)
            action = action.to(device=dev, dtype=self.action_dtype)
        flat_obs = obs.reshape(T * E, *self.obs_shape)
        flat_act = action.reshape(T * E, *self.action_shape)
        flat_next = next_obs.reshape(T * E, *self.obs_shape)
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
                    src_obs = torch.cat([self._stage_obs.reshape(K * E, *self.obs_shape), flat_obs])
                    src_act = torch.cat([self._stage_action.reshape(K * E, *self.action_shape), flat_act])
                else:
                    src_obs, src_act = flat_obs, flat_act
                    start = start - K * E
                next_src = flat_next.to(device=dev, dtype=self.obs_dtype).index_select(0, end)
                srcs = (
                    src_obs.index_select(0, start),
                    src_act.index_select(0, start),
                    next_src,
                    reward,
                    discount,
                )
            dsts = (self._obs, self._action, self._next_obs, self._reward, self._discount)
            pos = (self._pos + skip) % C  # commit k goes to slot (pos + k) % C, skipped ones too
            first = min(count, C - pos)
            for dst, src in zip(dsts, srcs, strict=True):
                dst[pos : pos + first].copy_(src[:first])
                if count > first:
                    dst[: count - first].copy_(src[first:])
            self._on_commit(pos, count)
        self._pos = (self._pos + m) % C
        self._size = min(C, self._size + m)
        self._committed += m
        if K:  # staging keeps the last K steps, oldest first
            if T >= K:
                self._stage_obs.copy_(obs[T - K :])
                self._stage_action.copy_(action[T - K :])
            else:
                self._stage_obs[: K - T] = self._stage_obs[T:].clone()
                self._stage_action[: K - T] = self._stage_action[T:].clone()
                self._stage_obs[K - T :].copy_(obs)
                self._stage_action[K - T :].copy_(action)

    def _add_device(
        self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any, truncated: Any
    ) -> None:
        """:meth:`add` in device mode: metadata checks only, then fixed-shape tensor ops.

        The step enters the staging ring at slot ``stage_steps % n``; once ``n - 1`` earlier
        steps are there, the ``E`` transitions that started ``n - 1`` steps ago are committed:
        return ``sum_{j<k} gamma**j r_j`` (``k`` up to and including the first episode end in
        the window, summed in f64 in host mode's order), bootstrap observation ``next_obs`` of the
        window's step ``k - 1``, discount ``gamma**k`` or 0 where that step terminated.
        """
        E = self.num_envs
        obs_t = _tensor("obs", obs, tuple(self._obs_full), self.obs_dtype)
        next_t = _tensor("next_obs", next_obs, tuple(self._obs_full), self.obs_dtype)
        act_t = _tensor("action", action, tuple(self._act_full), self.action_dtype)
        rew = _device_vec("reward", reward, E, "real")
        term = _device_vec("terminated", terminated, E, "bool")
        trunc = _device_vec("truncated", truncated, E, "bool")
        dev, n = self.device, self.n_step
        self._steps += 1
        if n == 1:  # one-step returns: commit straight from the inputs (copy_ casts and moves)
            term_d = term.to(device=dev)
            disc = torch.where(term_d, 0.0, self._discounts[1])
            self._commit_device(obs_t, act_t, rew, next_t, disc)
            return
        slot = self._stage_steps % n
        self._ring_obs[slot].copy_(obs_t)
        self._ring_action[slot].copy_(act_t)
        self._ring_next_obs[slot].copy_(next_t)
        self._ring_reward[slot].copy_(rew)
        self._ring_terminated[slot].copy_(term)
        torch.logical_or(self._ring_terminated[slot], trunc.to(device=dev), out=self._ring_done[slot])
        self._stage_steps += 1
        if self._stage_steps < n:  # warm-up: no window is full yet
            return
        first = self._stage_steps % n  # slot of the step n - 1 steps ago (the oldest)
        ret = self._ring_reward[first].clone()  # j = 0: weight gamma**0 = 1
        alive = ~self._ring_done[first]  # no episode end in the window's steps 0 .. j - 1
        k = torch.ones(E, dtype=torch.int64, device=dev)
        for j in range(1, n):
            s = (first + j) % n
            ret = ret + torch.where(alive, self._ring_reward[s] * (self.gamma ** float(j)), 0.0)
            k = k + alive
            alive = alive & ~self._ring_done[s]
        end = ((k - 1 + first) % n) * E + self._env_index  # flat [n * E] index of the window's end
        terminated_end = self._ring_terminated.view(n * E).index_select(0, end)
        disc = torch.where(terminated_end, 0.0, self._discounts.index_select(0, k))
        boot = self._ring_next_obs.view(n * E, *self.obs_shape).index_select(0, end)
        self._commit_device(self._ring_obs[first], self._ring_action[first], ret, boot, disc)

    def _commit_device(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        discount: torch.Tensor,
    ) -> None:
        """Write ``E`` transitions (one per environment, in environment order) at the ring's
        position; ``copy_`` casts and moves each field once. More than ``capacity``: the last
        ``capacity`` survive, as in host mode."""
        E, C = self.num_envs, self._capacity
        skip = max(0, E - C)
        count = E - skip
        pos = (self._pos + skip) % C
        first = min(count, C - pos)
        dsts = (self._obs, self._action, self._reward, self._next_obs, self._discount)
        for dst, src in zip(dsts, (obs, action, reward, next_obs, discount), strict=True):
            dst[pos : pos + first].copy_(src[skip : skip + first])
            if count > first:
                dst[: count - first].copy_(src[skip + first :])
        self._on_commit(pos, count)
        self._pos = (self._pos + E) % C
        self._size = min(C, self._size + E)
        self._committed += E

    def _on_commit(self, pos: int, count: int) -> None:
        """Hook: slots ``pos .. pos + count - 1`` (mod capacity) now hold new transitions."""

    # ---- sampling ------------------------------------------------------------------------------

    def _check_batch_size(self, batch_size: int) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if self._size == 0:
            raise ValueError("cannot sample from an empty buffer (no complete transition yet)")
        if batch_size > self._size:
            raise ValueError(f"batch_size={batch_size} exceeds the {self._size} transitions stored")

    def _gather(self, idx: torch.Tensor, weights: torch.Tensor) -> ReplayBatch:
        """The rows ``idx`` (int64 ``[B]`` on the buffer's device, all in ``[0, len)``) of every
        field, as fresh tensors. On CPU numpy's ``take`` copies the rows (cheaper per call than
        ``index_select``, the same values); traced by ``torch.compile``, ``index_select``."""
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
            generator: the random source; a generator on another device than the buffer draws
                there and the indices are copied over. ``None``: the device's default generator.

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
            **({"staging": "device"} if self.staging == "device" else {}),  # absent: host
        }

    def _ring_tensors(self) -> tuple[torch.Tensor, ...]:
        """The device staging ring's tensors, in the order of ``_RING_KEYS``."""
        return (
            self._ring_obs,
            self._ring_action,
            self._ring_next_obs,
            self._ring_reward,
            self._ring_terminated,
            self._ring_done,
        )

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: tensors (views of the stored part) and a ``meta`` dict.

        The ``meta`` entry is JSON-serialisable (config and counters); every other entry is a
        tensor. Observations keep their stored dtype; :meth:`load_state_dict` casts them.

        Host mode saves its staging area (``stage_obs``, ``stage_action``) and the pending n-step
        rewards (``nstep_pending``, ``nstep_rewards``); device mode saves its whole staging ring
        (``ring_obs``, ``ring_action``, ``ring_next_obs``, ``ring_reward``, ``ring_terminated``,
        ``ring_done``, ``[n, E, ...]``) and ``meta["stage_steps"]``, and its ``config`` holds
        ``"staging": "device"``.
        """
        n = self._size
        sd: dict[str, Any] = {
            "obs": self._obs[:n],
            "next_obs": self._next_obs[:n],
            "action": self._action[:n],
            "reward": self._reward[:n],
            "discount": self._discount[:n],
        }
        if self.staging == "device":
            ring = self._ring_tensors()
            sd.update(zip(_RING_KEYS, ring, strict=True))
        else:
            sd.update(
                stage_obs=self._stage_obs,
                stage_action=self._stage_action,
                nstep_pending=torch.from_numpy(self._nstep.pending.copy()),
                nstep_rewards=torch.from_numpy(self._nstep.rewards.copy()),
            )
        sd["meta"] = {
            "format": _FORMAT,
            "version": _VERSION,
            "config": self._config(),
            "pos": self._pos,
            "size": self._size,
            "steps": self._steps,
            "committed": self._committed,
        }
        if self.staging == "device":
            sd["meta"]["stage_steps"] = self._stage_steps
        return sd

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict` (possibly saved on another device or in another dtype).

        A state saved in the other staging mode loads too (a run resumed with another
        ``staging``): the stored transitions and counters are kept and the staging starts empty,
        so the at most ``(n - 1) * num_envs`` transitions whose windows were open are dropped.

        Raises:
            ValueError: the state is not a replay-buffer state, or its configuration, shapes or
                counters do not match this buffer; the buffer is left unchanged.
        """
        staged = self.parse_state(state)
        self.apply_state(staged)

    def parse_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """Validate ``state`` (a :meth:`state_dict`) and convert its tensors to this buffer's
        dtypes and device; touches nothing of ``self``. With :meth:`apply_state`, the two halves of
        :meth:`load_state_dict`, for an owner that checks all its parts before changing any (an
        agent's checkpoint load).

        Returns:
            the staged state, for :meth:`apply_state`.

        Raises:
            ValueError: the state is not a replay-buffer state, or its configuration, shapes or
                counters do not match this buffer.
        """
        if not isinstance(state, dict) or not isinstance(state.get("meta"), dict):
            raise ValueError("not a replay-buffer state: no 'meta' entry")
        meta = state["meta"]
        if meta.get("format") != _FORMAT or meta.get("version") != _VERSION:
            raise ValueError(f"not a {_FORMAT} v{_VERSION} state: format={meta.get('format')!r}")
        config, mine = meta.get("config"), self._config()
        saved_staging = config.get("staging", "host") if isinstance(config, dict) else "host"
        if isinstance(config, dict):  # either staging mode loads (see load_state_dict)
            config = {k: v for k, v in config.items() if k != "staging"}
        mine.pop("staging", None)
        if saved_staging not in STAGINGS:
            raise ValueError(f"state has an unknown staging mode {saved_staging!r}")
        if config != mine:
            diff = {
                k: (config.get(k) if isinstance(config, dict) else None, v)
                for k, v in mine.items()
                if not isinstance(config, dict) or config.get(k) != v
            }
            raise ValueError(
                f"state was saved by a buffer with another configuration (saved, this): {str(diff)[:200]}"
            )
        size, pos = meta.get("size"), meta.get("pos")
        if isinstance(size, bool) or isinstance(pos, bool):
            size = pos = None
        C, K, E = self._capacity, self.n_step - 1, self.num_envs
        if not (isinstance(size, int) and 0 <= size <= C and isinstance(pos, int) and 0 <= pos < C):
            raise ValueError(f"state has invalid counters size={size!r} pos={pos!r}")
        if size < C and pos != size:
            raise ValueError(f"state has pos={pos} but size={size} < capacity")
        steps, committed = meta.get("steps"), meta.get("committed")
        for key, value in (("steps", steps), ("committed", committed)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(
                    f"state meta {key!r} is missing or not a non-negative int (got {repr(value)[:40]})"
                )
        if committed % C != pos or min(committed, C) != size or committed > steps * E:
            raise ValueError(
                f"state counters disagree: committed={committed}, size={size}, pos={pos}, "
                f"steps={steps} for capacity {C} and {E} environments"
            )
        shapes = {
            "obs": ((size, *self.obs_shape), self.obs_dtype),
            "next_obs": ((size, *self.obs_shape), self.obs_dtype),
            "action": ((size, *self.action_shape), self.action_dtype),
            "reward": ((size,), torch.float32),
            "discount": ((size,), torch.float32),
        }
        if saved_staging == "host":
            shapes.update(
                stage_obs=((K, E, *self.obs_shape), self.obs_dtype),
                stage_action=((K, E, *self.action_shape), self.action_dtype),
                nstep_pending=((E,), torch.int64),
                nstep_rewards=((K, E), torch.float64),
            )
        else:
            R = self.n_step if self.n_step > 1 else 0
            shapes.update(
                ring_obs=((R, E, *self.obs_shape), self.obs_dtype),
                ring_action=((R, E, *self.action_shape), self.action_dtype),
                ring_next_obs=((R, E, *self.obs_shape), self.obs_dtype),
                ring_reward=((R, E), torch.float64),
                ring_terminated=((R, E), torch.bool),
                ring_done=((R, E), torch.bool),
            )
            stage_steps = meta.get("stage_steps")
            ok = isinstance(stage_steps, int) and not isinstance(stage_steps, bool)
            if not ok or not 0 <= stage_steps <= steps:
                raise ValueError(f"state meta 'stage_steps' is invalid (got {repr(stage_steps)[:40]})")
        if saved_staging != self.staging:
            ring_fields = ("obs", "next_obs", "action", "reward", "discount")
            shapes = {k: v for k, v in shapes.items() if k in ring_fields}  # the other staging is dropped
        out: dict[str, Any] = {"meta": meta, "same_staging": saved_staging == self.staging}
        for key, (shape, dtype) in shapes.items():
            t = state.get(key)
            if not isinstance(t, torch.Tensor):
                raise ValueError(f"state is missing tensor {key!r}")
            if tuple(t.shape) != shape:
                raise ValueError(f"state tensor {key!r} has shape {tuple(t.shape)}, expected {shape}")
            if t.dtype != dtype and not (t.dtype.is_floating_point and dtype.is_floating_point):
                raise ValueError(f"state tensor {key!r} has dtype {t.dtype}, cannot load into {dtype}")
            if t.dtype != dtype and (dtype == torch.bool or t.dtype == torch.bool):
                raise ValueError(f"state tensor {key!r} has dtype {t.dtype}, cannot load into {dtype}")
            dev = "cpu" if key.startswith("nstep_") else self.device
            if key == "ring_reward":
                dtype = self._acc_dtype
            out[key] = t.to(device=dev, dtype=dtype)  # the load boundary: one cast
        if "nstep_pending" in out:
            pending = out["nstep_pending"].numpy()
            if (pending < 0).any() or (pending > K).any():
                raise ValueError(f"state has invalid pending counts {pending.tolist()}")
        return out

    def apply_state(self, staged: dict[str, Any]) -> None:
        """Restore a state staged by :meth:`parse_state` (no further checks)."""
        meta = staged["meta"]
        n = meta["size"]
        for key, dst in (
            ("obs", self._obs),
            ("next_obs", self._next_obs),
            ("action", self._action),
            ("reward", self._reward),
            ("discount", self._discount),
        ):
            dst[:n].copy_(staged[key])
        same = staged.get("same_staging", True)
        if self.staging == "device":
            ring = self._ring_tensors()
            if same:
                for key, dst in zip(_RING_KEYS, ring, strict=True):
                    dst.copy_(staged[key])
                self._stage_steps = int(meta["stage_steps"])
            else:  # saved in host mode: its open windows are dropped
                for dst in ring:
                    dst.zero_()
                self._stage_steps = 0
        elif same:
            self._stage_obs.copy_(staged["stage_obs"])
            self._stage_action.copy_(staged["stage_action"])
            self._nstep = NStepState(
                staged["nstep_pending"].numpy().copy(), staged["nstep_rewards"].numpy().copy()
            )
        else:  # saved in device mode: its staged steps are dropped
            self._stage_obs.zero_()
            self._stage_action.zero_()
            self._nstep = NStepState.empty(self.n_step, self.num_envs)
        self._pos, self._size = meta["pos"], n
        self._steps, self._committed = int(meta["steps"]), int(meta["committed"])

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`state_dict` to one safetensors file (``meta`` as JSON in its header).

        The write is atomic: a temporary file in the same folder, flushed to disk (``fsync``),
        then ``os.replace``; an interrupted save never destroys the previous file.
        """
        from safetensors.torch import save

        sd = self.state_dict()
        meta = sd.pop("meta")
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in sd.items()}
        atomic_write_bytes(path, save(tensors, metadata={_FORMAT: json.dumps(meta)}))

    def load(self, path: str | os.PathLike[str]) -> None:
        """Restore from a file written by :meth:`save` (any device / dtype it was saved from).

        Raises:
            FileNotFoundError: no such file.
            ValueError: truncated or foreign file, or another configuration; the buffer is unchanged.
        """
        from safetensors import safe_open

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no replay-buffer file at {path}")
        try:
            with safe_open(str(path), framework="pt") as f:
                header = f.metadata() or {}
                tensors = {k: f.get_tensor(k) for k in f.keys()}
        except Exception as exc:  # safetensors raises its own error types for damaged files
            raise ValueError(
                f"{path} is not a readable safetensors file ({type(exc).__name__}: {exc})"
            ) from exc
        if _FORMAT not in header:
            raise ValueError(f"{path} is not a replay-buffer file (no {_FORMAT!r} metadata)")
        try:
            meta = json.loads(header[_FORMAT])
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} has damaged replay-buffer metadata: {exc}") from exc
        self.load_state_dict({**tensors, "meta": meta})


def _dims(x: Any) -> tuple[int, ...]:
    shape = tuple(x.shape) if hasattr(x, "shape") else np.shape(x)
    if len(shape) < 2:
        raise ValueError(f"obs must have leading dims [T, num_envs], got shape {shape}")
    return shape


_RING_KEYS = ("ring_obs", "ring_action", "ring_next_obs", "ring_reward", "ring_terminated", "ring_done")

_NUMPY_DTYPES = (torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.uint8)


def _is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


def _is_uint8(dtype: torch.dtype) -> bool:
    return dtype == torch.uint8


def _is_int(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def _kind_rule(target: torch.dtype) -> tuple[Callable[[torch.dtype], bool], str]:
    """Which input dtypes a field stored as ``target`` takes, and how errors name them: uint8
    exactly for uint8 storage, any floating dtype for floating storage, else any integer dtype."""
    if target == torch.uint8:
        return _is_uint8, "uint8"
    if target.is_floating_point:
        return _is_float, "a floating dtype"
    return _is_int, "an integer dtype"


def _np(t: torch.Tensor) -> np.ndarray:
    """A tensor's values as an array (no copy on the CPU)."""
    t = t.detach()
    return (t if t.is_cpu else t.cpu()).numpy()


def _host_vec(x: Any) -> np.ndarray | None:
    """A CPU tensor or numpy array as an array (no copy), else ``None`` (the general path reads it)."""
    if type(x) is np.ndarray:
        return x
    if type(x) is torch.Tensor and x.device.type == "cpu" and x.dtype in _NUMPY_DTYPES + (torch.bool,):
        return x.detach().numpy()
    return None


def _device_vec(name: str, value: Any, E: int, kind: str) -> torch.Tensor:
    """A reward / flag vector ``[E]`` as a tensor (host inputs are wrapped, not yet moved), after
    shape and dtype-kind checks; no value is read."""
    t = value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))
    if tuple(t.shape) != (E,):
        raise ValueError(f"{name} must have shape {(E,)}, got {tuple(t.shape)}")
    if kind == "bool" and t.dtype != torch.bool:
        raise TypeError(f"{name} must be boolean, got dtype {t.dtype}")
    if kind == "real" and (t.dtype == torch.bool or t.dtype.is_complex):
        raise TypeError(f"{name} must be a real number array, got dtype {t.dtype}")
    return t


def _lead(x: Any) -> Any:
    """Add a leading step dim of 1 (``add`` is ``extend`` of one step)."""
    if isinstance(x, torch.Tensor):
        return x.unsqueeze(0)
    return np.asarray(x)[None]
