"""The DQN family through the shared loop and ``python -m tritonrl.toolkit train``: exact resume and
bad input."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

pytest.importorskip(
    "gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

from tritonrl.agents.dqn import DQNAgent, preset
from tritonrl.toolkit.cli import main
from tritonrl.toolkit.envs import make_vec_env
from tritonrl.toolkit.loop import LoopConfig, run_training
from tritonrl.toolkit.offpolicy import schedule_for

TINY = {"torso_width": 32, "batch_size": 32, "buffer_size": 2_000, "learning_starts": 200, "train_freq": 64,
        "gradient_steps": 8, "target_update_every": 16}


def _run(tmp: Path, name: str, *, stop_at: int | None = None, resume: bool = False) -> tuple[DQNAgent, dict]:
    env = make_vec_env("CartPole-v1", 2, seed=3)
    agent = DQNAgent(env.single_observation_space, env.single_action_space, preset(name, **TINY), num_envs=2,
                     seed=3)
    cfg = LoopConfig(total_steps=1_600, seed=3, run_dir=str(tmp), log_every=400, eval_every=800,
                     eval_episodes=2, checkpoint_every=400, stop_at=stop_at, resume=resume, plot=False,
                     tensorboard=False, meta=(("agent", name),))
    try:
        return agent, run_training(agent, env, schedule_for(agent), cfg)
    finally:
        env.close()


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path) as f:
        return [{k: v for k, v in row.items() if k != "charts/SPS"} for row in csv.DictReader(f)]


@pytest.mark.parametrize("name", ["dqn", "rainbow"])
def test_resume_continues_exactly(tmp_path: Path, name: str) -> None:
    # Stopped after 1,000 env steps (checkpoint at 800) and resumed, the run must end where the
    # uninterrupted run ends: same weights, replay priorities, counters, metrics and evaluations.
    full, s_full = _run(tmp_path / "full", name)
    _, s_cut = _run(tmp_path / "cut", name, stop_at=1_000)
    assert s_cut["interrupted"]
    resumed, s_res = _run(tmp_path / "cut", name, resume=True)
    assert resumed.env_steps == full.env_steps and resumed.updates == full.updates > 0
    for a, b in zip(full.online.parameters(), resumed.online.parameters(), strict=True):
        assert torch.equal(a, b)
    for a, b in zip(full.target.parameters(), resumed.target.parameters(), strict=True):
        assert torch.equal(a, b)
    if name == "rainbow":
        assert torch.equal(full.buffer.priorities(), resumed.buffer.priorities())
    assert s_res["evaluations"] == s_full["evaluations"]
    assert _rows(tmp_path / "full" / "metrics.csv") == _rows(tmp_path / "cut" / "metrics.csv")


def _train(capsys, *args: str) -> tuple[int, str]:
    code = main(["train", "--no-progress", "--no-tensorboard", *args])
    err = capsys.readouterr().err.strip()
    return code, err


def test_cli_trains_and_refuses_bad_input(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    small = ["--set", "torso_width=32", "--set", "learning_starts=100", "--set", "train_freq=64",
             "--set", "gradient_steps=4", "--set", "batch_size=32"]
    code, _ = _train(capsys, "--agent", "dqn", "--env", "CartPole-v1", "--steps", "400",
                     "--run-dir", str(run), "--eval-episodes", "2", *small)
    assert code == 0
    ckpt = run / "checkpoint.safetensors"
    saved = ckpt.read_bytes()

    def refused(*args: str, match: str) -> None:
        code, err = _train(capsys, *args)
        assert code == 2
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and match in lines[0], err
        assert ckpt.read_bytes() == saved  # nothing overwritten

    refused("--agent", "rainbo", "--run-dir", str(tmp_path / "x"), match="unknown agent 'rainbo'")
    refused("--agent", "dqn", "--env", "CartPolf-v1", "--run-dir", str(tmp_path / "x"),
            match="unknown environment id 'CartPolf-v1'")
    refused("--agent", "rainbow", "--env", "Pendulum-v1", "--run-dir", str(tmp_path / "x"),
            match="Discrete and MultiDiscrete")
    refused("--agent", "dqn", "--set", "distribution=c52", "--run-dir", str(tmp_path / "x"),
            match="distribution='c52'")
    refused("--agent", "dqn", "--set", "lrr=1", "--run-dir", str(tmp_path / "x"),
            match="unknown config key 'lrr'")
    # an existing checkpoint is never overwritten without --resume ...
    refused("--agent", "dqn", "--run-dir", str(run), match="--resume")
    # ... and --resume refuses a checkpoint of another agent or another observation shape
    refused("--agent", "rainbow", "--run-dir", str(run), "--resume", match="agent='dqn'")
    refused("--agent", "dqn", "--env", "CartPoleNoVel-v1", "--run-dir", str(run), "--resume",
            match="env='CartPole-v1'")
    # ... and settings that the saved schedule or replay buffer cannot continue with
    refused("--agent", "dqn", "--run-dir", str(run), "--resume", "--steps", "800", *small,
            "--set", "train_freq=32", match="--resume cannot change train_freq (checkpoint 64, now 32)")
    refused("--agent", "dqn", "--run-dir", str(run), "--resume", "--steps", "800", *small,
            "--set", "buffer_size=20000", match="--resume cannot change buffer_size (checkpoint 50000")
    assert not (tmp_path / "x").exists()


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
