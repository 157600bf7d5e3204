"""Data-parallel plumbing of the loop: rank 0's work sent to every rank, errors agreed over the ranks, and the
checkpoint's per-rank parts.

Layer: training. Guide: docs/pages/scaling.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from tritonrl.toolkit.checkpoint import CheckpointError, brief
from tritonrl.toolkit.distributed import AGREED_ERRORS, DistContext, picklable_error

__all__ = [
    "RANK_PARTS",
    "SAME_AS_RANK_0",
    "agree_on_errors",
    "fill_shared",
    "first_line",
    "rank_seed",
    "saved_world_size",
    "scatter_from_main",
    "shared_marker",
    "to_cpu",
]


def scatter_from_main(ctx: DistContext, fn: Callable[[], list[Any]]) -> Any:
    """``fn()[rank]`` on every rank, ``fn`` run on rank 0 alone (errors as ``on_main``)."""
    if not ctx.enabled:
        return fn()[0]
    items: list[tuple[bool, Any]] | None = None
    error: BaseException | None = None
    if ctx.is_main:
        try:
            items = [(True, x) for x in fn()]
        except AGREED_ERRORS as exc:
            error = exc
            items = [(False, picklable_error(exc))] * ctx.world_size
    ok, value = ctx.scatter_objects(items)
    if ok:
        return value
    raise error if error is not None else value


def agree_on_errors(ctx: DistContext, error: BaseException | None) -> None:
    """Raise on every rank when ``error`` is set on any: the first rank's, prefixed ``rank R:`` elsewhere."""
    if not ctx.enabled:
        if error is not None:
            raise error
        return
    seen = ctx.all_gather_objects(None if error is None else picklable_error(error))
    for rank, exc in enumerate(seen):
        if exc is None:
            continue
        if rank == ctx.rank and error is not None:
            raise error
        assert isinstance(exc, BaseException)
        try:
            raise type(exc)(f"rank {rank}: {first_line(exc)}")
        except TypeError:  # an exception type with another signature
            raise RuntimeError(f"rank {rank}: {first_line(exc)}") from None


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


SAME_AS_RANK_0 = "__same_as_rank_0__"
"""Key of the marker ``{SAME_AS_RANK_0: True}`` that stands, in a rank's checkpoint part, for a
subtree equal to rank 0's (stored once, in the top-level section)."""


def same(a: Any, b: Any) -> bool:
    """Whether two leaves of a state are equal (tensors: dtype, shape and every element)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and bool(torch.equal(a.cpu(), b.cpu()))
        )
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and bool(np.array_equal(a, b))
        )
    return type(a) is type(b) and a == b


def shared_marker(tree: Any, base: Any) -> Any:
    """``tree`` with every subtree equal to ``base``'s replaced by `SAME_AS_RANK_0`."""
    marker = {SAME_AS_RANK_0: True}
    if isinstance(tree, Mapping) and isinstance(base, Mapping):
        out = {k: shared_marker(v, base[k]) if k in base else v for k, v in tree.items()}
        if out.keys() == base.keys() and all(is_marker(v) for v in out.values()):
            return marker
        return out
    if isinstance(tree, (list, tuple)) and isinstance(base, (list, tuple)) and type(tree) is type(base):
        if len(tree) != len(base):
            return tree
        items = [shared_marker(v, b) for v, b in zip(tree, base, strict=True)]
        if all(is_marker(v) for v in items):
            return marker
        return type(tree)(items)
    if isinstance(tree, (Mapping, list, tuple)) or isinstance(base, (Mapping, list, tuple)):
        return tree
    return marker if same(tree, base) else tree


def fill_shared(tree: Any, base: Any) -> Any:
    """Undo `shared_marker`; ``ValueError`` for a marker where ``base`` has nothing."""
    if is_marker(tree):
        return base
    if isinstance(tree, Mapping):
        if not any(holds_marker(v) for v in tree.values()):
            return dict(tree)
        if not isinstance(base, Mapping):
            raise ValueError("a rank's agent state refers to rank 0's where rank 0 has no such entry")
        return {k: fill_shared(v, base.get(k)) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        if not any(holds_marker(v) for v in tree):
            return tree
        if not isinstance(base, (list, tuple)) or len(base) != len(tree):
            raise ValueError("a rank's agent state refers to rank 0's where rank 0 has no such entry")
        return type(tree)(fill_shared(v, b) for v, b in zip(tree, base, strict=True))
    return tree


def is_marker(tree: Any) -> bool:
    return isinstance(tree, Mapping) and tree.keys() == {SAME_AS_RANK_0}


def holds_marker(tree: Any) -> bool:
    if isinstance(tree, Mapping):
        return is_marker(tree) or any(holds_marker(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return any(holds_marker(v) for v in tree)
    return False


def to_cpu(tree: Any) -> Any:
    """``tree`` with every tensor copied to the CPU (sent to rank 0 by pickling)."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu()
    if isinstance(tree, Mapping):
        return {k: to_cpu(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(to_cpu(v) for v in tree)
    return tree


RANK_PARTS = ("agent", "env", "rng", "collector")
"""A rank's own sections of a checkpoint (``ranks[r - 1]`` for rank ``r >= 1``)."""


def saved_world_size(state: Mapping[str, Any], where: str) -> int:
    """The number of ranks that wrote ``state`` (1 without ``meta["world_size"]``).

    Raises:
        CheckpointError: a bad world size, or a ``ranks`` section without one dict per rank but 0.
    """
    world = state["meta"].get("world_size", 1)
    if type(world) is not int or world < 1:
        raise CheckpointError(f"{where}: the world size in the run identity section is {brief(world, 20)}")
    ranks = state.get("ranks", [])
    if (
        not isinstance(ranks, list)
        or len(ranks) != world - 1
        or not all(isinstance(p, Mapping) and all(k in p for k in ("agent", "env", "rng")) for p in ranks)
    ):
        raise CheckpointError(
            f"{where}: the per-rank section ('ranks') is damaged: {world} ranks need {world - 1} "
            "entries with 'agent', 'env' and 'rng'"
        )
    return world


def rank_seed(seed: int, rank: int, step: int = 0) -> int:
    """The global RNG seed of ``rank``: ``seed + rank`` (plus ``step`` on a mid-run restart)."""
    return (seed + rank + step) % 2**63
