"""Torch references of the Mamba2 scan (chunked SSD) and the single step.

The CPU path with resets and the kernels' oracle; float32 math (float64 for float64 ``x``).
See docs/pages/mamba2.md ("The chunked algorithm").
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["dt_transform", "mamba2_scan_ref", "mamba2_step_ref"]


def dt_transform(
    dt: torch.Tensor,
    dt_bias: torch.Tensor | None,
    dt_softplus: bool,
    dt_limit: tuple[float, float],
) -> torch.Tensor:
    """``clamp(softplus(dt + dt_bias), *dt_limit)`` (softplus only if ``dt_softplus``) of ``dt``
    [..., H], ``dt_bias`` [H] or None, in ``dt``'s dtype."""
    if dt_bias is not None:
        dt = dt + dt_bias.to(dt.dtype)
    if dt_softplus:
        dt = F.softplus(dt)
        if dt_limit[0] <= 0.0 and dt_limit[1] == math.inf:
            return dt
    return dt.clamp(min=dt_limit[0], max=dt_limit[1])


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def mamba2_scan_ref(
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
    resets: torch.Tensor | None,
    chunk_size: int,
    return_final_states: bool,
    *,
    compute_dtype: torch.dtype | None = None,
    return_chunk_states: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """The chunked SSD scan in torch (arguments as `tritonrl.kernels.mamba2.mamba2_scan`).

    x: [B, L, H, P]; dt: [B, L, H]; A: [H]; B, C: [B, L, G, N]; D: [H] or [H, P]; z like x;
    dt_bias: [H]; initial_states: [B, H, P, N]; resets: [B, L] bool. Returns y [B, L, H, P] in
    ``x.dtype``, and the final states [B, H, P, N] (float32, float64 for float64 x) if asked.
    Any ``chunk_size >= 1``; ``compute_dtype`` overrides the internal dtype (tests);
    ``return_chunk_states`` also returns the states entering every chunk, [B, H, NC, P, N].
    """
    batch, length, nheads, headdim = x.shape
    ngroups, dstate = B.shape[-2:]
    cdt = compute_dtype or _compute_dtype(x)
    # A chunk longer than the sequence would only add padding (the result does not depend on the
    # chunk): one chunk of L steps then. The chunk states are returned per chunk of ``chunk_size``.
    T = chunk_size if return_chunk_states else min(chunk_size, length)
    nchunks = -(-length // T)
    pad = nchunks * T - length

    xf = x.to(cdt)
    w = dt_transform(dt.to(cdt), dt_bias, dt_softplus, dt_limit)  # [B, L, H]
    Bf, Cf, wp, xp = B.to(cdt), C.to(cdt), w, xf
    if pad:
        xp = F.pad(xf, (0, 0, 0, 0, 0, pad))
        wp = F.pad(w, (0, 0, 0, pad))  # dt' = 0 on padding: no decay, no input
        Bf = F.pad(Bf, (0, 0, 0, 0, 0, pad))
        Cf = F.pad(Cf, (0, 0, 0, 0, 0, pad))
    xc = xp.view(batch, nchunks, T, nheads, headdim)
    wc = wp.view(batch, nchunks, T, nheads)
    rep = nheads // ngroups
    Bh = Bf.view(batch, nchunks, T, ngroups, dstate).repeat_interleave(rep, dim=3)  # [b, c, t, h, n]
    Ch = Cf.view(batch, nchunks, T, ngroups, dstate).repeat_interleave(rep, dim=3)

    cs = (wc * A.to(cdt)).cumsum(dim=2)  # [b, c, t, h]: log decay from the chunk start
    cs_h = cs.permute(0, 1, 3, 2)  # [b, c, h, t]
    idx = torch.arange(T, device=x.device)
    mask = (idx[:, None] >= idx[None, :]).expand(batch, nchunks, 1, T, T)  # [b, c, 1, t, s]
    g = cs.exp()  # decay from the chunk start to t
    e = (cs[:, :, -1:] - cs).exp()  # decay from t to the chunk end
    g_last = cs[:, :, -1].exp()  # [b, c, h]
    if resets is not None:
        r = F.pad(resets, (0, pad)).view(batch, nchunks, T).to(torch.int64)
        seg = r.cumsum(dim=2)  # [b, c, t]: resets seen so far in the chunk
        mask = mask & (seg[..., :, None] == seg[..., None, :])[:, :, None]
        zero = torch.zeros((), dtype=cdt, device=x.device)
        g = torch.where((seg == 0)[..., None], g, zero)
        e = torch.where((seg == seg[..., -1:])[..., None], e, zero)
        g_last = torch.where((seg[..., -1] == 0)[..., None], g_last, zero)
    Lmat = (cs_h[..., :, None] - cs_h[..., None, :]).masked_fill(~mask, float("-inf")).exp()
    CB = torch.einsum("bcthn,bcshn->bchts", Ch, Bh)
    M = Lmat * CB * wc.permute(0, 1, 3, 2)[..., None, :]  # [b, c, h, t, s]
    y = torch.einsum("bchts,bcshp->bcthp", M, xc)

    local = torch.einsum("bcth,bcthn,bcthp->bchpn", e * wc, Bh, xc)  # chunk-local end states
    if initial_states is None:
        state = xf.new_zeros(batch, nheads, headdim, dstate)
    else:
        state = initial_states.to(cdt)
    starts = []
    for c in range(nchunks):
        starts.append(state)
        state = g_last[:, c, :, None, None] * state + local[:, c]
    S0 = torch.stack(starts, dim=1)  # [b, c, h, p, n]: state entering each chunk
    y = y + torch.einsum("bcthn,bchpn,bcth->bcthp", Ch, S0, g)
    y = y.reshape(batch, nchunks * T, nheads, headdim)[:, :length].contiguous()
    if D is not None:
        Dv = D.to(cdt)
        y = y + (Dv[:, None] if Dv.dim() == 1 else Dv) * xf
    if z is not None:
        y = y * F.silu(z.to(cdt))
    y = y.to(x.dtype)
    if return_chunk_states and return_final_states:
        return y, state, S0.transpose(1, 2).contiguous()
    return (y, state) if return_final_states else y


def mamba2_step_ref(
    state: torch.Tensor,
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
    reset: torch.Tensor | None,
) -> torch.Tensor:
    """One recurrence step in torch; updates ``state`` in place (arguments as
    [`tritonrl.kernels.mamba2.mamba2_step`][tritonrl.kernels.mamba2.mamba2_step]).

    state: [B, H, P, N] contiguous (float32, or float64 in tests); x: [B, H, P]; dt: [B, H];
    B, C: [B, G, N]; reset: [B] bool. Returns y [B, H, P] in ``x.dtype``.
    """
    sdt = state.dtype
    batch, nheads, headdim = x.shape
    ngroups, dstate = B.shape[1:]
    rep = nheads // ngroups
    w = dt_transform(dt.to(sdt), dt_bias, dt_softplus, dt_limit)  # [B, H]
    decay = torch.exp(w * A.to(sdt))
    if reset is not None:
        decay = decay.masked_fill(reset[:, None], 0.0)
    xf = x.to(sdt)
    h = state.view(batch, ngroups, rep, headdim, dstate)
    h.mul_(decay.view(batch, ngroups, rep, 1, 1))
    h.addcmul_((w[:, :, None] * xf).view(batch, ngroups, rep, headdim, 1), B.to(sdt)[:, :, None, None, :])
    y = (h * C.to(sdt)[:, :, None, None, :]).sum(-1).view(batch, nheads, headdim)  # state @ C per head
    if D is not None:
        Dv = D.to(sdt)
        y = torch.addcmul(y, Dv[:, None] if Dv.dim() == 1 else Dv, xf)
    if z is not None:
        y = y * F.silu(z.to(sdt))
    return y.to(x.dtype)
