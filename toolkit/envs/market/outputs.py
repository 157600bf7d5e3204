"""Output buffers a batched env's step writes into: allocated once, reused only when nobody holds them.

Fresh large outputs every step cost page faults. `OutputPool` hands a set out again only
when its storages' use counts and its views' reference counts are back to what they were when it
was built (where either count is unavailable, every take builds a new set). On an accelerator,
another stream reading an output needs the caller to keep a reference until it is done.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["OutputPool", "OutputSet"]

_use_count: Callable[[int], int] | None = getattr(torch._C, "_storage_Use_Count", None)
_REUSE = _use_count is not None and bool(getattr(sys, "_is_gil_enabled", lambda: True)())


class OutputSet:
    """One set of output tensors: ``bases`` (the allocations), ``out`` (the views a step hands
    out), ``parts`` (views the step writes through, kept by the set; never handed out)."""

    __slots__ = ("bases", "out", "parts", "_storages", "_uses", "_refs")

    def __init__(self, bases: tuple[torch.Tensor, ...], out: tuple[Any, ...], parts: tuple[Any, ...]) -> None:
        self.bases = bases
        self.out = out
        self.parts = parts
        # the bases' storages, by address (stable: the set owns its bases and never resizes them)
        self._storages = tuple(b.untyped_storage()._cdata for b in bases)
        self._uses, self._refs = self._counts()

    def _counts(self) -> tuple[list[int], list[int]]:
        """The storage use counts of the bases and the reference counts of the handed-out views."""
        assert _use_count is not None
        return list(map(_use_count, self._storages)), list(map(sys.getrefcount, self.out))

    def free(self) -> bool:
        """Whether nothing outside this set refers to its tensors (their storages or its views)."""
        if not _REUSE:
            return False
        uses, refs = self._counts()
        return uses == self._uses and refs == self._refs


class OutputPool:
    """Up to ``size`` `OutputSet` built by ``make``; `take` returns a free one.

    Args:
        size: the most sets kept; beyond it a new set replaces the oldest (still held) one.
    """

    def __init__(self, make: Callable[[], OutputSet], size: int = 4) -> None:
        if size < 1:
            raise ValueError(f"an output pool keeps at least one set, got size={size}")
        self._make = make
        self._size = size
        self._sets: list[OutputSet] = []

    def take(self) -> OutputSet:
        """A set no one else holds (its tensors hold stale values: the caller overwrites them)."""
        for s in self._sets:
            if s.free():
                return s
        s = self._make()
        if len(self._sets) >= self._size:
            self._sets.pop(0)
        self._sets.append(s)
        return s

    def __len__(self) -> int:
        return len(self._sets)
