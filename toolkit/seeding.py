"""The seeds of an agent's sampling generator: per data-parallel rank (`rank_seed`) and after a
generator state that cannot be restored ([`reseed`][tritonrl.toolkit.seeding.reseed]). A core module: imports
torch only.
"""

from __future__ import annotations

import torch

__all__ = ["RANK_SEED_STRIDE", "RESEED_STRIDE", "rank_seed", "reseed"]

RESEED_STRIDE = 7919
"""A generator state saved on another device type is replaced by ``seed + RESEED_STRIDE * updates``
(a prime, so that runs with nearby seeds and update counts do not share a stream)."""

RANK_SEED_STRIDE = 1_000_003
"""Rank ``r`` of a data-parallel run seeds its agent's generator with ``seed + RANK_SEED_STRIDE * r``
([`rank_seed`][tritonrl.toolkit.seeding.rank_seed]; a prime far above any run's update count, so that the
ranks' streams, and their reseeds after `RESEED_STRIDE` steps, do not meet)."""


def rank_seed(seed: int, rank: int) -> int:
    """The seed of rank ``rank``'s sampling generator (exploration, minibatch order, replay
    sampling): ``seed + RANK_SEED_STRIDE * rank``; rank 0 (and a single process) uses ``seed``."""
    return int(seed) + RANK_SEED_STRIDE * int(rank)


def reseed(generator: torch.Generator, seed: int, updates: int) -> None:
    """Reseed ``generator`` deterministically from ``seed`` and the update count: what replaces a
    generator state saved on another device type (CUDA <-> CPU states cannot cross over)."""
    generator.manual_seed(seed + RESEED_STRIDE * updates)
