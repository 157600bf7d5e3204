"""The eager paths of the sum-tree ops, run where no Triton kernel does.

Tuned numpy on views of a CPU tree, vectorised torch elsewhere; both compute what
`tritonrl.kernels.sumtree.reference` specifies, bit for bit (tests/kernels/test_sumtree.py).
The CPU path keeps a contiguous copy of every level's totals beside the tree, kept in step
through torch's version counter of ``sums``. See docs/pages/replay.md ("The sum tree").
"""

from __future__ import annotations

import functools
import weakref
from typing import NamedTuple

import numpy as np
import torch
from tritonrl.kernels.sumtree.reference import (
    BAD_INDEX,
    BAD_PRIORITY,
    FANOUT,
    FANOUT_LOG2,
    ROW,
    SumTree,
    geometry,
)

__all__ = [
    "forget_host_copies",
    "per_insert_eager",
    "per_sample_eager",
    "per_update_eager",
    "prefix_eager",
    "rebuild_eager",
]


class _Work(NamedTuple):
    """Preallocated buffers of one descent (batch ``B``); only intermediate values live here."""

    t: torch.Tensor  # f32 [B, 1] target mass (and [B] minima in updates)
    t1: torch.Tensor  # f32 [B], a view of t
    rows: torch.Tensor  # f32 [B, 32] the gathered rows (children in updates)
    prefix: torch.Tensor  # f32 [B, 32] their prefix sums (updates)
    count: torch.Tensor  # int64 [B, 1] prefixes <= t
    child: torch.Tensor  # int64 [B, 1]
    sub: torch.Tensor  # f32 [B, 1] prefix of the chosen child
    node: tuple[torch.Tensor, torch.Tensor]  # int64 [B] x 2: row index, ping-pong


def _work(views: _Views, B: int, device: torch.device) -> _Work:
    w = views.work.get(B)
    if w is None:
        if len(views.work) >= 4:
            views.work.clear()
        i64 = dict(dtype=torch.int64, device=device)
        t = torch.empty(B, 1, dtype=torch.float32, device=device)
        w = views.work[B] = _Work(
            t,
            t.view(B),
            torch.empty(B, FANOUT, dtype=torch.float32, device=device),
            torch.empty(B, FANOUT, dtype=torch.float32, device=device),
            torch.empty(B, 1, **i64),
            torch.empty(B, 1, **i64),
            torch.empty(B, 1, dtype=torch.float32, device=device),
            (torch.empty(B, **i64), torch.empty(B, **i64)),
        )
    return w


class _Views(NamedTuple):
    """Views of one tree's levels (index ``l - 1`` for level ``l``)."""

    stored: tuple[torch.Tensor, ...]  # [stored rows, 33]
    search: tuple[torch.Tensor, ...]  # [stored rows, 32]: entries 0 .. 31 (0 and the inner prefixes)
    prefix: tuple[torch.Tensor, ...]  # [n_l, 32]: entries 1 .. 32 of the real rows (written)
    children: tuple[torch.Tensor, ...]  # [n_l, 32]: the totals of level l - 1 (leaves for l = 1)
    mins: tuple[tuple[torch.Tensor, torch.Tensor], ...]  # (children [n_l, 32], out [n_l])
    root: torch.Tensor  # [33] the root row
    root_search: torch.Tensor  # the root row's prefixes over its real children (the rest is padding)
    min_root: torch.Tensor  # 0-d: the global minimum
    total: torch.Tensor  # 0-d: the root's total
    shifts: torch.Tensor  # int64 [L, 1]: 5, 10, ..., 5L (leaf index -> row index of level l)
    one: torch.Tensor  # int64 0-d: 1
    all_sums: torch.Tensor  # tree.sums whole, as an alias (the cache must not hold the tree's tensors)
    all_mins: torch.Tensor  # tree.mins whole, as an alias
    work: dict[int, _Work]  # descent buffers by batch size
    host: list[_HostViews]  # CPU trees: numpy views of the tensors, made on first use
    sample: dict[int, _SampleWork]  # CPU trees: descent buffers with numpy views, by batch size


# Views of each tree's levels, built once per tree: slicing costs as much as the op it feeds on
# CPU. Keyed by id(sums), checked against weak references, dropped when tree.sums dies.
_VIEWS: dict[int, tuple[weakref.ref, weakref.ref, int, _Views]] = {}


def _views(tree: SumTree) -> _Views:
    sums, mins = tree.sums, tree.mins
    key = id(sums)
    hit = _VIEWS.get(key)
    if hit is not None and hit[0]() is sums and hit[1]() is mins and hit[2] == sums.data_ptr():
        return hit[3]
    # The views hang off aliases (detach(): the same memory, other tensor objects; views and
    # numpy arrays keep their base tensor alive), so this cache keeps the memory but not the
    # tree's own tensors alive: when they die, the finalizer below drops the entry.
    sums, mins = sums.detach(), mins.detach()
    g = geometry(tree.scratch.shape[0])
    so, mo = g.sum_offsets, g.min_offsets
    stored, prefix, children, min_views = [], [], [], []
    below = sums[: g.P]  # totals of the level below, flat
    for lvl in range(1, g.levels + 1):
        n = g.rows[lvl - 1]
        n_stored = (so[lvl + 1] - so[lvl]) // ROW if lvl < g.levels else 1
        rows = sums[so[lvl] : so[lvl] + ROW * n_stored].view(n_stored, ROW)
        stored.append(rows)
        prefix.append(rows[:n, 1:])
        children.append(below[: FANOUT * n].view(n, FANOUT))
        below = rows[:, FANOUT]
        min_views.append(
            (mins[mo[lvl - 1] : mo[lvl - 1] + FANOUT * n].view(n, FANOUT), mins[mo[lvl] : mo[lvl] + n])
        )
    shifts = torch.arange(1, g.levels + 1, device=sums.device).mul_(FANOUT_LOG2).unsqueeze(1)
    views = _Views(
        tuple(stored),
        tuple(rows[:, :FANOUT] for rows in stored),
        tuple(prefix),
        tuple(children),
        tuple(min_views),
        stored[-1][0],
        stored[-1][0, 1 : g.rows[-2] if g.levels > 1 else g.P],
        mins[mo[-1]],
        sums[g.total_offset],
        shifts,
        torch.ones((), dtype=torch.int64, device=sums.device),
        sums,
        mins,
        {},
        [],
        {},
    )
    _VIEWS[key] = (weakref.ref(tree.sums), weakref.ref(tree.mins), sums.data_ptr(), views)
    weakref.finalize(tree.sums, _VIEWS.pop, key, None)
    return views


def prefix_eager(children: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Inclusive prefix sums of ``children`` (f32 ``[n, 32]``) by the prefix rule, into ``out`` if given."""
    if children.is_cpu:  # cumsum of f32 accumulates in f64 on CPU (tested)
        return torch.cumsum(children, 1) if out is None else torch.cumsum(children, 1, out=out)
    cs = torch.cumsum(children, 1, dtype=torch.float64)
    return cs.float() if out is None else out.copy_(cs)


def _dense_limit(batch: int) -> int:
    """Recompute a whole level of an update when it has at most this many children.

    A speed choice only: an unchanged row already equals the prefix of its children.
    """
    return max(8192, 64 * batch)


def _update_ancestors(tree: SumTree, idx: torch.Tensor) -> None:
    """Recompute the rows and min entries above leaves ``idx`` (int64 ``[B]``), bottom up."""
    v = _views(tree)
    B = idx.shape[0]
    limit = _dense_limit(B)
    parents = None
    work = None
    for lvl, (children, prefix) in enumerate(zip(v.children, v.prefix, strict=True)):
        if children.numel() <= limit:
            prefix_eager(children, out=prefix)
            continue
        if parents is None:
            parents = torch.bitwise_right_shift(idx, v.shifts)  # [L, B]
            work = _work(v, B, idx.device)
        rows = parents[lvl]
        # children of levels >= 2 are a strided column, where advanced indexing gathers faster
        kids = torch.index_select(children, 0, rows, out=work.rows) if lvl == 0 else children[rows]
        prefix.index_copy_(0, rows, prefix_eager(kids, out=work.prefix))
    for lvl, (children, out) in enumerate(v.mins):
        if children.numel() <= limit:
            torch.amin(children, 1, out=out)
            continue
        if parents is None:
            parents = torch.bitwise_right_shift(idx, v.shifts)
            work = _work(v, B, idx.device)
        rows = parents[lvl]
        out.index_copy_(
            0, rows, torch.amin(torch.index_select(children, 0, rows, out=work.rows), 1, out=work.t1)
        )


def per_update_eager(
    tree: SumTree, indices: torch.Tensor, td_errors: torch.Tensor, alpha: float, eps: float, size: int
) -> None:
    """Eager `tritonrl.kernels.sumtree.per_update` (one sync on CUDA for the validity test).

    On CPU the leaf part runs on numpy views (`_per_update_cpu`), bit for bit the torch path.
    """
    if indices.shape[0] == 0:
        return
    if indices.is_cpu:
        _per_update_cpu(tree, indices, td_errors, alpha, eps, size)
    else:
        _per_update_torch(tree, indices, td_errors, alpha, eps, size)


def _reject(tree: SumTree, finite: bool, in_range: bool) -> None:
    tree.status[0] += 1
    tree.status[1] = (0 if finite else BAD_PRIORITY) | (0 if in_range else BAD_INDEX)


def _per_update_torch(
    tree: SumTree, indices: torch.Tensor, td_errors: torch.Tensor, alpha: float, eps: float, size: int
) -> None:
    """`per_update_eager` in torch ops on any device (``indices`` non-empty)."""
    B = indices.shape[0]
    p = td_errors.float().abs().add_(_scalar(eps, indices.device))  # a 0-d tensor adds faster
    p_max = p.max()  # NaN if any p is NaN, inf if any is inf
    lo, hi = torch.aminmax(indices)
    finite = abs(p_max.item()) < float("inf")  # False for NaN and inf
    in_range = lo.item() >= 0 and hi.item() < size
    if not (finite and in_range):
        _reject(tree, finite, in_range)
        return
    tree.max_priority.clamp_(min=p_max)
    val = p.pow_(alpha)
    # last one wins: the highest batch position owns an index, every duplicate writes its value
    scratch = tree.scratch
    scratch.scatter_reduce_(0, indices, _positions(B, indices.device), "amax")
    val = val.index_select(0, scratch.index_select(0, indices))
    scratch.index_fill_(0, indices, -1)
    tree.sums.scatter_(0, indices, val)  # leaves are sums[0:P]
    tree.mins.scatter_(0, indices, val)
    _update_ancestors(tree, indices)


# one row of 32 f32 children, and one stored prefix row of 33 f32, as single numpy items: a
# gather or write-back of whole rows is then a 1-D take / put of B items (cheaper than
# 2-D fancy indexing)
_CHILD_ROW = np.dtype((np.void, 4 * FANOUT))
_PREFIX_ROW = np.dtype((np.void, 4 * ROW))


class _HostLevel(NamedTuple):
    """numpy and torch views of one level of a CPU tree; children are read from a contiguous copy."""

    shift: int  # 5 l: leaf index >> shift = the row of level l above it
    children: np.ndarray  # [n_l, 32]: the leaves (l = 1), the copy of level l - 1's totals, or on
    # the root row (never sparse) its children in place
    children_rows: np.ndarray | None  # [n_l] contiguous children as _CHILD_ROW items (None in place)
    children_t: torch.Tensor  # children as a tensor (the same memory)
    prefix_t: torch.Tensor  # _Views.prefix: entries 1 .. 32 of the real rows, in ``sums``
    prefix: np.ndarray  # the same, numpy
    stored_rows: np.ndarray  # [n_l] the real rows as _PREFIX_ROW items
    total: np.ndarray | None  # f32 [stored rows of l]: the copy of their totals (None below the root row)
    total_col: np.ndarray  # [stored rows of l] their totals in ``sums`` (entry 32, strided)
    mins_children: np.ndarray  # [n_l, 32] min-tree level l - 1 (contiguous)
    mins_children_rows: np.ndarray  # [n_l] as _CHILD_ROW items
    mins_children_t: torch.Tensor
    mins_out: np.ndarray  # [n_l] min-tree level l
    mins_out_t: torch.Tensor
    numpy_min: bool  # few rows: numpy's row-wise minimum is cheaper than torch.amin


class _HostViews(NamedTuple):
    """numpy views of one CPU tree's tensors (the same memory) and of its update buffers."""

    tensors: tuple[torch.Tensor, torch.Tensor]  # tree.scratch and tree.max_priority (not in _Views' key)
    fresh: dict[tuple[float, float], np.float32]  # inserts: max_priority ** alpha by (max_priority, alpha)
    sums: np.ndarray
    mins: np.ndarray
    scratch: np.ndarray
    max_priority: np.ndarray
    levels: tuple[_HostLevel, ...]  # level 1 .. L
    work: dict[int, _HostWork]  # update buffers by batch size
    sums_t: torch.Tensor  # an alias of tree.sums (its version counter, read by _sync_totals)
    synced: list[int]  # [version of sums when the total copies last matched it], -1: never


class _HostWork(NamedTuple):
    """Buffers of one CPU update of ``B`` leaves: each torch tensor with its numpy view."""

    rows_t: torch.Tensor  # f32 [B, 32] gathered children
    rows: np.ndarray  # [B] of _CHILD_ROW, the same memory
    prefix_t: torch.Tensor  # f32 [B, 32]: entries 1 .. 32 of prefix_rows, where cumsum writes
    prefix_rows: np.ndarray  # [B] of _PREFIX_ROW over f32 [B, 33] whose entry 0 stays 0
    totals: np.ndarray  # [B] entry 32 of prefix_rows: the rows' totals
    minima_t: torch.Tensor  # f32 [B] their minima
    minima: np.ndarray
    prio_t: torch.Tensor  # f32 [B] the priorities, then the leaf values
    prio: np.ndarray
    positions: np.ndarray  # int32 [B] batch positions (read-only)
    rising: np.ndarray  # bool [B - 1]: s[k + 1] > s[k] for the sorted indices s
    plan: tuple[tuple[bool, _HostLevel], ...]  # per level: gather the touched rows (else recompute it whole)


# numpy's row-wise minimum beats torch.amin's fixed cost on a level of at most this many rows,
# and loses on larger ones (it reduces each short row separately)
_NUMPY_MIN_ROWS = 8


def _host_views(tree: SumTree, v: _Views) -> _HostViews:
    if v.host:
        h = v.host[0]
        if h.tensors[0] is tree.scratch and h.tensors[1] is tree.max_priority:
            return h
        v.host.clear()  # the same sums and mins in a tree with other scratch / max_priority tensors
    levels = []
    below = v.all_sums[: tree.scratch.shape[0]]  # the children of level 1: the leaves
    for lvl, (prefix, stored, (mchildren, mout)) in enumerate(zip(v.prefix, v.stored, v.mins, strict=True)):
        n = prefix.shape[0]
        if below is None:  # the root row: the 32 stored totals of the level below, in place
            below = v.stored[lvl - 1][:, FANOUT]
        children_t = below[: FANOUT * n].view(n, FANOUT)
        # the copy of this level's totals, for the level above; the root row reads its 32
        # children in place (one short column is cheaper than keeping a copy)
        below = torch.zeros(stored.shape[0]) if lvl < len(v.stored) - 2 else None
        m = mchildren.numpy()
        levels.append(
            _HostLevel(
                FANOUT_LOG2 * (lvl + 1),
                children_t.numpy(),
                children_t.numpy().reshape(-1).view(_CHILD_ROW) if children_t.is_contiguous() else None,
                children_t,
                prefix,
                prefix.numpy(),
                stored[:n].numpy().reshape(-1).view(_PREFIX_ROW),
                None if below is None else below.numpy(),
                stored[:, FANOUT].numpy(),
                m,
                m.reshape(-1).view(_CHILD_ROW),
                mchildren,
                mout.numpy(),
                mout,
                n <= _NUMPY_MIN_ROWS,
            )
        )
    h = _HostViews(
        (tree.scratch, tree.max_priority),
        {},
        v.all_sums.numpy(),
        v.all_mins.numpy(),
        tree.scratch.numpy(),
        tree.max_priority.numpy(),
        tuple(levels),
        {},
        v.all_sums,
        [-1],
    )
    v.host.append(h)
    return h


def _sums_version(h: _HostViews) -> int:
    """The version counter of the tree's ``sums``; -1 for an inference tensor (always refreshed)."""
    t = h.sums_t
    return -1 if t.is_inference() else t._version


def _sync_totals(h: _HostViews) -> None:
    """Refresh the contiguous copies of the level totals if anything but the CPU path wrote ``sums``."""
    version = _sums_version(h)
    if version == h.synced[0] and version >= 0:
        return
    for lv in h.levels:
        if lv.total is not None:
            np.copyto(lv.total, lv.total_col)


def forget_host_copies(tree: SumTree) -> None:
    """Drop the CPU path's cached views of ``tree``, after a write that skips torch's version counter."""
    hit = _VIEWS.get(id(tree.sums))
    if hit is not None:
        hit[3].host.clear()


def _host_work(h: _HostViews, B: int) -> _HostWork:
    hw = h.work.get(B)
    if hw is None:
        if len(h.work) >= 4:
            h.work.clear()
        rows_t, minima_t, prio_t = torch.empty(B, FANOUT), torch.empty(B), torch.empty(B)
        prefix_rows = torch.zeros(B, ROW)  # entry 0 of a row is 0 and stays 0
        limit = _dense_limit(B)
        hw = h.work[B] = _HostWork(
            rows_t,
            rows_t.numpy().reshape(-1).view(_CHILD_ROW),
            prefix_rows[:, 1:],
            prefix_rows.numpy().reshape(-1).view(_PREFIX_ROW),
            prefix_rows.numpy()[:, FANOUT],
            minima_t,
            minima_t.numpy(),
            prio_t,
            prio_t.numpy(),
            _positions(B, torch.device("cpu")).numpy(),
            np.empty(max(B - 1, 0), dtype=np.bool_),
            tuple((lv.children_t.numel() > limit, lv) for lv in h.levels),
        )
    return hw


def _update_ancestors_cpu(hw: _HostWork, idx: np.ndarray) -> None:
    """`_update_ancestors` on CPU: the same torch ``cumsum`` / ``amin``, index work in numpy.

    Level 1's minima come from the sum tree's leaf rows when they hold no empty leaf (a filled leaf
    is the same value in both trees).
    """
    rows_t, rows_buf, prefix_t, prefix_rows = hw.rows_t, hw.rows, hw.prefix_t, hw.prefix_rows
    minima, minima_t = hw.minima, hw.minima_t
    for sparse, lv in hw.plan:
        if not sparse:
            torch.cumsum(lv.children_t, 1, out=lv.prefix_t)  # prefix_eager on CPU
            if lv.total is not None:
                np.copyto(lv.total[: lv.prefix.shape[0]], lv.prefix[:, FANOUT - 1])
            if lv.numpy_min:  # a minimum is exact: any order, same bits
                np.minimum.reduce(lv.mins_children, 1, out=lv.mins_out)
            else:
                torch.amin(lv.mins_children_t, 1, out=lv.mins_out_t)
            continue
        rows = idx >> lv.shift
        lv.children_rows.take(rows, 0, rows_buf, "clip")  # "clip" skips a bounds pass
        torch.cumsum(rows_t, 1, out=prefix_t)  # prefix_eager on CPU
        lv.stored_rows.put(rows, prefix_rows)  # duplicate rows write equal values
        if lv.total is not None:
            lv.total.put(rows, hw.totals)
        if lv.shift == FANOUT_LOG2:  # level 1: rows_t holds leaf rows of the sum tree
            torch.amin(rows_t, 1, out=minima_t)
            if not np.minimum.reduce(minima) > 0:  # an empty (or zero) leaf among them
                lv.mins_children_rows.take(rows, 0, rows_buf, "clip")
                torch.amin(rows_t, 1, out=minima_t)
        else:
            lv.mins_children_rows.take(rows, 0, rows_buf, "clip")
            torch.amin(rows_t, 1, out=minima_t)
        lv.mins_out.put(rows, minima, "clip")


def _per_update_cpu(
    tree: SumTree, indices: torch.Tensor, td_errors: torch.Tensor, alpha: float, eps: float, size: int
) -> None:
    """`_per_update_torch` on CPU with numpy for the leaf part, bit for bit the same.

    ``** alpha`` stays a torch op (numpy's ``powf`` may differ by an ulp); duplicates resolve by the
    same scratch rule, with ``np.maximum.at`` for ``scatter_reduce_(amax)``.
    """
    h = _host_views(tree, _views(tree))
    B = indices.shape[0]
    hw = h.work.get(B) or _host_work(h, B)
    td = td_errors if td_errors.dtype == torch.float32 else td_errors.float()
    if td.requires_grad:
        td = td.detach()
    idx = indices.numpy()
    p = hw.prio
    np.abs(td.numpy(), out=p)
    np.add(p, np.float32(eps), out=p)
    p_max = np.maximum.reduce(p)  # NaN if any p is NaN (numpy propagates it), inf if any is inf
    finite = bool(p_max < np.inf)
    # strictly increasing (what stratified sampling returns, unless a leaf spans two strata):
    # no repeats; else sorted once, for the range, the repeats and gathers in address order
    unique = np.count_nonzero(np.greater(idx[1:], idx[:-1], out=hw.rising)) == B - 1  # True for B = 1
    s = idx
    if not unique:
        s = np.sort(idx)
        unique = np.count_nonzero(np.greater(s[1:], s[:-1], out=hw.rising)) == B - 1
    in_range = bool(s[0] >= 0 and s[-1] < size)
    if not (finite and in_range):
        _reject(tree, finite, in_range)
        return
    _sync_totals(h)
    mp = h.max_priority
    if p_max > mp[0]:
        mp[0] = p_max
    hw.prio_t.pow_(alpha)  # p now holds the leaf values
    if unique:
        val = p
    else:  # the last occurrence wins
        scratch = h.scratch
        np.maximum.at(scratch, idx, hw.positions)
        val = p[scratch[idx]]
        scratch[idx] = -1
    h.sums.put(idx, val, "clip")  # leaves are sums[0:P]; indices checked above
    h.mins.put(idx, val, "clip")
    _update_ancestors_cpu(hw, s)
    h.synced[0] = _sums_version(h)


def per_insert_eager(tree: SumTree, start: int, count: int, alpha: float) -> None:
    """Eager `tritonrl.kernels.sumtree.per_insert`: one prefix per level over the touched range."""
    if count == 0:
        return
    if tree.sums.is_cpu:
        _per_insert_cpu(tree, start, count, alpha)
    else:
        _per_insert_torch(tree, start, count, alpha)


def _per_insert_torch(tree: SumTree, start: int, count: int, alpha: float) -> None:
    """`per_insert_eager` in torch ops on any device (``count > 0``)."""
    sums, mins = tree.sums, tree.mins
    v = _views(tree)
    val = tree.max_priority.pow(alpha)  # [1]
    a, b = start, start + count - 1  # inclusive leaf range
    sums[a : b + 1] = val
    mins[a : b + 1] = val
    limit = 8192  # small levels at once; a range of a large level is never dearer than all of it
    for lvl, (children, prefix) in enumerate(zip(v.children, v.prefix, strict=True)):
        if children.numel() <= limit:
            prefix_eager(children, out=prefix)
        else:
            shift = FANOUT_LOG2 * (lvl + 1)
            lo, hi = a >> shift, (b >> shift) + 1
            prefix_eager(children[lo:hi], out=prefix[lo:hi])
    for lvl, (children, out) in enumerate(v.mins):
        if children.numel() <= limit:
            torch.amin(children, 1, out=out)
        else:
            shift = FANOUT_LOG2 * (lvl + 1)
            lo, hi = a >> shift, (b >> shift) + 1
            torch.amin(children[lo:hi], 1, out=out[lo:hi])


def _per_insert_cpu(tree: SumTree, start: int, count: int, alpha: float) -> None:
    """`_per_insert_torch` on CPU in numpy, bit for bit (``count > 0``; ``pow`` stays torch's)."""
    h = _host_views(tree, _views(tree))
    _sync_totals(h)
    key = (float(h.max_priority[0]), float(alpha))
    val = h.fresh.get(key)
    if val is None:
        if len(h.fresh) >= 8:
            h.fresh.clear()
        val = h.fresh[key] = np.float32(tree.max_priority.pow(alpha).numpy()[0])
    a, b = start, start + count  # leaf range [a, b)
    h.sums[a:b] = val
    h.mins[a:b] = val
    b -= 1  # inclusive from here on
    accumulate, minimum = np.add.accumulate, np.minimum.reduce
    f64 = np.float64
    for lv in h.levels:
        lo, hi = a >> lv.shift, (b >> lv.shift) + 1
        acc = accumulate(lv.children[lo:hi], 1, f64)  # sequential f64, one rounding each
        lv.prefix[lo:hi] = acc
        if lv.total is not None:  # the contiguous copy the next level reads
            lv.total[lo:hi] = acc[:, FANOUT - 1]
        minimum(lv.mins_children[lo:hi], 1, out=lv.mins_out[lo:hi])
    h.synced[0] = _sums_version(h)


@functools.lru_cache(maxsize=16)
def _scalar(value: float, device: torch.device) -> torch.Tensor:
    """``value`` as a 0-d f32 tensor (read-only constant; cheaper to pass to an op than a float)."""
    return torch.tensor(value, dtype=torch.float32, device=device)


@functools.lru_cache(maxsize=16)
def _positions(B: int, device: torch.device) -> torch.Tensor:
    """``arange(B)`` in int32 (read-only constant): batch positions for the duplicate rule."""
    return torch.arange(B, dtype=torch.int32, device=device)


@functools.lru_cache(maxsize=16)
def _strata(B: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``arange(B)`` and ``f32(1 / B)`` as f32 tensors (read-only constants)."""
    strata = torch.arange(B, dtype=torch.float32, device=device)
    return strata, torch.tensor(1.0 / B, dtype=torch.float32, device=device)


def per_sample_eager(
    tree: SumTree, uniforms: torch.Tensor, beta: float, size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager `tritonrl.kernels.sumtree.per_sample`: the descent of the reference, index clamped.

    On CPU the index work runs on numpy views (`_per_sample_cpu`), bit for bit the torch path.
    """
    if uniforms.is_cpu:
        return _per_sample_cpu(tree, uniforms, beta, size)
    return _per_sample_torch(tree, uniforms, beta, size)


def _per_sample_torch(
    tree: SumTree, uniforms: torch.Tensor, beta: float, size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """`per_sample_eager` in torch ops on any device."""
    v = _views(tree)
    B = uniforms.shape[0]
    w = _work(v, B, uniforms.device)
    strata, inv_b = _strata(B, uniforms.device)
    t, t1 = w.t, w.t1  # [B, 1] and [B] views of the target mass
    torch.add(strata, uniforms, out=t1).mul_(v.total * inv_b)
    node, spare = w.node
    # root row: count only its real children (the others are padding)
    torch.searchsorted(v.root_search, t1, right=True, out=node)
    t1.sub_(v.root.index_select(0, node))
    child1 = w.child.view(B)
    for rows in reversed(v.search[:-1]):
        torch.index_select(rows, 0, node, out=w.rows)  # [B, 32]: 0 and the inner prefixes
        torch.searchsorted(w.rows, t, right=True, out=w.count)  # 1 + child (row[0] = 0 <= t)
        torch.sub(w.count, v.one, out=w.child)
        t.sub_(torch.gather(w.rows, 1, w.child, out=w.sub))
        node, spare = torch.add(child1, node, alpha=FANOUT, out=spare), node  # next level's row
    idx = torch.clamp_max(node, size - 1)  # the leaf (a fresh tensor)
    weights = tree.sums.index_select(0, idx).div_(v.min_root).pow_(-beta)
    return idx, weights


class _SampleWork(NamedTuple):
    """numpy views of one CPU tree (the same memory) and the buffers of a descent of ``B`` targets."""

    sums: np.ndarray  # tree.sums
    mins: np.ndarray  # tree.mins
    levels: tuple[np.ndarray, ...]  # [stored rows, 33] of levels L - 1 .. 1 (descent order)
    root: np.ndarray  # [33] the root row
    root_search: np.ndarray  # _Views.root_search
    total: int  # position of the root's total in sums
    min_root: int  # position of the global minimum in mins
    strata: np.ndarray  # f32 [B]: 0 .. B - 1 (read-only)
    inv_b: np.float32  # f32(1 / B)
    row_start: np.ndarray  # int64 [B]: 33 j, where sample j's row starts in the flat rows
    t: np.ndarray  # f32 [B]: the target mass, then what is left of it below the current row
    t_col: np.ndarray  # [B, 1] view of t
    rows: np.ndarray  # f32 [B, 33] the gathered rows
    rows_flat: np.ndarray  # [B * 33] view of rows
    le: np.ndarray  # bool [B, 33]: rows <= t
    le_inner: np.ndarray  # uint8 [B, 31] view of le's inner prefixes (entries 1 .. 31)
    child: np.ndarray  # uint8 [B]: inner prefixes <= t, the child taken
    flat: np.ndarray  # int64 [B]: flat position of the child's prefix in rows
    sub: np.ndarray  # f32 [B]: that prefix


def _sample_work(tree: SumTree, v: _Views, B: int) -> _SampleWork:
    s = v.sample.get(B)
    if s is None:
        if len(v.sample) >= 4:
            v.sample.clear()
        g = geometry(tree.scratch.shape[0])
        t = np.empty(B, dtype=np.float32)
        rows = np.empty((B, ROW), dtype=np.float32)
        le = np.empty((B, ROW), dtype=np.bool_)
        s = v.sample[B] = _SampleWork(
            v.all_sums.numpy(),
            v.all_mins.numpy(),
            tuple(r.numpy() for r in reversed(v.stored[:-1])),
            v.root.numpy(),
            v.root_search.numpy(),
            g.total_offset,
            g.min_offsets[-1],
            np.arange(B, dtype=np.float32),
            np.float32(1.0 / B),
            np.arange(0, ROW * B, ROW, dtype=np.int64),
            t,
            t[:, None],
            rows,
            rows.reshape(ROW * B),
            le,
            le.view(np.uint8)[:, 1:FANOUT],
            np.empty(B, dtype=np.uint8),
            np.empty(B, dtype=np.int64),
            np.empty(B, dtype=np.float32),
        )
    return s


def _per_sample_cpu(
    tree: SumTree, uniforms: torch.Tensor, beta: float, size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """`_per_sample_torch` on CPU in numpy, bit for bit.

    A level's child is the count of inner prefixes ``<= t`` (the torch path's ``searchsorted - 1``);
    ``** -beta`` stays the torch ``pow_`` (numpy's ``powf`` may differ by an ulp).
    """
    v = _views(tree)
    s = _sample_work(tree, v, uniforms.shape[0])
    t, child, flat = s.t, s.child, s.flat
    np.add(s.strata, (uniforms.detach() if uniforms.requires_grad else uniforms).numpy(), out=t)
    t *= s.sums[s.total] * s.inv_b  # two f32 scalars: an f32 product
    # root row: count only its real children (the others are padding)
    node = np.searchsorted(s.root_search, t, side="right")  # a fresh array: the result
    last = len(s.levels) - 1  # what is left of t after the last level is not needed
    if last >= 0:
        t -= s.root.take(node)
    for lvl, level in enumerate(s.levels):
        level.take(node, 0, s.rows, "clip")  # [B, 33]; mode "clip" skips a bounds pass
        np.less_equal(s.rows, s.t_col, out=s.le)
        np.einsum("ij->i", s.le_inner, out=child)  # a byte sum: at most 31
        if lvl < last:
            np.add(s.row_start, child, out=flat)
            t -= s.rows_flat.take(flat, out=s.sub)
        node *= FANOUT  # the next level's row: FANOUT * node + child
        node += child
    np.minimum(node, size - 1, out=node)  # the leaf
    w = s.sums.take(node)
    w /= s.mins[s.min_root]
    return torch.from_numpy(node), torch.from_numpy(w).pow_(-beta)


def rebuild_eager(tree: SumTree, exact: bool = False) -> None:
    """Recompute every sum row and inner min node from the leaves, in place.

    ``exact=False``: the prefix rule, the tree the updates maintain; ``exact=True``: each row from
    unrounded f64 totals, rounded once.
    """
    v = _views(tree)
    for rows in v.stored:
        rows.zero_()
    if exact:
        below = tree.sums[: tree.scratch.shape[0]].double()
        for children, prefix in zip(v.children, v.prefix, strict=True):
            n = children.shape[0]
            cs = torch.cumsum(below[: FANOUT * n].view(n, FANOUT), 1)
            prefix.copy_(cs)
            below = torch.zeros(max(n, FANOUT), dtype=torch.float64, device=cs.device)
            below[:n] = cs[:, -1]
    else:
        for children, prefix in zip(v.children, v.prefix, strict=True):
            prefix_eager(children, out=prefix)
    for children, out in v.mins:
        torch.amin(children, 1, out=out)
