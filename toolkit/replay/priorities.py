"""What the two prioritized buffers share: settings, the ``beta`` schedule, the checks of
``update_priorities``, their part of the saved state. See docs/pages/replay.md.
"""

from __future__ import annotations

import abc
from typing import Any

import torch
from tritonrl.kernels.sumtree import BAD_INDEX, BAD_PRIORITY, SumTree
from tritonrl.kernels.validate import check_int
from tritonrl.toolkit.replay.inputs import check_fraction

__all__ = ["PrioritySchedule"]


class PrioritySchedule(abc.ABC):
    """Mixin before a `ReplayBuffer` in the bases: the PER settings.

    The buffer keeps its tree in ``_tree`` and implements the abstract `priorities`,
    `_state_leaves` and `_check_state_priorities`.
    """

    _tree: SumTree
    device: torch.device

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        *,
        alpha: float = 0.6,
        beta: float = 0.4,
        beta_final: float = 1.0,
        beta_steps: int = 100_000,
        eps: float = 1e-6,
        check_priorities: bool | None = None,
        **kwargs: Any,
    ) -> None:
        self._init_priorities(alpha, beta, beta_final, beta_steps, eps, check_priorities)
        super().__init__(capacity, obs_shape, **kwargs)  # type: ignore[call-arg]
        self._resolve_check(self.device)

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
            ValueError: a value out of range.
            TypeError: ``check_priorities`` not None or a bool.
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
        """``check_priorities``, by default on a CPU only."""
        setting = self._check_setting
        self.check_priorities = device.type == "cpu" if setting is None else setting

    @property
    def sample_calls(self) -> int:
        """Calls of `sample` so far (the ``beta`` schedule position); settable."""
        return self._sample_calls

    @sample_calls.setter
    def sample_calls(self, value: int) -> None:
        self._sample_calls = check_int("sample_calls", value, low=0)

    @property
    def current_beta(self) -> float:
        """The IS exponent the next `sample` uses (linear schedule over ``beta_steps``)."""
        frac = min(1.0, self._sample_calls / self.beta_steps)
        return self.beta + (self.beta_final - self.beta) * frac

    @property
    def rejected_updates(self) -> int:
        """Number of rejected `update_priorities` batches so far (a sync on CUDA)."""
        return int(self._tree.status[0])

    def _raise_rejected(self, rows: str) -> None:
        """Raise ``ValueError`` if the tree counted rejected batches (one sync); ``rows`` for the message."""
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

    # ---- update_priorities' arguments ----------------------------------------------------------

    def _priority_batch(
        self, indices: Any, td_errors: Any, empty: bool
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``update_priorities``' arguments as tensors, checked; ``None`` for an empty batch.

        Raises:
            TypeError: non-integer indices or non-floating TD errors.
            ValueError: not 1-D, lengths differ, or a non-empty batch for an empty buffer.
        """
        idx = indices if isinstance(indices, torch.Tensor) else torch.as_tensor(indices)
        td = td_errors if isinstance(td_errors, torch.Tensor) else torch.as_tensor(td_errors)
        if idx.dtype.is_floating_point or idx.dtype.is_complex or idx.dtype == torch.bool:
            raise TypeError(f"indices must have an integer dtype, got {idx.dtype}")
        if not td.dtype.is_floating_point:
            raise TypeError(f"td_errors must have a floating dtype, got {td.dtype}")
        if idx.dim() != 1 or td.dim() != 1:
            raise ValueError(
                f"indices and td_errors must be 1-D, got {tuple(idx.shape)} and {tuple(td.shape)}"
            )
        if idx.shape[0] != td.shape[0]:
            raise ValueError(f"td_errors has {td.shape[0]} entries but indices has {idx.shape[0]}")
        if idx.shape[0] == 0:
            return None
        if empty:
            raise ValueError("update_priorities on an empty buffer: no index is valid")
        return idx, td

    # ---- config and saved state ----------------------------------------------------------------

    def _config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = super()._config()  # type: ignore[misc]
        cfg.update(
            alpha=self.alpha,
            beta=self.beta,
            beta_final=self.beta_final,
            beta_steps=self.beta_steps,
            eps=self.eps,
        )
        return cfg

    @abc.abstractmethod
    def priorities(self) -> torch.Tensor:
        """The leaf values ``p ** alpha`` a saved state holds, f32 (a copy)."""

    def state_dict(self) -> dict[str, Any]:
        """The buffer's state plus ``priorities``, ``max_priority``, ``status`` and schedule counters."""
        sd: dict[str, Any] = super().state_dict()  # type: ignore[misc]
        sd["priorities"] = self.priorities()
        sd["max_priority"] = self._tree.max_priority.clone()
        sd["status"] = self._tree.status.clone()
        sd["meta"]["sample_calls"] = self._sample_calls
        sd["meta"]["rejections_seen"] = self._rejections_seen
        return sd

    @abc.abstractmethod
    def _state_leaves(self, staged: dict[str, Any]) -> int:
        """How many leaves a state's ``priorities`` hold."""

    @abc.abstractmethod
    def _check_state_priorities(self, staged: dict[str, Any]) -> None:
        """Value checks of the staged ``priorities``; raises ``ValueError``."""

    def parse_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """The buffer's staged state plus the priorities, the running max and the counters."""
        out: dict[str, Any] = super().parse_state(state)  # type: ignore[misc]
        n = self._state_leaves(out)
        for key, shape, dtype in (
            ("priorities", (n,), torch.float32),
            ("max_priority", (1,), torch.float32),
            ("status", (2,), torch.int32),
        ):
            t = state.get(key)
            if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape or t.dtype != dtype:
                raise ValueError(f"state tensor {key!r} is missing or not {dtype} {shape}")
            out[key] = t.to(self.device)
        self._check_state_priorities(out)
        mp = float(out["max_priority"][0])
        if not (mp > 0 and mp < float("inf")):
            raise ValueError(f"state max_priority must be finite and > 0, got {mp}")
        for key in ("sample_calls", "rejections_seen"):
            check_int(f"state meta {key!r}", out["meta"].get(key), low=0)
        return out

    def _adopt_priorities(self, tree: SumTree, staged: dict[str, Any]) -> None:
        """Give ``tree`` the staged running max and status; take the staged counters."""
        tree.max_priority.copy_(staged["max_priority"])
        tree.status.copy_(staged["status"])
        self._sample_calls = staged["meta"]["sample_calls"]
        self._rejections_seen = staged["meta"]["rejections_seen"]
