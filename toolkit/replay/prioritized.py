"""Prioritized replay (Schaul et al., 2016, proportional variant) on the device.

``P(i) = p_i**alpha / sum_j p_j**alpha``, sampled stratified by a sum-tree descent
([`tritonrl.kernels.sumtree`][tritonrl.kernels.sumtree]); IS weights are normalised by the global minimum
priority (so ``w <= 1``); ``beta`` anneals linearly; new transitions get the running maximum priority. Bad
priority batches are rejected on the device and counted. See docs/pages/replay.md.
"""

from __future__ import annotations

from typing import Any

import torch
from tritonrl.kernels.sumtree import (
    SumTree,
    geometry,
    leaves,
    leaves_for,
    new_sumtree,
    per_insert,
    per_sample,
    per_sample_unchecked,
    per_update,
    per_update_unchecked,
    rebuild,
)
from tritonrl.toolkit.replay.buffer import ReplayBatch, ReplayBuffer
from tritonrl.toolkit.replay.priorities import PrioritySchedule

__all__ = ["PrioritizedReplayBuffer"]

# the TD-error dtypes per_update takes (others go through its checks, which name the problem)
_TD_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


class PrioritizedReplayBuffer(PrioritySchedule, ReplayBuffer):
    """Proportional prioritized replay with stratified sampling and global IS-weight normalisation.

    Takes every argument of [`ReplayBuffer`][tritonrl.toolkit.replay.ReplayBuffer], plus:

    Args:
        alpha: priority exponent in ``[0, 1]`` (0 = uniform).
        beta: initial importance-sampling exponent in ``[0, 1]``.
        beta_final: exponent reached after ``beta_steps`` calls of
            [`sample`][tritonrl.toolkit.replay.prioritized.PrioritizedReplayBuffer.sample].
        beta_steps: length of the linear annealing, in
            [`sample`][tritonrl.toolkit.replay.prioritized.PrioritizedReplayBuffer.sample] calls (>= 1).
        eps: added to ``|td_error|`` so that no priority is 0 (> 0).
        check_priorities: raise in `update_priorities` when a batch was rejected; ``None``:
            on CPU yes, on an accelerator no (call
            [`check`][tritonrl.toolkit.replay.prioritized.PrioritizedReplayBuffer.check] instead: it syncs).

    Raises:
        ValueError / TypeError: an argument is out of range or of the wrong type.
    """

    def _allocate(self) -> None:
        super()._allocate()
        self._set_tree(new_sumtree(self.capacity, self.device))

    @classmethod
    def memory_bytes(cls, capacity: int, obs_shape: tuple[int, ...], **kwargs: Any) -> dict[str, int]:
        """`ReplayBuffer.memory_bytes` plus the priority sum tree."""
        parts = super().memory_bytes(capacity, obs_shape, **kwargs)
        g = geometry(leaves_for(capacity))
        parts["priorities"] = 4 * (g.sum_size + g.min_size + g.P)
        return parts

    # ---- priorities ----------------------------------------------------------------------------

    def _set_tree(self, tree: SumTree) -> None:
        """Adopt ``tree``; on CPU keep a numpy view of its status for `check`."""
        self._tree = tree
        self._status_host = tree.status.numpy() if tree.status.is_cpu else None

    def _on_commit(self, pos: int, count: int) -> None:
        first = min(count, self.capacity - pos)  # slots pos .. pos + count - 1, wrapping once
        per_insert(self._tree, pos, first, alpha=self.alpha)
        if count > first:
            per_insert(self._tree, 0, count - first, alpha=self.alpha)

    def update_priorities(self, indices: Any, td_errors: Any) -> None:
        """Set ``p_i = |td_errors| + eps`` for ``indices``; the last of duplicates wins.

        Args:
            indices: int ``[B]`` slots (tensor, array or list).
            td_errors: float ``[B]``, on any device.

        Raises:
            ValueError: lengths differ or not 1-D; with priority checking on, also NaN/inf TD errors
                or indices outside ``[0, len)`` (the batch is then ignored).
            TypeError: non-integer indices or non-floating TD errors.
        """
        batch = self._priority_batch(indices, td_errors, self._size == 0)
        if batch is None:
            return
        idx, td = batch
        if idx.dtype != torch.int64 or idx.device != self.device:
            idx = idx.to(device=self.device, dtype=torch.int64)
        if td.device != self.device:
            td = td.to(device=self.device)
        idx, td = idx.contiguous(), td.contiguous()
        alpha, eps = self.alpha, self.eps
        if td.dtype in _TD_DTYPES and type(alpha) is float and type(eps) is float and alpha >= 0 and eps > 0:
            # what per_update would check holds: the buffer's own tree and size, 1-D contiguous
            # tensors of equal length on its device, int64 indices, the exponents of __init__
            per_update_unchecked(self._tree, idx, td, alpha, eps, self._size)
        else:  # alpha or eps reassigned since __init__, or an unusual dtype: the checked op raises
            per_update(self._tree, idx, td, alpha=alpha, eps=eps, size=self._size)
        if self.check_priorities:
            self.check()

    def check(self) -> None:
        """Raise if an `update_priorities` batch was rejected since the last check (syncs).

        Raises:
            ValueError: names what was wrong.
        """
        host = self._status_host
        if host is not None and host[0] <= self._rejections_seen:  # CPU, nothing new rejected
            return
        self._raise_rejected(f"[0, {self._size})")

    def priorities(self) -> torch.Tensor:
        """The stored leaf values ``p_i ** alpha`` of the ``len(self)`` transitions, f32 (a copy)."""
        return leaves(self._tree)[: self._size].clone()

    def rebuild_tree(self, exact: bool = False) -> None:
        """Recompute the sum and min trees from their leaves (``exact``: each sum node from an f64 sum)."""
        rebuild(self._tree, exact=exact)

    # ---- sampling ------------------------------------------------------------------------------

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> ReplayBatch:
        """``batch_size`` transitions, one per equal-mass stratum, with IS weights; advances ``beta``.

        Raises:
            ValueError: empty buffer, or ``batch_size`` not in ``[1, len(self)]``.
        """
        self._check_batch_size(batch_size)
        if generator is None:  # the device's default generator: the same stream as below
            uniforms = torch.rand(batch_size, device=self.device)
        else:
            uniforms = torch.rand(batch_size, generator=generator, device=generator.device).to(self.device)
        beta = self.current_beta
        if type(beta) is float and beta >= 0:  # uniforms: f32 [B] contiguous, on the device
            idx, weights = per_sample_unchecked(self._tree, uniforms, beta, self._size)
        else:  # beta or beta_final reassigned since __init__: the checked op names the problem
            idx, weights = per_sample(self._tree, uniforms, beta, self._size)
        self._sample_calls += 1
        return self._gather(idx, weights)

    # ---- checkpoints ---------------------------------------------------------------------------

    def _state_leaves(self, staged: dict[str, Any]) -> int:
        return int(staged["meta"]["size"])  # the stored transitions'

    def _check_state_priorities(self, staged: dict[str, Any]) -> None:
        prio = staged["priorities"].double()
        if staged["meta"]["size"] and not bool(torch.isfinite(prio).all() & (prio > 0).all()):
            raise ValueError("state priorities must be finite and > 0")

    def apply_state(self, staged: dict[str, Any]) -> None:
        """As `ReplayBuffer.apply_state`, rebuilding the sum tree from the staged priorities."""
        super().apply_state(staged)
        size = staged["meta"]["size"]
        tree = new_sumtree(self.capacity, self.device)
        leaves(tree)[:size] = staged["priorities"]
        tree.mins[:size] = staged["priorities"]
        rebuild(tree)
        self._adopt_priorities(tree, staged)
        self._set_tree(tree)
