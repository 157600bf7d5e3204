"""The SAC family's part in overlapped training (:mod:`tritonrl.toolkit.training.overlap`).

The actor of an overlapped run acts from an f32 snapshot of the actor network with a random
generator and a step count of its own, so that it never touches what the learner uses (the
learner may run in another process). Its exploration is :meth:`ContinuousAgent.act`'s: uniform
random actions before ``learning_starts`` environment steps (counted by the actor), then the
family's exploring policy on the snapshot (SAC: a sample of the squashed Gaussian; TD3: the
deterministic action plus clipped Gaussian noise), rescaled onto the action space's bounds.
"""

from __future__ import annotations

from typing import Any

import torch
from tritonrl.toolkit.training.overlap import SnapshotActor, actor_generator

__all__ = ["LaggedContinuous"]


class LaggedContinuous:
    """Mixin of :class:`tritonrl.agents.sac.base.ContinuousAgent`: ``learner_tensors`` and
    ``lagged_actor``."""

    def learner_tensors(self) -> list[torch.Tensor]:
        """The actor network's parameters then buffers (what the lagged actor's snapshot holds)."""
        agent: Any = self
        return [*agent.actor.parameters(), *agent.actor.buffers()]

    def lagged_actor(self) -> SnapshotActor[Any]:
        """An actor for an overlapped run: an f32 snapshot of the actor network (holding its
        weights now), exploring as ``act(explore=True)`` does at the actor's own step count (which
        starts at ``env_steps``) with a generator seeded by one draw from the agent's, and
        deterministic for evaluations. Actions ``[E, *action_shape]`` f32 within the bounds.
        Reads nothing on the host per step."""
        agent: Any = self
        generator = actor_generator(agent.generator, agent.device)
        stride = agent.num_envs * agent.dist.world_size
        steps = [agent.env_steps]
        D, dev = agent.action_dim, agent.device

        def randn(rows: int) -> torch.Tensor:
            return torch.randn((rows, D), generator=generator, device=dev)

        def ingest(obs: Any) -> torch.Tensor:
            x = torch.as_tensor(obs, device=dev, dtype=torch.float32)
            return x.reshape(x.shape[0], agent.obs_dim)

        def act(snapshot: Any, obs: torch.Tensor) -> torch.Tensor:
            x = ingest(obs)
            if steps[0] < agent.config.learning_starts:
                a = agent._uniform(x.shape[0], generator)
            else:
                a = agent._explore(snapshot, x, randn)
            steps[0] += stride
            out: torch.Tensor = agent._to_env(a)
            return out

        def greedy(snapshot: Any, obs: Any) -> torch.Tensor:
            out: torch.Tensor = agent._to_env(agent._greedy(snapshot, ingest(obs)))
            return out

        return SnapshotActor(agent.actor, act, greedy, generator, steps)
