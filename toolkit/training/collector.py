"""The device experience collector: policy, environment and replay on one device, no host round trip.

:class:`Collector` drives any vector environment whose ``step_transition(actions)`` returns a
:class:`tritonrl.toolkit.envs.vector.Transition` of tensors on the agent's device (``MarketEnv``, or your
own), and feeds any agent of the agent protocol (:class:`tritonrl.toolkit.agent.Agent`) the same way:

1. ``policy(obs)``: the agent's acting policy (``agent.acting_policy(sync_every)``, a
   :class:`tritonrl.toolkit.acting.ActingPolicy`) acts on the env's observations. An off-policy
   agent (the DQN family) acts from an **f32 snapshot** of its learner, refreshed once at least
   ``sync_every`` learner updates happened since the last refresh (the one export cast, see
   :class:`~tritonrl.toolkit.acting.SnapshotPolicy`), with its own exploration; an on-policy
   agent (PPO) acts with the learner (:class:`~tritonrl.toolkit.acting.LearnerPolicy`: its
   importance ratio needs the policy that acted to be the learner);
2. ``env.step_transition(actions)``;
3. ``agent.observe(obs, actions, reward, next_obs, terminated, truncated)``: the agent stores the
   step as it always does (input checks, ICM's intrinsic reward, replay or rollout, counters).

Nothing in a step reads a tensor value on the host when the agent's own ``observe`` reads none:
the DQN family with its replay in device staging (``replay_staging="device"``, the accelerator
default of ``"auto"``; host staging reads rewards and done flags, free on a CPU), PPO on an
accelerator (on a CPU its ``observe`` reads the CPU truncation flags, free there).
"""

from __future__ import annotations

from typing import Any

import torch
from tritonrl.toolkit.acting import ActingPolicy, check_sync_every
from tritonrl.toolkit.envs.vector import Transition

__all__ = ["Collector"]


class Collector:
    """Step ``env`` with ``agent``'s acting policy and let the agent store what happens (see the
    module docstring).

    Args:
        agent: an agent of the agent protocol (``acting_policy``, ``observe``; its ``num_envs``
            and ``device``, where it has them, must be the env's), built for ``env.num_envs``
            environments on ``env.device``.
        env: a vector environment with ``num_envs``, ``device``, ``obs`` (the observations to act
            on next, ``None`` before the first reset), ``reset()`` and
            ``step_transition(actions) -> Transition``, all tensors on ``env.device``.
        sync_every: learner updates between two refreshes of an acting snapshot (ignored by a
            policy that acts with the learner).

    Raises:
        TypeError: ``agent`` has no ``acting_policy`` or ``observe``.
        ValueError: ``sync_every`` is not a positive int, or the env's number of environments or
            device differs from the agent's.
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
        """Refresh the acting policy from the learner now (as after a resume without a saved
        collector state); a no-op when the learner acts."""
        self.policy.sync()

    def step(self) -> Transition:
        """One vector step: act on ``env.obs`` (resetting the env first if it has none), step the
        env, ``agent.observe`` the transition.

        Returns:
            the env's :class:`~tritonrl.toolkit.envs.vector.Transition` (device tensors).

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
        """``sync_every`` and the acting policy's state (``synced_at``, ``syncs`` and, for a
        snapshot, its tensors as ``snapshot``), so that a resumed collector acts exactly as before."""
        return {"sync_every": self.sync_every, **self.policy.state_dict()}

    def check_state_dict(self, state: dict[str, Any]) -> None:
        """Raise ``ValueError`` unless ``state`` fits this collector's acting policy (its
        ``check_state_dict``, where it has one); changes nothing."""
        if not isinstance(state, dict):
            raise ValueError(f"collector state is a {type(state).__name__}, not a dict")
        check = getattr(self.policy, "check_state_dict", None)
        if check is not None:
            check(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict` (the ``sync_every`` of this collector is kept).

        Raises:
            ValueError: a missing or mistyped entry, or a snapshot of other shapes; nothing changed.
        """
        self.policy.load_state_dict(state)
