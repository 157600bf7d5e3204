"""Small environments for the DQN learning tests (registered with gymnasium on import).

- ``tritonrl-test/Corridor-v0``: a sparse exploration task. Positions ``0..length-1``, start at
  0, actions left/right (a wall at 0), ``horizon`` steps per episode; the only reward is 1 for
  reaching the far end (which terminates). Observation: the one-hot position (so every new
  position is a new input, as novel states are in pixel tasks).
- ``tritonrl-test/TargetMatch-v0``: a MultiDiscrete task whose optimum needs every action
  dimension. Each step shows ``dims`` random digits ``x`` in ``{0..choices-1}`` (one-hot,
  concatenated); the action is ``dims`` sub-actions and sub-action ``d`` is right when it equals
  ``(x_d + x_{d+1 mod dims}) mod choices`` (with the default 2 choices: the XOR of two
  neighbouring bits, so every branch needs a nonlinear function of two inputs, not a copy of
  one); the reward is the fraction of dimensions right. Episodes last ``horizon`` steps, so the
  best return is ``horizon``; a uniformly random policy gets ``horizon / choices``, and a policy
  that ignores one dimension gets at most ``horizon * (1 - (1 - 1/choices) / dims)`` (9.17 with
  the defaults: 6 dimensions, 64 joint actions).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["CORRIDOR_ID", "TARGET_MATCH_ID", "Corridor", "TargetMatch"]

CORRIDOR_ID = "tritonrl-test/Corridor-v0"
TARGET_MATCH_ID = "tritonrl-test/TargetMatch-v0"


class Corridor(gym.Env):
    """See the module docstring. ``info["position"]`` reports where the agent is."""

    def __init__(self, length: int = 40, horizon: int = 80) -> None:
        self.length, self.horizon = length, horizon
        self.observation_space = spaces.Box(0.0, 1.0, shape=(length,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.pos = 0
        self.t = 0

    def _obs(self) -> np.ndarray:
        o = np.zeros(self.length, np.float32)
        o[self.pos] = 1.0
        return o

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.pos, self.t = 0, 0
        return self._obs(), {"position": self.pos}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.pos = min(self.length - 1, max(0, self.pos + (1 if int(action) == 1 else -1)))
        self.t += 1
        terminated = self.pos == self.length - 1
        truncated = not terminated and self.t >= self.horizon
        return self._obs(), float(terminated), terminated, truncated, {"position": self.pos}


class TargetMatch(gym.Env):
    """See the module docstring."""

    def __init__(self, dims: int = 6, choices: int = 2, horizon: int = 10) -> None:
        self.dims, self.choices, self.horizon = dims, choices, horizon
        self.observation_space = spaces.Box(0.0, 1.0, shape=(dims * choices,), dtype=np.float32)
        self.action_space = spaces.MultiDiscrete([choices] * dims)
        self.target = np.zeros(dims, np.int64)
        self.t = 0

    def _new_target(self) -> np.ndarray:
        x = self.np_random.integers(self.choices, size=self.dims)
        self.target = (x + np.roll(x, -1)) % self.choices
        o = np.zeros((self.dims, self.choices), np.float32)
        o[np.arange(self.dims), x] = 1.0
        return o.reshape(-1)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self._new_target(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        reward = float(np.mean(np.asarray(action) == self.target))
        self.t += 1
        return self._new_target(), reward, False, self.t >= self.horizon, {}


if CORRIDOR_ID not in gym.registry:
    gym.register(id=CORRIDOR_ID, entry_point=Corridor)
if TARGET_MATCH_ID not in gym.registry:
    gym.register(id=TARGET_MATCH_ID, entry_point=TargetMatch)
