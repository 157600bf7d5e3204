"""The DQN family's checkpoints: one of another observation shape is refused.

Exact resume is in test_resume.py (every agent family), command-line mistakes are rows of the
table in test_cli_errors.py."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

from tritonrl.agents.dqn import DQNAgent, preset
from tritonrl.toolkit.envs.vector import make_vec_env

TINY = {
    "torso_width": 32,
    "batch_size": 32,
    "buffer_size": 2_000,
    "learning_starts": 200,
    "train_freq": 64,
    "gradient_steps": 8,
    "target_update_every": 16,
}


def test_agent_checkpoint_of_another_shape_is_refused(tmp_path: Path) -> None:
    from tritonrl.toolkit.checkpoint import CheckpointError

    env = make_vec_env("CartPoleNoVel-v1", 1, seed=0)
    other = DQNAgent(env.single_observation_space, env.single_action_space, preset("dqn", **TINY))
    env.close()
    other.save(tmp_path / "novel.safetensors")
    env = make_vec_env("CartPole-v1", 1, seed=0)
    agent = DQNAgent(env.single_observation_space, env.single_action_space, preset("dqn", **TINY))
    env.close()
    from tritonrl.toolkit.checkpoint import load_checkpoint

    with pytest.raises(CheckpointError, match=r"observation shape \[2\]"):
        agent.load_state_dict(load_checkpoint(tmp_path / "novel.safetensors"))
