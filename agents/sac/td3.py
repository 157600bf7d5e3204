"""The TD3 agent (as CleanRL's ``td3_continuous_action.py``): twin critics, target policy
smoothing with clipped noise, the actor and both targets updated every ``policy_frequency``
critic updates, Gaussian exploration noise. Guide: docs/pages/sac.md."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import nn
from tritonrl.agents.sac.base import ContinuousAgent
from tritonrl.agents.sac.config import TD3_KIND, TD3Config
from tritonrl.agents.sac.network import DeterministicActor, TwinQ
from tritonrl.agents.sac.policy import DeterministicPolicy
from tritonrl.toolkit.optim import MasterWeightOptimizer
from tritonrl.toolkit.replay import ReplayBatch

__all__ = ["TD3Agent"]

_DEFAULT_CONFIG = TD3Config(learning_starts=5_000, tags=("td3",))
"""The config of an agent built without one: the ``td3`` preset's (a test keeps them equal)."""


class TD3Agent(ContinuousAgent):
    """A TD3 agent for ``Box`` actions of any shape.

    Args:
        observation_space: a gymnasium ``Box`` (flattened for the networks).
        action_space: a ``Box`` with finite bounds.
        config: a [`TD3Config`][tritonrl.agents.sac.config.TD3Config] (default: the ``td3`` preset).
        num_envs: environments per ``act``/``observe`` call.
        dist: the data-parallel context (``None``: a single process).

    Raises:
        ValueError: a space that is not a ``Box``, infinite action bounds, or a replay that does
            not fit in the device's memory.
        TypeError: ``config`` is not a [`TD3Config`][tritonrl.agents.sac.config.TD3Config].
    """

    kind = TD3_KIND
    config_class = TD3Config
    part_keys = (
        "actor",
        "actor_target",
        "critic",
        "critic_target",
        "actor_optimizer",
        "critic_optimizer",
        "replay",
        "actor_target_master",
        "critic_target_master",
    )

    default_config = _DEFAULT_CONFIG
    policy_class = DeterministicPolicy
    actor: DeterministicActor

    def _build(self, cfg: TD3Config) -> None:
        n_obs, D, dev, dt = self.obs_dim, self.action_dim, self.device, self.dtype
        self.actor, self.critic = self._build_seeded(
            lambda: (
                DeterministicActor(n_obs, D, cfg.hidden, device=dev, dtype=dt),
                TwinQ(n_obs, D, cfg.hidden, device=dev, dtype=dt),
            )
        )
        self.actor_target = copy.deepcopy(self.actor)
        self.critic_target = copy.deepcopy(self.critic)
        self.actor_target.requires_grad_(False)
        self.critic_target.requires_grad_(False)
        self.actor_optimizer = self._adam(self.actor.parameters(), cfg.lr)
        self.critic_optimizer = self._adam(self.critic.parameters(), cfg.lr)
        self._actor_target_master = self._target_masters(self.actor_target)
        self._critic_target_master = self._target_masters(self.critic_target)

    # ------------------------------------------------------------------ parts

    def _nets(self) -> dict[str, nn.Module]:
        return {
            "actor": self.actor,
            "actor_target": self.actor_target,
            "critic": self.critic,
            "critic_target": self.critic_target,
        }

    def _optimizers(self) -> dict[str, tuple[MasterWeightOptimizer, float]]:
        lr = self.config.lr
        return {
            "actor_optimizer": (self.actor_optimizer, lr),
            "critic_optimizer": (self.critic_optimizer, lr),
        }

    def _targets(
        self,
    ) -> dict[str, tuple[nn.Module, nn.Module, list[torch.Tensor] | None, MasterWeightOptimizer]]:
        return {
            "actor_target_master": (
                self.actor_target,
                self.actor,
                self._actor_target_master,
                self.actor_optimizer,
            ),
            "critic_target_master": (
                self.critic_target,
                self.critic,
                self._critic_target_master,
                self.critic_optimizer,
            ),
        }

    # ------------------------------------------------------------------ acting

    def _explore(self, actor: Any, x: torch.Tensor, randn: Callable[[int], torch.Tensor]) -> torch.Tensor:
        noise = randn(x.shape[0]) * self.config.exploration_noise
        return (actor(x) + noise).clamp(-1.0, 1.0)

    def _greedy(self, actor: Any, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = actor(x)
        return out

    # ------------------------------------------------------------------ learning

    def _critic_loss(
        self, batch: ReplayBatch, noise: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The TD loss of both critics (f32); ``noise [B, D]``: the clipped smoothing noise."""
        with torch.no_grad():
            next_a = (self.actor_target(batch.next_obs) + noise).clamp(-1.0, 1.0)
            q1_t, q2_t = self.critic_target(batch.next_obs, next_a.to(self.dtype))
            y = batch.reward + batch.discount * torch.minimum(q1_t, q2_t)
        return self._twin_td_loss(batch, y)

    def _actor_loss(self, obs: torch.Tensor) -> torch.Tensor:
        """``-mean Q1(s, pi(s))`` (f32); the second critic is not run."""
        critic = cast(TwinQ, self.critic)
        return -critic.q1(obs, self.actor(obs).to(self.dtype)).mean()

    def update(self) -> dict[str, torch.Tensor]:
        """One critic step; every ``policy_frequency`` updates, an actor step and the target updates.

        Returns f32 scalar ``losses/*`` metrics on the device, without a host read.

        Raises:
            RuntimeError: the replay holds fewer transitions than `batch_size`.
            ValueError: with ``inputs.check_at_update``, a deferred input check failed.
        """
        cfg = self.config
        batch = self._sample()
        noise = (self._randn(batch.obs.shape[0]) * cfg.policy_noise).clamp(-cfg.noise_clip, cfg.noise_clip)
        metrics = self._critic_step(batch, noise)
        if self.updates % cfg.policy_frequency == 0:
            metrics["losses/actor_loss"] = self._actor_step(batch.obs)
            self._soft_update("actor_target_master")
            self._soft_update("critic_target_master")
        self.updates += 1
        return metrics
