"""The policy modules of SAC and TD3: the deterministic action on the space's bounds.

``agent.policy()`` is an f32 copy of the actor with the bounds as buffers (SAC:
``center + scale * tanh(mean)``, TD3: ``center + scale * actor(obs)``); observations are
flattened inside.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import torch
from torch import nn
from tritonrl.toolkit.policy import PolicyModule

__all__ = ["ContinuousPolicy", "DeterministicPolicy", "SquashedPolicy"]


class ContinuousPolicy(PolicyModule):
    """An actor with the action bounds: ``obs [B, *obs_shape] -> [B, *action_shape]`` f32 within
    the bounds; subclasses define [`greedy`][tritonrl.agents.sac.policy.ContinuousPolicy.greedy].

    Args:
        actor: the actor network (``agent.policy()`` passes an f32 copy).
        observation_space: a ``Box`` of any shape (flattened for the actor).
        action_space: a ``Box`` with finite bounds.
        center: ``[D]`` the middle of each action dimension's bounds.
        scale: ``[D]`` the half-range of each action dimension.
    """

    center: torch.Tensor
    scale: torch.Tensor

    def __init__(
        self,
        actor: nn.Module,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        center: torch.Tensor,
        scale: torch.Tensor,
    ) -> None:
        super().__init__(observation_space, action_space)
        self.actor = actor
        self.obs_dim = math.prod(self.obs_shape)
        self.action_shape = tuple(int(s) for s in (action_space.shape or ()))
        self.register_buffer("center", center.float().clone(), persistent=False)
        self.register_buffer("scale", scale.float().clone(), persistent=False)

    def mirrors(self) -> list[torch.Tensor]:
        """The actor's parameters then buffers (the agent's ``learner_tensors()``)."""
        return [*self.actor.parameters(), *self.actor.buffers()]

    def ingest(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations as the actor takes them: ``[B, O]`` in its dtype."""
        dtype = next(self.actor.parameters()).dtype
        return obs.to(dtype).reshape(obs.shape[0], self.obs_dim)

    def greedy(self, x: torch.Tensor) -> torch.Tensor:
        """The deterministic action ``[B, D]`` in ``[-1, 1]`` (f32) for ingested ``x``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement greedy")

    def to_env(self, a: torch.Tensor) -> torch.Tensor:
        """``[B, D]`` in ``[-1, 1]`` -> ``[B, *action_shape]`` within the bounds (f32)."""
        return (self.center + self.scale * a).reshape(a.shape[0], *self.action_shape)

    def act(self, obs: torch.Tensor, *state: torch.Tensor) -> torch.Tensor:
        """The deterministic actions of a batch, on the bounds."""
        return self.to_env(self.greedy(self.ingest(obs)))

    def outputs(self, obs: torch.Tensor, *state: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{"action"}`` of a batch."""
        return {"action": self.act(obs)}


class SquashedPolicy(ContinuousPolicy):
    """SAC's policy module: ``center + scale * tanh(mean)`` of the squashed Gaussian actor."""

    family = "sac"

    def greedy(self, x: torch.Tensor) -> torch.Tensor:
        """``tanh(mean)``."""
        greedy: Any = self.actor.greedy  # a SquashedGaussianActor's method
        out: torch.Tensor = greedy(x)
        return out


class DeterministicPolicy(ContinuousPolicy):
    """TD3's policy module: ``center + scale * actor(obs)``."""

    family = "td3"

    def greedy(self, x: torch.Tensor) -> torch.Tensor:
        """The actor's output."""
        out: torch.Tensor = self.actor(x)
        return out
