"""The DQN agent's checkpoint parts (the `tritonrl.toolkit.agent.AgentBase` hooks).

Networks, optimizer, replay, f32 target masters and, with ICM, its parts; the replays are this
rank's own (``rank_part_keys``) and start empty when loaded without them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from tritonrl.agents.dqn.config import DQNConfig
from tritonrl.agents.dqn.network import QNetwork
from tritonrl.agents.icm import ICM
from tritonrl.toolkit.checkpoint import CheckpointError
from tritonrl.toolkit.optim import MasterWeightOptimizer
from tritonrl.toolkit.replay import (
    FrameReplayBuffer,
    PrioritizedFrameReplayBuffer,
    PrioritizedReplayBuffer,
    ReplayBuffer,
)
from tritonrl.toolkit.runstate import check_module_tensors, load_into_module, section

__all__ = ["DQNCheckpoint"]


class DQNCheckpoint:
    """The checkpoint hooks of `tritonrl.agents.dqn.DQNAgent` (a mixin: the attributes
    below are the agent's)."""

    config: DQNConfig
    updates: int
    online: QNetwork
    target: QNetwork
    optimizer: MasterWeightOptimizer
    buffer: Any  # a ReplayBuffer or FrameReplayBuffer, or their prioritized kinds with PER
    icm_module: ICM | None
    icm_optimizer: MasterWeightOptimizer
    icm_buffer: ReplayBuffer | None
    _target_master: list[torch.Tensor] | None
    _build_buffer: Callable[[], ReplayBuffer | FrameReplayBuffer]
    _build_icm_buffer: Callable[[], ReplayBuffer]

    def _state_parts(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "online": self.online.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "replay": self.buffer.state_dict(),
        }
        if self._target_master is not None:
            state["target_master"] = [t.clone() for t in self._target_master]
        if self.icm_module is not None:
            state["icm"] = self.icm_module.state_dict()
            state["icm_optimizer"] = self.icm_optimizer.state_dict()
            assert self.icm_buffer is not None  # created with icm_module
            state["icm_replay"] = self.icm_buffer.state_dict()
        return state

    def _check_parts(self, state: Mapping[str, Any], where: str, rank_parts: bool) -> dict[str, Any]:
        check_module_tensors(
            self.online,
            section(state, "online", where, "the online network"),
            where=f"{where} (online network)",
        )
        check_module_tensors(
            self.target,
            section(state, "target", where, "the target network"),
            where=f"{where} (target network)",
        )
        if (self.icm_module is None) != ("icm" not in state):
            raise CheckpointError(
                f"{where}: ICM {'absent' if 'icm' not in state else 'present'} in the "
                "checkpoint but the config says otherwise"
            )
        staged: dict[str, Any] = {}
        self.optimizer.check_state_dict(section(state, "optimizer", where, "the optimizer state"))
        if rank_parts:
            staged["replay"] = self.buffer.parse_state(section(state, "replay", where, "the replay buffer"))
        if self.icm_module is not None:
            check_module_tensors(self.icm_module, state["icm"], where=f"{where} (ICM)")
            self.icm_optimizer.check_state_dict(
                section(state, "icm_optimizer", where, "the ICM optimizer state")
            )
            assert self.icm_buffer is not None  # created with icm_module
            if rank_parts:
                staged["icm_replay"] = self.icm_buffer.parse_state(
                    section(state, "icm_replay", where, "the ICM replay buffer")
                )
        masters = state.get("target_master")
        if masters is not None:
            shapes = [tuple(p.shape) for p in self.target.parameters()]
            if (
                not isinstance(masters, list)
                or [
                    tuple(m.shape) if isinstance(m, torch.Tensor) and m.is_floating_point() else None
                    for m in masters
                ]
                != shapes
            ):
                raise ValueError("target_master does not hold a float tensor per target parameter")
        return staged

    def _load_parts(self, state: Mapping[str, Any], staged: dict[str, Any], rank_parts: bool) -> None:
        load_into_module(self.online, state["online"])
        load_into_module(self.target, state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.optimizer.set_lr(self.config.lr)
        if rank_parts:
            self.buffer.apply_state(staged["replay"])
        else:
            self._fresh_replays()
        if self._target_master is not None:
            saved = state.get("target_master")
            src = saved if saved is not None else list(self.target.parameters())
            for m, s in zip(self._target_master, src, strict=True):
                m.copy_(s.to(device=m.device, dtype=m.dtype))
        if self.icm_module is not None:
            load_into_module(self.icm_module, state["icm"])
            self.icm_optimizer.load_state_dict(state["icm_optimizer"])
            self.icm_optimizer.set_lr(self.config.icm_lr)
            assert self.icm_buffer is not None  # created with icm_module
            if rank_parts:
                self.icm_buffer.apply_state(staged["icm_replay"])

    def _fresh_replays(self) -> None:
        """Empty replays (this rank's part); a prioritized one continues ``beta`` from the update count."""
        if self.buffer.steps:
            self.buffer = None  # release the storage before building the new one
            self.buffer = self._build_buffer()
        if isinstance(self.buffer, (PrioritizedReplayBuffer, PrioritizedFrameReplayBuffer)):
            self.buffer.sample_calls = self.updates
        if self.icm_buffer is not None and self.icm_buffer.steps:
            self.icm_buffer = None
            self.icm_buffer = self._build_icm_buffer()
