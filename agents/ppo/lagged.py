"""The PPO agent's part in overlapped training (:mod:`tritonrl.toolkit.training.overlap`).

The actor collects rollout ``k + 1`` from an f32 policy snapshot taken at sync point ``k`` and
stages its raw actions and log-probs; :meth:`LaggedPPO.observe_steps` stores them as the old
log-probs, so the ratio is taken against the policy that acted. Feed-forward policies without
``normalize_obs`` only (memories and statistics live on the acting side). See docs/pages/ppo.md.
"""

from __future__ import annotations

from typing import Any

import torch
from tritonrl.toolkit.acting import SnapshotActor, actor_generator

__all__ = ["LaggedPPO"]


class LaggedPPO:
    """Mixin of :class:`tritonrl.agents.ppo.PPOAgent`: ``check_lagged``, ``lagged_actor`` and
    ``observe_steps``."""

    def check_lagged(self) -> None:
        """Raise ``ValueError`` for a recurrent policy or ``normalize_obs=True``."""
        agent: Any = self
        if agent.recurrent:
            raise ValueError(
                f"overlap: the {agent.config.policy!r} policy is recurrent (its memory lives on the "
                "acting side); use a feed-forward policy (discrete, continuous, flow) or overlap=False"
            )
        if agent.obs_rms is not None:
            raise ValueError(
                "overlap: normalize_obs=True updates the observation statistics on the acting side; "
                "set normalize_obs=False or overlap=False"
            )

    def lagged_actor(self) -> SnapshotActor:
        """An overlapped run's actor: a policy snapshot with its own generator and ``extras()``.

        Raises:
            ValueError: a recurrent policy, or ``normalize_obs=True``.
        """
        self.check_lagged()
        agent: Any = self
        generator = actor_generator(agent.generator, agent.device)
        stride = agent.num_envs * agent.dist.world_size
        steps = [agent.env_steps]
        last: dict[str, torch.Tensor] = {}

        def act(policy: Any, obs: Any) -> torch.Tensor:
            # checked as act checks it (shape, finite values or image bytes), f32 for the snapshot
            x = agent._ingest(obs, update_stats=False, call="act", dtype=torch.float32)
            noise = policy.net.head.draw(x.shape[0], generator)
            env_a, last["raw"], last["logprob"] = policy.sample(x, noise)
            steps[0] += stride
            return env_a

        return SnapshotActor(
            agent.policy(), act, generator, steps, check=agent.eval_check, extras=lambda: dict(last)
        )

    @torch.no_grad()
    def observe_steps(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        *,
        raw: torch.Tensor | None = None,
        logprob: torch.Tensor | None = None,
    ) -> None:
        """Store ``T`` vector steps (``[T, E, ...]``), scored by this agent's critic in one batch.

        ``raw`` and ``logprob`` (``[T, E]`` f32) are the behaviour policy's; without them the actions
        are scored by this agent's policy.

        Raises:
            ValueError: a recurrent policy or ``normalize_obs``, blocks of different lengths, or a step
                :meth:`observe` would refuse; nothing is stored.
            RuntimeError: the steps do not fit into the rollout.
        """
        self.check_lagged()
        agent: Any = self
        T = int(obs.shape[0])
        block = {"action": action, "reward": reward, "next_obs": next_obs}
        block.update(terminated=terminated, truncated=truncated)
        if logprob is not None:
            block["logprob"] = logprob
        for name, v in block.items():
            if int(v.shape[0]) != T:
                raise ValueError(f"PPOAgent.observe_steps: {name} holds {v.shape[0]} steps, obs {T}")
        if (raw is None) != (logprob is None):
            raise ValueError("PPOAgent.observe_steps: raw and logprob come together")
        b = agent.buffer
        if b.pos + T > b.num_steps:
            raise RuntimeError(f"rollout holds {b.pos} of {b.num_steps} steps: {T} more do not fit")
        if not T:
            return
        # every check before anything is stored: the per-step shapes, then the values of the block
        agent.shapes.observe(obs[0], action[0], reward[0], next_obs[0], terminated[0], truncated[0])
        agent._check_values(obs, action, reward, next_obs)
        E = agent.num_envs
        flat = obs.reshape(T * E, *obs.shape[2:])
        x = agent._ingest(flat, update_stats=False)
        policy = agent.net
        if raw is None:
            raw_all = policy.head.to_raw(torch.as_tensor(action).reshape(T * E, *action.shape[2:]))
            logp, _, values = policy.evaluate(x, raw_all.to(agent.device), generator=agent.generator)
            raw = raw_all.reshape(T, E, *raw_all.shape[1:])
            logprob = logp.reshape(T, E)
        else:
            values = policy.value(x, None, None)
        values = values.reshape(T, E)
        assert logprob is not None  # given with raw, or scored above
        dev = agent.device
        term = torch.as_tensor(terminated).to(dev, torch.bool)
        trunc = torch.as_tensor(truncated).to(dev, torch.bool)
        rew = torch.as_tensor(reward).to(dev, torch.float32)
        if agent.config.reward_scale != 1.0:
            rew = rew * agent.config.reward_scale
        x = x.reshape(T, E, *x.shape[1:])
        first = b.pos
        # bootstraps: V(next_obs) where truncated, and at the rollout's last step
        need = trunc.clone()
        ends_rollout = first + T == b.num_steps
        if ends_rollout:
            need[-1] = True
        rows = need.any(-1).nonzero().flatten().tolist() if bool(need.any()) else []
        v_next: dict[int, torch.Tensor] = {}
        if rows:
            xn = agent._ingest(next_obs[rows].reshape(len(rows) * E, *next_obs.shape[2:]), update_stats=False)
            vn = policy.value(xn, None, None).reshape(len(rows), E)
            v_next = {r: vn[i] for i, r in enumerate(rows)}
        for t in range(T):
            starts = agent.starts if t == 0 else (term[t - 1] | trunc[t - 1])
            b.add(x[t], raw[t], logprob[t], values[t], rew[t], term[t], trunc[t], starts)
            if t in v_next:
                b.set_next_values(v_next[t], need[t])
        agent.starts = term[-1] | trunc[-1]
        agent._pending = None
        agent.env_steps += T * E * agent.dist.world_size
