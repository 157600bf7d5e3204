"""The CPU scan without resets where the decays allow it: each chunk's decay matrix factored.

``exp(cs_t - cs_s) = f_t u_s``, exact while the factors stay within ``exp(+-MAX_LOG_FACTOR)``
(checked on the host; else None). Hand-written backward. See docs/pages/mamba2.md.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable
from tritonrl.kernels.mamba2.reference import dt_transform

__all__ = ["CHUNK", "MAX_LOG_FACTOR", "mamba2_scan_factored", "scan_decays"]

# |cs_t - r| bound of the factored path: exp(30) ~ 1e13, so a factor times a float32 value stays
# far from overflow (3e38) and its inverse far from the subnormal range (1e-38).
MAX_LOG_FACTOR = 30.0
# The chunk of this path: its cost barely depends on it (the decays are out of the [T, T]
# matrices, 16 and 32 cost the same), but a longer chunk needs larger factors and pads more, and
# float32 gradients of A and dt_bias (sums over every step that largely cancel) lose accuracy
# with chunks of 32 (several times the reference's error), not with 16.
CHUNK = 16


def _chunks(length: int) -> tuple[int, ...]:
    T = min(CHUNK, length)
    return (T, T // 2) if T > 1 else (T,)


def scan_decays(
    w: torch.Tensor, A: torch.Tensor, chunk: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The log factors from ``dt'`` [B, L, H] (``L`` a multiple of ``chunk``) and ``A`` [H].

    Returns ``(d, tot, r)``: ``d = cs - r`` [B, L, H]; ``r`` [B, L / chunk, H] the value at each
    chunk's first step, held constant (gradients stay exact); ``tot`` each chunk's total.
    """
    batch, length, nheads = w.shape
    cs = (w * A.to(w.dtype)).view(batch, length // chunk, chunk, nheads).cumsum(dim=2)
    r = cs[:, :, 0].detach()
    d = (cs - r[:, :, None]).view(batch, length, nheads)
    return d, cs[:, :, -1], r


class _FactoredScan(torch.autograd.Function):
    """The factored chunked scan (module doc) on the compute dtype; ``L`` a multiple of ``T``.

    Inputs: x [b, L, H, P]; u, f [b, L, H]; B, C [b, L, G, N]; alpha, beta, gamma [b, NC, H]
    (``exp(tot)``, ``exp(tot - r)``, ``exp(r)``); init [b, H, P, N]; D; z; T. Outputs y like x
    and the final state [b, H, P, N].
    """

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        u: torch.Tensor,
        f: torch.Tensor,
        B: torch.Tensor,
        C: torch.Tensor,
        alpha: torch.Tensor,
        beta: torch.Tensor,
        gamma: torch.Tensor,
        init: torch.Tensor | None,
        D: torch.Tensor | None,
        z: torch.Tensor | None,
        T: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        batch, length, nheads, headdim = x.shape
        ngroups, dstate = B.shape[-2:]
        nc = length // T
        R = nheads // ngroups * headdim  # a group's heads side by side
        xp = x * u[..., None]  # X' [b, L, H, P]
        x3 = _per_group(xp.view(batch, length, ngroups, R), T)  # [b c g, T, R]
        B3, C3 = _per_group(B, T), _per_group(C, T)  # [b c g, T, N]
        CB = torch.bmm(C3, B3.transpose(1, 2)).tril_()  # [b c g, T, T]: C_t . B_s, s <= t
        local = torch.bmm(x3.transpose(1, 2), B3).view(batch, nc, nheads, headdim, dstate)
        # the states entering each chunk and the final one, chunk-major: Sall[c] enters chunk c
        Sall = x.new_empty(nc + 1, batch, nheads, headdim, dstate)
        if init is None:
            Sall[0].zero_()
        else:
            Sall[0].copy_(init)
        for c in range(nc):
            torch.mul(Sall[c], alpha[:, c, :, None, None], out=Sall[c + 1])
            Sall[c + 1].addcmul_(beta[:, c, :, None, None], local[:, c])
        Sr = torch.empty_like(local)  # S' = exp(r) S [b, c, H, P, N]
        torch.mul(Sall[:nc].transpose(0, 1), gamma[..., None, None], out=Sr)
        Y3 = torch.bmm(C3, Sr.view(-1, R, dstate).transpose(1, 2)).baddbmm_(CB, x3)  # [b c g, T, R]
        Y = _per_step(Y3, batch, length, nheads, headdim)
        ypre = Y * f[..., None]
        if D is not None:
            ypre.addcmul_(x, D[:, None] if D.dim() == 1 else D)
        sz = None
        y = ypre
        if z is not None:
            sz = F.silu(z)
            y = ypre * sz
        ctx.save_for_backward(x, u, f, B3, C3, CB, x3, local, Sall, Sr, alpha, beta, gamma, Y, ypre, D, z, sz)
        ctx.T, ctx.has_init = T, init is not None
        return y, Sall[nc].clone()  # not a view of what the backward keeps: callers may update it in place

    @staticmethod
    @once_differentiable  # in-place products: no second derivative through this backward
    def backward(ctx: Any, gy: torch.Tensor, gS: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, u, f, B3, C3, CB, x3, local, Sall, Sr, alpha, beta, gamma, Y, ypre, D, z, sz = ctx.saved_tensors
        T = ctx.T
        batch, length, nheads, headdim = x.shape
        nc = length // T
        dstate = B3.shape[-1]
        R = x3.shape[-1]
        need = ctx.needs_input_grad
        gz = None
        if z is not None:
            if need[10]:
                gz = torch.ops.aten.silu_backward(gy * ypre, z)
            gy = gy * sz
        gD = gx = None
        if D is not None:
            if need[9]:
                gD = (gy * x).sum((0, 1, 3) if D.dim() == 1 else (0, 1))
            gx = gy * (D[:, None] if D.dim() == 1 else D)
        gf = (gy * Y).sum(-1)
        ngroups = B3.shape[0] // (batch * nc)
        gY3 = _per_group((gy * f[..., None]).view(batch, length, ngroups, R), T)  # the gradient of Y
        gCB = torch.bmm(gY3, x3.transpose(1, 2)).tril_()
        gSr = torch.bmm(gY3.transpose(1, 2), C3).view(batch, nc, nheads, headdim, dstate)
        gC3 = torch.bmm(gY3, Sr.view(-1, R, dstate)).baddbmm_(gCB, B3)
        # the state recurrence backwards: GS[c] is the gradient of Sall[c] (GS[nc]: the final state's)
        gS0 = gSr * gamma[..., None, None]  # [b, c, H, P, N]
        GS = torch.empty_like(Sall)
        GS[nc].copy_(gS)
        for c in range(nc - 1, -1, -1):
            torch.addcmul(gS0[:, c], alpha[:, c, :, None, None], GS[c + 1], out=GS[c])
        GSn = GS[1:].transpose(0, 1)  # [b, c, H, P, N]: the gradient of the state leaving chunk c
        galpha = (GSn * Sall[:nc].transpose(0, 1)).sum((-2, -1)) if need[5] else None
        gbeta = (GSn * local).sum((-2, -1)) if need[6] else None
        ggamma = (gSr * Sall[:nc].transpose(0, 1)).sum((-2, -1)) if need[7] else None
        glocal3 = torch.mul(GSn, beta[..., None, None], out=torch.empty_like(local)).view(-1, R, dstate)
        gB3 = torch.bmm(gCB.transpose(1, 2), C3).baddbmm_(x3, glocal3)
        gx3 = torch.bmm(CB.transpose(1, 2), gY3).baddbmm_(B3, glocal3.transpose(1, 2))
        gxp = _per_step(gx3, batch, length, nheads, headdim)
        gu = (gxp * x).sum(-1)
        ux = u[..., None]
        gx = gxp * ux if gx is None else gx.addcmul_(gxp, ux)
        gB = _per_step(gB3, batch, length, ngroups, dstate)
        gC = _per_step(gC3, batch, length, ngroups, dstate)
        ginit = GS[0] if ctx.has_init else None
        return gx, gu, gf, gB, gC, galpha, gbeta, ggamma, ginit, gD, gz, None


def _per_group(t: torch.Tensor, T: int) -> torch.Tensor:
    """[b, L, G, K] -> [b * NC * G, T, K], chunk by chunk and group by group (a view for one group)."""
    batch, length, ngroups, k = t.shape
    return t.reshape(batch, length // T, T, ngroups, k).transpose(2, 3).reshape(-1, T, k)


def _per_step(t3: torch.Tensor, batch: int, length: int, heads: int, last: int) -> torch.Tensor:
    """Inverse of `_per_group`: [b * NC * G, T, K] -> [b, L, heads, last] (``G K = heads last``)."""
    T = t3.shape[1]
    ngroups = t3.shape[0] // (batch * (length // T))
    t = t3.view(batch, length // T, ngroups, T, -1).transpose(2, 3)
    return t.reshape(batch, length, heads, last)


def mamba2_scan_factored(
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
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None:
    """The factored scan without resets (arguments as `tritonrl.kernels.mamba2.fast.mamba2_scan_fast`),
    or None where a log factor exceeds `MAX_LOG_FACTOR` or is not finite.

    Ignores ``chunk_size`` (picks `CHUNK` or half). Computes in float32 (float64 for
    float64 ``x``); returns y [B, L, H, P] in ``x.dtype`` and optionally the final states
    [B, H, P, N] in the compute dtype. Differentiable. Reads the decays on the host: CPU only.
    """
    batch, length = x.shape[:2]
    cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
    w = dt_transform(dt.to(cdt), dt_bias, dt_softplus, dt_limit)  # [b, L, h]
    # The factors' exponents (up to MAX_LOG_FACTOR) in float64: rounded in float32 they would
    # carry a relative error of |d| 2^-24 into every factor; this way one rounding of the factor.
    w64 = w.to(torch.float64)
    for T in _chunks(length):
        pad = -length % T
        wp = F.pad(w64, (0, 0, 0, pad)) if pad else w64  # dt' = 0 on padding: no decay, no input
        d, tot, r = scan_decays(wp, A, T)
        if bool(d.detach().abs().max() <= MAX_LOG_FACTOR):
            break
    else:
        return None
    xf, Bf, Cf, zf = x.to(cdt), B.to(cdt), C.to(cdt), None if z is None else z.to(cdt)
    if pad:
        xf, Bf, Cf = (F.pad(t, (0, 0, 0, 0, 0, pad)) for t in (xf, Bf, Cf))
        zf = None if zf is None else F.pad(zf, (0, 0, 0, 0, 0, pad))
    f, u = d.exp().to(cdt), (wp * (-d).exp()).to(cdt)
    alpha, beta, gamma = (t.exp().to(cdt) for t in (tot, tot - r, r))
    Dv = None if D is None else D.to(cdt)
    init = None if initial_states is None else initial_states.to(cdt)
    y, state = _FactoredScan.apply(xf, u, f, Bf, Cf, alpha, beta, gamma, init, Dv, zf, T)
    if pad:
        y = y[:, :length]
    y = y.to(x.dtype)
    return (y, state) if return_final_states else y
