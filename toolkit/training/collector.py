"""The device experience collector: policy, environment and replay on one device, no host round trip.

:class:`Collector` drives any vector environment whose ``step_transition(actions)`` returns a
:class:`tritonrl.toolkit.envs.vector.Transition` of tensors on the agent's device (``MarketEnv``, or your
own), and feeds the agent:

- **DQN family**: acting runs from an **f32 snapshot** of the learner's online network.
  :meth:`Collector.sync` copies the learner's weights (``training_dtype``: bf16 on accelerators)
  into it, the one boundary cast; :meth:`Collector.step` calls it when at least ``sync_every``
  learner updates happened since the last one (it compares ``agent.updates``, a Python int).
  Exploration is the agent's: epsilon-greedy with the agent's generator and epsilon schedule
  (:meth:`DQNAgent.epsilon_greedy`), or the noisy layers' noise as of the last sync. Transitions go
  straight into ``agent.buffer`` (``agent.observe`` is bypassed; the agent's ``env_steps`` counter
  advances and its input guard checks rewards and next observations, deferred on accelerators).
  With the buffer in device staging (``replay_staging="device"``, the accelerator default of
  ``"auto"``) nothing in a step reads a tensor value on the host; with host staging the buffer
  reads rewards and done flags on the host (free on a CPU, a sync per step on an accelerator).
- **PPO family**: through ``agent.act`` / ``agent.observe`` (device-only already), with the
  learner's own weights: PPO's importance ratio ``pi_new(a|s) / pi_old(a|s)`` needs the log-probs
  of the policy that acted, and the clipped objective assumes that policy is the learner at the
  rollout's start; acting from a separately cast snapshot would make ``pi_old`` a different
  (rounded) policy than the one the ratio is taken against. The rollout holds one update's data,
  so there is nothing to sync. (On a CPU, ``observe`` reads the CPU truncation flags to skip the
  bootstrap critic when nothing was truncated, free there; flags on an accelerator are not read.)

Observations enter the f32 snapshot as f32 (the env's features are in the training dtype; the
acting forward upcasts them, a no-op on a CPU). ICM agents are refused (use ``agent.observe``).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from tritonrl.toolkit.compile import Compiled
from tritonrl.toolkit.envs.vector import Transition

__all__ = ["Collector"]


class Collector:
    """Step ``env`` with ``agent``'s policy and store what happens (see the module docstring).

    Args:
        agent: a :class:`tritonrl.agents.dqn.DQNAgent` or :class:`tritonrl.agents.ppo.PPOAgent` built
            for ``env.num_envs`` environments on ``env.device``.
        env: a vector environment with ``num_envs``, ``device``, ``obs`` (the observations to act
            on next, ``None`` before the first reset), ``reset()`` and
            ``step_transition(actions) -> Transition``, all tensors on ``env.device``.
        sync_every: learner updates between two refreshes of the f32 acting snapshot (DQN
            family; ignored for PPO).

    Raises:
        TypeError: ``agent`` is neither a DQN nor a PPO agent.
        ValueError: ``sync_every`` is not a positive int, the env's number of environments or
            device differs from the agent's, or the DQN agent has ICM on.
    """

    def __init__(self, agent: Any, env: Any, *, sync_every: int = 1) -> None:
        if not isinstance(sync_every, int) or isinstance(sync_every, bool) or sync_every < 1:
            raise ValueError(f"sync_every must be a positive int, got {sync_every!r}")
        # the agent's family by its checkpoint kind (the toolkit never imports tritonrl.agents)
        self.kind = getattr(agent, "kind", None)
        if self.kind not in ("dqn", "ppo"):
            raise TypeError(f"agent must be a DQNAgent or a PPOAgent, got {type(agent).__name__}")
        if int(env.num_envs) != agent.num_envs:
            raise ValueError(f"env has {env.num_envs} environments, the agent was built for {agent.num_envs}")
        if torch.device(env.device) != agent.device:
            raise ValueError(f"env tensors live on {env.device}, the agent on {agent.device}")
        self.agent, self.env, self.sync_every = agent, env, sync_every
        self.syncs = 0
        """How many times :meth:`sync` ran (construction included)."""
        self._synced_at = 0
        self.snapshot: torch.nn.Module | None = None
        """DQN family: the f32 acting copy of ``agent.online`` (``None`` for PPO)."""
        if self.kind == "dqn":
            if agent.icm_module is not None:
                raise ValueError("the collector does not feed ICM's replay: use agent.act / agent.observe")
            snapshot = copy.deepcopy(agent.online).float().requires_grad_(False)  # built once
            self.snapshot = snapshot
            self._dst = [*snapshot.parameters(), *snapshot.buffers()]
            self._src = [*agent.online.parameters(), *agent.online.buffers()]
            mode = agent.config.compile if agent.device.type == "cuda" else "none"  # as DQNAgent.act
            self._act_q = Compiled(self._snapshot_q, mode, agent.device)
            self.sync()

    # ------------------------------------------------------------------ the snapshot

    @torch.no_grad()
    def sync(self) -> None:
        """Copy the learner's online weights (and buffers: noise, norms) into the f32 snapshot:
        the one cast between learner and actor. No-op for PPO (it acts with the learner)."""
        if self.snapshot is None:
            return
        for dst, src in zip(self._dst, self._src, strict=True):
            dst.copy_(src)
        self._synced_at = self.agent.updates
        self.syncs += 1

    def _snapshot_q(self, x: torch.Tensor) -> torch.Tensor:
        """Expected Q (f32) of the snapshot for f32 observations (the acting forward)."""
        assert self.snapshot is not None  # DQN family only
        return self.agent._q_of(self.snapshot, x)

    # ------------------------------------------------------------------ stepping

    @torch.no_grad()
    def _act_dqn(self, obs: torch.Tensor) -> torch.Tensor:
        agent = self.agent
        if agent.updates - self._synced_at >= self.sync_every:
            self.sync()
        self._act_q.step_begin()
        q = self._act_q(obs.to(torch.float32))  # the f32 acting forward (a no-op cast on a CPU)
        return agent.epsilon_greedy(q.argmax(-1), agent.epsilon())

    def step(self) -> Transition:
        """One vector step: act on ``env.obs`` (resetting the env first if it has none), step the
        env, store the transition, count ``num_envs`` env steps in the agent.

        Returns:
            the env's :class:`~tritonrl.toolkit.envs.vector.Transition` (device tensors).

        Raises:
            RuntimeError: PPO's rollout is full (call ``agent.update()`` first).
            ValueError: from the replay buffer or the env: wrong shapes or dtypes.
        """
        agent, env = self.agent, self.env
        obs = env.obs
        if obs is None:
            obs, _ = env.reset()
        if self.kind == "ppo":
            action = agent.act(obs)
            t = env.step_transition(action)
            agent.observe(obs, action, t.reward, t.next_obs, t.terminated, t.truncated)
            return t
        action = self._act_dqn(obs)
        t = env.step_transition(action)
        agent.inputs.reward("observe", t.reward)  # deferred device flags on an accelerator
        agent.inputs.obs("observe", "next_obs", t.next_obs)
        agent.buffer.add(obs, action, t.reward, t.next_obs, t.terminated, t.truncated)
        agent.env_steps += agent.num_envs * agent.dist.world_size  # global, as DQNAgent.observe counts
        return t

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        """``sync_every``, the update count of the last sync, the sync count and (DQN family) the
        snapshot's tensors, so that a resumed collector acts exactly as before (the learner has
        moved on since the last sync: the snapshot cannot be rebuilt from it)."""
        state: dict[str, Any] = {
            "sync_every": self.sync_every,
            "synced_at": self._synced_at,
            "syncs": self.syncs,
        }
        if self.snapshot is not None:
            state["snapshot"] = {k: v.detach().clone() for k, v in self.snapshot.state_dict().items()}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict` (the ``sync_every`` of this collector is kept).

        Raises:
            ValueError: a missing or mistyped entry, or a snapshot of other shapes; nothing changed.
        """
        for key in ("synced_at", "syncs"):
            value = state.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"collector state {key!r} must be a non-negative int, got {value!r}")
        if self.snapshot is not None:
            saved = state.get("snapshot")
            mine = self.snapshot.state_dict()
            if not isinstance(saved, dict) or set(saved) != set(mine):
                raise ValueError("collector state holds no snapshot of this agent's network")
            for k, v in mine.items():
                t = saved[k]
                if not isinstance(t, torch.Tensor) or t.shape != v.shape:
                    raise ValueError(f"collector snapshot tensor {k!r} does not match {tuple(v.shape)}")
            with torch.no_grad():
                for k, v in mine.items():
                    v.copy_(saved[k])
        self._synced_at, self.syncs = state["synced_at"], state["syncs"]
