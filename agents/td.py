"""TD targets and losses of the DQN family, as pure f32 functions.

Inputs are network outputs already upcast to f32 and replay data: ``reward`` the n-step return,
``discount`` ``gamma^k`` (0 after termination), so ``y = reward + discount * bootstrap`` covers
1-step and n-step targets. See docs/pages/dqn.md ("Targets and losses").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = [
    "branching_td_target",
    "c51_loss",
    "c51_project",
    "greedy_actions",
    "huber",
    "quantile_huber_loss",
    "quantile_midpoints",
    "scalar_td_target",
]


def greedy_actions(q_next_target: torch.Tensor, q_next_online: torch.Tensor | None = None) -> torch.Tensor:
    """Bootstrap actions ``a* = argmax_a Q(s', a)``: ``[..., A] -> [...]`` int64; with
    ``q_next_online`` the online network selects (double Q)."""
    return (q_next_target if q_next_online is None else q_next_online).argmax(-1)


def scalar_td_target(
    reward: torch.Tensor,
    discount: torch.Tensor,
    q_next_target: torch.Tensor,
    q_next_online: torch.Tensor | None = None,
) -> torch.Tensor:
    """``y = reward + discount * Q_target(s', a*)``: ``reward``, ``discount`` ``[B]``, ``q_next_*``
    ``[B, A]``, all f32 -> ``[B]`` f32, no gradient."""
    with torch.no_grad():
        a = greedy_actions(q_next_target, q_next_online)
        return reward + discount * q_next_target.gather(-1, a.unsqueeze(-1)).squeeze(-1)


def c51_project(
    next_probs: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor, support: torch.Tensor
) -> torch.Tensor:
    """Project ``reward + discount * Z(s', a*)`` onto ``support`` (C51): ``next_probs [B, Z]``,
    ``reward``/``discount [B]``, ``support [Z]`` f32 -> ``[B, Z]`` f32, no gradient."""
    with torch.no_grad():
        z = support.numel()
        v_min, v_max = support[0], support[-1]
        dz = (v_max - v_min) / (z - 1)
        tz = (reward.unsqueeze(-1) + discount.unsqueeze(-1) * support).clamp(v_min, v_max)  # [B, Z]
        b = ((tz - v_min) / dz).clamp(0, z - 1)  # [B, Z] in [0, Z-1]
        lower = b.floor()
        frac = b - lower
        lo = lower.long()
        hi = (lo + 1).clamp_max(z - 1)  # at b == Z-1, frac == 0: the clamped index gets no mass
        m = torch.zeros_like(next_probs)
        m.scatter_add_(-1, lo, next_probs * (1.0 - frac))
        m.scatter_add_(-1, hi, next_probs * frac)
        return m


def c51_loss(log_probs: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    """Per-sample cross-entropy ``-sum_i m_i log p_i``: ``[B, Z], [B, Z] -> [B]`` f32 (also
    Rainbow's priority)."""
    return -(target_probs * log_probs).sum(-1)


def huber(u: torch.Tensor, kappa: float = 1.0) -> torch.Tensor:
    """Elementwise Huber ``0.5 u^2`` for ``|u| <= kappa``, else ``kappa (|u| - 0.5 kappa)``."""
    return F.huber_loss(u, torch.zeros_like(u), reduction="none", delta=kappa)


def quantile_midpoints(n: int, *, device: torch.device | str | None = None) -> torch.Tensor:
    """QR-DQN's fixed quantile fractions ``tau_i = (2i + 1) / (2n)``: ``[n]`` f32."""
    return (torch.arange(n, device=device, dtype=torch.float32) + 0.5) / n


def quantile_huber_loss(
    quantiles: torch.Tensor, target: torch.Tensor, taus: torch.Tensor, kappa: float = 1.0
) -> torch.Tensor:
    """QR-DQN's quantile Huber loss per sample (Dabney et al., 2018).

    ``rho_ij = |tau_i - 1{u_ij < 0}| * huber(u_ij) / kappa`` with ``u_ij = target_j -
    quantiles_i``, summed over ``i``, averaged over ``j``; ``kappa == 0`` uses ``|u|``.
    ``quantiles [B, N]``, ``target [B, M]``, ``taus [N]``, all f32 -> ``[B]`` f32.

    Raises:
        ValueError: ``kappa < 0``.
    """
    if kappa < 0:
        raise ValueError(f"kappa={kappa} must be >= 0")
    u = target.detach().unsqueeze(1) - quantiles.unsqueeze(2)  # [B, N, M]
    if kappa == 0:
        loss = u.abs()
    else:
        loss = huber(u, kappa) / kappa
    weight = (taus.view(1, -1, 1) - (u.detach() < 0).to(u.dtype)).abs()
    return (weight * loss).mean(2).sum(1)


def branching_td_target(
    reward: torch.Tensor,
    discount: torch.Tensor,
    q_next_target: torch.Tensor,
    q_next_online: torch.Tensor | None = None,
) -> torch.Tensor:
    """Factored-action target ``y = r + discount * mean_d Q_target,d(s', a*_d)`` (Tavakoli et al., 2018):
    ``reward``, ``discount [B]``; ``q_next_* [B, D, n]`` with ``-inf`` padding -> ``[B]`` f32."""
    with torch.no_grad():
        a = greedy_actions(q_next_target, q_next_online)  # [B, D]
        boot = q_next_target.gather(-1, a.unsqueeze(-1)).squeeze(-1).mean(-1)
        return reward + discount * boot
