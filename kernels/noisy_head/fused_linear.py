"""Triton kernels of the noisy linear op: forward, and backward for x, weights and biases.

Two f32 accumulators in one pass, the noisy weight never built; bf16 and f32 from one source,
launch configs fixed per dtype. See docs/pages/noisy-head.md.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import empty
from tritonrl.kernels.fallback import reference_grads
from tritonrl.kernels.noisy_head.api import NOISY_LINEAR
from tritonrl.kernels.noisy_head.reference import noisy_linear_ref
from tritonrl.kernels.tl_helpers import dot, dot_flags

__all__ = [
    "NoisyLinearFunction",
    "noisy_linear_bwd",
    "noisy_linear_fwd",
    "noisy_linear_triton",
    "noisy_tile",
]


@triton.jit
def noisy_tile(
    x,
    s_xb,
    s_xi,
    w_mu,
    w_sigma,
    bias_mu,
    bias_sigma,
    eps_in,
    eps_out,
    o_m,
    m_m,
    o_r,
    m_r,
    I,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    NOISE: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    INTERPRET: tl.constexpr,
    IEEE: tl.constexpr,
):
    """f32 [BM, BN]: rows o_m of x through output units o_r (masked by m_r) of one noisy layer
    (``[O, I]`` row-major weights at ``w_mu`` / ``w_sigma``)."""
    b_acc = tl.zeros([BM, BN], dtype=tl.float32)
    b_acc_s = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, I, BK):
        o_k = k0 + tl.arange(0, BK)
        m_k = o_k < I
        # [BM, BK]
        m_x = m_m[:, None] & m_k[None, :]
        b_x = tl.load(x + o_m[:, None] * s_xb + o_k[None, :] * s_xi, mask=m_x, other=0)
        # [BK, BN]
        o_w = o_r[None, :] * I + o_k[:, None]
        m_w = m_r[None, :] & m_k[:, None]
        b_acc = dot(b_x, tl.load(w_mu + o_w, mask=m_w, other=0), b_acc, INTERPRET, IEEE)
        if NOISE:
            b_ei = tl.load(eps_in + o_k, mask=m_k, other=0).to(tl.float32)
            b_xe = (b_x.to(tl.float32) * b_ei[None, :]).to(x.dtype.element_ty)
            b_acc_s = dot(b_xe, tl.load(w_sigma + o_w, mask=m_w, other=0), b_acc_s, INTERPRET, IEEE)
    if HAS_BIAS:
        b_acc += tl.load(bias_mu + o_r, mask=m_r, other=0).to(tl.float32)[None, :]
    if NOISE:
        if HAS_BIAS:
            b_acc_s += tl.load(bias_sigma + o_r, mask=m_r, other=0).to(tl.float32)[None, :]
        b_acc += b_acc_s * tl.load(eps_out + o_r, mask=m_r, other=0).to(tl.float32)[None, :]
    return b_acc


@triton.jit
def _noisy_linear_fwd_kernel(
    x,
    w_mu,
    w_sigma,
    bias_mu,
    bias_sigma,
    eps_in,
    eps_out,
    y,
    B,
    I,
    O,
    NB_O,
    s_xb,
    s_xi,
    s_yb,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    NOISE: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    RELU: tl.constexpr,
    INTERPRET: tl.constexpr,
    IEEE: tl.constexpr,
):
    # y [B, G, O] = x [B, I] through G layers; program (row block, (group, column block))
    i_m = tl.program_id(0).to(tl.int64)
    i_p = tl.program_id(1).to(tl.int64)
    i_g = i_p // NB_O
    i_n = i_p % NB_O
    o_m = i_m * BM + tl.arange(0, BM)
    o_n = i_n * BN + tl.arange(0, BN)
    m_m = o_m < B
    m_n = o_n < O
    b_acc = noisy_tile(
        x,
        s_xb,
        s_xi,
        w_mu + i_g * O * I,
        w_sigma + i_g * O * I,
        bias_mu + i_g * O,
        bias_sigma + i_g * O,
        eps_in + i_g * I,
        eps_out + i_g * O,
        o_m,
        m_m,
        o_n,
        m_n,
        I,
        BM,
        BN,
        BK,
        NOISE,
        HAS_BIAS,
        INTERPRET,
        IEEE,
    )
    if RELU:
        b_acc = tl.maximum(b_acc, 0.0)
    p_y = y + o_m[:, None] * s_yb + i_g * O + o_n[None, :]
    tl.store(p_y, b_acc.to(y.dtype.element_ty), mask=m_m[:, None] & m_n[None, :])


@triton.jit
def _noisy_linear_bwd_dx_kernel(
    g,
    y,
    w_mu,
    w_sigma,
    eps_in,
    eps_out,
    dx,
    B,
    I,
    O,
    G_PER,
    s_gb,
    s_gg,
    s_go,
    s_yb,
    s_dxb,
    s_dxg,
    s_dxi,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    NOISE: tl.constexpr,
    RELU: tl.constexpr,
    ACCUMULATE: tl.constexpr,
    INTERPRET: tl.constexpr,
    IEEE: tl.constexpr,
):
    # dx[:, i_x] = sum over the G_PER groups i_g reading x[:, i_x] of
    #   g_g @ W_mu_g + ((g_g * eps_out_g) @ W_sigma_g) * eps_in_g
    i_m = tl.program_id(0).to(tl.int64)
    i_k = tl.program_id(1).to(tl.int64)
    i_x = tl.program_id(2).to(tl.int64)
    o_m = i_m * BM + tl.arange(0, BM)
    o_k = i_k * BK + tl.arange(0, BK)
    m_m = o_m < B
    m_k = o_k < I
    b_dx = tl.zeros([BM, BK], dtype=tl.float32)
    for i_gl in range(0, G_PER):
        i_g = i_x * G_PER + i_gl
        b_dx_s = tl.zeros([BM, BK], dtype=tl.float32)
        for n0 in range(0, O, BN):
            o_n = n0 + tl.arange(0, BN)
            m_n = o_n < O
            m_g = m_m[:, None] & m_n[None, :]
            # [BM, BN]
            b_g = tl.load(g + o_m[:, None] * s_gb + i_g * s_gg + o_n[None, :] * s_go, mask=m_g, other=0)
            b_g = b_g.to(tl.float32)
            if RELU:
                b_y = tl.load(y + o_m[:, None] * s_yb + i_g * O + o_n[None, :], mask=m_g, other=0)
                b_g = tl.where(b_y.to(tl.float32) > 0, b_g, 0.0)
            # [BN, BK]
            o_w = i_g * O * I + o_n[:, None] * I + o_k[None, :]
            m_w = m_n[:, None] & m_k[None, :]
            b_wm = tl.load(w_mu + o_w, mask=m_w, other=0)
            b_dx = dot(b_g.to(w_mu.dtype.element_ty), b_wm, b_dx, INTERPRET, IEEE)
            if NOISE:
                b_eo = tl.load(eps_out + i_g * O + o_n, mask=m_n, other=0).to(tl.float32)
                b_ge = (b_g * b_eo[None, :]).to(w_mu.dtype.element_ty)
                b_dx_s = dot(b_ge, tl.load(w_sigma + o_w, mask=m_w, other=0), b_dx_s, INTERPRET, IEEE)
        if NOISE:
            # [BK]
            b_ei = tl.load(eps_in + i_g * I + o_k, mask=m_k, other=0).to(tl.float32)
            b_dx += b_dx_s * b_ei[None, :]
    p_dx = dx + o_m[:, None] * s_dxb + i_x * s_dxg + o_k[None, :] * s_dxi
    m_dx = m_m[:, None] & m_k[None, :]
    if ACCUMULATE:
        b_dx += tl.load(p_dx, mask=m_dx, other=0).to(tl.float32)
    tl.store(p_dx, b_dx.to(dx.dtype.element_ty), mask=m_dx)


@triton.jit
def _noisy_linear_bwd_dw_kernel(
    g,
    y,
    x,
    eps_in,
    eps_out,
    dw_mu,
    dw_sigma,
    db_mu,
    db_sigma,
    ws_w,
    ws_b,
    B,
    I,
    O,
    NB_O,
    R,
    CHUNK,
    s_gb,
    s_gg,
    s_go,
    s_yb,
    s_xb,
    s_xg,
    s_xi,
    BN: tl.constexpr,
    BK: tl.constexpr,
    BB: tl.constexpr,
    NOISE: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    RELU: tl.constexpr,
    DIRECT: tl.constexpr,
    INTERPRET: tl.constexpr,
    IEEE: tl.constexpr,
):
    # dW_mu[g, o, i] = sum_b g[b, g, o] x[b, (g), i] over batch chunk i_s; DIRECT: one chunk,
    # write the gradients; else write f32 partials ws_w [S, R, I], ws_b [S, R] (R = G * O).
    i_p = tl.program_id(0).to(tl.int64)
    i_k = tl.program_id(1).to(tl.int64)
    i_s = tl.program_id(2).to(tl.int64)
    i_g = i_p // NB_O
    i_n = i_p % NB_O
    o_n = i_n * BN + tl.arange(0, BN)
    o_k = i_k * BK + tl.arange(0, BK)
    m_n = o_n < O
    m_k = o_k < I
    b_dw = tl.zeros([BN, BK], dtype=tl.float32)
    # [BN, BB] running sum of the g.T tiles, reduced to the bias gradient after the loop
    b_gs = tl.zeros([BN, BB], dtype=tl.float32)
    for b0 in range(0, CHUNK, BB):
        o_b = i_s * CHUNK + b0 + tl.arange(0, BB)
        m_b = o_b < B
        m_gt = m_n[:, None] & m_b[None, :]
        # [BN, BB]: a tile of g.T
        b_gt = tl.load(g + o_b[None, :] * s_gb + i_g * s_gg + o_n[:, None] * s_go, mask=m_gt, other=0)
        b_gt = b_gt.to(tl.float32)
        if RELU:
            b_yt = tl.load(y + o_b[None, :] * s_yb + i_g * O + o_n[:, None], mask=m_gt, other=0)
            b_gt = tl.where(b_yt.to(tl.float32) > 0, b_gt, 0.0)
        b_gs += b_gt
        # [BB, BK]
        b_x = tl.load(
            x + o_b[:, None] * s_xb + i_g * s_xg + o_k[None, :] * s_xi,
            mask=m_b[:, None] & m_k[None, :],
            other=0,
        )
        b_dw = dot(b_gt.to(x.dtype.element_ty), b_x, b_dw, INTERPRET, IEEE)
    b_db = tl.sum(b_gs, axis=1)
    o_r = i_g * O + o_n
    o_w = o_r[:, None] * I + o_k[None, :]
    m_w = m_n[:, None] & m_k[None, :]
    if DIRECT:
        tl.store(dw_mu + o_w, b_dw.to(dw_mu.dtype.element_ty), mask=m_w)
        if NOISE:
            b_eo = tl.load(eps_out + o_r, mask=m_n, other=0).to(tl.float32)
            b_ei = tl.load(eps_in + i_g * I + o_k, mask=m_k, other=0).to(tl.float32)
            b_dws = b_dw * b_eo[:, None] * b_ei[None, :]
            tl.store(dw_sigma + o_w, b_dws.to(dw_sigma.dtype.element_ty), mask=m_w)
        if HAS_BIAS:
            if i_k == 0:
                tl.store(db_mu + o_r, b_db.to(db_mu.dtype.element_ty), mask=m_n)
                if NOISE:
                    b_eo2 = tl.load(eps_out + o_r, mask=m_n, other=0).to(tl.float32)
                    tl.store(db_sigma + o_r, (b_db * b_eo2).to(db_sigma.dtype.element_ty), mask=m_n)
    else:
        tl.store(ws_w + i_s * R * I + o_w, b_dw, mask=m_w)
        if HAS_BIAS:
            if i_k == 0:
                tl.store(ws_b + i_s * R + o_r, b_db, mask=m_n)


@triton.jit
def _noisy_linear_bwd_reduce_kernel(
    ws_w,
    ws_b,
    eps_in,
    eps_out,
    dw_mu,
    dw_sigma,
    db_mu,
    db_sigma,
    R,
    I,
    O,
    S,
    BR: tl.constexpr,
    BC: tl.constexpr,
    NOISE: tl.constexpr,
    HAS_BIAS: tl.constexpr,
):
    # Sum the S batch-chunk partials of the weight (and bias) gradients; scale for the sigma ones.
    i_r = tl.program_id(0).to(tl.int64)
    i_c = tl.program_id(1).to(tl.int64)
    o_r = i_r * BR + tl.arange(0, BR)
    o_c = i_c * BC + tl.arange(0, BC)
    m_r = o_r < R
    m_c = o_c < I
    o_w = o_r[:, None] * I + o_c[None, :]
    m_w = m_r[:, None] & m_c[None, :]
    # [BR, BC]
    b_dw = tl.zeros([BR, BC], dtype=tl.float32)
    for s in range(0, S):
        b_dw += tl.load(ws_w + s * R * I + o_w, mask=m_w, other=0)
    tl.store(dw_mu + o_w, b_dw.to(dw_mu.dtype.element_ty), mask=m_w)
    if NOISE:
        b_eo = tl.load(eps_out + o_r, mask=m_r, other=0).to(tl.float32)
        # eps_in [G, I]: row r belongs to group r // O
        b_ei = tl.load(eps_in + (o_r // O)[:, None] * I + o_c[None, :], mask=m_w, other=0).to(tl.float32)
        tl.store(dw_sigma + o_w, (b_dw * b_eo[:, None] * b_ei).to(dw_sigma.dtype.element_ty), mask=m_w)
    if HAS_BIAS:
        if i_c == 0:
            b_db = tl.zeros([BR], dtype=tl.float32)
            for s in range(0, S):
                b_db += tl.load(ws_b + s * R + o_r, mask=m_r, other=0)
            tl.store(db_mu + o_r, b_db.to(db_mu.dtype.element_ty), mask=m_r)
            if NOISE:
                b_eo2 = tl.load(eps_out + o_r, mask=m_r, other=0).to(tl.float32)
                tl.store(db_sigma + o_r, (b_db * b_eo2).to(db_sigma.dtype.element_ty), mask=m_r)


def _tiles(dtype: torch.dtype) -> tuple[int, int]:
    """(columns, reduction) tile sizes: IEEE f32 products hold twice the registers of bf16 ones."""
    return (32, 32) if dtype == torch.float32 else (64, 64)


def _row_block(rows: int, dtype: torch.dtype) -> int:
    """Rows per program: 16 for acting-size batches, else a full tile (fixed buckets, no tuning)."""
    if rows <= 16:
        return 16
    return 32 if dtype == torch.float32 else 64


def _dims(w_mu: torch.Tensor) -> tuple[int, int, int]:
    """(G, O, I) of ``[O, I]`` or ``[G, O, I]`` weights."""
    return (w_mu.shape[0] if w_mu.dim() == 3 else 1), w_mu.shape[-2], w_mu.shape[-1]


def noisy_linear_fwd(
    x: torch.Tensor,
    w_mu: torch.Tensor,
    w_sigma: torch.Tensor | None,
    b_mu: torch.Tensor | None,
    b_sigma: torch.Tensor | None,
    eps_in: torch.Tensor | None,
    eps_out: torch.Tensor | None,
    noise: bool,
    relu: bool,
) -> torch.Tensor:
    """Launch the forward kernel. x ``[B, I]``, any strides; output ``[B, O]`` / ``[B, G, O]``, x's dtype."""
    g_, o_, i_ = _dims(w_mu)
    b_ = x.shape[0]
    y = empty((b_, g_, o_) if w_mu.dim() == 3 else (b_, o_), dtype=x.dtype, device=x.device)
    bm = _row_block(b_, x.dtype)
    bn, bk = _tiles(x.dtype)
    nb_o = triton.cdiv(o_, bn)
    has_bias = b_mu is not None
    d = w_mu  # stands in for pointers a constexpr flag switches off
    _noisy_linear_fwd_kernel[(triton.cdiv(b_, bm), g_ * nb_o)](
        x,
        w_mu,
        w_sigma if noise else d,
        b_mu if has_bias else d,
        b_sigma if (noise and has_bias) else d,
        eps_in if noise else d,
        eps_out if noise else d,
        y,
        b_,
        i_,
        o_,
        nb_o,
        x.stride(0),
        x.stride(1),
        g_ * o_,
        BM=bm,
        BN=bn,
        BK=bk,
        NOISE=noise,
        HAS_BIAS=has_bias,
        RELU=relu,
        **dot_flags(x.dtype),
    )
    return y


def _split(rows: int, programs: int, bb: int) -> int:
    """Batch chunks for the weight gradient: enough programs to fill a GPU, chunks of >= 4 tiles."""
    return max(1, min(triton.cdiv(256, programs), rows // (4 * bb)))


def noisy_linear_bwd(
    g: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor | None,
    w_mu: torch.Tensor,
    w_sigma: torch.Tensor | None,
    eps_in: torch.Tensor | None,
    eps_out: torch.Tensor | None,
    *,
    noise: bool,
    relu: bool,
    has_bias: bool,
    need_dx: bool = True,
    need_dw: bool = True,
    dx: torch.Tensor | None = None,
    accumulate: bool = False,
    split: int | None = None,
) -> tuple[torch.Tensor | None, ...]:
    """Launch the backward kernels of the noisy linear op.

    Args:
        g: upstream gradient ``[B, O]`` (``[B, G, O]`` grouped), any float dtype and strides.
        x: ``[B, I]`` read by every group, or ``[B, G, I]`` (group g reads ``x[:, g]``); any strides.
        y: the forward output (only read with ``relu``).
        dx: where to write the input gradient (shaped like x); ``accumulate`` adds into it.
            Allocated when ``None``.
        split: batch chunks for the weight gradients (``None``: a heuristic).

    Returns:
        ``(dx, dw_mu, dw_sigma, db_mu, db_sigma)``; ``None`` where not asked for or absent.
    """
    g_, o_, i_ = _dims(w_mu)
    b_ = g.shape[0]
    bn, bk = _tiles(w_mu.dtype)
    bm = _row_block(b_, w_mu.dtype)
    flags = dot_flags(w_mu.dtype)
    d = w_mu
    s_g = (g.stride(0), g.stride(1), g.stride(2)) if g.dim() == 3 else (g.stride(0), 0, g.stride(1))
    s_yb = g_ * o_
    y_ = y if relu else d
    out_dx = None
    if need_dx:
        out_dx = dx if dx is not None else empty(x.shape, dtype=x.dtype, device=x.device)
        gx = x.shape[1] if x.dim() == 3 else 1
        s_dx = (
            (out_dx.stride(0), out_dx.stride(1), out_dx.stride(2))
            if out_dx.dim() == 3
            else (out_dx.stride(0), 0, out_dx.stride(1))
        )
        _noisy_linear_bwd_dx_kernel[(triton.cdiv(b_, bm), triton.cdiv(i_, bk), gx)](
            g,
            y_,
            w_mu,
            w_sigma if noise else d,
            eps_in if noise else d,
            eps_out if noise else d,
            out_dx,
            b_,
            i_,
            o_,
            g_ // gx,
            *s_g,
            s_yb,
            *s_dx,
            BM=bm,
            BN=bn,
            BK=bk,
            NOISE=noise,
            RELU=relu,
            ACCUMULATE=accumulate,
            **flags,
        )
    if not need_dw:
        return out_dx, None, None, None, None
    dw_mu = empty(w_mu.shape, dtype=w_mu.dtype, device=w_mu.device)
    dw_sigma = empty(w_mu.shape, dtype=w_mu.dtype, device=w_mu.device) if noise else None
    b_shape = w_mu.shape[:-1]
    db_mu = empty(b_shape, dtype=w_mu.dtype, device=w_mu.device) if has_bias else None
    db_sigma = empty(b_shape, dtype=w_mu.dtype, device=w_mu.device) if (has_bias and noise) else None
    bb = bk
    nb_o, nb_i = triton.cdiv(o_, bn), triton.cdiv(i_, bk)
    s = split if split is not None else _split(b_, g_ * nb_o * nb_i, bb)
    chunk = triton.cdiv(triton.cdiv(b_, s), bb) * bb
    s = triton.cdiv(b_, chunk)
    r_ = g_ * o_
    ws_w = empty((s, r_, i_), dtype=torch.float32, device=w_mu.device) if s > 1 else d
    ws_b = empty((s, r_), dtype=torch.float32, device=w_mu.device) if (s > 1 and has_bias) else d
    s_x = (x.stride(0), x.stride(1), x.stride(2)) if x.dim() == 3 else (x.stride(0), 0, x.stride(1))
    outs = (
        dw_mu,
        dw_sigma if noise else d,
        db_mu if has_bias else d,
        db_sigma if (has_bias and noise) else d,
    )
    _noisy_linear_bwd_dw_kernel[(g_ * nb_o, nb_i, s)](
        g,
        y_,
        x,
        eps_in if noise else d,
        eps_out if noise else d,
        *outs,
        ws_w,
        ws_b,
        b_,
        i_,
        o_,
        nb_o,
        r_,
        chunk,
        *s_g,
        s_yb,
        *s_x,
        BN=bn,
        BK=bk,
        BB=bb,
        NOISE=noise,
        HAS_BIAS=has_bias,
        RELU=relu,
        DIRECT=s == 1,
        **flags,
    )
    if s > 1:
        br, bc = 32, 64
        _noisy_linear_bwd_reduce_kernel[(triton.cdiv(r_, br), triton.cdiv(i_, bc))](
            ws_w,
            ws_b,
            eps_in if noise else d,
            eps_out if noise else d,
            *outs,
            r_,
            i_,
            o_,
            s,
            BR=br,
            BC=bc,
            NOISE=noise,
            HAS_BIAS=has_bias,
        )
    return out_dx, dw_mu, dw_sigma, db_mu, db_sigma


class NoisyLinearFunction(torch.autograd.Function):
    """Autograd of the Triton noisy linear op; its backward falls back to the reference's autograd."""

    @staticmethod
    def forward(ctx, x, w_mu, w_sigma, b_mu, b_sigma, eps_in, eps_out, noise, relu):  # type: ignore[override]
        y = noisy_linear_fwd(x, w_mu, w_sigma, b_mu, b_sigma, eps_in, eps_out, noise, relu)
        ctx.noise, ctx.relu = noise, relu
        ctx.save_for_backward(x, w_mu, w_sigma, b_mu, b_sigma, eps_in, eps_out, y if relu else None)
        return y

    @staticmethod
    def backward(ctx, gy):  # type: ignore[override]
        x, w_mu, w_sigma, b_mu, b_sigma, eps_in, eps_out, y = ctx.saved_tensors
        needs = ctx.needs_input_grad[:5]
        inputs = (x, w_mu, w_sigma, b_mu, b_sigma, eps_in, eps_out)

        def run() -> tuple[torch.Tensor | None, ...]:
            return noisy_linear_bwd(
                gy,
                x,
                y,
                w_mu,
                w_sigma,
                eps_in,
                eps_out,
                noise=ctx.noise,
                relu=ctx.relu,
                has_bias=b_mu is not None,
                need_dx=needs[0],
                need_dw=any(needs[1:]),
            )

        def fallback() -> tuple[torch.Tensor | None, ...]:
            def fn(*t: torch.Tensor) -> torch.Tensor:
                return noisy_linear_ref(*t, noise=ctx.noise, relu=ctx.relu)

            return reference_grads(fn, inputs, (*needs, False, False), (gy,))[:5]

        grads = NOISY_LINEAR.guard(x.device, run, fallback)
        return (*(gr if n else None for gr, n in zip(grads, needs, strict=True)), None, None, None, None)


def noisy_linear_triton(
    x: torch.Tensor,
    w_mu: torch.Tensor,
    w_sigma: torch.Tensor | None,
    b_mu: torch.Tensor | None,
    b_sigma: torch.Tensor | None,
    eps_in: torch.Tensor | None,
    eps_out: torch.Tensor | None,
    noise: bool,
    relu: bool,
) -> torch.Tensor:
    """The Triton implementation of `tritonrl.kernels.noisy_head.noisy_linear` (inputs validated)."""
    return NoisyLinearFunction.apply(x, w_mu, w_sigma, b_mu, b_sigma, eps_in, eps_out, noise, relu)
