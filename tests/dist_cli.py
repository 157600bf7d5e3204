"""``python -m tritonrl`` with a test environment registered, for the CLI tests of
data-parallel training (``torchrun ... tests/dist_cli.py train --env FixedLength-v0 ...``).

``FixedLength-v0``: every episode of the environment reset with seed ``s`` lasts ``5 + s % 7``
steps with a reward of 1 a step, whatever the actions, so the episodes each rank finishes (and
with them the returns ``metrics.csv`` must average) follow from the seeds alone.

With ``DIST_TEST_DIE_AT=K`` in the environment, the process of rank 1 exits (status 3, no
clean-up: a crashed rank) at the ``K``-th step of its first environment.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import gymnasium as gym
import numpy as np

FIXED_LENGTH_ID = "FixedLength-v0"


def episode_length(seed: int) -> int:
    """The length of every episode of an environment first reset with ``seed``."""
    return 5 + seed % 7


class FixedLength(gym.Env):
    """Episodes of :func:`episode_length` steps; observations ``t / 100`` (4 features)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.length = 5
        self.t = 0
        self.steps = 0
        die = os.environ.get("DIST_TEST_DIE_AT")
        self.die_at = int(die) if die and os.environ.get("RANK") == "1" else None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self.length = episode_length(seed)
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        self.steps += 1
        if self.die_at is not None and self.steps >= self.die_at:
            os._exit(3)  # a rank that crashes: no clean-up, no message
        return np.full(4, self.t / 100, np.float32), 1.0, self.t >= self.length, False, {}


if FIXED_LENGTH_ID not in gym.registry:
    gym.register(FIXED_LENGTH_ID, entry_point=FixedLength, max_episode_steps=1000)

if __name__ == "__main__":
    from tritonrl.cli import main

    sys.exit(main(sys.argv[1:]))
