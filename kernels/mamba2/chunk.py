"""Triton kernels of the chunked Mamba2 scan (SSD), forward and backward.

One program per (batch, head, block of P) walks the chunks with its f32 state in registers; no
atomics, so the backward is deterministic. See docs/pages/mamba2.md.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import empty
from tritonrl.kernels.fallback import reference_grads
from tritonrl.kernels.mamba2.reference import mamba2_scan_ref
from tritonrl.kernels.tl_helpers import dot, dot_flags

__all__ = ["Mamba2ScanFunction", "mamba2_chunk_bwd", "mamba2_chunk_fwd", "mamba2_scan_triton"]


@triton.jit
def _softplus_clamp(v, dt_lo, dt_hi, SOFTPLUS: tl.constexpr):
    """dt' = clamp(softplus(v)) and d dt' / d v, both float32 (torch's softplus threshold 20)."""
    if SOFTPLUS:
        w = tl.where(v > 20.0, v, tl.log(1.0 + tl.exp(tl.minimum(v, 20.0))))
        dw = tl.where(v > 20.0, 1.0, tl.sigmoid(v))
    else:
        w = v
        dw = v * 0.0 + 1.0  # works for scalars (the step kernel) and blocks alike
    dw = tl.where((w >= dt_lo) & (w <= dt_hi), dw, 0.0)
    return tl.minimum(tl.maximum(w, dt_lo), dt_hi), dw


@triton.jit
def _mamba2_chunk_fwd_kernel(
    x,
    dt,
    A,
    Bm,
    Cm,
    D,
    z,
    dt_bias,
    h0,
    rs,
    y,
    hT,
    hc,
    s_x_b,
    s_x_l,
    s_x_h,
    s_dt_b,
    s_dt_l,
    s_dt_h,
    s_b_b,
    s_b_l,
    s_b_g,
    s_c_b,
    s_c_l,
    s_c_g,
    s_z_b,
    s_z_l,
    s_z_h,
    L,
    H,
    P,
    N,
    HPG,
    NC,
    dt_lo,
    dt_hi,
    BT: tl.constexpr,
    BP: tl.constexpr,
    BN: tl.constexpr,
    HAS_D: tl.constexpr,
    D_PER_P: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    SOFTPLUS: tl.constexpr,
    HAS_H0: tl.constexpr,
    HAS_RESET: tl.constexpr,
    STORE_FINAL: tl.constexpr,
    STORE_STATES: tl.constexpr,
    INTERPRET: tl.constexpr,
    IEEE: tl.constexpr,
):
    i_bh = tl.program_id(0).to(tl.int64)
    i_p = tl.program_id(1).to(tl.int64)
    i_b = i_bh // H
    i_h = i_bh % H
    i_g = i_h // HPG
    o_t = tl.arange(0, BT)
    o_p = i_p * BP + tl.arange(0, BP)
    o_n = tl.arange(0, BN)
    m_p = o_p < P
    m_n = o_n < N
    m_np = m_n[:, None] & m_p[None, :]
    m_causal = o_t[:, None] >= o_t[None, :]

    b_A = tl.load(A + i_h).to(tl.float32)
    b_bias = 0.0
    if HAS_BIAS:
        b_bias = tl.load(dt_bias + i_h).to(tl.float32)
    if HAS_D:
        if D_PER_P:
            b_D = tl.load(D + i_h * P + o_p, mask=m_p, other=0.0).to(tl.float32)  # [BP]
        else:
            b_D = tl.load(D + i_h).to(tl.float32)
    # the state, transposed: [BN, BP]
    o_state = (i_bh * P + o_p[None, :]) * N + o_n[:, None]
    if HAS_H0:
        b_h = tl.load(h0 + o_state, mask=m_np, other=0.0).to(tl.float32)
    else:
        b_h = tl.zeros([BN, BP], dtype=tl.float32)

    p_x = x + i_b * s_x_b + i_h * s_x_h
    p_dt = dt + i_b * s_dt_b + i_h * s_dt_h
    p_B = Bm + i_b * s_b_b + i_g * s_b_g
    p_C = Cm + i_b * s_c_b + i_g * s_c_g
    p_z = z + i_b * s_z_b + i_h * s_z_h
    for i_c in range(NC):
        o_l = (i_c * BT + o_t).to(tl.int64)  # int64: L * H * P may pass 2**31
        m_l = o_l < L
        m_lp = m_l[:, None] & m_p[None, :]
        # [BT]
        b_v = tl.load(p_dt + o_l * s_dt_l, mask=m_l, other=0.0).to(tl.float32) + b_bias
        b_w, _ = _softplus_clamp(b_v, dt_lo, dt_hi, SOFTPLUS)
        b_w = tl.where(m_l, b_w, 0.0)
        b_a = b_w * b_A
        b_cs = tl.cumsum(b_a, axis=0)
        b_last = tl.sum(b_a, axis=0)
        # [BT, BP]
        b_x = tl.load(p_x + o_l[:, None] * s_x_l + o_p[None, :], mask=m_lp, other=0.0)
        # [BT, BN] and [BN, BT]
        b_C = tl.load(p_C + o_l[:, None] * s_c_l + o_n[None, :], mask=m_l[:, None] & m_n[None, :], other=0.0)
        b_Bt = tl.load(p_B + o_l[None, :] * s_b_l + o_n[:, None], mask=m_n[:, None] & m_l[None, :], other=0.0)

        m_ts = m_causal
        b_g = tl.exp(b_cs)
        b_e = tl.exp(b_last - b_cs)
        b_glast = tl.exp(b_last)
        if HAS_RESET:
            b_r = tl.load(rs + i_b * L + o_l, mask=m_l, other=0).to(tl.int32)
            b_seg = tl.cumsum(b_r, axis=0)
            b_seg_last = tl.sum(b_r, axis=0)
            m_ts = m_ts & (b_seg[:, None] == b_seg[None, :])
            b_g = tl.where(b_seg == 0, b_g, 0.0)
            b_e = tl.where(b_seg == b_seg_last, b_e, 0.0)
            b_glast = tl.where(b_seg_last == 0, b_glast, 0.0)
        # [BT, BT]: decay from s to t, zero across resets and above the diagonal
        b_Lm = tl.where(m_ts, tl.exp(tl.where(m_ts, b_cs[:, None] - b_cs[None, :], 0.0)), 0.0)
        b_cb = dot(b_C, b_Bt, tl.zeros([BT, BT], dtype=tl.float32), INTERPRET, IEEE)
        b_M = b_cb * b_Lm * b_w[None, :]
        # [BT, BP]
        b_y = dot(b_C.to(tl.float32), b_h, tl.zeros([BT, BP], dtype=tl.float32), INTERPRET, IEEE)
        b_y = dot(b_M.to(b_x.dtype), b_x, b_y * b_g[:, None], INTERPRET, IEEE)
        b_xf = b_x.to(tl.float32)
        if HAS_D:
            if D_PER_P:
                b_y += b_xf * b_D[None, :]
            else:
                b_y += b_xf * b_D
        if HAS_Z:
            b_z = tl.load(p_z + o_l[:, None] * s_z_l + o_p[None, :], mask=m_lp, other=0.0).to(tl.float32)
            b_y = b_y * b_z * tl.sigmoid(b_z)
        tl.store(
            y + ((i_b * L + o_l[:, None]) * H + i_h) * P + o_p[None, :], b_y.to(y.dtype.element_ty), mask=m_lp
        )
        if STORE_STATES:
            tl.store(hc + ((i_bh * NC + i_c) * P + o_p[None, :]) * N + o_n[:, None], b_h, mask=m_np)
        # fold the chunk into the state: [BN, BT] @ [BT, BP]
        b_xw = b_xf * (b_e * b_w)[:, None]
        b_h = dot(b_Bt.to(tl.float32), b_xw, b_h * b_glast, INTERPRET, IEEE)
    if STORE_FINAL:
        tl.store(hT + o_state, b_h, mask=m_np)


@triton.jit
def _mamba2_chunk_bwd_kernel(
    x,
    dt,
    A,
    Bm,
    Cm,
    D,
    z,
    dt_bias,
    rs,
    hc,
    dy,
    dhT,
    dx,
    dz,
    ddt,
    dB,
    dC,
    dA,
    dD,
    dh0,
    s_x_b,
    s_x_l,
    s_x_h,
    s_dt_b,
    s_dt_l,
    s_dt_h,
    s_b_b,
    s_b_l,
    s_b_g,
    s_c_b,
    s_c_l,
    s_c_g,
    s_z_b,
    s_z_l,
    s_z_h,
    NB,
    L,
    H,
    P,
    N,
    HPG,
    NC,
    dt_lo,
    dt_hi,
    BT: tl.constexpr,
    BP: tl.constexpr,
    BN: tl.constexpr,
    HAS_D: tl.constexpr,
    D_PER_P: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    SOFTPLUS: tl.constexpr,
    HAS_RESET: tl.constexpr,
    HAS_DHT: tl.constexpr,
    INTERPRET: tl.constexpr,
    IEEE: tl.constexpr,
):
    i_bh = tl.program_id(0).to(tl.int64)
    i_p = tl.program_id(1).to(tl.int64)
    i_b = i_bh // H
    i_h = i_bh % H
    i_g = i_h // HPG
    o_t = tl.arange(0, BT)
    o_p = i_p * BP + tl.arange(0, BP)
    o_n = tl.arange(0, BN)
    m_p = o_p < P
    m_n = o_n < N
    m_np = m_n[:, None] & m_p[None, :]
    m_pn = m_p[:, None] & m_n[None, :]
    m_causal = o_t[:, None] >= o_t[None, :]

    b_A = tl.load(A + i_h).to(tl.float32)
    b_bias = 0.0
    if HAS_BIAS:
        b_bias = tl.load(dt_bias + i_h).to(tl.float32)
    if HAS_D:
        if D_PER_P:
            b_D = tl.load(D + i_h * P + o_p, mask=m_p, other=0.0).to(tl.float32)[None, :]  # [1, BP]
        else:
            b_D = tl.load(D + i_h).to(tl.float32)
    o_state = (i_bh * P + o_p[None, :]) * N + o_n[:, None]  # [BN, BP]
    # gradient w.r.t. the state leaving the current chunk, transposed: [BN, BP]
    if HAS_DHT:
        b_ds = tl.load(dhT + o_state, mask=m_np, other=0.0).to(tl.float32)
    else:
        b_ds = tl.zeros([BN, BP], dtype=tl.float32)
    b_dA = tl.zeros([BT], dtype=tl.float32)
    b_dD = tl.zeros([BP], dtype=tl.float32)

    p_x = x + i_b * s_x_b + i_h * s_x_h
    p_dt = dt + i_b * s_dt_b + i_h * s_dt_h
    p_B = Bm + i_b * s_b_b + i_g * s_b_g
    p_C = Cm + i_b * s_c_b + i_g * s_c_g
    p_z = z + i_b * s_z_b + i_h * s_z_h
    i_pb = i_p * NB + i_b  # row of the per-P-block partial outputs
    for i_r in range(NC):
        i_c = NC - 1 - i_r
        o_l = (i_c * BT + o_t).to(tl.int64)  # int64: L * H * P may pass 2**31
        m_l = o_l < L
        m_lp = m_l[:, None] & m_p[None, :]
        m_ln = m_l[:, None] & m_n[None, :]
        m_nl = m_n[:, None] & m_l[None, :]
        b_v = tl.load(p_dt + o_l * s_dt_l, mask=m_l, other=0.0).to(tl.float32) + b_bias
        b_w, b_dwdv = _softplus_clamp(b_v, dt_lo, dt_hi, SOFTPLUS)
        b_w = tl.where(m_l, b_w, 0.0)
        b_a = b_w * b_A
        b_cs = tl.cumsum(b_a, axis=0)
        b_last = tl.sum(b_a, axis=0)
        # [BT, BP], [BP, BT]
        b_x = tl.load(p_x + o_l[:, None] * s_x_l + o_p[None, :], mask=m_lp, other=0.0)
        b_xt = tl.load(p_x + o_l[None, :] * s_x_l + o_p[:, None], mask=m_p[:, None] & m_l[None, :], other=0.0)
        b_xf = b_x.to(tl.float32)
        # [BT, BN], [BN, BT]
        b_B = tl.load(p_B + o_l[:, None] * s_b_l + o_n[None, :], mask=m_ln, other=0.0)
        b_Bt = tl.load(p_B + o_l[None, :] * s_b_l + o_n[:, None], mask=m_nl, other=0.0)
        b_C = tl.load(p_C + o_l[:, None] * s_c_l + o_n[None, :], mask=m_ln, other=0.0)
        b_Ct = tl.load(p_C + o_l[None, :] * s_c_l + o_n[:, None], mask=m_nl, other=0.0)
        # the state entering this chunk: [BN, BP] and [BP, BN]
        o_hc = i_bh * NC + i_c
        b_h0t = tl.load(hc + (o_hc * P + o_p[None, :]) * N + o_n[:, None], mask=m_np, other=0.0)
        b_h0 = tl.load(hc + (o_hc * P + o_p[:, None]) * N + o_n[None, :], mask=m_pn, other=0.0)
        # [BT, BP]
        b_dy = tl.load(dy + ((i_b * L + o_l[:, None]) * H + i_h) * P + o_p[None, :], mask=m_lp, other=0.0)
        b_dy = b_dy.to(tl.float32)

        m_ts = m_causal
        b_g = tl.exp(b_cs)
        b_e = tl.exp(b_last - b_cs)
        b_glast = tl.exp(b_last)
        if HAS_RESET:
            b_r = tl.load(rs + i_b * L + o_l, mask=m_l, other=0).to(tl.int32)
            b_seg = tl.cumsum(b_r, axis=0)
            b_seg_last = tl.sum(b_r, axis=0)
            m_ts = m_ts & (b_seg[:, None] == b_seg[None, :])
            b_g = tl.where(b_seg == 0, b_g, 0.0)
            b_e = tl.where(b_seg == b_seg_last, b_e, 0.0)
            b_glast = tl.where(b_seg_last == 0, b_glast, 0.0)
        b_Lm = tl.where(m_ts, tl.exp(tl.where(m_ts, b_cs[:, None] - b_cs[None, :], 0.0)), 0.0)
        b_cb = dot(b_C, b_Bt, tl.zeros([BT, BT], dtype=tl.float32), INTERPRET, IEEE)
        b_LC = b_Lm * b_cb  # [BT, BT]
        # contribution of the entering state to y: [BT, BP]
        b_yoff = dot(b_C.to(tl.float32), b_h0t, tl.zeros([BT, BP], dtype=tl.float32), INTERPRET, IEEE)
        b_yoff = b_yoff * b_g[:, None]
        if HAS_Z:
            # recompute y before the gate
            b_y = dot((b_LC * b_w[None, :]).to(b_x.dtype), b_x, b_yoff, INTERPRET, IEEE)
            if HAS_D:
                b_y += b_xf * b_D
            b_z = tl.load(p_z + o_l[:, None] * s_z_l + o_p[None, :], mask=m_lp, other=0.0).to(tl.float32)
            b_sig = tl.sigmoid(b_z)
            b_dz = b_dy * b_y * b_sig * (1.0 + b_z * (1.0 - b_sig))
            tl.store(
                dz + ((i_b * L + o_l[:, None]) * H + i_h) * P + o_p[None, :],
                b_dz.to(dz.dtype.element_ty),
                mask=m_lp,
            )
            b_dy = b_dy * b_z * b_sig
        if HAS_D:
            b_dD += tl.sum(b_dy * b_xf, axis=0)
        # DX[t, s] = dy_t . x_s: [BT, BT]
        b_DX = dot(b_dy.to(b_x.dtype), b_xt, tl.zeros([BT, BT], dtype=tl.float32), INTERPRET, IEEE)
        # (dS_end B_s)[p]: [BT, BP]
        b_bds = dot(b_B.to(tl.float32), b_ds, tl.zeros([BT, BP], dtype=tl.float32), INTERPRET, IEEE)
        # U = d(loss) / d(dt'_s x_s): [BT, BP]
        b_U = dot(tl.trans(b_LC).to(b_x.dtype), b_dy.to(b_x.dtype), b_bds * b_e[:, None], INTERPRET, IEEE)
        b_dx = b_U * b_w[:, None]
        if HAS_D:
            b_dx += b_dy * b_D
        tl.store(
            dx + ((i_b * L + o_l[:, None]) * H + i_h) * P + o_p[None, :],
            b_dx.to(dx.dtype.element_ty),
            mask=m_lp,
        )
        b_dw = tl.sum(b_xf * b_U, axis=1)  # [BT]
        b_LDX = b_Lm * b_DX
        # dC: [BT, BN]
        b_dCv = dot(b_dy, b_h0, tl.zeros([BT, BN], dtype=tl.float32), INTERPRET, IEEE) * b_g[:, None]
        b_dCv = dot((b_LDX * b_w[None, :]).to(b_x.dtype), b_B, b_dCv, INTERPRET, IEEE)
        o_dbc = ((i_pb * L + o_l[:, None]) * H + i_h) * N + o_n[None, :]
        tl.store(dC + o_dbc, b_dCv, mask=m_ln)
        # dB: [BT, BN]
        b_xds = dot(b_xf, tl.trans(b_ds), tl.zeros([BT, BN], dtype=tl.float32), INTERPRET, IEEE)
        b_dBv = dot(tl.trans(b_LDX).to(b_x.dtype), b_C, b_xds * b_e[:, None], INTERPRET, IEEE)
        tl.store(dB + o_dbc, b_dBv * b_w[:, None], mask=m_ln)
        # gradient w.r.t. the cumulative log decay cs_t, then w.r.t. a_t = dt'_t A
        b_Q = b_LC * b_w[None, :] * b_DX
        b_R = b_e * b_w * tl.sum(b_xf * b_bds, axis=1)
        b_dcs = tl.sum(b_Q, axis=1) - tl.sum(b_Q, axis=0) + tl.sum(b_dy * b_yoff, axis=1) - b_R
        b_extra = b_glast * tl.sum(tl.sum(b_ds * b_h0t, axis=1), axis=0) + tl.sum(b_R, axis=0)
        b_da = tl.sum(b_dcs, axis=0) - tl.cumsum(b_dcs, axis=0) + b_dcs + b_extra
        b_da = tl.where(m_l, b_da, 0.0)
        b_dw += b_A * b_da
        b_dA += b_w * b_da
        tl.store(ddt + (i_pb * L + o_l) * H + i_h, b_dw * b_dwdv, mask=m_l)
        # gradient w.r.t. the state entering this chunk: [BN, BT] @ [BT, BP]
        b_ds = dot(b_Ct.to(tl.float32), b_dy * b_g[:, None], b_ds * b_glast, INTERPRET, IEEE)
    tl.store(dh0 + o_state, b_ds, mask=m_np)
    tl.store(dA + i_pb * H + i_h, tl.sum(b_dA, axis=0))
    if HAS_D:
        tl.store(dD + i_bh * P + o_p, b_dD, mask=m_p)


# Below this many programs per launch, P-blocks shrink (to 16) so more programs run side by side.
_MIN_PROGRAMS = 128


def _blocks(P: int, N: int, BT: int, bwd: bool, rows: int) -> tuple[int, int, int]:
    """BP (P-block), BN (padded N) and warps for ``rows`` = batch x heads sequences; hand-picked
    (few sequences cut P into smaller blocks so more programs run)."""
    BN = max(16, triton.next_power_of_2(N))
    cap = 32 if (bwd or BN > 64 or BT > 64) else 64
    BP = max(16, min(cap, triton.next_power_of_2(P)))
    while BP > 16 and rows * triton.cdiv(P, BP) < _MIN_PROGRAMS:
        BP //= 2
    num_warps = 8 if BT * BN >= 64 * 128 else 4
    return BP, BN, num_warps


def _unit_last(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _common_args(x, dt, B, C, z):
    zz = z if z is not None else x
    return (
        x.stride(0),
        x.stride(1),
        x.stride(2),
        dt.stride(0),
        dt.stride(1),
        dt.stride(2),
        B.stride(0),
        B.stride(1),
        B.stride(2),
        C.stride(0),
        C.stride(1),
        C.stride(2),
        zz.stride(0),
        zz.stride(1),
        zz.stride(2),
    )


def mamba2_chunk_fwd(
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
    store_final: bool,
    store_states: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Launch the forward kernel. Returns y, the final states (if ``store_final``) and the
    f32 states entering every chunk [B, H, NC, P, N] (if ``store_states``)."""
    batch, length, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2:]
    x, B, C = _unit_last(x), _unit_last(B), _unit_last(C)
    z = _unit_last(z) if z is not None else None
    nchunks = triton.cdiv(length, chunk_size)
    BP, BN, num_warps = _blocks(headdim, dstate, chunk_size, bwd=False, rows=batch * nheads)
    dev = x.device
    y = empty((batch, length, nheads, headdim), dtype=x.dtype, device=dev)
    hT = empty((batch, nheads, headdim, dstate), dtype=torch.float32, device=dev) if store_final else None
    hc_shape = (batch, nheads, nchunks, headdim, dstate)
    hc = empty(hc_shape, dtype=torch.float32, device=dev) if store_states else None
    h0 = initial_states.contiguous() if initial_states is not None else None
    rs = resets.contiguous().view(torch.uint8) if resets is not None else None
    dummy = y
    grid = (batch * nheads, triton.cdiv(headdim, BP))
    _mamba2_chunk_fwd_kernel[grid](
        x,
        dt,
        A,
        B,
        C,
        D.contiguous() if D is not None else dummy,
        z if z is not None else dummy,
        dt_bias if dt_bias is not None else dummy,
        h0 if h0 is not None else dummy,
        rs if rs is not None else dummy,
        y,
        hT if hT is not None else dummy,
        hc if hc is not None else dummy,
        *_common_args(x, dt, B, C, z),
        length,
        nheads,
        headdim,
        dstate,
        nheads // ngroups,
        nchunks,
        float(dt_limit[0]),
        min(float(dt_limit[1]), 3.0e38),
        BT=chunk_size,
        BP=BP,
        BN=BN,
        HAS_D=D is not None,
        D_PER_P=D is not None and D.dim() == 2,
        HAS_Z=z is not None,
        HAS_BIAS=dt_bias is not None,
        SOFTPLUS=dt_softplus,
        HAS_H0=h0 is not None,
        HAS_RESET=rs is not None,
        STORE_FINAL=store_final,
        STORE_STATES=store_states,
        num_warps=num_warps,
        num_stages=1,
        **dot_flags(x.dtype),
    )
    return y, hT, hc


def mamba2_chunk_bwd(
    dy: torch.Tensor,
    dhT: torch.Tensor | None,
    hc: torch.Tensor,
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
    resets: torch.Tensor | None,
    chunk_size: int,
) -> dict[str, torch.Tensor]:
    """Launch the backward kernel and reduce its partials: a dict of gradients by input name, in the
    inputs' dtypes (states: float32)."""
    batch, length, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2:]
    x, B, C = _unit_last(x), _unit_last(B), _unit_last(C)
    z = _unit_last(z) if z is not None else None
    nchunks = triton.cdiv(length, chunk_size)
    BP, BN, num_warps = _blocks(headdim, dstate, chunk_size, bwd=True, rows=batch * nheads)
    npb = triton.cdiv(headdim, BP)
    dev = x.device
    f32 = torch.float32
    dx = empty((batch, length, nheads, headdim), dtype=x.dtype, device=dev)
    dz = empty((batch, length, nheads, headdim), dtype=x.dtype, device=dev) if z is not None else None
    ddt = empty((npb, batch, length, nheads), dtype=f32, device=dev)
    dB = empty((npb, batch, length, nheads, dstate), dtype=f32, device=dev)
    dC = empty((npb, batch, length, nheads, dstate), dtype=f32, device=dev)
    dA = empty((npb, batch, nheads), dtype=f32, device=dev)
    dD = empty((batch, nheads, headdim), dtype=f32, device=dev) if D is not None else None
    dh0 = empty((batch, nheads, headdim, dstate), dtype=f32, device=dev)
    rs = resets.contiguous().view(torch.uint8) if resets is not None else None
    dummy = dx
    grid = (batch * nheads, npb)
    _mamba2_chunk_bwd_kernel[grid](
        x,
        dt,
        A,
        B,
        C,
        D.contiguous() if D is not None else dummy,
        z if z is not None else dummy,
        dt_bias if dt_bias is not None else dummy,
        rs if rs is not None else dummy,
        hc,
        dy.contiguous(),
        dhT.contiguous() if dhT is not None else dummy,
        dx,
        dz if dz is not None else dummy,
        ddt,
        dB,
        dC,
        dA,
        dD if dD is not None else dummy,
        dh0,
        *_common_args(x, dt, B, C, z),
        batch,
        length,
        nheads,
        headdim,
        dstate,
        nheads // ngroups,
        nchunks,
        float(dt_limit[0]),
        min(float(dt_limit[1]), 3.0e38),
        BT=chunk_size,
        BP=BP,
        BN=BN,
        HAS_D=D is not None,
        D_PER_P=D is not None and D.dim() == 2,
        HAS_Z=z is not None,
        HAS_BIAS=dt_bias is not None,
        SOFTPLUS=dt_softplus,
        HAS_RESET=rs is not None,
        HAS_DHT=dhT is not None,
        num_warps=num_warps,
        num_stages=1,
        **dot_flags(x.dtype),
    )
    # Fixed-order reductions over P-blocks (and over the heads of a group): deterministic.
    g_dt = ddt.sum(0)  # [B, L, H] f32
    grads: dict[str, torch.Tensor] = {
        "x": dx,
        "dt": g_dt.to(dt.dtype),
        "A": dA.sum((0, 1)).to(A.dtype),
        "B": dB.sum(0).view(batch, length, ngroups, nheads // ngroups, dstate).sum(3).to(B.dtype),
        "C": dC.sum(0).view(batch, length, ngroups, nheads // ngroups, dstate).sum(3).to(C.dtype),
        "initial_states": dh0,
    }
    if z is not None:
        grads["z"] = dz
    if D is not None:
        grads["D"] = (dD.sum(0) if D.dim() == 2 else dD.sum((0, 2))).to(D.dtype)
    if dt_bias is not None:
        grads["dt_bias"] = g_dt.sum((0, 1)).to(dt_bias.dtype)
    return grads


_INPUTS = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states")


def _fallback_grads(
    inputs: tuple[torch.Tensor | None, ...],
    needs: tuple[bool, ...],
    cfg: tuple,
    dy: torch.Tensor,
    dhT: torch.Tensor | None,
) -> dict[str, torch.Tensor | None]:
    """The fallback backward: autograd through the torch chunked reference."""
    dt_softplus, dt_limit, resets, chunk_size = cfg

    def fn(x, dt, A, B, C, D, z, dt_bias, h0):
        return mamba2_scan_ref(
            x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_limit, h0, resets, chunk_size, True
        )

    return dict(zip(_INPUTS, reference_grads(fn, inputs, needs, (dy, dhT)), strict=True))


class Mamba2ScanFunction(torch.autograd.Function):
    """Autograd of the Triton scan; its backward falls back to the reference's autograd."""

    @staticmethod
    def forward(ctx, x, dt, A, B, C, D, z, dt_bias, initial_states, resets, cfg, need_grad, return_final):
        dt_softplus, dt_limit, chunk_size = cfg
        y, hT, hc = mamba2_chunk_fwd(
            x,
            dt,
            A,
            B,
            C,
            D,
            z,
            dt_bias,
            dt_softplus,
            dt_limit,
            initial_states,
            resets,
            chunk_size,
            store_final=return_final,
            store_states=need_grad,
        )
        ctx.cfg = cfg
        ctx.has_h0 = initial_states is not None
        ctx.set_materialize_grads(False)
        if need_grad:
            ctx.save_for_backward(x, dt, A, B, C, D, z, dt_bias, initial_states, resets, hc)
        if return_final:
            return y, hT
        return y

    @staticmethod
    def backward(ctx, dy, dhT=None):
        x, dt, A, B, C, D, z, dt_bias, h0, resets, hc = ctx.saved_tensors
        dt_softplus, dt_limit, chunk_size = ctx.cfg
        if dy is None:
            dy = torch.zeros_like(x)
        inputs = (x, dt, A, B, C, D, z, dt_bias, h0)
        needs = tuple(ctx.needs_input_grad[: len(_INPUTS)])
        from tritonrl.kernels.mamba2.api import MAMBA2_SCAN

        grads = MAMBA2_SCAN.guard(
            x.device,
            lambda: mamba2_chunk_bwd(
                dy, dhT, hc, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_limit, resets, chunk_size
            ),
            lambda: _fallback_grads(inputs, needs, (dt_softplus, dt_limit, resets, chunk_size), dy, dhT),
        )
        out = [
            grads.get(k) if t is not None and n else None
            for k, t, n in zip(_INPUTS, inputs, needs, strict=True)
        ]
        return (*out, None, None, None, None)


def mamba2_scan_triton(
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
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The Triton path of `tritonrl.kernels.mamba2.mamba2_scan` (inputs already validated)."""
    tensors = (x, dt, A, B, C, D, z, dt_bias, initial_states)
    need_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
    return Mamba2ScanFunction.apply(
        x,
        dt,
        A,
        B,
        C,
        D,
        z,
        dt_bias,
        initial_states,
        resets,
        (dt_softplus, dt_limit, chunk_size),
        need_grad,
        return_final_states,
    )
