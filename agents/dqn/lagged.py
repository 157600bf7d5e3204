"""The DQN agent's part in overlapped training (:mod:`tritonrl.toolkit.training.overlap`).

The actor of an overlapped run acts from an f32 snapshot of the online network with a random
generator and a step count of its own, so that it never touches what the learner uses (the
learner may run in another process). Its exploration is :meth:`DQNAgent.act`'s: epsilon-greedy
on the snapshot's expected Q with the agent's epsilon schedule, or the noisy layers' noise as of
the last sync.
"""

from __future__ import annotations

from typing import Any

import torch
from tritonrl.toolkit.training.overlap import SnapshotActor, actor_generator

__all__ = ["LaggedActing"]


class LaggedActing:
    """Mixin of :class:`tritonrl.agents.dqn.DQNAgent`: ``learner_tensors`` and ``lagged_actor``."""

    def learner_tensors(self) -> list[torch.Tensor]:
        """The online network's parameters then buffers (what the actor's snapshot holds)."""
        agent: Any = self
        return [*agent.online.parameters(), *agent.online.buffers()]

    def lagged_actor(self) -> SnapshotActor[Any]:
        """An actor for an overlapped run: an f32 snapshot of the online network (holding its
        weights now), acting epsilon-greedily (``epsilon`` at the actor's own step count, which
        starts at ``env_steps``) with a generator seeded by one draw from the agent's, and
        greedily (eval mode) for evaluations. On a CPU with Discrete actions it explores as
        :meth:`DQNAgent.act` does (the forward only when some environment acts greedily); else it
        reads nothing on the host per step."""
        agent: Any = self
        generator = actor_generator(agent.generator, agent.device)
        stride = agent.num_envs * agent.dist.world_size
        steps = [agent.env_steps]

        def q(snapshot: Any, obs: Any) -> torch.Tensor:
            x = torch.as_tensor(obs, device=agent.device, dtype=torch.float32)
            return agent._q_of(snapshot, x)

        def act(snapshot: Any, obs: torch.Tensor) -> torch.Tensor:
            eps = agent.epsilon_at(steps[0])
            steps[0] += stride
            if eps > 0.0 and agent._host_explore:  # as act: the forward only where one acts greedily
                x = torch.as_tensor(obs, device=agent.device, dtype=torch.float32)
                return agent._host_epsilon_greedy(x, eps, generator, lambda x: agent._q_of(snapshot, x))
            return agent.epsilon_greedy(q(snapshot, obs).argmax(-1), eps, generator)

        return SnapshotActor(
            agent.online, act, lambda snapshot, obs: q(snapshot, obs).argmax(-1), generator, steps
        )
