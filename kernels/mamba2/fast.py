"""A CPU scan without resets: the chunked SSD algorithm in fewer, larger products.

For decays too large for `tritonrl.kernels.mamba2.factored`. ``C . B`` once per group and
products with a group's heads side by side, where the reference takes small products per head.
Equal to the reference up to float32 reassociation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from tritonrl.kernels.mamba2.reference import dt_transform

__all__ = ["mamba2_scan_fast"]


def mamba2_scan_fast(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    dt_softplus: bool,
    dt_limit: tuple[float, float],
    initial_states: torch.Tensor | None,
    chunk_size: int,
    return_final_states: bool,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The chunked scan without resets (arguments as
    `tritonrl.kernels.mamba2.reference.mamba2_scan_ref`), computed in float32 (float64 for
    float64 ``x``): y [B, L, H, P] in ``x.dtype``, optionally the final states [B, H, P, N].
    Differentiable."""
    batch, length, nheads, headdim = x.shape
    ngroups, dstate = B.shape[-2:]
    rep = nheads // ngroups
    cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
    T = min(chunk_size, length)
    nc = -(-length // T)
    pad = nc * T - length

    xf = x.to(cdt)
    w = dt_transform(dt.to(cdt), dt_bias, dt_softplus, dt_limit)  # [b, L, h]
    xw = xf * w[..., None]  # dt' x: [b, L, h, p]
    Bf, Cf, wp = B.to(cdt), C.to(cdt), w
    if pad:
        xw = F.pad(xw, (0, 0, 0, 0, 0, pad))
        wp = F.pad(w, (0, 0, 0, pad))  # dt' = 0 on padding: no decay, no input
        Bf = F.pad(Bf, (0, 0, 0, 0, 0, pad))
        Cf = F.pad(Cf, (0, 0, 0, 0, 0, pad))
    Bc = Bf.view(batch, nc, T, ngroups, dstate).transpose(2, 3)  # [b, c, g, t, n]
    Cc = Cf.view(batch, nc, T, ngroups, dstate).transpose(2, 3)
    xwc = xw.view(batch, nc, T, nheads, headdim)  # [b, c, t, h, p]

    cs = (wp.view(batch, nc, T, nheads) * A.to(cdt)).cumsum(dim=2)  # [b, c, t, h]
    cs_h = cs.transpose(2, 3)  # [b, c, h, t]
    idx = torch.arange(T, device=x.device)
    causal = idx[:, None] >= idx[None, :]
    Lmat = (cs_h[..., :, None] - cs_h[..., None, :]).masked_fill(~causal, float("-inf")).exp()
    CB = Cc @ Bc.transpose(-1, -2)  # [b, c, g, t, s]: once per group
    M = Lmat.view(batch, nc, ngroups, rep, T, T) * CB[:, :, :, None]
    y = M.view(batch, nc, nheads, T, T) @ xwc.transpose(2, 3)  # [b, c, h, t, p]

    # chunk-local end states, the group's heads side by side: [(h/g) p, t] @ [t, n]
    e = (cs[:, :, -1:] - cs).exp()  # [b, c, t, h]: decay from t to the chunk end
    xe = (xwc * e[..., None]).view(batch, nc, T, ngroups, rep * headdim).permute(0, 1, 3, 4, 2)
    local = (xe @ Bc).view(batch, nc, nheads, headdim, dstate)  # [b, c, h, p, n]
    g_last = cs[:, :, -1].exp()  # [b, c, h]
    if initial_states is None:
        state = xf.new_zeros(batch, nheads, headdim, dstate)
    else:
        state = initial_states.to(cdt)
    starts = []
    for c in range(nc):
        starts.append(state)
        state = g_last[:, c, :, None, None] * state + local[:, c]
    S0 = torch.stack(starts, dim=1)  # [b, c, h, p, n]: the state entering each chunk
    # its contribution, per group: [t, n] @ [n, (h/g) p], then the decay from the chunk start
    off = Cc @ S0.view(batch, nc, ngroups, rep * headdim, dstate).transpose(-1, -2)  # [b, c, g, t, (h/g) p]
    off = off.view(batch, nc, ngroups, T, rep, headdim).permute(0, 1, 3, 2, 4, 5)
    y = y.transpose(2, 3) + off.reshape(batch, nc, T, nheads, headdim) * cs.exp()[..., None]
    y = y.reshape(batch, nc * T, nheads, headdim)[:, :length]
    if D is not None:
        Dv = D.to(cdt)
        y = y + (Dv[:, None] if Dv.dim() == 1 else Dv) * xf
    if z is not None:
        y = y * F.silu(z.to(cdt))
    y = y.to(x.dtype)
    return (y, state) if return_final_states else y
