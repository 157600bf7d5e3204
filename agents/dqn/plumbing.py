"""The DQN agent's plumbing: what its spaces are made of, and its replay buffers.

The spaces are checked once, at construction: a ``Box`` of observations, and ``Discrete`` or flat
``MultiDiscrete`` actions starting at 0 (the factored head). The replays hold this rank's share of
``buffer_size``; their memory is checked against the device before anything is allocated.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tritonrl.agents.dqn.config import DQNConfig
from tritonrl.toolkit.checks import check_memory
from tritonrl.toolkit.replay import (
    FrameReplayBuffer,
    PrioritizedFrameReplayBuffer,
    PrioritizedReplayBuffer,
    ReplayBuffer,
)
from tritonrl.toolkit.spaces import pixel_scale

__all__ = [
    "action_counts",
    "action_shape",
    "action_spec",
    "build_icm_replay",
    "build_replay",
    "check_pixels",
    "check_replay_memory",
    "obs_shape",
    "pixel_scale",
    "resolve_staging",
]


def action_spec(action_space: gym.Space) -> dict[str, Any]:
    """``{"type": "discrete", "n": n}`` or ``{"type": "multidiscrete", "nvec": [...]}``.

    Raises:
        ValueError: another space, or one whose actions do not start at 0.
    """
    if isinstance(action_space, gym.spaces.Discrete):
        if int(action_space.start) != 0:
            raise ValueError(f"action_space={action_space}: DQN needs Discrete actions starting at 0")
        return {"type": "discrete", "n": int(action_space.n)}
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        if action_space.nvec.ndim != 1 or np.any(action_space.start != 0):
            raise ValueError(f"action_space={action_space}: DQN needs a flat MultiDiscrete starting at 0")
        return {"type": "multidiscrete", "nvec": [int(n) for n in action_space.nvec]}
    raise ValueError(
        f"action_space={action_space}: the DQN family handles Discrete and MultiDiscrete action "
        "spaces only (continuous actions need an actor-critic agent)"
    )


def action_shape(action: dict[str, Any]) -> tuple[int, ...]:
    """The shape of one environment's action: ``()`` (Discrete) or ``(D,)`` (MultiDiscrete)."""
    return () if action["type"] == "discrete" else (len(action["nvec"]),)


def action_counts(action: dict[str, Any]) -> int | list[int]:
    """What the replay checks actions against: ``n`` (Discrete) or ``nvec`` (MultiDiscrete)."""
    return int(action["n"]) if action["type"] == "discrete" else list(action["nvec"])


def obs_shape(observation_space: gym.Space) -> tuple[int, ...]:
    """The shape of one observation.

    Raises:
        ValueError: not a ``Box``.
    """
    if not isinstance(observation_space, gym.spaces.Box):
        raise ValueError(f"observation_space={observation_space}: DQN needs a Box observation space")
    return tuple(int(s) for s in observation_space.shape)


def check_pixels(cfg: DQNConfig, obs_shape: tuple[int, ...], pixel_scale: float | None) -> None:
    """Refuse what image observations (``pixel_scale`` not ``None``) cannot take.

    Raises:
        ValueError: ``icm=True`` (its models are MLPs), or a ``frame_stack`` that does not divide
            the observation's channels.
    """
    if pixel_scale is None:
        return
    if cfg.icm:
        raise ValueError("icm=True is not available with image observations (its models are MLPs)")
    if obs_shape[0] % cfg.frame_stack:
        raise ValueError(
            f"frame_stack={cfg.frame_stack} must divide the {obs_shape[0]} channels of the "
            f"observations {obs_shape}"
        )


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
    """Refuse a ``buffer_size`` whose replay (and ICM replay) of ``capacity`` transitions (this
    rank's share) cannot fit on the device, before anything is allocated (``pixels``: the frame
    replay of :func:`build_replay`).

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
    """The Q learner's replay of ``capacity`` transitions for actions of ``action``
    (:func:`action_spec`): ``n_step`` returns, prioritized if ``cfg.prioritized``; int64 actions,
    checked against the space when the replay is used directly (the agent checks its own inputs
    and adds with ``check=False``). With a ``pixel_scale`` (image observations,
    :func:`pixel_scale`), a frame replay that stores each frame once as uint8 and samples the
    stacks of ``cfg.frame_stack`` frames scaled by it into the training dtype
    (:class:`tritonrl.toolkit.replay.FrameReplayBuffer`; its n-step windows close at sample time,
    so ``staging`` does not apply; ``capacity`` is rounded down to a multiple of ``num_envs``,
    one ring of frames per environment)."""
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
    ``n_step`` the Q target uses (actions as in :func:`build_replay`)."""
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
