"""The on-policy schedule of the shared loop: collect a rollout of T vector steps, then update once.

The agent's ``update()`` runs its epochs over the rollout it stored; this schedule only decides when. Layer:
training. Guide: docs/pages/ppo.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["OnPolicySchedule", "schedule_for"]


class OnPolicySchedule:
    """Call ``agent.update()`` after every ``rollout_steps`` vector steps (``T``).

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
        """The rollout restarted empty: the next update after a full rollout."""
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
        """Restore the counters; ``ValueError`` (checked first) on a bad state."""
        self.check_state_dict(state)
        self.vector_steps = state["vector_steps"]
        self.updates = state["updates"]


def schedule_for(agent: Any) -> OnPolicySchedule:
    """The schedule for an on-policy agent: its rollout length ``agent.config.num_steps``."""
    return OnPolicySchedule(int(agent.config.num_steps))
