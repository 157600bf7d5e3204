"""The DQN family's replays: staging mode, memory check and builders of the Q learner's and the ICM's.

They hold this rank's share of ``buffer_size``. See docs/pages/dqn.md and docs/pages/replay.md.
"""

from __future__ import annotations

from typing import Any

import torch
from tritonrl.agents.dqn.config import DQNConfig
from tritonrl.agents.dqn.spaces import action_counts, action_shape
from tritonrl.toolkit.checks import check_memory
from tritonrl.toolkit.replay import (
    FrameReplayBuffer,
    PrioritizedFrameReplayBuffer,
    PrioritizedReplayBuffer,
    ReplayBuffer,
)

__all__ = ["build_icm_replay", "build_replay", "check_replay_memory", "resolve_staging"]


def resolve_staging(staging: str, device: torch.device) -> str:
    """``config.replay_staging`` resolved: ``"auto"`` is host on a CPU, device on an accelerator."""
    return staging if staging != "auto" else ("host" if device.type == "cpu" else "device")


def check_replay_memory(
    cfg: DQNConfig,
    capacity: int,
    obs_shape: tuple[int, ...],
    action_shape: tuple[int, ...],
    *,
    num_envs: int,
    device: torch.device,
    dtype: torch.dtype,
    staging: str,
    pixels: bool = False,
) -> None:
    """Refuse a ``buffer_size`` whose replays (this rank's share) do not fit on the device.

    Raises:
        ValueError: the replay does not fit in the device's free memory.
    """
    if pixels:
        frame_cls = PrioritizedFrameReplayBuffer if cfg.prioritized else FrameReplayBuffer
        parts = frame_cls.memory_bytes(
            capacity, obs_shape, stack=cfg.frame_stack, action_shape=action_shape, num_envs=num_envs
        )
        check_memory(f"buffer_size={cfg.buffer_size}", parts, device)
        return
    buffer_cls = PrioritizedReplayBuffer if cfg.prioritized else ReplayBuffer
    kw: dict[str, Any] = dict(
        obs_dtype=dtype, action_shape=action_shape, action_dtype=torch.int64, num_envs=num_envs
    )
    kw["staging"] = staging
    parts = buffer_cls.memory_bytes(capacity, obs_shape, n_step=cfg.n_step, **kw)
    if cfg.icm:
        icm = ReplayBuffer.memory_bytes(capacity, obs_shape, **kw)
        parts["ICM replay"] = sum(icm.values())
    check_memory(f"buffer_size={cfg.buffer_size}", parts, device)


def build_replay(
    cfg: DQNConfig,
    capacity: int,
    obs_shape: tuple[int, ...],
    action: dict[str, Any],
    *,
    num_envs: int,
    device: torch.device,
    staging: str,
    pixel_scale: float | None = None,
) -> ReplayBuffer | FrameReplayBuffer:
    """The Q learner's replay: ``n_step`` returns, prioritized if ``cfg.prioritized``, int64 actions.

    With a ``pixel_scale``, a `tritonrl.toolkit.replay.FrameReplayBuffer` of ``cfg.frame_stack``
    frames (``staging`` does not apply; ``capacity`` rounds down to a multiple of ``num_envs``).
    """
    kw: dict[str, Any] = dict(
        device=device,
        num_envs=num_envs,
        n_step=cfg.n_step,
        gamma=cfg.gamma,
        action_shape=action_shape(action),
        action_dtype=torch.int64,
        staging=staging,
        num_actions=action_counts(action),
    )
    per: dict[str, Any] = dict(
        alpha=cfg.per_alpha,
        beta=cfg.per_beta,
        beta_final=cfg.per_beta_final,
        beta_steps=cfg.per_beta_steps,
        eps=cfg.per_eps,
    )
    if pixel_scale is not None:
        capacity -= capacity % num_envs  # one ring per environment, of equal length
        del kw["staging"]
        kw.update(stack=cfg.frame_stack, scale=pixel_scale)
        if cfg.prioritized:
            return PrioritizedFrameReplayBuffer(capacity, obs_shape, **per, **kw)
        return FrameReplayBuffer(capacity, obs_shape, **kw)
    if cfg.prioritized:
        return PrioritizedReplayBuffer(capacity, obs_shape, **per, **kw)
    return ReplayBuffer(capacity, obs_shape, **kw)


def build_icm_replay(
    cfg: DQNConfig,
    capacity: int,
    obs_shape: tuple[int, ...],
    action: dict[str, Any],
    *,
    num_envs: int,
    device: torch.device,
    staging: str,
) -> ReplayBuffer:
    """The ICM's replay: one-step transitions for the forward/inverse models, whatever
    ``n_step`` the Q target uses (actions as in `build_replay`)."""
    return ReplayBuffer(
        capacity,
        obs_shape,
        device=device,
        num_envs=num_envs,
        n_step=1,
        gamma=cfg.gamma,
        action_shape=action_shape(action),
        action_dtype=torch.int64,
        staging=staging,
        num_actions=action_counts(action),
    )
