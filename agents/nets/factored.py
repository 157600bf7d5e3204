"""Factored (branching) Q for MultiDiscrete action spaces (Tavakoli et al., 2018, "BDQ").

One torso, a state value and one advantage head per action dimension:
``Q_d(s, a_d) = V(s) + A_d(s, a_d) - mean A_d``, ``sum(n_d) + 1`` outputs instead of ``prod(n_d)``.
Shorter branches are padded with ``-inf``. See docs/pages/dqn.md ("Factored actions").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from tritonrl.agents.nets.heads import NoisyLinear
from tritonrl.toolkit.precision import dtype_or_default

__all__ = ["BranchingHead", "branching_q"]


class BranchingHead(nn.Module):
    """State value and per-dimension advantages for ``nvec`` sub-action counts.

    ``h [B, in_features]`` -> ``(value [B, 1], advantages [B, D, n_max])`` in the parameter dtype.
    ``noisy=True`` uses ``NoisyLinear`` layers.

    Raises:
        ValueError: empty ``nvec`` or a count below 2.
    """

    def __init__(
        self,
        in_features: int,
        nvec: Sequence[int],
        *,
        noisy: bool = False,
        sigma0: float = 0.5,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        dtype = dtype_or_default(dtype, device)
        counts = [int(n) for n in nvec]
        if not counts or min(counts) < 2:
            raise ValueError(f"nvec={list(nvec)} must be non-empty sub-action counts >= 2")
        self.nvec = counts
        self.n_max = max(counts)
        kw: dict[str, Any] = {"device": device, "dtype": dtype}
        self.value: NoisyLinear | nn.Linear
        self.advantage: NoisyLinear | nn.Linear
        if noisy:
            self.value = NoisyLinear(in_features, 1, sigma0=sigma0, **kw)
            self.advantage = NoisyLinear(in_features, len(counts) * self.n_max, sigma0=sigma0, **kw)
        else:
            self.value = nn.Linear(in_features, 1, **kw)
            self.advantage = nn.Linear(in_features, len(counts) * self.n_max, **kw)
        # [D, n_max] True where the sub-action exists
        mask = torch.arange(self.n_max, device=device) < torch.tensor(counts, device=device).unsqueeze(1)
        self.register_buffer("mask", mask, persistent=False)
        self.noisy = noisy

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.value(h), self.advantage(h).view(h.shape[0], len(self.nvec), self.n_max)

    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """Draw fresh noise for the noisy layers (no-op without noise)."""
        for layer in (self.value, self.advantage):
            if isinstance(layer, NoisyLinear):  # the noisy=True layers
                layer.reset_noise(generator)


def branching_q(value: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``Q_d = V + A_d - mean(A_d)`` over real sub-actions: ``value [B, 1]``, ``advantages [B, D,
    n_max]``, ``mask [D, n_max]`` bool -> ``[B, D, n_max]`` f32, ``-inf`` at the padding."""
    adv = advantages.float().masked_fill(~mask, 0.0)
    mean = adv.sum(-1, keepdim=True) / mask.sum(-1, keepdim=True)
    q = value.float().unsqueeze(-1) + adv - mean
    return q.masked_fill(~mask, float("-inf"))
