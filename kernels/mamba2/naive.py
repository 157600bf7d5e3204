"""The sequential Mamba2 recurrence, one step after another: the test oracle only.

Written straight from the definition; computes in ``x.dtype`` (tests use float64).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from tritonrl.kernels.mamba2.reference import dt_transform

__all__ = ["mamba2_scan_naive"]


def mamba2_scan_naive(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    *,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = True,
    dt_limit: tuple[float, float] = (0.0, math.inf),
    initial_states: torch.Tensor | None = None,
    resets: torch.Tensor | None = None,
    return_final_states: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``h_t = exp(dt'_t A) h_{t-1} (1 - reset_t) + dt'_t x_t B_t^T``, ``y_t = h_t C_t + D x_t``;
    shapes as `tritonrl.kernels.mamba2.mamba2_scan`, everything in ``x.dtype``."""
    batch, length, nheads, headdim = x.shape
    ngroups, dstate = B.shape[-2:]
    dtype = x.dtype
    w = dt_transform(dt.to(dtype), dt_bias, dt_softplus, dt_limit)  # [B, L, H]
    Bh = B.to(dtype).repeat_interleave(nheads // ngroups, dim=2)  # [B, L, H, N]
    Ch = C.to(dtype).repeat_interleave(nheads // ngroups, dim=2)
    if initial_states is None:
        h = x.new_zeros(batch, nheads, headdim, dstate)
    else:
        h = initial_states.to(dtype)
    ys = []
    for t in range(length):
        decay = torch.exp(w[:, t] * A.to(dtype))  # [B, H]
        if resets is not None:
            decay = torch.where(resets[:, t, None], torch.zeros_like(decay), decay)
        h = decay[:, :, None, None] * h + (w[:, t, :, None] * x[:, t])[..., None] * Bh[:, t, :, None, :]
        y = torch.einsum("bhpn,bhn->bhp", h, Ch[:, t])
        if D is not None:
            Dv = D.to(dtype)
            y = y + (Dv[:, None] if Dv.dim() == 1 else Dv) * x[:, t]
        if z is not None:
            y = y * F.silu(z[:, t].to(dtype))
        ys.append(y)
    out = torch.stack(ys, dim=1)
    return (out, h) if return_final_states else out
