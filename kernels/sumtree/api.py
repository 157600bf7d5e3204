"""The sum-tree ops: validation, dispatch and the public functions. Imports no triton.

A `SumTree` is a 32-ary f32 sum tree of prefix rows and a 32-ary f32 min tree over the leaves
``p_i ** alpha`` (layout: `tritonrl.kernels.sumtree.reference`). `per_sample`, `per_update` and
`per_insert` are each one [`KernelOp`][tritonrl.kernels.backend.KernelOp] (Triton on CUDA,
``cpu.py``'s eager path elsewhere). See docs/pages/replay.md ("The sum tree").
"""

from __future__ import annotations

import weakref

import torch
from tritonrl.kernels.backend import KernelOp
from tritonrl.kernels.sumtree.cpu import per_insert_eager, per_sample_eager, per_update_eager, rebuild_eager
from tritonrl.kernels.sumtree.reference import BAD_INDEX, BAD_PRIORITY, FANOUT, Geometry, SumTree, geometry
from tritonrl.kernels.validate import check_int, check_real, check_tensor

__all__ = [
    "BAD_INDEX",
    "BAD_PRIORITY",
    "FANOUT",
    "PER_INSERT",
    "PER_SAMPLE",
    "PER_UPDATE",
    "Geometry",
    "SumTree",
    "geometry",
    "leaves",
    "leaves_for",
    "new_sumtree",
    "per_insert",
    "per_sample",
    "per_sample_unchecked",
    "per_update",
    "per_update_unchecked",
    "rebuild",
    "total",
]

# One name per op: the public function, its KernelOp (upper case) and its registry name agree
# (``per_sample`` / ``PER_SAMPLE`` / "per_sample", eager path ``per_sample_eager``, Triton
# ``per_sample_triton``).
PER_SAMPLE = KernelOp("per_sample", per_sample_eager, "tritonrl.kernels.sumtree.fused:per_sample_triton")
PER_UPDATE = KernelOp("per_update", per_update_eager, "tritonrl.kernels.sumtree.fused:per_update_triton")
PER_INSERT = KernelOp("per_insert", per_insert_eager, "tritonrl.kernels.sumtree.fused:per_insert_triton")


def leaves_for(capacity: int) -> int:
    """``P``, the leaves of a tree of ``capacity`` items (a power of two >= 32); ``ValueError`` if bad."""
    check_int("capacity", capacity, low=1)
    return max(FANOUT, 1 << (capacity - 1).bit_length())


def new_sumtree(capacity: int, device: torch.device | str = "cpu", max_priority: float = 1.0) -> SumTree:
    """An empty tree for ``capacity`` items on ``device`` (sums 0, mins +inf, scratch -1).

    Raises:
        ValueError: ``capacity`` is not a positive int or ``max_priority`` is not finite and > 0.
    """
    check_real("max_priority", max_priority, positive=True)
    g = geometry(leaves_for(capacity))
    return SumTree(
        sums=torch.zeros(g.sum_size, dtype=torch.float32, device=device),
        mins=torch.full((g.min_size,), float("inf"), dtype=torch.float32, device=device),
        scratch=torch.full((g.P,), -1, dtype=torch.int32, device=device),
        max_priority=torch.full((1,), float(max_priority), dtype=torch.float32, device=device),
        status=torch.zeros(2, dtype=torch.int32, device=device),
    )


def leaves(tree: SumTree) -> torch.Tensor:
    """The ``P`` leaf values ``p ** alpha`` (f32 ``[P]``, a view of ``tree.sums``; empty leaves 0)."""
    return tree.sums[: tree.scratch.shape[0]]


def total(tree: SumTree, *, exact: bool = False) -> torch.Tensor:
    """The sum of all leaves: the root's total (f32, 0-d), or with ``exact=True`` an f64 sum."""
    if exact:
        return leaves(tree).sum(dtype=torch.float64)
    return tree.sums[geometry(tree.scratch.shape[0]).total_offset]


# ---- validation (metadata only: never reads tensor data) -------------------------------------


_F32, _I32 = torch.float32, torch.int32


# Trees that passed _check_tree, by id: weak references to their five tensors, and the geometry.
# A SumTree is immutable and a tensor's dtype and device never change, so the same five tensor
# objects are a tree already checked (changing a tensor's shape in place, with resize_ or set_,
# is not supported on a tree). Weak references: the memo keeps no tree alive, and a new tree
# that reuses a dead one's id fails the identity test.
_CHECKED: dict[int, tuple[tuple[weakref.ref, ...], Geometry]] = {}


def _check_tree(tree: SumTree) -> Geometry:
    if torch.compiler.is_compiling():  # traced once: the plain checks (no try block, no memo)
        return _check_tree_slow(tree)
    hit = _CHECKED.get(id(tree))
    if hit is not None and type(tree) is SumTree:
        (r_sums, r_mins, r_scratch, r_max, r_status), g = hit
        if (
            r_sums() is tree.sums
            and r_mins() is tree.mins
            and r_scratch() is tree.scratch
            and r_max() is tree.max_priority
            and r_status() is tree.status
        ):
            return g
    g = _check_tree_meta(tree)
    if len(_CHECKED) >= 64:
        _CHECKED.clear()
    _CHECKED[id(tree)] = (tuple(weakref.ref(t) for t in tree), g)
    return g


def _check_tree_meta(tree: SumTree) -> Geometry:
    # fast path: one expression over the metadata; anything unusual goes to the detailed checks
    try:
        sums, mins, scratch, max_p, status = tree
        g = geometry(scratch.shape[0])
        dev = sums.device
        if (
            type(tree) is SumTree
            and sums.dtype == _F32
            and mins.dtype == _F32
            and scratch.dtype == _I32
            and max_p.dtype == _F32
            and status.dtype == _I32
            and sums.shape == (g.sum_size,)
            and mins.shape == (g.min_size,)
            and scratch.dim() == 1
            and max_p.shape == (1,)
            and status.shape == (2,)
            and mins.device == dev
            and scratch.device == dev
            and max_p.device == dev
            and status.device == dev
            and sums.is_contiguous()
            and mins.is_contiguous()
            and scratch.is_contiguous()
            and status.is_contiguous()
        ):
            return g
    except Exception:  # the detailed checks below raise the right error
        pass
    return _check_tree_slow(tree)


def _check_tree_slow(tree: SumTree) -> Geometry:
    if not isinstance(tree, SumTree):
        raise TypeError(f"tree must be a tritonrl.kernels.sumtree.SumTree, got {type(tree).__name__}")
    scratch = tree.scratch
    P = scratch.shape[0] if isinstance(scratch, torch.Tensor) and scratch.dim() == 1 else 0
    if P < FANOUT or P & (P - 1):
        raise ValueError(
            f"tree.scratch must have shape [P] with P a power of two >= {FANOUT}, "
            f"got {tuple(getattr(scratch, 'shape', ()))}"
        )
    # traced: the uncached body (dynamo warns on lru_cache wrappers; geometry is pure in P)
    g = geometry.__wrapped__(P) if torch.compiler.is_compiling() else geometry(P)
    expected = {
        "sums": ((g.sum_size,), torch.float32),
        "mins": ((g.min_size,), torch.float32),
        "scratch": ((g.P,), torch.int32),
        "max_priority": ((1,), torch.float32),
        "status": ((2,), torch.int32),
    }
    for name, (shape, dtype) in expected.items():
        check_tensor(
            f"tree.{name}",
            getattr(tree, name),
            dtype=dtype,
            shape=shape,
            device=tree.sums.device,
            device_of="tree.sums",
            contiguous=True,
        )
    return g


def _check_vec(name: str, t: torch.Tensor, dtypes: tuple[torch.dtype, ...], device: torch.device) -> None:
    if (  # the common case in one expression; anything else gets the detailed check and its error
        type(t) is torch.Tensor
        and t.dtype in dtypes
        and t.dim() == 1
        and t.device == device
        and t.is_contiguous()
    ):
        return
    check_tensor(name, t, dtype=dtypes, ndim=1, device=device, device_of="tree.sums", contiguous=True)


def _check_size(size: int, P: int) -> None:
    check_int("size", size, low=1, high=P)


_FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


# ---- public ops --------------------------------------------------------------------------------


def per_sample(
    tree: SumTree, uniforms: torch.Tensor, beta: float, size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw ``B = len(uniforms)`` leaves, one per equal-mass stratum, with their IS weights.

    Every backend makes the same f32 operations, so the indices agree for the same uniforms.

    Args:
        tree: a [`SumTree`][tritonrl.kernels.sumtree.api.SumTree] with at least one non-empty leaf among ``[0,
            size)``.
        uniforms: f32 ``[B]`` in ``[0, 1)``, on the tree's device.
        beta: importance-sampling exponent >= 0.
        size: leaves ``[0, size)`` are stored; indices are clamped below ``size``.

    Returns:
        ``(indices, weights)``: int64 ``[B]`` and f32 ``[B]``, ``(leaf / min_leaf)**-beta`` (<= 1).

    Raises:
        TypeError / ValueError: wrong dtype, shape, device, or an invalid ``beta`` / ``size``.
    """
    g = _check_tree(tree)
    _check_vec("uniforms", uniforms, (torch.float32,), tree.sums.device)
    check_real("beta", beta)
    _check_size(size, g.P)
    if torch.compiler.is_compiling():  # the custom op
        return torch.ops.tritonrl.per_sample(*tree, uniforms, float(beta), size)
    return PER_SAMPLE(tree.sums.device, tree, uniforms, float(beta), size)


def per_update(
    tree: SumTree, indices: torch.Tensor, td_errors: torch.Tensor, *, alpha: float, eps: float, size: int
) -> None:
    """Set ``leaf[indices[k]] = (|td_errors[k]| + eps) ** alpha`` and recompute the ancestors.

    A batch with a NaN/inf priority or an index outside ``[0, size)`` changes nothing but
    ``tree.status`` (``[0] += 1``, ``[1]`` = `BAD_PRIORITY` | `BAD_INDEX`); otherwise
    ``max_priority`` takes the batch's largest ``|td| + eps``. The last of duplicate indices wins.

    Args:
        indices: int64 ``[B]``.
        td_errors: float ``[B]`` (read as f32).
        alpha: priority exponent >= 0.
        eps: added to ``|td|``, > 0.
        size: stored leaves.

    Raises:
        TypeError / ValueError: wrong metadata (dtype, shape, device, lengths) or arguments.
    """
    g = _check_tree(tree)
    dev = tree.sums.device
    _check_vec("indices", indices, (torch.int64,), dev)
    _check_vec("td_errors", td_errors, _FLOATS, dev)
    if td_errors.shape[0] != indices.shape[0]:
        raise ValueError(f"td_errors has {td_errors.shape[0]} entries, indices {indices.shape[0]}")
    check_real("alpha", alpha)
    check_real("eps", eps, positive=True)
    _check_size(size, g.P)
    if torch.compiler.is_compiling():  # the custom op; priorities take no gradient
        torch.ops.tritonrl.per_update(*tree, indices, td_errors.detach(), float(alpha), float(eps), size)
        return
    PER_UPDATE(dev, tree, indices, td_errors, float(alpha), float(eps), size)


def per_sample_unchecked(
    tree: SumTree, uniforms: torch.Tensor, beta: float, size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """`per_sample` without its argument checks, for a caller that made them (the replay buffer)."""
    if torch.compiler.is_compiling():
        return per_sample(tree, uniforms, beta, size)
    return PER_SAMPLE(tree.sums.device, tree, uniforms, beta, size)


def per_update_unchecked(
    tree: SumTree, indices: torch.Tensor, td_errors: torch.Tensor, alpha: float, eps: float, size: int
) -> None:
    """`per_update` without its argument checks (the batch is still validated on the device)."""
    if torch.compiler.is_compiling():
        per_update(tree, indices, td_errors, alpha=alpha, eps=eps, size=size)
        return
    PER_UPDATE(tree.sums.device, tree, indices, td_errors, alpha, eps, size)


def per_insert(tree: SumTree, start: int, count: int, *, alpha: float) -> None:
    """Give leaves ``start .. start + count - 1`` the value ``max_priority ** alpha``.

    Raises:
        TypeError / ValueError: wrong tree metadata, a range outside ``[0, P)`` or a bad ``alpha``.
    """
    g = _check_tree(tree)
    check_int("start", start, low=0)
    check_int("count", count, low=0)
    if start + count > g.P:
        raise ValueError(f"leaves {start} .. {start + count - 1} exceed the tree's {g.P} leaves")
    check_real("alpha", alpha)
    if torch.compiler.is_compiling():  # the custom op
        torch.ops.tritonrl.per_insert(*tree, start, count, float(alpha))
        return
    PER_INSERT(tree.sums.device, tree, start, count, float(alpha))


def rebuild(tree: SumTree, *, exact: bool = False) -> None:
    """Recompute all prefix rows and min nodes from the leaves in place, on any device.

    Write both ``leaves(tree)`` and ``tree.mins[:P]`` (+inf where empty) first. ``exact=False``
    gives the trees the updates maintain, bit for bit; ``exact=True`` rounds each row once from f64.
    """
    _check_tree(tree)
    rebuild_eager(tree, exact)
