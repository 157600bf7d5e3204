"""Triton kernels of the noisy dueling / distributional head: one forward launch, f32 epilogue.

One program per block of batch rows; several action tiles are parked in the f32 output so no
matmul runs twice. See docs/pages/noisy-head.md.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import empty
from tritonrl.kernels.fallback import reference_grads
from tritonrl.kernels.noisy_head.api import NOISY_DUELING
from tritonrl.kernels.noisy_head.fused_linear import noisy_linear_bwd, noisy_tile
from tritonrl.kernels.noisy_head.reference import NoisyParams, noisy_dueling_ref
from tritonrl.kernels.tl_helpers import dot_flags

__all__ = ["NoisyDuelingFunction", "noisy_dueling_bwd", "noisy_dueling_fwd", "noisy_dueling_triton"]


@triton.jit
def _dueling_finish(
    b_a3,
    b_v,
    b_mean,
    t,
    o_m,
    m_m,
    out,
    q,
    support,
    A,
    Z,
    BA: tl.constexpr,
    ZB: tl.constexpr,
    DUELING: tl.constexpr,
    LOG_SOFTMAX: tl.constexpr,
    HAS_SUPPORT: tl.constexpr,
):
    """Combine action tile t ([BM, BA, ZB] f32) with V and mean_a A, log-softmax, store."""
    o_a = t * BA + tl.arange(0, BA)
    o_z = tl.arange(0, ZB)
    m_a = o_a < A
    m_z = o_z < Z
    if DUELING:
        b_q = b_v[:, None, :] + b_a3 - b_mean[:, None, :]
    else:
        b_q = b_a3
    if LOG_SOFTMAX:
        b_q = tl.where(m_z[None, None, :], b_q, float("-inf"))
        # [BM, BA]
        b_max = tl.max(b_q, axis=2)
        b_lse = b_max + tl.log(tl.sum(tl.exp(b_q - b_max[:, :, None]), axis=2))
        b_q = b_q - b_lse[:, :, None]
    p_o = out + o_m[:, None, None] * A * Z + o_a[None, :, None] * Z + o_z[None, None, :]
    tl.store(p_o, b_q, mask=m_m[:, None, None] & m_a[None, :, None] & m_z[None, None, :])
    if HAS_SUPPORT:
        b_s = tl.load(support + o_z, mask=m_z, other=0).to(tl.float32)
        # [BM, BA]; padded atoms hold exp(-inf) = 0
        b_ev = tl.sum(tl.exp(b_q) * b_s[None, None, :], axis=2)
        tl.store(q + o_m[:, None] * A + o_a[None, :], b_ev, mask=m_m[:, None] & m_a[None, :])


@triton.jit
def _noisy_dueling_fwd_kernel(
    xv,
    xa,
    s_xvb,
    s_xvi,
    s_xab,
    s_xai,
    v_w_mu,
    v_w_sigma,
    v_b_mu,
    v_b_sigma,
    v_eps_in,
    v_eps_out,
    a_w_mu,
    a_w_sigma,
    a_b_mu,
    a_b_sigma,
    a_eps_in,
    a_eps_out,
    support,
    out,
    q,
    B,
    I,
    A,
    Z,
    NT,
    BM: tl.constexpr,
    BK: tl.constexpr,
    BA: tl.constexpr,
    ZB: tl.constexpr,
    VB: tl.constexpr,
    NOISE: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    DUELING: tl.constexpr,
    LOG_SOFTMAX: tl.constexpr,
    HAS_SUPPORT: tl.constexpr,
    SINGLE: tl.constexpr,
    INTERPRET: tl.constexpr,
    IEEE: tl.constexpr,
):
    i_m = tl.program_id(0).to(tl.int64)
    o_m = i_m * BM + tl.arange(0, BM)
    m_m = o_m < B
    # [BM, ZB] value: a dot needs >= 16 columns, so the tile is VB = max(16, ZB) wide and only
    # its first Z columns are non-zero; folding it to [BM, VB // ZB, ZB] and summing keeps them.
    b_v = tl.zeros([BM, ZB], dtype=tl.float32)
    if DUELING:
        o_vc = tl.arange(0, VB).to(tl.int64)
        b_vt = noisy_tile(
            xv,
            s_xvb,
            s_xvi,
            v_w_mu,
            v_w_sigma,
            v_b_mu,
            v_b_sigma,
            v_eps_in,
            v_eps_out,
            o_m,
            m_m,
            o_vc,
            o_vc < Z,
            I,
            BM,
            VB,
            BK,
            NOISE,
            HAS_BIAS,
            INTERPRET,
            IEEE,
        )
        b_v = tl.sum(tl.reshape(b_vt, [BM, VB // ZB, ZB]), axis=1)
    # advantage tile columns c = a_local * ZB + z
    o_c = tl.arange(0, BA * ZB).to(tl.int64)
    c_a = o_c // ZB
    c_z = o_c % ZB
    if SINGLE:
        m_c = (c_a < A) & (c_z < Z)
        b_at = noisy_tile(
            xa,
            s_xab,
            s_xai,
            a_w_mu,
            a_w_sigma,
            a_b_mu,
            a_b_sigma,
            a_eps_in,
            a_eps_out,
            o_m,
            m_m,
            c_a * Z + c_z,
            m_c,
            I,
            BM,
            BA * ZB,
            BK,
            NOISE,
            HAS_BIAS,
            INTERPRET,
            IEEE,
        )
        # [BM, BA, ZB]
        b_a3 = tl.reshape(tl.where(m_c[None, :], b_at, 0.0), [BM, BA, ZB])
        b_mean = tl.sum(b_a3, axis=1) / A
        _dueling_finish(
            b_a3, b_v, b_mean, 0, o_m, m_m, out, q, support, A, Z, BA, ZB, DUELING, LOG_SOFTMAX, HAS_SUPPORT
        )
    else:
        b_sum = tl.zeros([BM, ZB], dtype=tl.float32)
        for t in range(0, NT):
            o_a = t * BA + c_a
            m_c = (o_a < A) & (c_z < Z)
            o_r = o_a * Z + c_z  # weight row, and the column of out[b] = [A * Z]
            b_at = noisy_tile(
                xa,
                s_xab,
                s_xai,
                a_w_mu,
                a_w_sigma,
                a_b_mu,
                a_b_sigma,
                a_eps_in,
                a_eps_out,
                o_m,
                m_m,
                o_r,
                m_c,
                I,
                BM,
                BA * ZB,
                BK,
                NOISE,
                HAS_BIAS,
                INTERPRET,
                IEEE,
            )
            b_at = tl.where(m_c[None, :], b_at, 0.0)
            b_sum += tl.sum(tl.reshape(b_at, [BM, BA, ZB]), axis=1)
            tl.store(out + o_m[:, None] * A * Z + o_r[None, :], b_at, mask=m_m[:, None] & m_c[None, :])
        # every thread of the program sees the parked raw tiles before reading them back
        tl.debug_barrier()
        b_mean = b_sum / A
        for t in range(0, NT):
            o_a = t * BA + c_a
            m_c = (o_a < A) & (c_z < Z)
            p_a = out + o_m[:, None] * A * Z + (o_a * Z + c_z)[None, :]
            b_at = tl.load(p_a, mask=m_m[:, None] & m_c[None, :], other=0)
            # all threads have read tile t before _dueling_finish overwrites it
            tl.debug_barrier()
            _dueling_finish(
                tl.reshape(b_at, [BM, BA, ZB]),
                b_v,
                b_mean,
                t,
                o_m,
                m_m,
                out,
                q,
                support,
                A,
                Z,
                BA,
                ZB,
                DUELING,
                LOG_SOFTMAX,
                HAS_SUPPORT,
            )


@triton.jit
def _dq_tile(
    go,
    s_gb,
    s_ga,
    s_gz,
    gq,
    s_qb,
    s_qa,
    out,
    support,
    t,
    o_m,
    m_m,
    A,
    Z,
    BA: tl.constexpr,
    ZB: tl.constexpr,
    LOG_SOFTMAX: tl.constexpr,
    HAS_GQ: tl.constexpr,
):
    """f32 [BM, BA, ZB]: gradient w.r.t. the combined values Q of action tile t (0 where padded)."""
    o_a = t * BA + tl.arange(0, BA)
    o_z = tl.arange(0, ZB)
    m_a = o_a < A
    m_z = o_z < Z
    m = m_m[:, None, None] & m_a[None, :, None] & m_z[None, None, :]
    p_g = go + o_m[:, None, None] * s_gb + o_a[None, :, None] * s_ga + o_z[None, None, :] * s_gz
    b_g = tl.load(p_g, mask=m, other=0).to(tl.float32)
    if LOG_SOFTMAX:
        p_o = out + o_m[:, None, None] * A * Z + o_a[None, :, None] * Z + o_z[None, None, :]
        b_p = tl.exp(tl.load(p_o, mask=m, other=float("-inf")))
        if HAS_GQ:
            # q = sum_z p_z s_z: dq / dlog_p_z = p_z s_z
            b_gq = tl.load(
                gq + o_m[:, None] * s_qb + o_a[None, :] * s_qa, mask=m_m[:, None] & m_a[None, :], other=0
            ).to(tl.float32)
            b_s = tl.load(support + o_z, mask=m_z, other=0).to(tl.float32)
            b_g += b_gq[:, :, None] * b_p * b_s[None, None, :]
        b_g = b_g - b_p * tl.sum(b_g, axis=2)[:, :, None]
    return b_g


@triton.jit
def _noisy_dueling_bwd_kernel(
    go,
    s_gb,
    s_ga,
    s_gz,
    gq,
    s_qb,
    s_qa,
    out,
    support,
    dv,
    da,
    B,
    A,
    Z,
    NT,
    BM: tl.constexpr,
    BA: tl.constexpr,
    ZB: tl.constexpr,
    DUELING: tl.constexpr,
    LOG_SOFTMAX: tl.constexpr,
    HAS_GQ: tl.constexpr,
):
    # dv [B, Z] = sum_a dQ; da [B, A * Z] = dQ - dv / A (dueling) or dQ; both f32
    i_m = tl.program_id(0).to(tl.int64)
    o_m = i_m * BM + tl.arange(0, BM)
    m_m = o_m < B
    o_z = tl.arange(0, ZB)
    b_dv = tl.zeros([BM, ZB], dtype=tl.float32)
    if DUELING:
        for t in range(0, NT):
            b_dq = _dq_tile(
                go,
                s_gb,
                s_ga,
                s_gz,
                gq,
                s_qb,
                s_qa,
                out,
                support,
                t,
                o_m,
                m_m,
                A,
                Z,
                BA,
                ZB,
                LOG_SOFTMAX,
                HAS_GQ,
            )
            b_dv += tl.sum(b_dq, axis=1)
        tl.store(dv + o_m[:, None] * Z + o_z[None, :], b_dv, mask=m_m[:, None] & (o_z < Z)[None, :])
    for t in range(0, NT):
        b_dq = _dq_tile(
            go, s_gb, s_ga, s_gz, gq, s_qb, s_qa, out, support, t, o_m, m_m, A, Z, BA, ZB, LOG_SOFTMAX, HAS_GQ
        )
        if DUELING:
            b_dq = b_dq - b_dv[:, None, :] / A
        o_a = t * BA + tl.arange(0, BA)
        p_a = da + o_m[:, None, None] * A * Z + o_a[None, :, None] * Z + o_z[None, None, :]
        m = m_m[:, None, None] & (o_a < A)[None, :, None] & (o_z < Z)[None, None, :]
        tl.store(p_a, b_dq, mask=m)


def _config(num_actions: int, atoms: int, dtype: torch.dtype) -> dict[str, int]:
    """Tile sizes from the dims that change code (actions, atoms, dtype), never the batch size; BK
    keeps a weight tile near 8 KiB so a pipelined loop fits shared memory."""
    zb = triton.next_power_of_2(atoms)
    ba = max(1, min(triton.next_power_of_2(num_actions), 128 // zb), 16 // zb)
    width = ba * zb
    size = 4 if dtype == torch.float32 else 2
    bm = 64 if width <= 64 else (32 if width <= 128 else 16)
    if dtype == torch.float32:
        bm = min(bm, 32)
    return {
        "BM": bm,
        "BK": max(16, min(64, 8192 // (width * size))),
        "BA": ba,
        "ZB": zb,
        "VB": max(16, zb),
        "NT": triton.cdiv(num_actions, ba),
        "num_warps": 8 if width >= 256 else 4,
        "num_stages": 2 if width * size >= 1024 else 3,
    }


def _streams(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The value and advantage inputs: both x for ``[B, I]``, ``x[:, 0]``, ``x[:, 1]`` for ``[B, 2, I]``."""
    return (x[:, 0], x[:, 1]) if x.dim() == 3 else (x, x)


def noisy_dueling_fwd(
    x: torch.Tensor,
    adv: NoisyParams,
    val: NoisyParams | None,
    num_actions: int,
    atoms: int,
    noise: bool,
    log_softmax: bool,
    support: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Launch the forward kernel: ``out [B, A, Z]`` f32 and, with ``support``, ``q [B, A]`` f32."""
    xv, xa = _streams(x)
    b_, i_ = xa.shape
    cfg = _config(num_actions, atoms, x.dtype)
    out = empty((b_, num_actions, atoms), dtype=torch.float32, device=x.device)
    q = None
    if support is not None:
        q = empty((b_, num_actions), dtype=torch.float32, device=x.device)
    d = adv.weight_mu
    has_bias = adv.bias_mu is not None

    def layer(p: NoisyParams | None) -> list[torch.Tensor]:
        # absent tensors (no value stream, no bias, no noise) are switched off by constexpr flags
        return [d] * 6 if p is None else [d if v is None else v for v in p]

    nt = cfg.pop("NT")
    _noisy_dueling_fwd_kernel[(triton.cdiv(b_, cfg["BM"]),)](
        xv,
        xa,
        xv.stride(0),
        xv.stride(1),
        xa.stride(0),
        xa.stride(1),
        *layer(val),
        *layer(adv),
        support if support is not None else out,
        out,
        q if q is not None else out,
        b_,
        i_,
        num_actions,
        atoms,
        nt,
        **cfg,
        NOISE=noise,
        HAS_BIAS=has_bias,
        DUELING=val is not None,
        LOG_SOFTMAX=log_softmax and atoms > 1,
        HAS_SUPPORT=support is not None,
        SINGLE=nt == 1,
        **dot_flags(x.dtype),
    )
    return out, q


def noisy_dueling_bwd(
    go: torch.Tensor,
    gq: torch.Tensor | None,
    x: torch.Tensor,
    out: torch.Tensor,
    support: torch.Tensor | None,
    adv: NoisyParams,
    val: NoisyParams | None,
    num_actions: int,
    atoms: int,
    noise: bool,
    log_softmax: bool,
    *,
    need_dx: bool = True,
    need_adv: bool = True,
    need_val: bool = True,
) -> tuple[torch.Tensor | None, tuple[torch.Tensor | None, ...], tuple[torch.Tensor | None, ...]]:
    """Launch the backward kernels: ``(dx, advantage grads, value grads)``, grads as
    ``(dW_mu, dW_sigma, db_mu, db_sigma)``; ``None`` where not asked for or absent."""
    xv, xa = _streams(x)
    b_ = x.shape[0]
    cfg = _config(num_actions, atoms, x.dtype)
    zb, ba, nt = cfg["ZB"], cfg["BA"], cfg["NT"]
    bm = max(1, min(64, 4096 // (ba * zb)))
    dueling = val is not None
    dv = empty((b_, atoms), dtype=torch.float32, device=x.device) if dueling else out
    da = empty((b_, num_actions * atoms), dtype=torch.float32, device=x.device)
    has_gq = gq is not None
    gq_ = gq if gq is not None else out
    s_q = (gq.stride(0), gq.stride(1)) if gq is not None else (0, 0)
    _noisy_dueling_bwd_kernel[(triton.cdiv(b_, bm),)](
        go,
        go.stride(0),
        go.stride(1),
        go.stride(2),
        gq_,
        *s_q,
        out,
        support if support is not None else out,
        dv,
        da,
        b_,
        num_actions,
        atoms,
        nt,
        BM=bm,
        BA=ba,
        ZB=zb,
        DUELING=dueling,
        LOG_SOFTMAX=log_softmax and atoms > 1,
        HAS_GQ=has_gq,
    )
    dx = empty(x.shape, dtype=x.dtype, device=x.device) if need_dx else None
    shared = x.dim() == 2

    def stream(g: torch.Tensor, xs: torch.Tensor, p: NoisyParams, dx_s, acc: bool, need_w: bool):
        return noisy_linear_bwd(
            g,
            xs,
            None,
            p.weight_mu,
            p.weight_sigma,
            p.eps_in,
            p.eps_out,
            noise=noise,
            relu=False,
            has_bias=p.bias_mu is not None,
            need_dx=need_dx,
            need_dw=need_w,
            dx=dx_s,
            accumulate=acc,
        )[1:]

    g_val: tuple[torch.Tensor | None, ...] = (None,) * 4
    if dueling:
        g_val = stream(dv, xv, val, dx if shared else (dx[:, 0] if dx is not None else None), False, need_val)
    dx_a = dx if shared else (dx[:, 1] if dx is not None else None)
    g_adv = stream(da, xa, adv, dx_a, dueling and shared, need_adv)
    return dx, g_adv, g_val


class NoisyDuelingFunction(torch.autograd.Function):
    """Autograd of the Triton dueling head; its backward falls back to the reference's autograd."""

    @staticmethod
    def forward(ctx, x, support, cfg, *flat):  # type: ignore[override]
        num_actions, atoms, noise, log_softmax = cfg
        adv = NoisyParams(*flat[:6])
        val = NoisyParams(*flat[6:]) if flat[6] is not None else None
        out, q = noisy_dueling_fwd(x, adv, val, num_actions, atoms, noise, log_softmax, support)
        ctx.cfg = cfg
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, support, out, *flat)
        return out if q is None else (out, q)

    @staticmethod
    def backward(ctx, go, gq=None):  # type: ignore[override]
        x, support, out, *flat = ctx.saved_tensors
        num_actions, atoms, noise, log_softmax = ctx.cfg
        needs = ctx.needs_input_grad
        need_flat = needs[3:]
        adv = NoisyParams(*flat[:6])
        val = NoisyParams(*flat[6:]) if flat[6] is not None else None

        def run() -> tuple[torch.Tensor | None, ...]:
            g = go if go is not None else torch.zeros_like(out)
            dx, g_adv, g_val = noisy_dueling_bwd(
                g,
                gq,
                x,
                out,
                support,
                adv,
                val,
                num_actions,
                atoms,
                noise,
                log_softmax,
                need_dx=needs[0],
                need_adv=any(need_flat[:4]),
                need_val=any(need_flat[6:10]),
            )
            w_adv = (g_adv[0], g_adv[1], g_adv[2], g_adv[3], None, None)
            w_val = (g_val[0], g_val[1], g_val[2], g_val[3], None, None)
            return (dx, *w_adv, *w_val)

        def fallback() -> tuple[torch.Tensor | None, ...]:
            def fn(x_, *f):
                v = NoisyParams(*f[6:]) if f[6] is not None else None
                return noisy_dueling_ref(
                    x_, NoisyParams(*f[:6]), v, num_actions, atoms, noise, log_softmax, support
                )

            grads_out = (go,) if support is None else (go, gq)
            return reference_grads(fn, (x, *flat), (needs[0], *need_flat), grads_out)

        grads = NOISY_DUELING.guard(x.device, run, fallback)
        masked = [gr if n else None for gr, n in zip(grads, (needs[0], *need_flat), strict=True)]
        return (masked[0], None, None, *masked[1:])


def noisy_dueling_triton(
    x: torch.Tensor,
    advantage: NoisyParams,
    value: NoisyParams | None,
    num_actions: int,
    atoms: int,
    noise: bool,
    log_softmax: bool,
    support: torch.Tensor | None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The Triton implementation of `tritonrl.kernels.noisy_head.noisy_dueling` (inputs validated)."""
    flat = (*advantage, *(value if value is not None else (None,) * 6))
    return NoisyDuelingFunction.apply(x, support, (num_actions, atoms, noise, log_softmax), *flat)
