"""Torch reference of the prioritized-replay sum tree: the specification, test oracle and CPU path.

Layout (shared with the Triton kernels in :mod:`kernels.sumtree.fused`), ``P`` = a power of two
>= the capacity, at least 2:

- ``sums``: f32 ``[2P]``, a binary sum tree. Node 1 is the root, node ``n`` has children ``2n``
  and ``2n + 1``, leaf ``i`` is node ``P + i``; empty leaves hold 0; entry 0 is unused.
- ``mins``: f32, a 32-ary min tree stored level after level. Level 0 is the leaves (empty ones
  +inf), level ``k + 1`` entry ``b`` is the minimum of level ``k`` entries ``32b .. 32b + 31``.
  Level ``k`` holds ``n_k = max(1, P >> 5k)`` entries padded with +inf to ``max(n_k, 32)``; the
  last level is the single global minimum. ``geometry(P)`` gives the offsets. A minimum is
  exact whatever the fan-out, so a wide tree (few levels, cheap on CPU) changes no result.

Every sum node is recomputed from its two children (``fl32(left + right)``) on every update,
never patched with a delta, so nothing drifts: after any sequence of updates ``sums`` equals
:func:`rebuild_ref` of its leaves bit for bit, and the root's relative error against the exact
sum of the leaves is at most ``log2(P) * 2**-24`` (pairwise summation).

Everything is vectorised over the batch; the only Python loops run over tree levels.
"""

from __future__ import annotations

import functools
import math
import weakref
from typing import NamedTuple

import torch

__all__ = [
    "BAD_INDEX",
    "BAD_PRIORITY",
    "MIN_FANOUT_LOG2",
    "Geometry",
    "SumTree",
    "geometry",
    "per_insert_ref",
    "per_sample_ref",
    "per_update_ref",
    "rebuild_ref",
]

# status[1] bits written when an update is rejected
BAD_PRIORITY = 1  # a priority is NaN or infinite
BAD_INDEX = 2  # an index is outside [0, size)
MIN_FANOUT_LOG2 = 5  # the min tree is 32-ary


class SumTree(NamedTuple):
    """The device tensors of one tree (create with :func:`kernels.sumtree.new_sumtree`).

    Attributes:
        sums: f32 ``[2P]`` binary sum tree of the leaf values ``p ** alpha``.
        mins: f32 32-ary min tree (see the module docstring).
        scratch: int32 ``[P]``, all -1 between calls (duplicate resolution in updates).
        max_priority: f32 ``[1]``, the running maximum raw priority (new leaves get it).
        status: int32 ``[2]``: rejected update batches, reason bits of the last rejection.
    """

    sums: torch.Tensor
    mins: torch.Tensor
    scratch: torch.Tensor
    max_priority: torch.Tensor
    status: torch.Tensor


class Geometry(NamedTuple):
    """Sizes of a tree with ``P`` leaves."""

    P: int
    levels: int  # edges from the sum tree's root to a leaf: log2(P)
    min_offsets: tuple[int, ...]  # start of each min-tree level in ``mins``; the last is the root
    min_size: int  # entries of ``mins``


@functools.lru_cache(maxsize=64)
def geometry(P: int) -> Geometry:
    """The :class:`Geometry` of a tree with ``P`` leaves (``P`` a power of two >= 2)."""
    if P < 2 or P & (P - 1):
        raise ValueError(f"P must be a power of two >= 2, got {P}")
    fan = 1 << MIN_FANOUT_LOG2
    offsets, off, n = [], 0, P
    while True:
        offsets.append(off)
        if n == 1:
            off += 1
            break
        off += max(n, fan)
        n = max(1, n >> MIN_FANOUT_LOG2)
    return Geometry(P, P.bit_length() - 1, tuple(offsets), off)


@functools.lru_cache(maxsize=64)
def _shifts(P: int, device: torch.device) -> torch.Tensor:
    """``[[1], [2], ..., [levels]]`` (int64 on ``device``): shifts from a leaf to its ancestors."""
    return torch.arange(1, geometry(P).levels + 1, device=device).unsqueeze(1)


def _dense_limit(batch: int) -> int:
    """Recompute a whole level (one strided op) when it reads at most this many children.

    Only a speed choice: an unchanged node already equals ``fl32(left + right)`` of its
    children, so recomputing it densely writes the same bits as leaving it alone.
    """
    return max(8192, 8 * batch)


class _LevelViews(NamedTuple):
    sums: tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], ...]  # by depth d: (left, right, out)
    mins: tuple[tuple[torch.Tensor, torch.Tensor], ...]  # by level k + 1: (children [n, 32], out [n])


# Views of each tree's levels, built once per tree: slicing costs as much as the add it feeds on
# CPU. Keyed by id(sums), checked against weak references, dropped when the tree's tensors die.
_VIEWS: dict[int, tuple[weakref.ref, weakref.ref, int, _LevelViews]] = {}


def _level_views(tree: SumTree) -> _LevelViews:
    sums, mins = tree.sums, tree.mins
    key = id(sums)
    hit = _VIEWS.get(key)
    if hit is not None and hit[0]() is sums and hit[1]() is mins and hit[2] == sums.data_ptr():
        return hit[3]
    P = sums.shape[0] // 2
    g = geometry(P)
    sum_views = tuple(
        (sums[2 << d : 4 << d : 2], sums[(2 << d) + 1 : 4 << d : 2], sums[1 << d : 2 << d])
        for d in range(g.levels)
    )
    fan, off = 1 << MIN_FANOUT_LOG2, g.min_offsets
    min_views = []
    for k in range(len(off) - 1):
        n = max(1, P >> (MIN_FANOUT_LOG2 * (k + 1)))
        min_views.append((mins[off[k] : off[k] + fan * n].view(n, fan), mins[off[k + 1] : off[k + 1] + n]))
    views = _LevelViews(sum_views, tuple(min_views))
    _VIEWS[key] = (weakref.ref(sums), weakref.ref(mins), sums.data_ptr(), views)
    weakref.finalize(sums, _VIEWS.pop, key, None)
    return views


def _update_ancestors(tree: SumTree, idx: torch.Tensor) -> None:
    """Recompute every ancestor of leaves ``idx`` (int64 [B]) in both trees, bottom up.

    Low levels: gather the two children of each touched node, add, scatter. High levels
    (small): recompute the whole level with one strided op.
    """
    sums = tree.sums
    P = sums.shape[0] // 2
    g = geometry(P)
    limit = _dense_limit(idx.shape[0])
    shifts = _shifts(P, sums.device)
    views = _level_views(tree)
    # sum tree, sparse part: heights 1..n_sparse above the leaves (nodes at depth levels - h)
    n_sparse = sum(1 for h in range(1, g.levels + 1) if 2 << (g.levels - h) > limit)
    if n_sparse:
        node = torch.bitwise_right_shift(idx + P, shifts[:n_sparse])  # [n_sparse, B]
        left = node * 2
        right = left + 1
        for n, l, r in zip(node.unbind(0), left.unbind(0), right.unbind(0), strict=True):
            sums.scatter_(0, n, sums.gather(0, l) + sums.gather(0, r))
    for d in range(g.levels - n_sparse - 1, -1, -1):  # dense part: depth d from depth d + 1
        left_v, right_v, out = views.sums[d]
        torch.add(left_v, right_v, out=out)
    # min tree: level k + 1 entry b is the min of level-k entries 32b .. 32b + 31
    for k, (children, out) in enumerate(views.mins):
        if children.numel() > limit:
            block = torch.bitwise_right_shift(idx, MIN_FANOUT_LOG2 * (k + 1))
            out.scatter_(0, block, children.index_select(0, block).amin(1))  # rows [B, 32]
        else:
            torch.amin(children, 1, out=out)


def per_update_ref(
    tree: SumTree, indices: torch.Tensor, td_errors: torch.Tensor, alpha: float, eps: float, size: int
) -> None:
    """Set leaf ``indices[k]`` to ``(|td_errors[k]| + eps) ** alpha``; see :func:`kernels.sumtree.per_update`.

    A batch with a non-finite priority or an index outside ``[0, size)`` changes nothing but
    ``tree.status`` (``[0] += 1``, ``[1] = reason bits``). Duplicate indices: the last occurrence
    wins. The validity test reads three numbers (one synchronisation on CUDA).
    """
    B = indices.shape[0]
    if B == 0:
        return
    p = td_errors.float().abs().add_(eps)
    # an f64 sum of f32 values cannot overflow: it is finite iff every p is
    lo, hi = torch.aminmax(indices)
    finite = math.isfinite(p.sum(dtype=torch.float64).item())
    in_range = lo.item() >= 0 and hi.item() < size
    if not (finite and in_range):
        tree.status[0] += 1
        tree.status[1] = (0 if finite else BAD_PRIORITY) | (0 if in_range else BAD_INDEX)
        return
    tree.max_priority.clamp_(min=p.max())
    v = p.pow_(alpha)
    # last one wins: the highest batch position owns an index, every duplicate writes its value
    scratch = tree.scratch
    scratch.scatter_reduce_(0, indices, _positions(B, indices.device), "amax")
    v = v.index_select(0, scratch.index_select(0, indices))
    scratch.index_fill_(0, indices, -1)
    P = tree.sums.shape[0] // 2
    tree.sums.scatter_(0, indices + P, v)
    tree.mins.scatter_(0, indices, v)
    _update_ancestors(tree, indices)


def per_insert_ref(tree: SumTree, start: int, count: int, alpha: float) -> None:
    """Set leaves ``start .. start + count - 1`` to ``max_priority ** alpha``; see
    :func:`kernels.sumtree.per_insert`. The touched nodes of every level form one contiguous
    range, recomputed with one strided op per level."""
    if count == 0:
        return
    sums, mins = tree.sums, tree.mins
    P = sums.shape[0] // 2
    g = geometry(P)
    v = tree.max_priority.pow(alpha)  # [1]
    a, b = start, start + count - 1  # inclusive leaf range
    sums[P + a : P + b + 1] = v
    mins[a : b + 1] = v
    limit = _dense_limit(count)
    views = _level_views(tree)
    lo, hi = P + a, P + b
    for d in range(g.levels - 1, -1, -1):
        lo, hi = lo >> 1, hi >> 1
        if 2 << d <= limit:  # small level: recompute all of it (same bits, fewer ops)
            left_v, right_v, out = views.sums[d]
            torch.add(left_v, right_v, out=out)
        else:
            torch.add(sums[2 * lo : 2 * hi + 2 : 2], sums[2 * lo + 1 : 2 * hi + 2 : 2], out=sums[lo : hi + 1])
    fan, off = 1 << MIN_FANOUT_LOG2, g.min_offsets
    for k, (all_children, all_out) in enumerate(views.mins):
        if all_children.numel() <= limit:
            torch.amin(all_children, 1, out=all_out)
            continue
        shift = MIN_FANOUT_LOG2 * (k + 1)
        lo, hi = a >> shift, b >> shift
        children = mins[off[k] + fan * lo : off[k] + fan * (hi + 1)].view(hi - lo + 1, fan)
        torch.amin(children, 1, out=mins[off[k + 1] + lo : off[k + 1] + hi + 1])


@functools.lru_cache(maxsize=16)
def _positions(B: int, device: torch.device) -> torch.Tensor:
    """``arange(B)`` in int32 (read-only constant): batch positions for the duplicate rule."""
    return torch.arange(B, dtype=torch.int32, device=device)


@functools.lru_cache(maxsize=16)
def _strata(B: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``arange(B)`` and ``f32(1 / B)`` as f32 tensors (read-only constants)."""
    strata = torch.arange(B, dtype=torch.float32, device=device)
    return strata, torch.tensor(1.0 / B, dtype=torch.float32, device=device)


def per_sample_ref(
    tree: SumTree, uniforms: torch.Tensor, beta: float, size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stratified proportional sampling by tree descent; see :func:`kernels.sumtree.per_sample`.

    Sample ``j`` targets the mass ``(j + uniforms[j]) * (total * f32(1/B))`` and descends: go
    right (subtracting the left sum) when the target is >= the left child's sum. The leaf index
    is clamped to ``size - 1`` (rounding can only push a descent into the empty tail).
    """
    sums = tree.sums
    B = uniforms.shape[0]
    P = sums.shape[0] // 2
    g = geometry(P)
    strata, inv_b = _strata(B, sums.device)
    target = (strata + uniforms) * (sums[1] * inv_b)
    left_sums = sums[0::2]  # left_sums[n] = sums[2n], the left child of node n
    node = torch.ones(B, dtype=torch.int64, device=sums.device)
    # go right <=> target >= left, kept as f32 and int64 0/1: mixed-dtype ops are slow on CPU,
    # and so is allocating; every op below writes into a preallocated buffer
    go_f = torch.empty(B, dtype=torch.float32, device=sums.device)
    go_i = torch.empty_like(node)
    left = torch.empty_like(target)
    child = torch.empty_like(node)
    for _ in range(g.levels):
        torch.index_select(left_sums, 0, node, out=left)
        torch.ge(target, left, out=go_f)
        torch.ge(target, left, out=go_i)
        target.addcmul_(left, go_f, value=-1)  # target - left where going right (left * 1 or * 0 is exact)
        torch.add(go_i, node, alpha=2, out=child)  # child 2n or 2n + 1
        node, child = child, node
    idx = node.sub_(P).clamp_max_(size - 1)
    leaf = sums.index_select(0, idx + P)
    weights = (leaf / tree.mins[g.min_offsets[-1]]).pow_(-beta)
    return idx, weights


def rebuild_ref(tree: SumTree, exact: bool = False) -> None:
    """Recompute every internal node of both trees from the leaves, level by level (in place).

    ``exact=False``: each sum node is ``fl32(left + right)``, the tree the updates maintain.
    ``exact=True``: sums are accumulated in f64 and every node is rounded to f32 once, so each
    node (the root included) is the correctly rounded sum of its subtree's f32 leaves up to one
    f64 rounding per level (relative ``log2(P) * 2**-53``). The min tree is exact either way.
    """
    sums, mins = tree.sums, tree.mins
    P = sums.shape[0] // 2
    g = geometry(P)
    level = sums[P:].double() if exact else sums[P:]
    for k in range(g.levels - 1, -1, -1):
        level = level[0::2] + level[1::2]
        sums[1 << k : 2 << k] = level
    sums[0] = 0.0
    fan = 1 << MIN_FANOUT_LOG2
    for k in range(len(g.min_offsets) - 1):
        n_parent = max(1, P >> (MIN_FANOUT_LOG2 * (k + 1)))
        child = mins[g.min_offsets[k] : g.min_offsets[k] + n_parent * fan]
        end = g.min_offsets[k + 1] + n_parent
        mins[g.min_offsets[k + 1] : end] = child.view(n_parent, fan).amin(1)
