"""The networks of SAC and TD3: twin Q critics, the squashed Gaussian actor, the deterministic actor.

ReLU MLPs (as CleanRL); actors act in ``[-1, 1]``; outputs, log-probs and Q values leave in f32.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from tritonrl.agents.nets.policy_heads import squash_log_det
from tritonrl.agents.nets.torsos import MLP
from tritonrl.toolkit.precision import dtype_or_default

__all__ = ["DeterministicActor", "SquashedGaussianActor", "TwinQ", "squashed_gaussian_log_prob"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _up(t: torch.Tensor) -> torch.Tensor:
    """The output boundary: upcast to f32 (f64 stays f64, so the maths can be tested exactly)."""
    return t if t.dtype == torch.float64 else t.float()


def squashed_gaussian_log_prob(
    noise: torch.Tensor, log_std: torch.Tensor, u: torch.Tensor, log_scale: torch.Tensor
) -> torch.Tensor:
    """``log pi(a)`` ``[B]`` of ``a = center + scale * tanh(u)``, ``u = mean + exp(log_std) * noise``
    (``[B, D]``; ``log_scale`` ``[D]``), change of variables included, stable for large ``|u|``."""
    gauss = (-0.5 * noise.square() - log_std - _HALF_LOG_2PI).sum(-1)
    return gauss - squash_log_det(u, log_scale)


def _torso_head(
    in_dim: int,
    out_dim: int,
    hidden: tuple[int, ...],
    device: torch.device | str | None,
    dtype: torch.dtype | None,
) -> tuple[MLP, nn.Linear]:
    """A ReLU `MLP` of ``hidden`` on ``in_dim`` inputs, then a linear head to ``out_dim``;
    built in this order (a seeded initialisation depends on it)."""
    dtype = dtype_or_default(dtype, device)
    torso = MLP(in_dim, tuple(hidden), device=device, dtype=dtype)
    return torso, nn.Linear(torso.out_features, out_dim, device=device, dtype=dtype)


class TwinQ(nn.Module):
    """Two independent critics ``Q_i(s, a)``: ``(obs [B, O], action [B, D]) -> (q1 [B], q2 [B])`` f32."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden: tuple[int, ...],
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.torso1, self.head1 = _torso_head(obs_dim + action_dim, 1, hidden, device, dtype)
        self.torso2, self.head2 = _torso_head(obs_dim + action_dim, 1, hidden, device, dtype)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([obs, action], -1)
        q1 = self.head1(self.torso1(x)).squeeze(-1)
        q2 = self.head2(self.torso2(x)).squeeze(-1)
        return _up(q1), _up(q2)

    def q1(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``Q_1(s, a)`` alone, f32 ``[B]``: the first output of `forward`, bit for bit."""
        return _up(self.head1(self.torso1(torch.cat([obs, action], -1))).squeeze(-1))


class SquashedGaussianActor(nn.Module):
    """SAC's actor: a diagonal Gaussian over ``u`` with state-dependent log-std, squashed by ``tanh``
    into ``[-1, 1]``; log-probs include the action scale's log-determinant (as CleanRL).

    Args:
        obs_dim: flat observation size ``O``.
        action_dim: flat action size ``D``.
        hidden: the MLP's hidden sizes.
        log_scale: ``[D]`` f32, ``log((high - low) / 2)`` of the action space (an f32 buffer).
        log_std_min: lowest log-std (the log-std head is squashed into ``[min, max]``).
        log_std_max: highest log-std.
    """

    log_scale: torch.Tensor

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden: tuple[int, ...],
        log_scale: torch.Tensor,
        *,
        log_std_min: float = -5.0,
        log_std_max: float = 2.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.torso, self.mean = _torso_head(obs_dim, action_dim, hidden, device, dtype)
        self.log_std = nn.Linear(
            self.torso.out_features, action_dim, device=device, dtype=dtype_or_default(dtype, device)
        )
        self.log_std_min, self.log_std_max = float(log_std_min), float(log_std_max)
        self.register_buffer(
            "log_scale", torch.as_tensor(log_scale, dtype=torch.float32, device=device), persistent=False
        )

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean [B, D], log_std [B, D])`` of ``u``, f32."""
        h = self.torso(obs)
        mean = _up(self.mean(h))
        log_std = torch.tanh(_up(self.log_std(h)))
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (log_std + 1.0)
        return mean, log_std

    def sample(self, obs: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(action [B, D] in [-1, 1], log_prob [B])``, f32, reparameterised on standard normals
        ``noise [B, D]``."""
        mean, log_std = self(obs)
        u = mean + log_std.exp() * noise
        return torch.tanh(u), squashed_gaussian_log_prob(noise, log_std, u, self.log_scale)

    def explore(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """The action of `sample` alone, without its log-probability."""
        mean, log_std = self(obs)
        return torch.tanh(mean + log_std.exp() * noise)

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """The deterministic action ``tanh(mean)`` ``[B, D]`` in ``[-1, 1]``, f32."""
        return torch.tanh(self(obs)[0])


class DeterministicActor(nn.Module):
    """TD3's actor: ``tanh(Linear(MLP(obs)))``, ``forward(obs [B, O]) -> [B, D]`` in ``[-1, 1]``, f32."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden: tuple[int, ...],
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.torso, self.mu = _torso_head(obs_dim, action_dim, hidden, device, dtype)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(_up(self.mu(self.torso(obs))))
