"""The frame replay's host bookkeeping: each env's write position in its ring of slots.

Pure Python ints, saved in the buffer's ``meta``. See docs/pages/replay.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from tritonrl.kernels.validate import check_int

__all__ = ["FrameCursor", "Range"]

Range = tuple[int, int]


def _row_ranges(e: int, a: int, b: int, ring: int) -> list[Range]:
    """Absolute slots ``[a, b)`` of env ``e`` as row ranges, split where the ring wraps."""
    if b <= a:
        return []
    base, pa = e * ring, a % ring
    end = pa + (b - a)
    if end <= ring:
        return [(base + pa, base + end)]
    return [(base + pa, base + ring), (base, base + end - ring)]


@dataclass
class FrameCursor:
    """Per env ints: ``top`` (newest slot, -1 before any), ``new_episode``, ``episode_start``, ``depth``.

    Absolute slot ``t`` of env ``e`` is row ``e * ring + t % ring``.
    """

    top: list[int]
    new_episode: list[bool]
    episode_start: list[int]
    depth: list[int]

    @classmethod
    def empty(cls, num_envs: int) -> FrameCursor:
        return cls([-1] * num_envs, [True] * num_envs, [0] * num_envs, [0] * num_envs)

    def pending(self, e: int, n_step: int) -> int:
        """Env ``e``'s started transitions whose n-step window is open."""
        if self.new_episode[e]:
            return 0
        top = self.top[e]
        return top - max(self.episode_start[e], top - n_step + 1)

    def advance(
        self, done: np.ndarray, ring: int, stack: int, n_step: int
    ) -> tuple[list[int], list[int], tuple[list[Range], list[Range]]]:
        """One ``add`` with episode ends ``done`` (bool ``[E]``).

        Returns:
            ``rows`` (``2E``: step slots, then next slots), their ``depths``, and the row ranges that
            become and stop being sampleable.
        """
        E = len(self.top)
        first, second, d_first, d_second = [], [], [], []
        on: list[Range] = []
        off: list[Range] = []
        for e in range(E):
            old = self.top[e]
            if self.new_episode[e]:
                h, d = old + 1, 1
                self.episode_start[e] = h
            else:
                h, d = old, self.depth[e]
            top = h + 1
            self.top[e], self.depth[e] = top, min(d + 1, stack)
            self.new_episode[e] = bool(done[e])
            first.append(e * ring + h % ring)
            second.append(e * ring + top % ring)
            d_first.append(d)
            d_second.append(self.depth[e])
            if done[e]:  # every open window of the episode closes here
                a, b = max(self.episode_start[e], h - n_step + 1), h + 1
            else:  # the window that started n - 1 steps ago closes
                a = h + 1 - n_step
                b = a + 1 if a >= self.episode_start[e] else a
            lo_new, lo_old = top - ring + stack, max(0, old - ring + stack)
            on += _row_ranges(e, max(a, lo_new), b, ring)
            off += _row_ranges(e, lo_old, lo_new, ring)
        return first + second, d_first + d_second, (on, off)

    def copy(self) -> FrameCursor:
        """An independent copy."""
        return FrameCursor(list(self.top), list(self.new_episode), list(self.episode_start), list(self.depth))

    def to_meta(self) -> dict[str, list[Any]]:
        """The saved state's ``meta`` entries of the cursor (see `from_meta`)."""
        return {
            "top": list(self.top),
            "new_episode": list(self.new_episode),
            "episode_start": list(self.episode_start),
            "depth": list(self.depth),
        }

    @classmethod
    def from_meta(cls, meta: dict[str, Any], E: int, stack: int) -> FrameCursor:
        """The cursor of a saved state's ``meta``, checked.

        Raises:
            ValueError: an entry is missing, of the wrong type or out of range.
        """
        lists: dict[str, list[Any]] = {}
        for k in ("top", "new_episode", "episode_start", "depth"):
            v = meta.get(k)
            if not isinstance(v, list) or len(v) != E:
                raise ValueError(f"state meta {k!r} must be a list of {E} entries, got {v!r}"[:200])
            lists[k] = v
        for e in range(E):
            top = check_int("state meta 'top'", lists["top"][e], low=-1)
            check_int("state meta 'episode_start'", lists["episode_start"][e], low=0, high=top + 1)
            check_int("state meta 'depth'", lists["depth"][e], low=0, high=stack)
            if not isinstance(lists["new_episode"][e], bool):
                raise ValueError(f"state meta 'new_episode' must hold bools, got {lists['new_episode'][e]!r}")
        return cls(
            list(lists["top"]), list(lists["new_episode"]), list(lists["episode_start"]), list(lists["depth"])
        )
