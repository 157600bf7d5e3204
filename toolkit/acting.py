"""Acting policies: what a collector or an overlapped run acts with, and when it follows the learner.

Each snapshot is ``agent.policy()`` (f32) with the family's exploration around it:
[`SnapshotPolicy`][tritonrl.toolkit.acting.SnapshotPolicy] (the collector's, refreshed every ``sync_every``
updates), [`SnapshotActor`][tritonrl.toolkit.acting.SnapshotActor] (an overlapped run's actor, with its own
generator) and [`LearnerPolicy`][tritonrl.toolkit.acting.LearnerPolicy] (``agent.act`` itself, for on-policy
learners). A core module: it imports no toolkit subpackage. Guide: docs/pages/training.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import torch
from tritonrl.toolkit.policy import GreedyActor, PolicyModule
from tritonrl.toolkit.runstate import nonfinite_entry

__all__ = [
    "ActingPolicy",
    "LearnerPolicy",
    "SnapshotActor",
    "SnapshotPolicy",
    "actor_generator",
    "check_sync_every",
]

Explore = Callable[[Any, Any], torch.Tensor]
"""``act(policy, obs) -> actions``: a family's exploration around its policy module."""


@runtime_checkable
class ActingPolicy(Protocol):
    """Acts from a policy snapshot (or the learner itself) for a collector; `syncs` counts refreshes."""

    syncs: int

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        """Actions ``[E, ...]`` for observations ``[E, *obs_shape]`` on the agent's device, no host read."""
        ...

    def sync(self) -> None:
        """Refresh the acting weights from the learner; a no-op when the learner acts."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """What a resume needs to act exactly as before (``synced_at``, ``syncs``, ...)."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore `state_dict` output; ``ValueError`` (nothing changed) on a bad one."""
        ...


def check_sync_every(sync_every: Any) -> int:
    """``sync_every`` if it is a positive int, else ``ValueError``."""
    if not isinstance(sync_every, int) or isinstance(sync_every, bool) or sync_every < 1:
        raise ValueError(f"sync_every must be a positive int, got {sync_every!r}")
    return sync_every


def actor_generator(generator: torch.Generator, device: torch.device | str) -> torch.Generator:
    """An actor's own generator on ``device``, seeded by one draw from the agent's ``generator``."""
    seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))
    out = torch.Generator(device=device)
    out.manual_seed(seed)
    return out


def _check_counters(state: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` unless ``synced_at`` and ``syncs`` are non-negative ints."""
    for key in ("synced_at", "syncs"):
        value = state.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"collector state {key!r} must be a non-negative int, got {value!r}")


class LearnerPolicy:
    """Acts with ``agent.act(obs)`` (exploring; any ``agent`` with ``act``): the learner acts."""

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
        """Restore `state_dict` output; ``ValueError`` (nothing changed) on a bad one."""
        _check_counters(state)
        self.synced_at, self.syncs = state["synced_at"], state["syncs"]


class _Snapshot:
    """An f32 policy module acted from with ``act(policy, obs)``, refreshed by `load`."""

    def __init__(self, policy: PolicyModule, act: Explore, check: Callable[[Any], None] | None) -> None:
        self.policy = policy.requires_grad_(False)
        self.act = act
        self._check = check
        self._mirrors = policy.mirrors()

    @property
    def snapshot(self) -> PolicyModule:
        """The acting policy module (f32)."""
        return self.policy

    @torch.no_grad()
    def load(self, tensors: Sequence[torch.Tensor]) -> None:
        """Copy ``tensors`` (``learner_tensors()`` order) into the snapshot: the one cast."""
        for dst, src in zip(self._mirrors, tensors, strict=True):
            dst.copy_(src)

    def eval_policy(self) -> Callable[[Any], torch.Tensor]:
        """Greedy actions of the snapshot (eval mode) for any number of observations, checked."""
        return GreedyActor(self.policy, self._check)


class SnapshotPolicy(_Snapshot):
    """The collector's acting policy: a snapshot of the learner, refreshed every ``sync_every`` learner
    updates.

    Args:
        policy: the snapshot, a fresh ``agent.policy()`` (train mode where exploration uses its noise).
        act: ``act(policy, obs) -> actions``: the family's exploration around the policy.
        learner: returns the learner's tensors (``agent.learner_tensors``).
        updates: returns the learner's update count now.
        check: the agent's observation checks for `eval_policy`.

    Raises:
        ValueError: ``sync_every`` is not a positive int.
    """

    def __init__(
        self,
        policy: PolicyModule,
        act: Explore,
        learner: Callable[[], Sequence[torch.Tensor]],
        updates: Callable[[], int],
        *,
        sync_every: int = 1,
        check: Callable[[Any], None] | None = None,
    ) -> None:
        self.sync_every = check_sync_every(sync_every)
        super().__init__(policy, act, check)
        self.learner, self.updates = learner, updates
        self.synced_at = 0
        """The learner's update count at the last sync."""
        self.syncs = 0
        self.sync()

    def sync(self) -> None:
        """Copy the learner's tensors into the snapshot (`load`)."""
        self.load(self.learner())
        self.synced_at = self.updates()
        self.syncs += 1

    @torch.no_grad()
    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        """Actions from the snapshot (synced first when due)."""
        if self.updates() - self.synced_at >= self.sync_every:
            self.sync()
        return self.act(self.policy, obs)

    def state_dict(self) -> dict[str, Any]:
        """``synced_at``, ``syncs`` and the snapshot's state dict (the learner has moved on since)."""
        return {
            "synced_at": self.synced_at,
            "syncs": self.syncs,
            "snapshot": {k: v.detach().clone() for k, v in self.policy.state_dict().items()},
        }

    def _saved(self, state: Mapping[str, Any]) -> Mapping[str, Any]:
        """The saved snapshot's tensors under this policy's names (older saves lack the prefix)."""
        saved = state.get("snapshot")
        mine = self.policy.state_dict()
        if not isinstance(saved, Mapping) or set(saved) == set(mine):
            return saved if isinstance(saved, Mapping) else {}
        heads = {k.split(".", 1)[0] for k in mine}
        if len(heads) == 1:
            prefix = f"{heads.pop()}."
            renamed = {prefix + str(k): v for k, v in saved.items()}
            if set(renamed) == set(mine):
                return renamed
        return saved

    def check_state_dict(self, state: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` unless ``state`` is a `state_dict` of this policy; changes nothing."""
        _check_counters(state)
        saved = self._saved(state)
        mine = self.policy.state_dict()
        if set(saved) != set(mine):
            raise ValueError("collector state holds no snapshot of this agent's network")
        for k, v in mine.items():
            t = saved[k]
            if not isinstance(t, torch.Tensor) or t.shape != v.shape:
                raise ValueError(f"collector snapshot tensor {k!r} does not match {tuple(v.shape)}")
        bad = nonfinite_entry(dict(saved))
        if bad is not None:
            raise ValueError(f"collector snapshot tensor {bad!r} holds NaN or infinite values")

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore `state_dict` output; ``ValueError`` (nothing changed) on a bad one."""
        self.check_state_dict(state)
        saved = self._saved(state)
        with torch.no_grad():
            for k, v in self.policy.state_dict().items():
                v.copy_(saved[k])
        self.synced_at, self.syncs = state["synced_at"], state["syncs"]


class SnapshotActor(_Snapshot):
    """An overlapped run's actor: a snapshot refreshed at sync points, with its own generator and step count.

    Args:
        act: ``act(policy, obs) -> actions``, exploring from ``generator``, counting env steps in
            ``steps[0]``.
        generator: the actor's own generator ([`actor_generator`][tritonrl.toolkit.acting.actor_generator]).
        steps: a one-element list, the actor's env step count, shared with ``act``.
        extras: ``extras() -> {name: tensor}`` staged beside each step; ``None``: nothing.
    """

    def __init__(
        self,
        policy: PolicyModule,
        act: Explore,
        generator: torch.Generator,
        steps: list[int],
        *,
        check: Callable[[Any], None] | None = None,
        extras: Callable[[], dict[str, torch.Tensor]] | None = None,
    ) -> None:
        super().__init__(policy, act, check)
        self._extras = extras
        self.generator, self.steps = generator, steps

    def extras(self) -> dict[str, torch.Tensor]:
        """What to stage beside the last step (``{}`` unless the actor was given ``extras``)."""
        return {} if self._extras is None else self._extras()

    def state_dict(self) -> dict[str, Any]:
        """Copies of the snapshot's tensors, the generator's state and the step count."""
        return {
            "snapshot": [t.detach().clone() for t in self._mirrors],
            "generator": self.generator.get_state(),
            "steps": int(self.steps[0]),
        }

    @torch.no_grad()
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore `state_dict` output; ``ValueError`` for a snapshot of another network."""
        saved = list(state["snapshot"])
        if [tuple(t.shape) for t in saved] != [tuple(t.shape) for t in self._mirrors]:
            raise ValueError("overlap: the saved actor snapshot does not match the agent's network")
        self.load(saved)
        self.generator.set_state(state["generator"])
        self.steps[0] = int(state["steps"])

    @torch.no_grad()
    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        """Exploring actions from the snapshot."""
        return self.act(self.policy, obs)
