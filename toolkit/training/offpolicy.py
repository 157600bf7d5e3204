"""The off-policy schedule of the shared loop: learning starts, train frequency, gradient steps.

Nothing before ``learning_starts`` env steps; then ``gradient_steps`` updates each time the global step
crosses a multiple of ``train_freq``, so the update-to-data ratio does not depend on the number of envs.
Target updates happen inside ``agent.update()``. Layer: training. Guide: docs/pages/dqn.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["OffPolicySchedule", "schedule_for"]


class OffPolicySchedule:
    """``gradient_steps`` calls of ``agent.update()`` per ``train_freq`` env steps after ``learning_starts``.

    Args:
        learning_starts: environment steps (all envs) before the first update.
        return_metrics: ``"last"``: the metrics of each round's last update; ``"all"``: every update's.

    Raises:
        ValueError: a negative ``learning_starts``, a count below 1, or an unknown ``return_metrics``.
    """

    def __init__(
        self, learning_starts: int, train_freq: int, gradient_steps: int = 1, *, return_metrics: str = "last"
    ) -> None:
        if int(learning_starts) < 0:
            raise ValueError(f"learning_starts must be >= 0, got {learning_starts!r}")
        if int(train_freq) < 1:
            raise ValueError(f"train_freq must be >= 1, got {train_freq!r}")
        if int(gradient_steps) < 1:
            raise ValueError(f"gradient_steps must be >= 1, got {gradient_steps!r}")
        if return_metrics not in ("last", "all"):
            raise ValueError(f"return_metrics must be 'last' or 'all', got {return_metrics!r}")
        self.learning_starts = int(learning_starts)
        self.train_freq = int(train_freq)
        self.gradient_steps = int(gradient_steps)
        self.return_metrics = return_metrics
        self.last_step = 0
        self.rounds = 0
        self.updates = 0
        self.refill_until = 0  # no updates before this global step (replay restarted empty)

    def rounds_due(self, prev: int, step: int) -> int:
        """Multiples of ``train_freq`` in ``(prev, step]`` past ``learning_starts``/``refill_until``."""
        lo = max(prev, self.learning_starts - 1, self.refill_until - 1)
        return max(0, step // self.train_freq - lo // self.train_freq) if step > lo else 0

    def after_step(self, agent: Any, step: int) -> list[Mapping[str, torch.Tensor]]:
        """Run the updates due now that the global env step is ``step``; return their metrics."""
        rounds = self.rounds_due(self.last_step, step)
        self.last_step = step
        out: list[Mapping[str, torch.Tensor]] = []
        for _ in range(rounds):
            metrics: Mapping[str, torch.Tensor] = {}
            for _ in range(self.gradient_steps):
                metrics = agent.update()
                self.updates += 1
                if self.return_metrics == "all":
                    out.append(metrics)
            self.rounds += 1
            if self.return_metrics == "last":
                out.append(metrics)
        return out

    def restart_collection(self, step: int) -> None:
        """The replay restarted empty at ``step``: wait ``learning_starts`` new steps."""
        self.refill_until = step + self.learning_starts

    def state_dict(self) -> dict[str, Any]:
        """Settings and counters (``refill_until`` only when set)."""
        state = {
            "learning_starts": self.learning_starts,
            "train_freq": self.train_freq,
            "gradient_steps": self.gradient_steps,
            "last_step": self.last_step,
            "rounds": self.rounds,
            "updates": self.updates,
        }
        if self.refill_until:
            state["refill_until"] = self.refill_until
        return state

    def check_state_dict(self, state: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` unless ``state`` is this schedule's; changes nothing."""
        if not isinstance(state, Mapping):
            raise ValueError(f"schedule state is a {type(state).__name__}, not a dict")
        for key in ("learning_starts", "train_freq", "gradient_steps", "last_step", "rounds", "updates"):
            value = state.get(key)
            if type(value) is not int or value < 0:
                raise ValueError(f"schedule state {key}={repr(value)[:20]} is missing or not an int >= 0")
        refill = state.get("refill_until", 0)
        if type(refill) is not int or refill < 0:
            raise ValueError(f"schedule state refill_until={repr(refill)[:20]} is not an int >= 0")
        for key in ("learning_starts", "train_freq", "gradient_steps"):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"schedule state has {key}={state[key]}, this schedule has {getattr(self, key)}"
                )

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output; ``ValueError`` (checked first) on a bad one."""
        self.check_state_dict(state)
        self.last_step = state["last_step"]
        self.rounds = state["rounds"]
        self.updates = state["updates"]
        self.refill_until = state.get("refill_until", 0)


def schedule_for(agent: Any) -> OffPolicySchedule:
    """The schedule of an off-policy agent from its config (never before one batch)."""
    cfg = agent.config
    starts = max(int(cfg.learning_starts), int(getattr(cfg, "batch_size", 0)))
    return OffPolicySchedule(starts, int(cfg.train_freq), int(cfg.gradient_steps))
