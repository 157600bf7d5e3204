"""Triton kernels of the prioritized-replay sum tree (layout: `tritonrl.kernels.sumtree.reference`).

``_per_sample_kernel`` descends the prefix rows for a whole batch in one launch.
``_per_update_kernel`` / ``_per_insert_kernel`` run one CTA per launch, ordering the levels with
``tl.debug_barrier()``; duplicates resolve with an int32 ``atomic_max`` into a scratch array.
Rows follow the reference's prefix rule bit for bit; loads of values written in the same launch
use ``cache_modifier=".cg"``. See docs/pages/replay.md ("The sum tree").
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import empty
from tritonrl.kernels.sumtree.cpu import forget_host_copies
from tritonrl.kernels.sumtree.reference import FANOUT, FANOUT_LOG2, ROW, SumTree, geometry

__all__ = ["per_insert_triton", "per_sample_triton", "per_update_triton"]

_SAMPLE_BLOCK = 128
_UPDATE_BLOCK = 1024
_MIN_BLOCK = 64  # [64, 32] children per pass of the min tree


@triton.jit
def _prefix_row(sums, b_row, m_b, off_kid, kid_stride, kid_col, off_row, F: tl.constexpr, ROW_: tl.constexpr):
    """Rows ``b_row`` ([BLOCK]) of a level by the prefix rule (sequential f64 sums, each rounded to f32)."""
    b_acc = tl.zeros(b_row.shape, dtype=tl.float64)
    for j in tl.static_range(F):
        p_kid = sums + off_kid + (b_row * F + j) * kid_stride + kid_col
        b_acc += tl.load(p_kid, mask=m_b, other=0.0, cache_modifier=".cg").to(tl.float64)
        tl.store(sums + off_row + b_row * ROW_ + 1 + j, b_acc.to(tl.float32), mask=m_b)


@triton.jit
def _update_ancestors(
    sums,
    mins,
    sum_offsets,
    min_offsets,
    indices,
    B,
    LEVELS: tl.constexpr,
    BLOCK: tl.constexpr,
    MIN_BLOCK: tl.constexpr,
    F: tl.constexpr,
    F_LOG2: tl.constexpr,
    ROW_: tl.constexpr,
):
    """Recompute the rows and min entries above leaves ``indices[:B]``, one level per pass."""
    o_k = tl.arange(0, BLOCK)
    for lvl in range(LEVELS):  # level lvl + 1 from level lvl (the leaves for lvl = 0)
        off_kid = tl.load(sum_offsets + lvl)
        off_row = tl.load(sum_offsets + lvl + 1)
        kid_stride = tl.where(lvl == 0, 1, ROW_)  # a child's total: the leaf, or its row's last entry
        kid_col = tl.where(lvl == 0, 0, F)
        for start in range(0, B, BLOCK):
            o_b = start + o_k
            m_b = o_b < B
            # [BLOCK]
            b_i = tl.load(indices + o_b, mask=m_b, other=0).to(tl.int64)
            b_row = b_i >> (F_LOG2 * (lvl + 1))
            _prefix_row(sums, b_row, m_b, off_kid, kid_stride, kid_col, off_row, F, ROW_)
        tl.debug_barrier()
    o_m = tl.arange(0, MIN_BLOCK)
    o_f = tl.arange(0, F)
    for lvl in range(LEVELS):
        off_child = tl.load(min_offsets + lvl)
        off_parent = tl.load(min_offsets + lvl + 1)
        for start in range(0, B, MIN_BLOCK):
            o_b = start + o_m
            m_b = o_b < B
            # [MIN_BLOCK]
            b_i = tl.load(indices + o_b, mask=m_b, other=0).to(tl.int64)
            b_blk = b_i >> (F_LOG2 * (lvl + 1))
            # [MIN_BLOCK, F]
            p_kids = mins + off_child + b_blk[:, None] * F + o_f[None, :]
            b_kids = tl.load(p_kids, mask=m_b[:, None], other=0.0, cache_modifier=".cg")
            tl.store(mins + off_parent + b_blk, tl.min(b_kids, axis=1), mask=m_b)
        tl.debug_barrier()


@triton.jit
def _per_update_kernel(
    sums,
    mins,
    sum_offsets,
    min_offsets,
    scratch,
    max_priority,
    status,
    indices,
    td,
    B,
    size,
    alpha,
    eps,
    LEVELS: tl.constexpr,
    BLOCK: tl.constexpr,
    MIN_BLOCK: tl.constexpr,
    F: tl.constexpr,
    F_LOG2: tl.constexpr,
    ROW_: tl.constexpr,
):
    o_k = tl.arange(0, BLOCK)
    # pass 1: validate the whole batch, running max of the raw priorities
    b_bad_p = tl.zeros([BLOCK], dtype=tl.int32)
    b_bad_i = tl.zeros([BLOCK], dtype=tl.int32)
    b_max = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, B, BLOCK):
        o_b = start + o_k
        m_b = o_b < B
        b_i = tl.load(indices + o_b, mask=m_b, other=0).to(tl.int64)
        b_p = tl.abs(tl.load(td + o_b, mask=m_b, other=0.0).to(tl.float32)) + eps
        b_bad_p += (m_b & ((b_p != b_p) | (b_p > 3.4028234663852886e38))).to(tl.int32)
        b_bad_i += (m_b & ((b_i < 0) | (b_i >= size))).to(tl.int32)
        b_max = tl.maximum(b_max, tl.where(m_b, b_p, 0.0))
    n_bad_p = tl.sum(b_bad_p, axis=0)
    n_bad_i = tl.sum(b_bad_i, axis=0)
    ok = (n_bad_p + n_bad_i) == 0
    n_ok = tl.where(ok, B, 0)  # the batch length to apply: B, or 0 to change nothing
    rejected = tl.load(status)
    tl.store(status, rejected + (1 - ok.to(tl.int32)))
    reason = (n_bad_p > 0).to(tl.int32) + 2 * (n_bad_i > 0).to(tl.int32)
    tl.store(status + 1, reason, mask=reason > 0)
    b_old_max = tl.load(max_priority)
    tl.store(max_priority, tl.maximum(b_old_max, tl.max(b_max, axis=0)), mask=ok)
    # pass 2: the last batch position of each index owns it
    for start in range(0, B, BLOCK):
        o_b = start + o_k
        m_b = o_b < n_ok
        b_i = tl.load(indices + o_b, mask=m_b, other=0).to(tl.int64)
        tl.atomic_max(scratch + b_i, o_b, mask=m_b)
    tl.debug_barrier()
    # pass 3: owners write their leaf value p ** alpha into both trees
    for start in range(0, B, BLOCK):
        o_b = start + o_k
        m_b = o_b < n_ok
        b_i = tl.load(indices + o_b, mask=m_b, other=0).to(tl.int64)
        b_owner = tl.load(scratch + b_i, mask=m_b, other=-1, cache_modifier=".cg")
        m_win = m_b & (b_owner == o_b)
        b_p = tl.abs(tl.load(td + o_b, mask=m_win, other=1.0).to(tl.float32)) + eps
        b_v = tl.exp2(alpha * tl.log2(b_p))
        tl.store(sums + b_i, b_v, mask=m_win)  # the leaves are sums[0:P]
        tl.store(mins + b_i, b_v, mask=m_win)
    tl.debug_barrier()
    # pass 4: reset the scratch entries (every reader is past the barrier)
    for start in range(0, B, BLOCK):
        o_b = start + o_k
        m_b = o_b < n_ok
        b_i = tl.load(indices + o_b, mask=m_b, other=0).to(tl.int64)
        tl.store(scratch + b_i, tl.full([BLOCK], -1, tl.int32), mask=m_b)
    _update_ancestors(
        sums, mins, sum_offsets, min_offsets, indices, n_ok, LEVELS, BLOCK, MIN_BLOCK, F, F_LOG2, ROW_
    )


@triton.jit
def _per_insert_kernel(
    sums,
    mins,
    sum_offsets,
    min_offsets,
    max_priority,
    start,
    count,
    alpha,
    LEVELS: tl.constexpr,
    BLOCK: tl.constexpr,
    MIN_BLOCK: tl.constexpr,
    F: tl.constexpr,
    F_LOG2: tl.constexpr,
    ROW_: tl.constexpr,
):
    """Leaves ``start .. start + count - 1`` get ``max_priority ** alpha``; each touched row once."""
    o_k = tl.arange(0, BLOCK)
    b_v = tl.exp2(alpha * tl.log2(tl.load(max_priority).to(tl.float32)))
    for s0 in range(0, count, BLOCK):
        o_b = s0 + o_k
        m_b = o_b < count
        b_i = start + o_b.to(tl.int64)
        b_fill = tl.full([BLOCK], 0.0, tl.float32) + b_v
        tl.store(sums + b_i, b_fill, mask=m_b)
        tl.store(mins + b_i, b_fill, mask=m_b)
    tl.debug_barrier()
    for lvl in range(LEVELS):
        off_kid = tl.load(sum_offsets + lvl)
        off_row = tl.load(sum_offsets + lvl + 1)
        kid_stride = tl.where(lvl == 0, 1, ROW_)
        kid_col = tl.where(lvl == 0, 0, F)
        lo = start >> (F_LOG2 * (lvl + 1))
        hi = (start + count - 1) >> (F_LOG2 * (lvl + 1))
        for s0 in range(0, hi - lo + 1, BLOCK):
            # [BLOCK]
            b_row = lo + s0 + o_k.to(tl.int64)
            _prefix_row(sums, b_row, b_row <= hi, off_kid, kid_stride, kid_col, off_row, F, ROW_)
        tl.debug_barrier()
    o_m = tl.arange(0, MIN_BLOCK)
    o_f = tl.arange(0, F)
    for lvl in range(LEVELS):
        off_child = tl.load(min_offsets + lvl)
        off_parent = tl.load(min_offsets + lvl + 1)
        lo_b = start >> (F_LOG2 * (lvl + 1))
        hi_b = (start + count - 1) >> (F_LOG2 * (lvl + 1))
        for s0 in range(0, hi_b - lo_b + 1, MIN_BLOCK):
            # [MIN_BLOCK]
            b_blk = lo_b + s0 + o_m.to(tl.int64)
            m_b = b_blk <= hi_b
            # [MIN_BLOCK, F]
            p_kids = mins + off_child + b_blk[:, None] * F + o_f[None, :]
            b_kids = tl.load(p_kids, mask=m_b[:, None], other=0.0, cache_modifier=".cg")
            tl.store(mins + off_parent + b_blk, tl.min(b_kids, axis=1), mask=m_b)
        tl.debug_barrier()


@triton.jit
def _per_sample_kernel(
    sums,
    mins,
    sum_offsets,
    uniforms,
    out_idx,
    out_w,
    B,
    size,
    inv_b,
    neg_beta,
    total_offset,
    min_root,
    root_children,
    LEVELS: tl.constexpr,
    BLOCK: tl.constexpr,
    F: tl.constexpr,
    ROW_: tl.constexpr,
):
    i_b = tl.program_id(0).to(tl.int64)
    o_b = i_b * BLOCK + tl.arange(0, BLOCK)
    m_b = o_b < B
    o_f = tl.arange(0, F)
    b_total = tl.load(sums + total_offset)
    b_min = tl.load(mins + min_root)
    # [BLOCK] target mass of stratum j: (j + u_j) * (total * f32(1/B))
    b_u = tl.load(uniforms + o_b, mask=m_b, other=0.0)
    b_t = (o_b.to(tl.float32) + b_u) * (b_total * inv_b)
    b_node = tl.zeros([BLOCK], dtype=tl.int64)  # row of the current level (the root row: 0)
    for lvl in range(LEVELS):  # level LEVELS - lvl
        off = tl.load(sum_offsets + LEVELS - lvl)
        n_cmp = tl.where(lvl == 0, root_children - 1, F - 1)  # prefixes 1 .. n_cmp are counted
        # [BLOCK, F]: row entries 0 .. F - 1 (0 and the inner prefixes)
        m_cmp = m_b[:, None] & (o_f[None, :] >= 1) & (o_f[None, :] <= n_cmp)
        b_rows = tl.load(sums + off + b_node[:, None] * ROW_ + o_f[None, :], mask=m_cmp, other=0.0)
        b_child = tl.sum((m_cmp & (b_rows <= b_t[:, None])).to(tl.int32), axis=1).to(tl.int64)
        b_t = b_t - tl.load(sums + off + b_node * ROW_ + b_child, mask=m_b, other=0.0)
        b_node = b_node * F + b_child
    b_idx = tl.minimum(b_node, size - 1)
    b_leaf = tl.load(sums + b_idx, mask=m_b, other=1.0)
    b_w = tl.exp2(neg_beta * (tl.log2(b_leaf) - tl.log2(b_min)))
    tl.store(out_idx + o_b, b_idx, mask=m_b)
    tl.store(out_w + o_b, b_w, mask=m_b)


def _offsets(tree: SumTree) -> tuple[torch.Tensor, torch.Tensor]:
    """``geometry.sum_offsets`` and ``geometry.min_offsets`` as int64 tensors on the tree's device."""
    key = (tree.scratch.shape[0], tree.sums.device)
    off = _OFFSETS.get(key)
    if off is None:
        g = geometry(tree.scratch.shape[0])
        dev = tree.sums.device
        off = _OFFSETS[key] = (
            torch.tensor(g.sum_offsets, dtype=torch.int64, device=dev),
            torch.tensor(g.min_offsets, dtype=torch.int64, device=dev),
        )
    return off


_OFFSETS: dict[tuple[int, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}


def per_sample_triton(
    tree: SumTree, uniforms: torch.Tensor, beta: float, size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    B = uniforms.shape[0]
    g = geometry(tree.scratch.shape[0])
    idx = empty(B, dtype=torch.int64, device=uniforms.device)
    w = empty(B, dtype=torch.float32, device=uniforms.device)
    if B == 0:
        return idx, w
    inv_b = float(torch.tensor(1.0 / B, dtype=torch.float32))  # the f32 value the reference uses
    grid = (triton.cdiv(B, _SAMPLE_BLOCK),)
    _per_sample_kernel[grid](
        tree.sums,
        tree.mins,
        _offsets(tree)[0],
        uniforms,
        idx,
        w,
        B,
        size,
        inv_b,
        -float(beta),
        g.total_offset,
        g.min_offsets[-1],
        g.rows[-2] if g.levels > 1 else g.P,
        LEVELS=g.levels,
        BLOCK=_SAMPLE_BLOCK,
        F=FANOUT,
        ROW_=ROW,
        num_warps=4,
    )
    return idx, w


def per_update_triton(
    tree: SumTree, indices: torch.Tensor, td_errors: torch.Tensor, alpha: float, eps: float, size: int
) -> None:
    B = indices.shape[0]
    if B == 0:
        return
    g = geometry(tree.scratch.shape[0])
    sum_off, min_off = _offsets(tree)
    _per_update_kernel[(1,)](
        tree.sums,
        tree.mins,
        sum_off,
        min_off,
        tree.scratch,
        tree.max_priority,
        tree.status,
        indices,
        td_errors,
        B,
        size,
        float(alpha),
        float(eps),
        LEVELS=g.levels,
        BLOCK=_UPDATE_BLOCK,
        MIN_BLOCK=_MIN_BLOCK,
        F=FANOUT,
        F_LOG2=FANOUT_LOG2,
        ROW_=ROW,
        num_warps=8,
    )
    if not tree.sums.is_cuda:  # the interpreter wrote the tree behind torch's version counter
        forget_host_copies(tree)


def per_insert_triton(tree: SumTree, start: int, count: int, alpha: float) -> None:
    if count == 0:
        return
    g = geometry(tree.scratch.shape[0])
    sum_off, min_off = _offsets(tree)
    _per_insert_kernel[(1,)](
        tree.sums,
        tree.mins,
        sum_off,
        min_off,
        tree.max_priority,
        start,
        count,
        float(alpha),
        LEVELS=g.levels,
        BLOCK=_UPDATE_BLOCK,
        MIN_BLOCK=_MIN_BLOCK,
        F=FANOUT,
        F_LOG2=FANOUT_LOG2,
        ROW_=ROW,
        num_warps=8,
    )
    if not tree.sums.is_cuda:  # the interpreter wrote the tree behind torch's version counter
        forget_host_copies(tree)
