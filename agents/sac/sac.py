"""The SAC agent (SAC v2, as CleanRL's ``sac_continuous_action.py``): twin soft Q critics with
Polyak targets, a tanh-squashed Gaussian actor, automatic entropy tuning towards ``-dim(A)``.
Guide: docs/pages/sac.md.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from tritonrl.agents.sac.base import NO_CLIP, ContinuousAgent
from tritonrl.agents.sac.config import SAC_KIND, SACConfig
from tritonrl.agents.sac.network import SquashedGaussianActor, TwinQ
from tritonrl.agents.sac.policy import SquashedPolicy
from tritonrl.toolkit.compile import Compiled, escape
from tritonrl.toolkit.optim import MasterWeightOptimizer
from tritonrl.toolkit.replay import ReplayBatch

__all__ = ["LogAlpha", "SACAgent"]

_DEFAULT_CONFIG = SACConfig(tags=("sac",))
"""The config of an agent built without one: the ``sac`` preset's (a test keeps them equal)."""


class LogAlpha(nn.Module):
    """The log of the entropy coefficient: one 0-d f32 parameter (f32 in every training dtype: bf16
    is too coarse for it), starting at ``log(alpha0)``."""

    def __init__(self, alpha0: float = 1.0, *, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.value = nn.Parameter(torch.full((), math.log(alpha0), dtype=torch.float32, device=device))


class SACAgent(ContinuousAgent):
    """A soft actor-critic agent for ``Box`` actions of any shape.

    Args:
        observation_space: a gymnasium ``Box`` (flattened for the networks).
        action_space: a ``Box`` with finite bounds.
        config: a [`SACConfig`][tritonrl.agents.sac.config.SACConfig] (default: the ``sac`` preset).
        num_envs: environments per ``act``/``observe`` call.
        dist: the data-parallel context (``None``: a single process).

    Raises:
        ValueError: a space that is not a ``Box``, infinite action bounds, or a replay that does
            not fit in the device's memory.
        TypeError: ``config`` is not a [`SACConfig`][tritonrl.agents.sac.config.SACConfig].
    """

    kind = SAC_KIND
    config_class = SACConfig
    part_keys = (
        "actor",
        "critic",
        "critic_target",
        "log_alpha",
        "actor_optimizer",
        "critic_optimizer",
        "alpha_optimizer",
        "replay",
        "critic_target_master",
    )

    default_config = _DEFAULT_CONFIG
    policy_class = SquashedPolicy
    actor: SquashedGaussianActor

    def _build(self, cfg: SACConfig) -> None:
        n_obs, D, dev, dt = self.obs_dim, self.action_dim, self.device, self.dtype
        self.actor, self.critic = self._build_seeded(
            lambda: (
                SquashedGaussianActor(
                    n_obs,
                    D,
                    cfg.hidden,
                    torch.log(self.scale),
                    log_std_min=cfg.log_std_min,
                    log_std_max=cfg.log_std_max,
                    device=dev,
                    dtype=dt,
                ),
                TwinQ(n_obs, D, cfg.hidden, device=dev, dtype=dt),
            )
        )
        self.critic_target = copy.deepcopy(self.critic)
        self.critic_target.requires_grad_(False)
        self.log_alpha = LogAlpha(1.0 if cfg.autotune else cfg.alpha, device=dev)
        self.log_alpha.requires_grad_(cfg.autotune)
        self.target_entropy = -float(D)
        """The entropy the coefficient is tuned towards: ``-dim(A)``."""
        self.actor_optimizer = self._adam(self.actor.parameters(), cfg.policy_lr)
        self.critic_optimizer = self._adam(self.critic.parameters(), cfg.q_lr)
        self.alpha_optimizer = self._adam([self.log_alpha.value], cfg.q_lr) if cfg.autotune else None
        self._critic_target_master = self._target_masters(self.critic_target)
        self._learn_alpha = Compiled(self._alpha_loss, cfg.compile, self.device)

    # ------------------------------------------------------------------ parts

    def _nets(self) -> dict[str, nn.Module]:
        return {
            "actor": self.actor,
            "critic": self.critic,
            "critic_target": self.critic_target,
            "log_alpha": self.log_alpha,
        }

    def _optimizers(self) -> dict[str, tuple[MasterWeightOptimizer, float]]:
        cfg = self.config
        opts = {
            "actor_optimizer": (self.actor_optimizer, cfg.policy_lr),
            "critic_optimizer": (self.critic_optimizer, cfg.q_lr),
        }
        if self.alpha_optimizer is not None:
            opts["alpha_optimizer"] = (self.alpha_optimizer, cfg.q_lr)
        return opts

    def _targets(
        self,
    ) -> dict[str, tuple[nn.Module, nn.Module, list[torch.Tensor] | None, MasterWeightOptimizer]]:
        return {
            "critic_target_master": (
                self.critic_target,
                self.critic,
                self._critic_target_master,
                self.critic_optimizer,
            )
        }

    # ------------------------------------------------------------------ acting

    def _explore(self, actor: Any, x: torch.Tensor, randn: Callable[[int], torch.Tensor]) -> torch.Tensor:
        return actor.explore(x, randn(x.shape[0]))

    def _greedy(self, actor: Any, x: torch.Tensor) -> torch.Tensor:
        return actor.greedy(x)

    def alpha(self) -> torch.Tensor:
        """The entropy coefficient now: a 0-d f32 tensor on the device (no sync)."""
        return self.log_alpha.value.detach().exp()

    # ------------------------------------------------------------------ learning

    def _critic_loss(
        self, batch: ReplayBatch, noise: torch.Tensor, alpha: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The soft TD loss of both critics (f32) on one batch; ``noise [B, D]`` samples the next actions."""
        with torch.no_grad():
            next_a, next_logp = self.actor.sample(batch.next_obs, noise)
            q1_t, q2_t = self.critic_target(batch.next_obs, next_a.to(self.dtype))
            soft = torch.minimum(q1_t, q2_t) - alpha * next_logp
            y = batch.reward + batch.discount * soft
        return self._twin_td_loss(batch, y)

    def _actor_loss(self, obs: torch.Tensor, noise: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        """``mean(alpha * log pi - min Q)``, f32."""
        a, logp = self.actor.sample(obs, noise)
        q1, q2 = self.critic(obs, a.to(self.dtype))
        return (alpha * logp - torch.minimum(q1, q2)).mean()

    def _alpha_loss(self, logp: torch.Tensor) -> torch.Tensor:
        """``mean(-alpha * (log pi + target_entropy))`` (f32; the gradient reaches ``log_alpha`` only)."""
        return (-self.log_alpha.value.exp() * (logp + self.target_entropy)).mean()

    def update(self) -> dict[str, torch.Tensor]:
        """One critic step on a replay batch; the actor, alpha and target steps when due.

        Returns f32 scalar ``losses/*`` metrics on the device, without a host read.

        Raises:
            RuntimeError: the replay holds fewer transitions than `batch_size`.
            ValueError: with ``inputs.check_at_update``, a deferred input check failed.
        """
        cfg = self.config
        batch = self._sample()
        B = batch.obs.shape[0]
        alpha = self.alpha()
        metrics = self._critic_step(batch, self._randn(B), alpha)
        if self.updates % cfg.policy_frequency == 0:
            for _ in range(cfg.policy_frequency):  # as many actor steps as the delay skipped
                metrics.update(self._update_actor(batch.obs, alpha))
                if cfg.autotune:
                    alpha = self.alpha()
        if self.updates % cfg.target_network_frequency == 0:
            self._soft_update("critic_target_master")
        self.updates += 1
        return metrics

    def _update_actor(self, obs: torch.Tensor, alpha: torch.Tensor) -> dict[str, torch.Tensor]:
        """One actor step and, with ``autotune``, one ``log_alpha`` step on fresh samples."""
        loss = self._actor_step(obs, self._randn(obs.shape[0]), alpha)
        out = {"losses/actor_loss": loss, "losses/alpha": alpha}
        if self.alpha_optimizer is not None:
            with torch.no_grad():
                _, logp = self.actor.sample(obs, self._randn(obs.shape[0]))
            self._learn_alpha.step_begin()
            self.alpha_optimizer.zero_grad()
            alpha_loss = self._learn_alpha(logp)
            alpha_loss.backward()
            self.alpha_optimizer.clip_and_step(NO_CLIP)
            out["losses/alpha_loss"] = escape(alpha_loss.detach(), self._learn_alpha)
        return out
