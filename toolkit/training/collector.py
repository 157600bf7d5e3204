"""The device experience collector: policy, environment and replay on one device, no host round trip.

[`Collector`][tritonrl.toolkit.training.collector.Collector] drives an env whose ``step_transition(actions)``
returns device tensors (``MarketEnv``): the agent's acting policy acts (an f32 snapshot for off-policy agents,
the learner for on-policy ones), the env steps, ``agent.observe`` stores the step. No step reads a tensor on
the host unless the agent's ``observe`` does. Layer: training. Guide: docs/pages/market.md.
"""

from __future__ import annotations

from typing import Any

import torch
from tritonrl.toolkit.acting import ActingPolicy, check_sync_every
from tritonrl.toolkit.envs.vector import Transition

__all__ = ["Collector"]


class Collector:
    """Step ``env`` with ``agent``'s acting policy and let the agent store what happens.

    Args:
        agent: an agent of the agent protocol, built for ``env.num_envs`` environments on ``env.device``.
        env: a vector env with ``num_envs``, ``device``, ``obs``, ``reset()`` and
            ``step_transition(actions)``.
        sync_every: learner updates between two refreshes of an acting snapshot.

    Raises:
        TypeError: ``agent`` has no ``acting_policy`` or ``observe``.
        ValueError: a bad ``sync_every``, or the env's size or device differs from the agent's.
    """

    def __init__(self, agent: Any, env: Any, *, sync_every: int = 1) -> None:
        check_sync_every(sync_every)
        make = getattr(agent, "acting_policy", None)
        if not callable(make) or not callable(getattr(agent, "observe", None)):
            raise TypeError(
                "agent must follow the agent protocol (tritonrl.toolkit.agent.Agent: acting_policy, "
                f"observe, ...), got {type(agent).__name__}"
            )
        num_envs = getattr(agent, "num_envs", None)
        if num_envs is not None and int(env.num_envs) != num_envs:
            raise ValueError(f"env has {env.num_envs} environments, the agent was built for {num_envs}")
        device = getattr(agent, "device", None)
        if device is not None and torch.device(env.device) != torch.device(device):
            raise ValueError(f"env tensors live on {env.device}, the agent on {device}")
        self.agent, self.env, self.sync_every = agent, env, sync_every
        self.policy: ActingPolicy = make(sync_every)
        """The agent's acting policy (built once, synced at construction when it has a snapshot)."""

    @property
    def syncs(self) -> int:
        """How many times the acting policy synced with the learner (construction included)."""
        return self.policy.syncs

    @property
    def snapshot(self) -> torch.nn.Module | None:
        """The acting policy's f32 snapshot, ``None`` when the learner acts."""
        return getattr(self.policy, "snapshot", None)

    def sync(self) -> None:
        """Refresh the acting policy from the learner now; a no-op when the learner acts."""
        self.policy.sync()

    def step(self) -> Transition:
        """One vector step: act on ``env.obs`` (reset first if needed), step, observe; returns the device
        ``Transition``.

        Raises:
            RuntimeError: PPO's rollout is full (call ``agent.update()`` first).
            ValueError: from the agent or the env: wrong shapes, dtypes or values.
        """
        env = self.env
        obs = env.obs
        if obs is None:
            obs, _ = env.reset()
        action = self.policy(obs)
        t = env.step_transition(action)
        self.agent.observe(obs, action, t.reward, t.next_obs, t.terminated, t.truncated)
        return t

    def state_dict(self) -> dict[str, Any]:
        """``sync_every`` and the acting policy's state, so a resumed collector acts exactly as before."""
        return {"sync_every": self.sync_every, **self.policy.state_dict()}

    def check_state_dict(self, state: dict[str, Any]) -> None:
        """Raise ``ValueError`` unless ``state`` fits this collector's acting policy; changes nothing."""
        if not isinstance(state, dict):
            raise ValueError(f"collector state is a {type(state).__name__}, not a dict")
        check = getattr(self.policy, "check_state_dict", None)
        if check is not None:
            check(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict` output; ``ValueError`` (nothing changed) on a bad one."""
        self.policy.load_state_dict(state)
