"""Triton kernels of the prioritized-replay sum tree (layout: :mod:`kernels.sumtree.naive`).

- ``_per_sample_kernel``: stratified sampling for a whole batch in one launch; each lane
  descends the tree (one load per level) and writes its leaf index and IS weight.
- ``_per_update_kernel`` / ``_per_insert_kernel`` (a contiguous range of new leaves): one
  program (one CTA) per launch. Writing a
  batch of leaves and recomputing their ancestors needs each level finished before the next
  starts; a single CTA orders the levels with ``tl.debug_barrier()`` and no grid-wide sync.
  Duplicate indices resolve with an int32 ``atomic_max`` of the batch position into a scratch
  array (last one wins, deterministic), which is reset to -1 before the kernel ends.

All arithmetic is f32. The descent uses only IEEE f32 add, subtract, multiply and compare (no
division, no transcendental), in the reference's order, so it picks exactly the leaves the torch
reference picks for the same uniforms; the IS weights and ``p ** alpha`` use ``exp2``/``log2``
and agree with the reference to a few ulps. The in-place
kernels are never autotuned (STYLE item 3). Loads of nodes written earlier in the same launch
use ``cache_modifier=".cg"`` (L2, bypassing L1).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.sumtree.naive import SumTree, geometry

__all__ = ["per_insert_triton", "per_sample_triton", "per_update_triton"]

_SAMPLE_BLOCK = 256
_UPDATE_BLOCK = 1024
_MIN_BLOCK = 64  # [64, 32] children per pass of the min tree


@triton.jit
def _update_ancestors(
    sums,
    mins,
    min_offsets,
    indices,
    B,
    P,
    LEVELS: tl.constexpr,
    MIN_LEVELS: tl.constexpr,
    BLOCK: tl.constexpr,
    MIN_BLOCK: tl.constexpr,
):
    """Recompute the ancestors of leaves ``indices[:B]`` in both trees, one level per pass."""
    o_k = tl.arange(0, BLOCK)
    for lvl in range(LEVELS):
        for start in range(0, B, BLOCK):
            o_b = start + o_k
            m_b = o_b < B
            # [BLOCK]
            b_i = tl.load(indices + o_b, mask=m_b, other=0).to(tl.int64)
            b_node = (b_i + P) >> (lvl + 1)
            b_l = tl.load(sums + b_node * 2, mask=m_b, other=0.0, cache_modifier=".cg")
            b_r = tl.load(sums + b_node * 2 + 1, mask=m_b, other=0.0, cache_modifier=".cg")
            tl.store(sums + b_node, b_l + b_r, mask=m_b)
        tl.debug_barrier()
    o_m = tl.arange(0, MIN_BLOCK)
    o_f = tl.arange(0, 32)
    for lvl in range(MIN_LEVELS):
        off_child = tl.load(min_offsets + lvl)
        off_parent = tl.load(min_offsets + lvl + 1)
        for start in range(0, B, MIN_BLOCK):
            o_b = start + o_m
            m_b = o_b < B
            # [MIN_BLOCK]
            b_i = tl.load(indices + o_b, mask=m_b, other=0).to(tl.int64)
            b_blk = b_i >> (5 * (lvl + 1))
            # [MIN_BLOCK, 32]
            p_kids = mins + off_child + b_blk[:, None] * 32 + o_f[None, :]
            b_kids = tl.load(p_kids, mask=m_b[:, None], other=0.0, cache_modifier=".cg")
            tl.store(mins + off_parent + b_blk, tl.min(b_kids, axis=1), mask=m_b)
        tl.debug_barrier()


@triton.jit
def _per_update_kernel(
    sums,
    mins,
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
    P,
    LEVELS: tl.constexpr,
    MIN_LEVELS: tl.constexpr,
    BLOCK: tl.constexpr,
    MIN_BLOCK: tl.constexpr,
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
        tl.store(sums + P + b_i, b_v, mask=m_win)
        tl.store(mins + b_i, b_v, mask=m_win)
    tl.debug_barrier()
    # pass 4: reset the scratch entries (every reader is past the barrier)
    for start in range(0, B, BLOCK):
        o_b = start + o_k
        m_b = o_b < n_ok
        b_i = tl.load(indices + o_b, mask=m_b, other=0).to(tl.int64)
        tl.store(scratch + b_i, tl.full([BLOCK], -1, tl.int32), mask=m_b)
    _update_ancestors(sums, mins, min_offsets, indices, n_ok, P, LEVELS, MIN_LEVELS, BLOCK, MIN_BLOCK)


@triton.jit
def _per_insert_kernel(
    sums,
    mins,
    min_offsets,
    max_priority,
    start,
    count,
    alpha,
    P,
    LEVELS: tl.constexpr,
    MIN_LEVELS: tl.constexpr,
    BLOCK: tl.constexpr,
    MIN_BLOCK: tl.constexpr,
):
    """Leaves ``start .. start + count - 1`` get ``max_priority ** alpha``. The touched nodes of
    each level form one contiguous range, so every node is recomputed once."""
    o_k = tl.arange(0, BLOCK)
    b_v = tl.exp2(alpha * tl.log2(tl.load(max_priority).to(tl.float32)))
    for s0 in range(0, count, BLOCK):
        o_b = s0 + o_k
        m_b = o_b < count
        b_i = start + o_b.to(tl.int64)
        b_fill = tl.full([BLOCK], 0.0, tl.float32) + b_v
        tl.store(sums + P + b_i, b_fill, mask=m_b)
        tl.store(mins + b_i, b_fill, mask=m_b)
    tl.debug_barrier()
    lo = start + P
    hi = start + count - 1 + P
    for _ in range(LEVELS):
        lo = lo // 2
        hi = hi // 2
        for s0 in range(0, hi - lo + 1, BLOCK):
            # [BLOCK]
            b_node = lo + s0 + o_k.to(tl.int64)
            m_b = b_node <= hi
            b_l = tl.load(sums + b_node * 2, mask=m_b, other=0.0, cache_modifier=".cg")
            b_r = tl.load(sums + b_node * 2 + 1, mask=m_b, other=0.0, cache_modifier=".cg")
            tl.store(sums + b_node, b_l + b_r, mask=m_b)
        tl.debug_barrier()
    o_m = tl.arange(0, MIN_BLOCK)
    o_f = tl.arange(0, 32)
    for lvl in range(MIN_LEVELS):
        off_child = tl.load(min_offsets + lvl)
        off_parent = tl.load(min_offsets + lvl + 1)
        lo_b = start >> (5 * (lvl + 1))
        hi_b = (start + count - 1) >> (5 * (lvl + 1))
        for s0 in range(0, hi_b - lo_b + 1, MIN_BLOCK):
            # [MIN_BLOCK]
            b_blk = lo_b + s0 + o_m.to(tl.int64)
            m_b = b_blk <= hi_b
            # [MIN_BLOCK, 32]
            p_kids = mins + off_child + b_blk[:, None] * 32 + o_f[None, :]
            b_kids = tl.load(p_kids, mask=m_b[:, None], other=0.0, cache_modifier=".cg")
            tl.store(mins + off_parent + b_blk, tl.min(b_kids, axis=1), mask=m_b)
        tl.debug_barrier()


@triton.jit
def _per_sample_kernel(
    sums,
    mins,
    uniforms,
    out_idx,
    out_w,
    B,
    size,
    inv_b,
    neg_beta,
    P,
    min_root,
    LEVELS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    i_b = tl.program_id(0).to(tl.int64)
    o_b = i_b * BLOCK + tl.arange(0, BLOCK)
    m_b = o_b < B
    b_total = tl.load(sums + 1)
    b_min = tl.load(mins + min_root)
    # [BLOCK] target mass of stratum j: (j + u_j) * (total * f32(1/B))
    b_u = tl.load(uniforms + o_b, mask=m_b, other=0.0)
    b_t = (o_b.to(tl.float32) + b_u) * (b_total * inv_b)
    b_node = tl.full([BLOCK], 1, tl.int64)
    for _ in range(LEVELS):
        b_left = tl.load(sums + b_node * 2, mask=m_b, other=0.0)  # sum of the left child 2n
        go = b_t >= b_left
        b_t = tl.where(go, b_t - b_left, b_t)
        b_node = b_node * 2 + go.to(tl.int64)
    b_idx = tl.minimum(b_node - P, size - 1)
    b_leaf = tl.load(sums + P + b_idx, mask=m_b, other=1.0)
    b_w = tl.exp2(neg_beta * (tl.log2(b_leaf) - tl.log2(b_min)))
    tl.store(out_idx + o_b, b_idx, mask=m_b)
    tl.store(out_w + o_b, b_w, mask=m_b)


def _min_offsets(tree: SumTree) -> torch.Tensor:
    key = (tree.mins.shape[0], tree.mins.device)
    off = _OFFSETS.get(key)
    if off is None:
        g = geometry(tree.sums.shape[0] // 2)
        off = _OFFSETS[key] = torch.tensor(g.min_offsets, dtype=torch.int64, device=tree.mins.device)
    return off


_OFFSETS: dict[tuple[int, torch.device], torch.Tensor] = {}


def per_sample_triton(
    tree: SumTree, uniforms: torch.Tensor, beta: float, size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    B = uniforms.shape[0]
    g = geometry(tree.sums.shape[0] // 2)
    idx = torch.empty(B, dtype=torch.int64, device=uniforms.device)
    w = torch.empty(B, dtype=torch.float32, device=uniforms.device)
    if B == 0:
        return idx, w
    inv_b = float(torch.tensor(1.0 / B, dtype=torch.float32))  # the f32 value the reference uses
    grid = (triton.cdiv(B, _SAMPLE_BLOCK),)
    _per_sample_kernel[grid](
        tree.sums,
        tree.mins,
        uniforms,
        idx,
        w,
        B,
        size,
        inv_b,
        -float(beta),
        g.P,
        g.min_offsets[-1],
        LEVELS=g.levels,
        BLOCK=_SAMPLE_BLOCK,
        num_warps=4,
    )
    return idx, w


def per_update_triton(
    tree: SumTree, indices: torch.Tensor, td_errors: torch.Tensor, alpha: float, eps: float, size: int
) -> None:
    B = indices.shape[0]
    if B == 0:
        return
    g = geometry(tree.sums.shape[0] // 2)
    _per_update_kernel[(1,)](
        tree.sums,
        tree.mins,
        _min_offsets(tree),
        tree.scratch,
        tree.max_priority,
        tree.status,
        indices,
        td_errors,
        B,
        size,
        float(alpha),
        float(eps),
        g.P,
        LEVELS=g.levels,
        MIN_LEVELS=len(g.min_offsets) - 1,
        BLOCK=_UPDATE_BLOCK,
        MIN_BLOCK=_MIN_BLOCK,
        num_warps=8,
    )


def per_insert_triton(tree: SumTree, start: int, count: int, alpha: float) -> None:
    if count == 0:
        return
    g = geometry(tree.sums.shape[0] // 2)
    _per_insert_kernel[(1,)](
        tree.sums,
        tree.mins,
        _min_offsets(tree),
        tree.max_priority,
        start,
        count,
        float(alpha),
        g.P,
        LEVELS=g.levels,
        MIN_LEVELS=len(g.min_offsets) - 1,
        BLOCK=_UPDATE_BLOCK,
        MIN_BLOCK=_MIN_BLOCK,
        num_warps=8,
    )
