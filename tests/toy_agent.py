"""A toy agent for loop tests: random actions, a counter that 'learns' (enough to test resume)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


class ToyAgent:
    """Random actions from torch's global RNG; a counter that 'learns' (enough to test resume)."""

    def __init__(self, n_actions: int) -> None:
        self.n = n_actions
        self.seen = torch.zeros(())
        self.reward_sum = torch.zeros(())
        self.updates = 0

    def act(self, obs: torch.Tensor, explore: bool = True) -> torch.Tensor:
        if not explore:
            return torch.zeros(obs.shape[0], dtype=torch.long)
        return torch.randint(0, self.n, (obs.shape[0],))

    def observe(self, obs, action, reward, next_obs, terminated, truncated) -> None:
        self.seen += obs.shape[0]
        self.reward_sum += reward.sum() + next_obs.sum() * 1e-3

    def update(self) -> dict[str, torch.Tensor]:
        self.updates += 1
        return {"losses/toy": self.reward_sum / self.seen, "losses/noise": torch.rand(())}

    def state_dict(self) -> dict[str, Any]:
        return {"seen": self.seen, "reward_sum": self.reward_sum, "updates": self.updates}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.seen = state["seen"].clone()
        self.reward_sum = state["reward_sum"].clone()
        self.updates = state["updates"]
