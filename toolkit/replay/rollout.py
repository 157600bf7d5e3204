"""On-policy rollout storage on the device, GAE in f32, and running observation statistics.

GAE keeps terminations and truncations apart (docs/pages/ppo.md; ``s'_t``: the true next obs)::

    delta_t = r_t + gamma * (1 - terminated_t) * V(s'_t) - V(s_t)
    A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from tritonrl.kernels.validate import check_int
from tritonrl.toolkit.distributed import DistContext

__all__ = ["RolloutBuffer", "RunningMeanStd", "compute_gae"]


def _check_2d(name: str, t: torch.Tensor, shape: tuple[int, ...]) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {shape} (like rewards)")


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimates and returns, in f32, vectorised over environments.

    Args:
        rewards: ``[T, E]``.
        values: ``[T, E]`` ``V(s_t)``.
        next_values: ``[T, E]`` ``V(s'_t)`` of the true next observation (unused where terminated).
        terminated: ``[T, E]`` bool: ``s'_t`` is terminal.
        truncated: ``[T, E]`` bool: the episode was cut after this step.
        gamma: discount in ``[0, 1]``.
        lam: GAE lambda in ``[0, 1]``.

    Returns:
        ``(advantages, returns)``, each ``[T, E]`` f32, ``returns = advantages + values``.

    Raises:
        ValueError: shapes differ, or ``gamma``/``lam`` outside ``[0, 1]``.
        TypeError: an argument is not a tensor.
    """
    if not isinstance(rewards, torch.Tensor):
        raise TypeError(f"rewards must be a tensor, got {type(rewards).__name__}")
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [T, E], got shape {tuple(rewards.shape)}")
    shape = tuple(rewards.shape)
    for name, arg in (
        ("values", values),
        ("next_values", next_values),
        ("terminated", terminated),
        ("truncated", truncated),
    ):
        _check_2d(name, arg, shape)
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be in [0, 1], got {lam}")
    rewards, values, next_values = rewards.float(), values.float(), next_values.float()
    not_terminal = (~terminated.bool()).float()
    not_done = (~(terminated.bool() | truncated.bool())).float()
    deltas = rewards + gamma * not_terminal * next_values - values
    decay = (gamma * lam) * not_done
    advantages = torch.empty_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in range(shape[0] - 1, -1, -1):
        running = deltas[t] + decay[t] * running
        advantages[t] = running
    return advantages, advantages + values


class RunningMeanStd:
    """Running mean and variance of a stream of batches, in f32 on ``device`` (Chan et al.'s merge).

    Args:
        shape: the shape of one sample.
        epsilon: initial pseudo-count (keeps the first normalisations finite).
    """

    def __init__(
        self, shape: tuple[int, ...], device: torch.device | str = "cpu", epsilon: float = 1e-4
    ) -> None:
        self.mean = torch.zeros(shape, dtype=torch.float32, device=device)
        self.var = torch.ones(shape, dtype=torch.float32, device=device)
        self.count = torch.full((), epsilon, dtype=torch.float32, device=device)

    def update(self, x: torch.Tensor) -> None:
        """Merge a batch ``x`` of shape ``[N, *shape]`` (any float dtype) into the statistics."""
        x = x.float().reshape(-1, *self.mean.shape)
        n = x.shape[0]
        batch_mean = x.mean(0)
        batch_var = x.var(0, unbiased=False)
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.var = (self.var * self.count + batch_var * n + delta.square() * (self.count * n / total)) / total
        self.count = total

    def merge(self, other: RunningMeanStd) -> None:
        """Merge ``other``'s statistics (of disjoint samples) into these, in place, without a host read."""
        total = self.count + other.count
        safe = torch.where(total > 0, total, torch.ones_like(total))
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.count / safe)
        m2 = self.var * self.count + other.var * other.count
        var = (m2 + delta.square() * (self.count * other.count / safe)) / safe
        keep = total > 0
        self.mean = torch.where(keep, mean, self.mean)
        self.var = torch.where(keep, var, self.var)
        self.count = total

    def all_reduce_(self, dist: DistContext) -> None:
        """Replace these statistics on every rank by all ranks' exact pooled ones (no host read)."""
        if not dist.enabled:
            return
        n = self.count.reshape(1)
        sums = dist.all_reduce_sum_(torch.cat([n, (self.mean * self.count).reshape(-1)]))
        total = sums[0]
        safe = torch.where(total > 0, total, torch.ones_like(total))
        mean = (sums[1:] / safe).view_as(self.mean)
        m2 = dist.all_reduce_sum_((self.var + (self.mean - mean).square()) * self.count)
        self.mean, self.var, self.count = mean, m2 / safe, total

    def normalize(self, x: torch.Tensor, clip: float = 10.0) -> torch.Tensor:
        """``clamp((x - mean) / sqrt(var + 1e-8), -clip, clip)`` in f32."""
        return ((x.float() - self.mean) / torch.sqrt(self.var + 1e-8)).clamp(-clip, clip)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Mean, variance and count."""
        return {"mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Restore `state_dict` output as f32 on this device; ``ValueError`` on another shape."""
        if tuple(state["mean"].shape) != tuple(self.mean.shape):
            raise ValueError(
                f"obs statistics have shape {tuple(state['mean'].shape)}, expected {tuple(self.mean.shape)}"
            )
        dev = self.mean.device
        self.mean = state["mean"].to(dev, torch.float32).clone()
        self.var = state["var"].to(dev, torch.float32).clone()
        self.count = state["count"].to(dev, torch.float32).clone().reshape(())


class RolloutBuffer:
    """``T`` vector steps of ``E`` environments, stored on ``device``.

    Observations in ``obs_dtype``, actions in ``action_dtype`` (the raw, pre-squash sample), flags as
    bool, everything else in f32.

    Args:
        num_steps: ``T``.
        num_envs: ``E``.
        action_shape: shape of one stored action (``()`` for discrete).
    """

    FIELDS = (
        "obs",
        "actions",
        "logprobs",
        "values",
        "rewards",
        "terminated",
        "truncated",
        "starts",
        "next_values",
        "has_next_value",
    )

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        action_dtype: torch.dtype,
        obs_dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        check_int("num_steps", num_steps, low=1)
        check_int("num_envs", num_envs, low=1)
        T, E = num_steps, num_envs
        self.num_steps, self.num_envs = T, E
        self.device = torch.device(device)
        kw: dict[str, Any] = {"device": self.device}
        self.obs = torch.zeros((T, E, *obs_shape), dtype=obs_dtype, **kw)
        self._cpu = self.device.type == "cpu"
        self._views: tuple[Any, ...] | None = None  # numpy views for add() (see _write_host)
        self._viewed: tuple[torch.Tensor, ...] = ()
        self.actions = torch.zeros((T, E, *action_shape), dtype=action_dtype, **kw)
        self.logprobs = torch.zeros((T, E), dtype=torch.float32, **kw)
        self.values = torch.zeros((T, E), dtype=torch.float32, **kw)
        self.rewards = torch.zeros((T, E), dtype=torch.float32, **kw)
        self.terminated = torch.zeros((T, E), dtype=torch.bool, **kw)
        self.truncated = torch.zeros((T, E), dtype=torch.bool, **kw)
        self.starts = torch.zeros((T, E), dtype=torch.bool, **kw)
        self.next_values = torch.zeros((T, E), dtype=torch.float32, **kw)
        self.has_next_value = torch.zeros((T, E), dtype=torch.bool, **kw)
        self.advantages = torch.zeros((T, E), dtype=torch.float32, **kw)
        self.returns = torch.zeros((T, E), dtype=torch.float32, **kw)
        self.pos = 0

    @property
    def full(self) -> bool:
        """All ``T`` steps are stored."""
        return self.pos == self.num_steps

    def add(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        logprobs: torch.Tensor,
        values: torch.Tensor,
        rewards: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        starts: torch.Tensor,
    ) -> None:
        """Store one vector step (each argument ``[E, ...]``); ``RuntimeError`` when full."""
        if self.full:
            raise RuntimeError(f"rollout buffer is full ({self.num_steps} steps): update, then reset()")
        t = self.pos
        args = (obs, actions, logprobs, values, rewards, terminated, truncated, starts)
        if not (self._cpu and self._write_host(t, args)):
            self.obs[t] = obs
            self.actions[t] = actions
            self.logprobs[t] = logprobs
            self.values[t] = values
            self.rewards[t] = rewards
            self.terminated[t] = terminated
            self.truncated[t] = truncated
            self.starts[t] = starts
            self.has_next_value[t] = False
        self.pos += 1

    _ADDED = ("obs", "actions", "logprobs", "values", "rewards", "terminated", "truncated", "starts")

    def _write_host(self, t: int, args: tuple[Any, ...]) -> bool:
        """Write row ``t`` through numpy views of CPU storage; ``False`` where numpy cannot."""
        fields = tuple(getattr(self, name) for name in self._ADDED)
        views = self._views
        if views is None or any(a is not b for a, b in zip(fields, self._viewed, strict=True)):
            if not all(f.dtype in _NUMPY_DTYPES for f in fields):
                return False
            views = self._views = tuple(f.numpy() for f in fields) + (self.has_next_value.numpy(),)
            self._viewed = fields
        try:
            for view, a in zip(views, args, strict=False):
                view[t] = a.numpy() if type(a) is torch.Tensor else a
        except (RuntimeError, TypeError, ValueError):  # requires grad, not on the CPU, a shape numpy
            return False  # broadcasts differently: the tensor path writes (or raises) all fields
        views[-1][t] = False
        return True

    def set_next_values(self, values: torch.Tensor, mask: torch.Tensor) -> None:
        """``V(s'_t)`` for the step just added, where ``mask`` ([E] bool; truncations, the last step)."""
        t = self.pos - 1
        self.next_values[t] = torch.where(mask, values.float(), self.next_values[t])
        self.has_next_value[t] = mask | self.has_next_value[t]

    def compute_advantages(
        self, gamma: float, lam: float, *, gae: Callable[..., tuple[torch.Tensor, torch.Tensor]] = compute_gae
    ) -> None:
        """Fill ``advantages`` and ``returns`` with ``gae``; ``RuntimeError`` unless full."""
        if not self.full:
            raise RuntimeError(f"rollout holds {self.pos} of {self.num_steps} steps")
        shifted = torch.cat([self.values[1:], torch.zeros_like(self.values[:1])])
        next_values = torch.where(self.has_next_value, self.next_values, shifted)
        self.advantages, self.returns = gae(
            self.rewards, self.values, next_values, self.terminated, self.truncated, gamma, lam
        )

    def reset(self) -> None:
        """Start a new rollout (old data is overwritten step by step)."""
        self.pos = 0

    def state_dict(self) -> dict[str, Any]:
        """Every stored tensor and the position (a partial rollout resumes exactly)."""
        return {"pos": self.pos, **{name: getattr(self, name) for name in self.FIELDS}}

    def check_state_dict(self, state: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` unless ``state`` fits this buffer; changes nothing."""
        if not isinstance(state, Mapping):
            raise ValueError(f"rollout state is a {type(state).__name__}, not a dict")
        for name in self.FIELDS:
            if name not in state:
                raise ValueError(f"rollout state lacks {name!r}")
            own, got = getattr(self, name), state[name]
            if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(own.shape):
                shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
                raise ValueError(f"rollout {name} has shape {shape}, expected {tuple(own.shape)}")
            if _kind(got.dtype) != _kind(own.dtype):
                raise ValueError(f"rollout {name} has dtype {got.dtype}, expected {own.dtype}")
        pos = state.get("pos")
        if type(pos) is not int or not 0 <= pos <= self.num_steps:
            raise ValueError(f"rollout position {repr(pos)[:20]} is not an int in [0, {self.num_steps}]")

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore `state_dict` output (checked first, then cast); ``ValueError`` if it does not fit."""
        self.check_state_dict(state)
        for name in self.FIELDS:
            getattr(self, name).copy_(state[name].to(self.device))
        self.pos = int(state["pos"])


_NUMPY_DTYPES = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.int64,
    torch.int32,
    torch.uint8,
    torch.bool,
)


def _kind(dtype: torch.dtype) -> str:
    """``"float"``, ``"bool"`` or ``"int"``: what a stored tensor may be cast from."""
    return "float" if dtype.is_floating_point else "bool" if dtype == torch.bool else "int"
