"""The PPO agent's checkpoint parts (the `tritonrl.toolkit.agent.AgentBase` hooks).

Policy, optimizer, rollout, observation statistics and recurrent memories; the rollout, memories
and a rank's own statistics are rank parts (``rank_part_keys``), reset when loaded without them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from tritonrl.agents.nets.actor_critic import ActorCritic
from tritonrl.agents.ppo.config import PPOConfig
from tritonrl.toolkit import pytree
from tritonrl.toolkit.checkpoint import CheckpointError, brief
from tritonrl.toolkit.optim import MasterWeightOptimizer
from tritonrl.toolkit.replay.rollout import RolloutBuffer, RunningMeanStd
from tritonrl.toolkit.runstate import check_module_tensors, load_into_module, section

__all__ = ["PPOCheckpoint"]


class PPOCheckpoint:
    """The checkpoint hooks of `tritonrl.agents.ppo.PPOAgent` (a mixin: the attributes
    below are the agent's)."""

    config: PPOConfig
    num_envs: int
    device: torch.device
    obs_dim: int
    net: ActorCritic
    optimizer: MasterWeightOptimizer
    buffer: RolloutBuffer
    obs_rms: RunningMeanStd | None
    _obs_shared: RunningMeanStd | None
    _obs_local: RunningMeanStd | None
    recurrent: bool
    state: Any
    starts: torch.Tensor
    segment_states: list[Any]
    _pending: Any
    current_lr: Callable[[], float]

    def _state_parts(self) -> dict[str, Any]:
        rms = self._obs_shared if self._obs_shared is not None else self.obs_rms
        parts: dict[str, Any] = {
            "policy": self.net.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "rollout": self.buffer.state_dict(),
            "obs_rms": rms.state_dict() if rms is not None else None,  # what every rank shares
            "memory": {
                "state": pytree.leaves(self.state),
                "starts": self.starts,
                "segments": [None if s is None else pytree.leaves(s) for s in self.segment_states],
            },
        }
        if self._obs_shared is not None and self._obs_local is not None and self.obs_rms is not None:
            # data-parallel: this rank's statistics (the shared ones and its own observations since
            # they were pooled) and those own observations alone
            parts["obs_rms_rank"] = {
                "current": self.obs_rms.state_dict(),
                "local": self._obs_local.state_dict(),
            }
        return parts

    def _check_rms(self, rms: Any, what: str) -> None:
        """Raise ``ValueError`` unless ``rms`` is a RunningMeanStd state of this observation size."""
        assert self.obs_rms is not None  # called only with normalize_obs
        if not isinstance(rms, Mapping) or any(
            not isinstance(rms.get(k), torch.Tensor)
            or not rms[k].is_floating_point()
            or rms[k].numel() != v.numel()
            for k, v in self.obs_rms.state_dict().items()
        ):
            raise ValueError(
                f"observation statistics ({what}) are not float tensors "
                "mean, var, count of this observation size"
            )

    def _check_parts(self, state: Mapping[str, Any], where: str, rank_parts: bool) -> dict[str, Any]:
        config = section(state, "config", where, "the agent config")
        saved_policy = config.get("policy") if isinstance(config, Mapping) else None
        if saved_policy != self.config.policy:
            raise CheckpointError(
                f"{where}: a {brief(saved_policy, 20)} policy, this agent has {self.config.policy!r}"
            )
        check_module_tensors(
            self.net, section(state, "policy", where, "the policy network"), where=f"{where} (policy)"
        )
        self.optimizer.check_state_dict(section(state, "optimizer", where, "the optimizer state"))
        rms = section(state, "obs_rms", where, "the observation statistics")
        if (rms is None) != (self.obs_rms is None):
            raise ValueError("observation normalisation differs (normalize_obs)")
        if self.obs_rms is not None:
            self._check_rms(rms, "obs_rms")
        if not rank_parts:
            return {}
        own = state.get("obs_rms_rank")
        if own is not None:
            if self.obs_rms is None or not isinstance(own, Mapping):
                raise ValueError("obs_rms_rank is not a mapping of 'current' and 'local' statistics")
            for key in ("current", "local"):
                self._check_rms(own.get(key), f"obs_rms_rank {key}")
        self.buffer.check_state_dict(section(state, "rollout", where, "the rollout buffer"))
        memory = section(state, "memory", where, "the recurrent memory")
        leaves = section(memory, "state", where, "the recurrent memory state")
        segments = section(memory, "segments", where, "the sequence segment memories")
        starts = section(memory, "starts", where, "the episode-start flags")
        if (
            not isinstance(starts, torch.Tensor)
            or tuple(starts.shape) != (self.num_envs,)
            or starts.dtype != torch.bool
        ):
            raise ValueError(f"episode-start flags are not a bool tensor [{self.num_envs}]")
        if not isinstance(segments, list) or len(segments) != len(self.segment_states):
            raise ValueError(
                f"{brief(segments, 30)} sequence segments, expected a list of {len(self.segment_states)}"
            )
        if not isinstance(leaves, list):
            raise ValueError("recurrent memory state is not a list of tensors")
        if self.recurrent:
            for s in [leaves, *(s for s in segments if s is not None)]:
                if not isinstance(s, list):
                    raise ValueError("a segment memory is not a list of tensors")
                pytree.from_leaves(self.state, s)
        elif leaves or any(s is not None for s in segments):
            raise ValueError("recurrent memory saved for a policy without memory")
        return {}

    def _load_parts(self, state: Mapping[str, Any], staged: dict[str, Any], rank_parts: bool) -> None:
        load_into_module(self.net, state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self._load_obs_stats(state, rank_parts)
        if rank_parts:
            self.buffer.load_state_dict(state["rollout"])
            memory = state["memory"]
            if self.recurrent:
                template = self.state
                self.state = pytree.from_leaves(template, memory["state"])
                self.segment_states = [
                    None if s is None else pytree.from_leaves(template, s) for s in memory["segments"]
                ]
            self.starts = memory["starts"].to(self.device, torch.bool).clone()
        else:  # this rank's own parts start fresh: an empty rollout, zero memory, episodes starting
            self.buffer.reset()
            self.state = self.net.initial_state(self.num_envs)
            self.segment_states = [None] * len(self.segment_states)
            self.starts = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        self.optimizer.set_lr(self.current_lr())  # after the counters: annealed to this update
        self._pending = None

    def _load_obs_stats(self, state: Mapping[str, Any], rank_parts: bool) -> None:
        """Restore ``obs_rms`` (shared) and, with ``rank_parts``, this rank's ``obs_rms_rank``."""
        if self.obs_rms is None:
            return
        own = state.get("obs_rms_rank") if rank_parts else None
        self.obs_rms.load_state_dict(own["current"] if own is not None else state["obs_rms"])
        if self._obs_shared is not None and self._obs_local is not None:
            self._obs_shared.load_state_dict(state["obs_rms"])
            self._obs_local = RunningMeanStd((self.obs_dim,), self.device, epsilon=0.0)
            if own is not None:
                self._obs_local.load_state_dict(own["local"])
