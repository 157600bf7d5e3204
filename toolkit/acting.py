"""Acting policies: what a collector acts with, and when it follows the learner.

An :class:`ActingPolicy` turns observations into actions on the agent's device without reading a
tensor value on the host. Two implementations cover the agent families:

- :class:`SnapshotPolicy` acts from an **f32 copy** of a learner network, refreshed by
  :meth:`~SnapshotPolicy.sync` (the one export cast, bf16 -> f32 on accelerators) once
  ``sync_every`` learner updates have happened since the last refresh. The agent gives the acting
  function of ``(snapshot, obs)`` (greedy choice and exploration are the agent's). Off-policy
  learners (the DQN family) act this way.
- :class:`LearnerPolicy` acts with ``agent.act`` itself: an on-policy learner (PPO) needs the
  policy that acted to be the learner (its importance ratio ``pi_new / pi_old`` is taken against
  the log-probs of that policy), so there is nothing to sync.

An agent says which it uses with ``acting_policy(sync_every)`` (:class:`tritonrl.toolkit.agent.Agent`;
:class:`tritonrl.toolkit.agent.AgentBase` defaults to :class:`LearnerPolicy`). The state of either
(:meth:`state_dict`: ``synced_at``, ``syncs`` and, for a snapshot, its tensors) is what a resumed
collector needs to act exactly as before. See the docs page *Training* for the collector.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import torch
from tritonrl.toolkit.checkpoint import nonfinite_entry

__all__ = ["ActingPolicy", "LearnerPolicy", "SnapshotPolicy", "check_sync_every"]

M = TypeVar("M", bound=torch.nn.Module)


@runtime_checkable
class ActingPolicy(Protocol):
    """Acts from a policy snapshot (or the learner itself) for a collector.

    Attributes:
        syncs: how many times :meth:`sync` refreshed the snapshot (construction included; 0 for a
            policy that acts with the learner).
    """

    syncs: int

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        """Actions ``[E, ...]`` for observations ``[E, *obs_shape]`` on the agent's device, with no
        host read of a tensor value (a due :meth:`sync` runs first)."""
        ...

    def sync(self) -> None:
        """Refresh the acting weights from the learner (the one export cast); a no-op for a policy
        that acts with the learner."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """What a resume needs to act exactly as before (``synced_at``, ``syncs``, ...)."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output; ``ValueError`` (nothing changed) on a bad one."""
        ...


def check_sync_every(sync_every: Any) -> int:
    """``sync_every`` if it is a positive int.

    Raises:
        ValueError: anything else (a bool, a float, 0).
    """
    if not isinstance(sync_every, int) or isinstance(sync_every, bool) or sync_every < 1:
        raise ValueError(f"sync_every must be a positive int, got {sync_every!r}")
    return sync_every


def _check_counters(state: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` unless ``synced_at`` and ``syncs`` are non-negative ints."""
    for key in ("synced_at", "syncs"):
        value = state.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"collector state {key!r} must be a non-negative int, got {value!r}")


class LearnerPolicy:
    """Acts with ``agent.act(obs)`` (exploring): the learner is the acting policy.

    :meth:`sync` does nothing (``syncs`` stays 0); the state holds the two counters of the
    protocol, kept as loaded (``synced_at``: 0).

    Args:
        agent: anything with ``act(obs) -> actions``.
    """

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.synced_at = 0
        """Unused here (kept as loaded, for the checkpoint's ``collector`` section)."""
        self.syncs = 0

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        """``agent.act(obs)``."""
        return self.agent.act(obs)

    def sync(self) -> None:
        """Nothing to refresh: the learner acts."""

    def state_dict(self) -> dict[str, Any]:
        """``synced_at`` and ``syncs``."""
        return {"synced_at": self.synced_at, "syncs": self.syncs}

    def check_state_dict(self, state: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` unless both counters are non-negative ints; changes nothing."""
        _check_counters(state)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output.

        Raises:
            ValueError: a missing or mistyped counter; nothing changed.
        """
        _check_counters(state)
        self.synced_at, self.syncs = state["synced_at"], state["syncs"]


class SnapshotPolicy(Generic[M]):
    """Acts from an f32 copy of ``learner``, refreshed every ``sync_every`` learner updates.

    The copy is made once (``copy.deepcopy``, cast to f32, no gradients); :meth:`sync` copies every
    parameter and buffer (noise, norms) of ``learner`` into it. A call syncs first when
    ``updates() - synced_at >= sync_every`` (Python ints: no host read), then returns
    ``act(snapshot, obs)`` under ``torch.no_grad()``.

    Args:
        learner: the network the learner trains (any dtype, on the agent's device).
        act: ``act(snapshot, obs) -> actions``: the agent's acting function (its greedy choice
            and exploration); observations come as the env hands them over.
        updates: returns the learner's update count now.
        sync_every: learner updates between two refreshes.

    Raises:
        ValueError: ``sync_every`` is not a positive int.
    """

    def __init__(
        self,
        learner: M,
        act: Callable[[M, torch.Tensor], torch.Tensor],
        updates: Callable[[], int],
        *,
        sync_every: int = 1,
    ) -> None:
        self.sync_every = check_sync_every(sync_every)
        self.act, self.updates = act, updates
        self.snapshot: M = copy.deepcopy(learner).float().requires_grad_(False)
        """The f32 acting copy of the learner (of its class)."""
        self._dst = [*self.snapshot.parameters(), *self.snapshot.buffers()]
        self._src = [*learner.parameters(), *learner.buffers()]
        self.synced_at = 0
        """The learner's update count at the last sync."""
        self.syncs = 0
        self.sync()

    @torch.no_grad()
    def sync(self) -> None:
        """Copy the learner's parameters and buffers into the f32 snapshot: the one cast between
        learner and actor."""
        for dst, src in zip(self._dst, self._src, strict=True):
            dst.copy_(src)
        self.synced_at = self.updates()
        self.syncs += 1

    @torch.no_grad()
    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        """Actions from the snapshot (synced first when due)."""
        if self.updates() - self.synced_at >= self.sync_every:
            self.sync()
        return self.act(self.snapshot, obs)

    def state_dict(self) -> dict[str, Any]:
        """``synced_at``, ``syncs`` and the snapshot's tensors (``snapshot``): the learner has moved
        on since the last sync, so the snapshot cannot be rebuilt from it."""
        return {
            "synced_at": self.synced_at,
            "syncs": self.syncs,
            "snapshot": {k: v.detach().clone() for k, v in self.snapshot.state_dict().items()},
        }

    def check_state_dict(self, state: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` unless ``state`` is a :meth:`state_dict` of this policy: counters
        that are non-negative ints, a snapshot of the same entries and shapes, finite; changes
        nothing."""
        _check_counters(state)
        saved = state.get("snapshot")
        mine = self.snapshot.state_dict()
        if not isinstance(saved, Mapping) or set(saved) != set(mine):
            raise ValueError("collector state holds no snapshot of this agent's network")
        for k, v in mine.items():
            t = saved[k]
            if not isinstance(t, torch.Tensor) or t.shape != v.shape:
                raise ValueError(f"collector snapshot tensor {k!r} does not match {tuple(v.shape)}")
        bad = nonfinite_entry(saved)
        if bad is not None:
            raise ValueError(f"collector snapshot tensor {bad!r} holds NaN or infinite values")

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (``sync_every`` is this policy's own).

        Raises:
            ValueError: a missing or mistyped counter, or a snapshot of other entries or shapes
                or not finite (:meth:`check_state_dict`); nothing changed.
        """
        self.check_state_dict(state)
        mine = self.snapshot.state_dict()
        saved = state["snapshot"]
        with torch.no_grad():
            for k, v in mine.items():
                v.copy_(saved[k])
        self.synced_at, self.syncs = state["synced_at"], state["syncs"]
