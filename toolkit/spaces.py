"""gymnasium spaces to and from JSON (how checkpoints record an agent's observation and action
spaces), and what an image observation space's bytes are scaled by (`pixel_scale`)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["pixel_scale", "space_from_json", "space_to_json"]


def space_to_json(space: gym.Space) -> dict[str, Any]:
    """A JSON description of a Discrete, MultiDiscrete or Box space (for checkpoints).

    Raises:
        TypeError: another kind of space.
    """
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist()}
    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "low": space.low.tolist(),
            "high": space.high.tolist(),
            "dtype": str(space.dtype),
        }
    raise TypeError(f"space {space!r} is not supported (Discrete, MultiDiscrete, Box)")


def space_from_json(d: dict[str, Any]) -> gym.Space:
    """Inverse of `space_to_json`.

    Raises:
        ValueError: an unknown or malformed description.
    """
    kind = d.get("type") if isinstance(d, dict) else None
    if kind == "Discrete":
        return spaces.Discrete(int(d["n"]), start=int(d.get("start", 0)))
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(np.asarray(d["nvec"], dtype=np.int64))
    if kind == "Box":
        return spaces.Box(
            np.asarray(d["low"], dtype=d["dtype"]),
            np.asarray(d["high"], dtype=d["dtype"]),
            shape=tuple(d["shape"]),
            dtype=d["dtype"],
        )
    raise ValueError(f"unknown space description {d!r}")


def pixel_scale(observation_space: gym.Space) -> float | None:
    """The factor that maps an image space's bytes to ``[0, 1]`` (``1 / high``), ``None`` for other spaces.

    An image space is a uint8 ``Box`` of shape ``[C, H, W]``: ``1/255`` for Atari frames, 1 for MinAtar.
    """
    space = observation_space
    if not (isinstance(space, spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3):
        return None
    return 1.0 / max(1.0, float(np.max(space.high)))
