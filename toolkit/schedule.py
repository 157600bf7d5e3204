"""The schedules of the shared loop: when the agent learns.

[`OnPolicySchedule`][tritonrl.toolkit.schedule.OnPolicySchedule] updates after every rollout (PPO);
[`OffPolicySchedule`][tritonrl.toolkit.schedule.OffPolicySchedule] updates ``gradient_steps`` times per
``train_freq`` environment steps (summed over the vector envs), so the update-to-data ratio does not depend on
the number of environments. A core module: imports torch only. See docs/pages/training.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["OffPolicySchedule", "OnPolicySchedule", "offpolicy_schedule", "onpolicy_schedule"]


class OffPolicySchedule:
    """``gradient_steps`` calls of ``agent.update()`` per ``train_freq`` env steps after ``learning_starts``.

    Args:
        learning_starts: environment steps (all envs) before the first update.
        return_metrics: ``"last"``: the metrics of each round's last update; ``"all"``: every update's.

    Raises:
        ValueError: a negative ``learning_starts``, ``train_freq`` or ``gradient_steps`` below 1,
            or an unknown ``return_metrics``.
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
        """Multiples ``k * train_freq`` in ``(prev, step]`` that are ``>= learning_starts`` (and
        ``>= refill_until``, see `restart_collection`)."""
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
        """The replay restarted empty at global step ``step``: no updates until ``learning_starts`` new
        env steps have refilled it."""
        self.refill_until = step + self.learning_starts

    def state_dict(self) -> dict[str, Any]:
        """Settings and counters (``refill_until`` only when a refill is set: a checkpoint without
        it loads as 0)."""
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
        """Raise ``ValueError`` unless ``state`` is this schedule's (same settings, counters that are
        non-negative ints); changes nothing."""
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
        """Restore `state_dict` output; ``ValueError`` (checked first) for other settings or damage."""
        self.check_state_dict(state)
        self.last_step = state["last_step"]
        self.rounds = state["rounds"]
        self.updates = state["updates"]
        self.refill_until = state.get("refill_until", 0)


def offpolicy_schedule(agent: Any) -> OffPolicySchedule:
    """The schedule of an off-policy agent from its config (``learning_starts``, ``train_freq``,
    ``gradient_steps``); learning never starts before the buffer holds one batch."""
    cfg = agent.config
    starts = max(int(cfg.learning_starts), int(getattr(cfg, "batch_size", 0)))
    return OffPolicySchedule(starts, int(cfg.train_freq), int(cfg.gradient_steps))


class OnPolicySchedule:
    """Call ``agent.update()`` after every ``rollout_steps`` vector steps (``T * num_envs`` transitions).

    Raises:
        ValueError: ``rollout_steps < 1``.
    """

    def __init__(self, rollout_steps: int) -> None:
        if not isinstance(rollout_steps, int) or rollout_steps < 1:
            raise ValueError(f"rollout_steps must be a positive int, got {rollout_steps!r}")
        self.rollout_steps = rollout_steps
        self.vector_steps = 0
        self.updates = 0

    def after_step(self, agent: Any, step: int) -> list[Mapping[str, torch.Tensor]]:
        """Count one vector step; at the end of a rollout run ``agent.update()`` and return its metrics."""
        del step
        self.vector_steps += 1
        if self.vector_steps % self.rollout_steps:
            return []
        self.updates += 1
        return [agent.update()]

    def restart_collection(self, step: int) -> None:
        """The rollout restarted empty: the next update follows a full rollout; ``step`` is unused."""
        del step
        self.vector_steps -= self.vector_steps % self.rollout_steps

    def state_dict(self) -> dict[str, Any]:
        """The counters."""
        return {
            "rollout_steps": self.rollout_steps,
            "vector_steps": self.vector_steps,
            "updates": self.updates,
        }

    def check_state_dict(self, state: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` unless ``state`` is this schedule's; changes nothing."""
        if not isinstance(state, Mapping):
            raise ValueError(f"schedule state is a {type(state).__name__}, not a dict")
        for key in ("rollout_steps", "vector_steps", "updates"):
            value = state.get(key)
            if type(value) is not int or value < 0:
                raise ValueError(f"schedule state {key}={repr(value)[:20]} is missing or not an int >= 0")
        if state["rollout_steps"] != self.rollout_steps:
            raise ValueError(
                f"schedule state has rollout_steps={state['rollout_steps']}, this schedule "
                f"has {self.rollout_steps}"
            )

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the counters; ``ValueError`` (checked first) for another rollout length or damage."""
        self.check_state_dict(state)
        self.vector_steps = state["vector_steps"]
        self.updates = state["updates"]


def onpolicy_schedule(agent: Any) -> OnPolicySchedule:
    """The schedule the CLI uses for an on-policy agent: its rollout length ``agent.config.num_steps``."""
    return OnPolicySchedule(int(agent.config.num_steps))
