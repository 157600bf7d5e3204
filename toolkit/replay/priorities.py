"""What the two prioritized buffers share (:class:`~tritonrl.toolkit.replay.PrioritizedReplayBuffer`
and :class:`~tritonrl.toolkit.replay.PrioritizedFrameReplayBuffer`): their settings and checks, the
``beta`` schedule, and the reading of rejected priority batches. Guide: docs/pages/replay.md.
"""

from __future__ import annotations

import torch
from tritonrl.kernels.sumtree import BAD_INDEX, BAD_PRIORITY, SumTree
from tritonrl.kernels.validate import check_int
from tritonrl.toolkit.replay.inputs import check_fraction

__all__ = ["PrioritySchedule"]


class PrioritySchedule:
    """A mixin: call :meth:`_init_priorities` first in ``__init__`` (before the buffer's own
    checks allocate anything) and :meth:`_resolve_check` once ``self.device`` is set."""

    _tree: SumTree

    def _init_priorities(
        self,
        alpha: float,
        beta: float,
        beta_final: float,
        beta_steps: int,
        eps: float,
        check_priorities: bool | None,
    ) -> None:
        """Check and keep the PER settings.

        Raises:
            ValueError: a value out of range.  TypeError: ``check_priorities`` not None or a bool.
        """
        self.alpha = check_fraction("alpha", alpha)
        self.beta = check_fraction("beta", beta)
        self.beta_final = check_fraction("beta_final", beta_final)
        self.beta_steps = check_int("beta_steps", beta_steps, low=1)
        self.eps = check_fraction("eps", eps, positive=True)
        if check_priorities not in (None, True, False):
            raise TypeError(f"check_priorities must be None or a bool, got {check_priorities!r}")
        self._check_setting = check_priorities
        self._sample_calls = 0
        self._rejections_seen = 0

    def _resolve_check(self, device: torch.device) -> None:
        """``check_priorities``: the setting, or by default at once on a CPU (free there) and at
        :meth:`check` on an accelerator (a read there is a sync)."""
        setting = self._check_setting
        self.check_priorities = device.type == "cpu" if setting is None else setting

    @property
    def sample_calls(self) -> int:
        """Calls of :meth:`sample` so far: the position of the ``beta`` schedule. Settable (a
        non-negative int), so that a fresh buffer can continue a schedule: an agent resumed
        without its replay (a data-parallel run on another number of ranks)."""
        return self._sample_calls

    @sample_calls.setter
    def sample_calls(self, value: int) -> None:
        self._sample_calls = check_int("sample_calls", value, low=0)

    @property
    def current_beta(self) -> float:
        """The IS exponent the next :meth:`sample` uses (linear schedule over ``beta_steps``)."""
        frac = min(1.0, self._sample_calls / self.beta_steps)
        return self.beta + (self.beta_final - self.beta) * frac

    @property
    def rejected_updates(self) -> int:
        """Number of rejected :meth:`update_priorities` batches so far (a sync on CUDA)."""
        return int(self._tree.status[0])

    def _raise_rejected(self, rows: str) -> None:
        """Raise if the tree counted rejected batches since the last call (reads two int32: one
        sync on CUDA); ``rows`` names the valid index range in the message.

        Raises:
            ValueError: names what was wrong (non-finite TD errors, indices out of range).
        """
        rejected, reason = (int(v) for v in self._tree.status.tolist())
        if rejected > self._rejections_seen:
            n_new = rejected - self._rejections_seen
            self._rejections_seen = rejected
            what = []
            if reason & BAD_PRIORITY:
                what.append("td_errors contain NaN or infinite values")
            if reason & BAD_INDEX:
                what.append(f"indices outside {rows}")
            raise ValueError(
                f"update_priorities rejected {n_new} batch(es) ({'; '.join(what)}); "
                "those batches changed nothing in the buffer"
            )
