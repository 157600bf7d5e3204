"""What the DQN family takes from its spaces, checked once: a ``Box`` of observations, and
``Discrete`` or flat ``MultiDiscrete`` actions starting at 0. See docs/pages/dqn.md.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from tritonrl.agents.dqn.config import DQNConfig

__all__ = ["action_counts", "action_shape", "action_spec", "check_pixels", "obs_shape"]


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
    """The shape of one observation; ``ValueError`` if not a ``Box``."""
    if not isinstance(observation_space, gym.spaces.Box):
        raise ValueError(f"observation_space={observation_space}: DQN needs a Box observation space")
    return tuple(int(s) for s in observation_space.shape)


def check_pixels(cfg: DQNConfig, obs_shape: tuple[int, ...], pixel_scale: float | None) -> None:
    """Refuse what image observations cannot take.

    Raises:
        ValueError: ``icm=True``, or a ``frame_stack`` that does not divide the channels.
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
