"""ICM: the Intrinsic Curiosity Module (Pathak et al., 2017), attachable to any DQN preset.

The forward model's error on the embedding, times ``eta``, is the intrinsic reward; the embedding
learns from the inverse model only. See docs/pages/dqn.md ("Curiosity (ICM)").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tritonrl.toolkit.precision import dtype_or_default

__all__ = ["ICM"]


class ICM(nn.Module):
    """Forward and inverse models on a learned embedding.

    Args:
        obs_shape: the observation shape (flattened inside).
        action_dims: sub-action counts: ``[A]`` for a Discrete space, ``nvec`` for MultiDiscrete.
        embed_dim: size of ``phi(s)``.
        hidden: hidden width of the encoder, forward and inverse models.
        eta: intrinsic reward scale.
        beta: weight of the forward loss against the inverse loss, in ``[0, 1]``.

    Raises:
        ValueError: empty ``action_dims``, a count below 2, ``beta`` outside ``[0, 1]``, or a
            negative ``eta``.
    """

    offsets: torch.Tensor  # a buffer registered in __init__

    def __init__(
        self,
        obs_shape: Sequence[int],
        action_dims: Sequence[int],
        *,
        embed_dim: int = 64,
        hidden: int = 128,
        eta: float = 1.0,
        beta: float = 0.2,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        dtype = dtype_or_default(dtype, device)
        dims = [int(n) for n in action_dims]
        if not dims or min(dims) < 2:
            raise ValueError(f"action_dims={list(action_dims)} must be non-empty counts >= 2")
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f"beta={beta} must lie in [0, 1]")
        if eta < 0:
            raise ValueError(f"eta={eta} must be >= 0")
        self.action_dims = dims
        self.eta, self.beta = float(eta), float(beta)
        kw: dict[str, Any] = {"device": device, "dtype": dtype}
        n_obs = math.prod(obs_shape)
        self.encoder = nn.Sequential(
            nn.Flatten(1), nn.Linear(n_obs, hidden, **kw), nn.ReLU(), nn.Linear(hidden, embed_dim, **kw)
        )
        # offsets so all sub-actions share one embedding table / one logits vector
        offsets = torch.tensor([0, *dims[:-1]], device=device).cumsum(0)
        self.register_buffer("offsets", offsets, persistent=False)
        self.fwd_state = nn.Linear(embed_dim, hidden, **kw)
        self.fwd_action = nn.Embedding(sum(dims), hidden, **kw)
        self.fwd_out = nn.Linear(hidden, embed_dim, **kw)
        self.inverse = nn.Sequential(
            nn.Linear(2 * embed_dim, hidden, **kw), nn.ReLU(), nn.Linear(hidden, sum(dims), **kw)
        )

    def _action_index(self, action: torch.Tensor) -> torch.Tensor:
        """``[B]`` or ``[B, D]`` int64 -> ``[B, D]`` rows of the shared tables."""
        a = action.long()
        if a.dim() == 1:
            a = a.unsqueeze(-1)
        return a + self.offsets

    def forward(
        self, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``obs``/``next_obs [B, *obs_shape]``, ``action [B]`` or ``[B, D]`` int64 ->
        ``(phi_next [B, E], phi_next_pred [B, E], action_logits [B, sum(dims)])``, parameter dtype."""
        phi, phi_next, pred = self._predict(obs, action, next_obs)
        logits = self.inverse(torch.cat([phi, phi_next], dim=-1))
        return phi_next, pred, logits

    def _predict(
        self, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        phi, phi_next = self.encoder(obs), self.encoder(next_obs)
        h = self.fwd_state(phi) + self.fwd_action(self._action_index(action)).sum(1)
        return phi, phi_next, self.fwd_out(F.relu(h))

    def losses(
        self, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(inverse_loss [B], forward_error [B])`` in f32, with gradients."""
        phi_next, pred, logits = self(obs, action, next_obs)
        # the loss boundary: network outputs are upcast to f32 once
        fwd = 0.5 * (pred.float() - phi_next.detach().float()).square().mean(-1)
        a = action.long().view(action.shape[0], -1)
        inv = torch.zeros_like(fwd)
        for d, logit in enumerate(logits.float().split(self.action_dims, dim=-1)):
            inv = inv + F.cross_entropy(logit, a[:, d], reduction="none")
        return inv, fwd

    def loss(
        self, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """The training loss ``(1 - beta) * inverse + beta * forward`` and its parts (f32 scalars)."""
        inv, fwd = self.losses(obs, action, next_obs)
        inv_m, fwd_m = inv.mean(), fwd.mean()
        return {"loss": (1.0 - self.beta) * inv_m + self.beta * fwd_m, "inverse": inv_m, "forward": fwd_m}

    @torch.no_grad()
    def intrinsic_reward(
        self, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor
    ) -> torch.Tensor:
        """``eta * forward_error`` per transition: ``[B]`` f32, no gradient."""
        _, phi_next, pred = self._predict(obs, action, next_obs)
        return self.eta * 0.5 * (pred.float() - phi_next.float()).square().mean(-1)
