"""The specification of the prioritized-replay sum tree: its layout, its rules, and a plain-loop
oracle of what every backend computes (``fused.py``, ``cpu.py``), for tests on small trees.

The layout is the comment block below; the rules are the docstrings of `prefix_row`,
`sample_ref` and `update_ref`. See docs/pages/replay.md ("The sum tree").
"""

# Layout. P: a power of two >= capacity, at least F = 32 (the fan-out); L = ceil(log2(P) / 5)
# levels of rows above the leaves.
# - sums (f32): entries [0, P) are the leaves p ** alpha (empty: 0). Then level l = 1 .. L of
#   prefix rows of F + 1 = 33 entries: row r covers children 32r .. 32r + 31 of level l - 1 and
#   holds [0, c_0, c_0 + c_1, ..., c_0 + ... + c_31] (exclusive prefixes, then its total T).
#   A child's total is its row's T (the leaf itself on level 0). Level l has n_l = max(1, P >> 5l)
#   rows, padded with zero rows to max(n_l, 32) (the top level: 1, the root row, whose T is the
#   total mass).
# - mins (f32): a 32-ary min tree level after level; level 0 the leaves (empty: +inf), entry b of
#   level k + 1 the minimum of entries 32b .. 32b + 31 of level k, padded with +inf; the last
#   level is the global minimum.
# Inserts (insert_ref) give a range of leaves max_priority ** alpha.

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

__all__ = [
    "BAD_INDEX",
    "BAD_PRIORITY",
    "FANOUT",
    "FANOUT_LOG2",
    "ROW",
    "Geometry",
    "Leaves",
    "SumTree",
    "build_ref",
    "geometry",
    "insert_ref",
    "prefix_row",
    "sample_ref",
    "update_ref",
]

# status[1] bits written when an update is rejected
BAD_PRIORITY = 1  # a priority is NaN or infinite
BAD_INDEX = 2  # an index is outside [0, size)
FANOUT_LOG2 = 5
FANOUT = 1 << FANOUT_LOG2  # children per row, in both trees
ROW = FANOUT + 1  # entries per prefix row: 0, 31 inner prefixes, total


class SumTree(NamedTuple):
    """The device tensors of one tree (create with `tritonrl.kernels.sumtree.new_sumtree`).

    Attributes:
        sums: f32 ``[Geometry.sum_size]``: the ``P`` leaves, then the prefix rows (layout above).
        mins: f32 ``[Geometry.min_size]``: the 32-ary min tree.
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
    """Sizes and offsets of a tree with ``P`` leaves."""

    P: int
    levels: int  # L: levels of prefix rows above the leaves (the root row is level L)
    rows: tuple[int, ...]  # n_l, real rows of level l = 1 .. L (index l - 1)
    sum_offsets: tuple[int, ...]  # [0] = 0 (leaves), [l] = start of level l's rows in ``sums``
    sum_size: int  # entries of ``sums``
    min_offsets: tuple[int, ...]  # start of min-tree level k = 0 .. L in ``mins``; [L] is the root
    min_size: int  # entries of ``mins``

    @property
    def total_offset(self) -> int:
        """Position of the root row's total (the sum of all leaves) in ``sums``."""
        return self.sum_offsets[-1] + FANOUT


@functools.lru_cache(maxsize=64)
def geometry(P: int) -> Geometry:
    """The `Geometry` of a tree with ``P`` leaves; ``ValueError`` unless a power of two >= 32."""
    if P < FANOUT or P & (P - 1):
        raise ValueError(f"P must be a power of two >= {FANOUT}, got {P}")
    L = -(-(P.bit_length() - 1) // FANOUT_LOG2)
    rows = tuple(max(1, P >> (FANOUT_LOG2 * lvl)) for lvl in range(1, L + 1))
    sum_offsets, min_offsets = [0, P], [0, P]
    for n in rows[:-1]:  # stored rows of levels 1 .. L - 1: padded to 32 (the root row: 1)
        sum_offsets.append(sum_offsets[-1] + ROW * max(n, FANOUT))
        min_offsets.append(min_offsets[-1] + max(n, FANOUT))
    sum_size = sum_offsets[-1] + ROW
    min_size = min_offsets[-1] + 1
    return Geometry(P, L, rows, tuple(sum_offsets), sum_size, tuple(min_offsets), min_size)


# ---- the oracle: plain loops over Python floats (f64) and np.float32 scalars -----------------


def prefix_row(children: Sequence[float], exact: Sequence[float] | None = None) -> tuple[list[float], float]:
    """The prefix rule: inclusive prefix sums of ``children`` accumulated in f64, each rounded once to f32.

    Also returns the unrounded f64 total; ``exact``: accumulate these f64 totals instead. A row is
    always recomputed from its children, never patched, so ``sums`` equals `build_ref` of its
    leaves bit for bit (root relative error at most about ``L * 2**-24``).
    """
    acc, out = 0.0, []
    for c in children if exact is None else exact:
        acc += float(c)
        out.append(float(np.float32(acc)))
    return out, acc


def build_ref(
    leaves: torch.Tensor, min_leaves: torch.Tensor, exact: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """``sums`` and ``mins`` of the tree over ``leaves`` and ``min_leaves`` (f32 ``[P]`` each)."""
    P = leaves.shape[0]
    g = geometry(P)
    sums = torch.zeros(g.sum_size, dtype=torch.float32)
    mins = torch.full((g.min_size,), math.inf, dtype=torch.float32)
    sums[:P], mins[:P] = leaves, min_leaves
    totals = [float(v) for v in leaves.tolist()]
    unrounded = list(totals)
    mins_below = [float(v) for v in min_leaves.tolist()]
    for lvl in range(1, g.levels + 1):
        n = g.rows[lvl - 1]
        padded = FANOUT * n  # the level's children: stored totals of the level below, zero-padded
        totals += [0.0] * (padded - len(totals))
        unrounded += [0.0] * (padded - len(unrounded))
        mins_below += [math.inf] * (padded - len(mins_below))
        next_totals, next_unrounded, next_mins = [], [], []
        for r in range(n):
            kids = slice(FANOUT * r, FANOUT * (r + 1))
            row, acc = prefix_row(totals[kids], unrounded[kids] if exact else None)
            start = g.sum_offsets[lvl] + ROW * r
            sums[start + 1 : start + ROW] = torch.tensor(row, dtype=torch.float32)
            next_totals.append(row[-1])
            next_unrounded.append(acc)
            next_mins.append(min(mins_below[kids]))
            mins[g.min_offsets[lvl] + r] = next_mins[-1]
        totals, unrounded, mins_below = next_totals, next_unrounded, next_mins
    return sums, mins


def sample_ref(
    tree: SumTree, uniforms: torch.Tensor, beta: float, size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stratified descent for ``uniforms`` (f32 ``[B]``): int64 indices ``[B]``, f32 weights ``[B]``.

    Sample ``j`` targets ``t = (j + u_j) * (total * f32(1/B))``; a row sends it to child
    ``k = #{i in 1 .. 31 : row[i] <= t}`` (on the root, real children only) with ``t - row[k]`` (f32).
    The leaf is clamped below ``size``; its weight is ``(leaf / min_leaf) ** -beta``.
    """
    f32 = np.float32
    P = tree.scratch.shape[0]
    g = geometry(P)
    sums = tree.sums.tolist()
    B = uniforms.shape[0]
    step = f32(f32(sums[g.total_offset]) * f32(1.0 / B))
    root_children = g.rows[-2] if g.levels > 1 else P
    idx, weights = [], []
    for j, u in enumerate(uniforms.tolist()):
        t = f32(f32(f32(j) + f32(u)) * step)
        node = 0
        for lvl in range(g.levels, 0, -1):
            start = g.sum_offsets[lvl] + ROW * node
            row = sums[start : start + ROW]
            real = root_children if lvl == g.levels else FANOUT
            k = sum(1 for i in range(1, real) if f32(row[i]) <= t)
            t = f32(t - f32(row[k]))
            node = FANOUT * node + k
        leaf = min(node, size - 1)
        idx.append(leaf)
        ratio = f32(f32(sums[leaf]) / f32(tree.mins[g.min_offsets[-1]].item()))
        weights.append(float(ratio) ** -beta)
    return torch.tensor(idx, dtype=torch.int64), torch.tensor(weights, dtype=torch.float32)


@dataclass
class Leaves:
    """What the ops change besides the rows: both trees' leaves (floats ``[P]``), max priority, status."""

    sums: list[float]
    mins: list[float]
    max_priority: float = 1.0
    rejected: int = 0
    reason: int = 0


def update_ref(
    state: Leaves, indices: Sequence[int], td_errors: Sequence[float], alpha: float, eps: float, size: int
) -> None:
    """``per_update``: leaf ``indices[k]`` gets ``(|td_errors[k]| + eps) ** alpha`` (f32).

    The last of duplicates wins; a non-finite ``p`` or an index outside ``[0, size)`` only counts a
    rejection; the running maximum takes the batch's largest ``p``.
    """
    f32 = np.float32
    p = [f32(f32(abs(f32(td))) + f32(eps)) for td in td_errors]
    reason = (0 if all(math.isfinite(v) for v in p) else BAD_PRIORITY) | (
        0 if all(0 <= i < size for i in indices) else BAD_INDEX
    )
    if reason:
        state.rejected, state.reason = state.rejected + 1, reason
        return
    if p:
        state.max_priority = max(state.max_priority, float(max(p)))
    for i, v in zip(indices, p, strict=True):
        state.sums[i] = state.mins[i] = float(f32(float(v) ** alpha))


def insert_ref(state: Leaves, start: int, count: int, alpha: float) -> None:
    """``per_insert``: leaves ``start .. start + count - 1`` get ``max_priority ** alpha`` (f32)."""
    value = float(np.float32(state.max_priority**alpha))
    for i in range(start, start + count):
        state.sums[i] = state.mins[i] = value
