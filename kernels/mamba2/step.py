"""Triton kernel of the single Mamba2 step (acting): the float32 state is updated in place.

One program per (batch, head, block of P): decay the state slice, add ``dt' * outer(x, B)``,
store, reduce against ``C`` for ``y``. Not autotuned: the kernel writes its own input.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import empty
from tritonrl.kernels.mamba2.chunk import _softplus_clamp

__all__ = ["mamba2_step_triton"]


@triton.jit
def _mamba2_step_kernel(
    h,
    x,
    dt,
    A,
    Bm,
    Cm,
    D,
    z,
    dt_bias,
    rs,
    y,
    s_x_b,
    s_x_h,
    s_dt_b,
    s_dt_h,
    s_b_b,
    s_b_g,
    s_c_b,
    s_c_g,
    s_z_b,
    s_z_h,
    H,
    P,
    N,
    HPG,
    dt_lo,
    dt_hi,
    BP: tl.constexpr,
    BN: tl.constexpr,
    HAS_D: tl.constexpr,
    D_PER_P: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    SOFTPLUS: tl.constexpr,
    HAS_RESET: tl.constexpr,
):
    i_bh = tl.program_id(0).to(tl.int64)
    i_p = tl.program_id(1).to(tl.int64)
    i_b = i_bh // H
    i_h = i_bh % H
    i_g = i_h // HPG
    o_p = i_p * BP + tl.arange(0, BP)
    o_n = tl.arange(0, BN)
    m_p = o_p < P
    m_n = o_n < N
    m_pn = m_p[:, None] & m_n[None, :]

    b_v = tl.load(dt + i_b * s_dt_b + i_h * s_dt_h).to(tl.float32)
    if HAS_BIAS:
        b_v += tl.load(dt_bias + i_h).to(tl.float32)
    b_w, _ = _softplus_clamp(b_v, dt_lo, dt_hi, SOFTPLUS)
    b_decay = tl.exp(b_w * tl.load(A + i_h).to(tl.float32))
    if HAS_RESET:
        b_decay = tl.where(tl.load(rs + i_b) != 0, 0.0, b_decay)
    # [BP], [BN]
    b_x = tl.load(x + i_b * s_x_b + i_h * s_x_h + o_p, mask=m_p, other=0.0).to(tl.float32)
    b_B = tl.load(Bm + i_b * s_b_b + i_g * s_b_g + o_n, mask=m_n, other=0.0).to(tl.float32)
    b_C = tl.load(Cm + i_b * s_c_b + i_g * s_c_g + o_n, mask=m_n, other=0.0).to(tl.float32)
    # [BP, BN]
    p_h = h + (i_bh * P + o_p[:, None]) * N + o_n[None, :]
    b_h = tl.load(p_h, mask=m_pn, other=0.0)
    b_h = b_h * b_decay + (b_w * b_x)[:, None] * b_B[None, :]
    tl.store(p_h, b_h, mask=m_pn)
    b_y = tl.sum(b_h * b_C[None, :], axis=1)  # [BP]
    if HAS_D:
        if D_PER_P:
            b_y += b_x * tl.load(D + i_h * P + o_p, mask=m_p, other=0.0).to(tl.float32)
        else:
            b_y += b_x * tl.load(D + i_h).to(tl.float32)
    if HAS_Z:
        b_z = tl.load(z + i_b * s_z_b + i_h * s_z_h + o_p, mask=m_p, other=0.0).to(tl.float32)
        b_y = b_y * b_z * tl.sigmoid(b_z)
    tl.store(y + i_bh * P + o_p, b_y.to(y.dtype.element_ty), mask=m_p)


def mamba2_step_triton(
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
    """The Triton path of `tritonrl.kernels.mamba2.mamba2_step` (inputs already validated)."""
    batch, nheads, headdim = x.shape
    ngroups, dstate = B.shape[1:]
    x = x if x.stride(-1) == 1 else x.contiguous()
    B = B if B.stride(-1) == 1 else B.contiguous()
    C = C if C.stride(-1) == 1 else C.contiguous()
    if z is not None and z.stride(-1) != 1:
        z = z.contiguous()
    BN = triton.next_power_of_2(dstate)
    BP = min(triton.next_power_of_2(headdim), max(16, 4096 // BN))
    y = empty((batch, nheads, headdim), dtype=x.dtype, device=x.device)
    zz = z if z is not None else x
    rs = reset.contiguous().view(torch.uint8) if reset is not None else None
    grid = (batch * nheads, triton.cdiv(headdim, BP))
    _mamba2_step_kernel[grid](
        state,
        x,
        dt,
        A,
        B,
        C,
        D.contiguous() if D is not None else y,
        zz,
        dt_bias if dt_bias is not None else y,
        rs if rs is not None else y,
        y,
        x.stride(0),
        x.stride(1),
        dt.stride(0),
        dt.stride(1),
        B.stride(0),
        B.stride(1),
        C.stride(0),
        C.stride(1),
        zz.stride(0),
        zz.stride(1),
        nheads,
        headdim,
        dstate,
        nheads // ngroups,
        float(dt_limit[0]),
        min(float(dt_limit[1]), 3.0e38),
        BP=BP,
        BN=BN,
        HAS_D=D is not None,
        D_PER_P=D is not None and D.dim() == 2,
        HAS_Z=z is not None,
        HAS_BIAS=dt_bias is not None,
        SOFTPLUS=dt_softplus,
        HAS_RESET=rs is not None,
        num_warps=4,
    )
    return y
