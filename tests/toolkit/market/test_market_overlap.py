"""Overlapped acting and learning on ``MarketEnv``: the loop's overlapped actor steps the market env
itself (no collector), from the Python API and from ``train --env market:... --overlap``.

The in-process learner is the oracle of the lagged semantics (tests/toolkit/test_overlap.py); on
the market env the process learner must reproduce it bit for bit too (a CPU, the same computation
moved to another process: exact comparisons). About 15 s here (2 shared cores).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

from helpers import assert_same_tree
from tritonrl.agents.dqn import DQNAgent
from tritonrl.agents.dqn import preset as dqn_preset
from tritonrl.agents.ppo import PPOAgent
from tritonrl.agents.ppo import preset as ppo_preset
from tritonrl.cli import main
from tritonrl.toolkit.bars import synthetic_bars, upload
from tritonrl.toolkit.checkpoint import load_checkpoint
from tritonrl.toolkit.envs.market.env import MarketEnv, MarketEnvConfig
from tritonrl.toolkit.training.loop import CHECKPOINT_NAME, LoopConfig, run_training
from tritonrl.toolkit.training.offpolicy import schedule_for
from tritonrl.toolkit.training.onpolicy import OnPolicySchedule

ENVS = 8


def _agent(name: str, env: MarketEnv) -> Any:
    spaces = (env.single_observation_space, env.single_action_space)
    if name == "dqn":
        cfg = dqn_preset(
            "dqn",
            torso_hidden=(32, 32),
            buffer_size=4_096,
            batch_size=64,
            learning_starts=256,
            train_freq=64,
            gradient_steps=4,
            target_update_every=64,
        )
        return DQNAgent(*spaces, cfg, num_envs=ENVS, seed=5)
    return PPOAgent(*spaces, ppo_preset("ppo", hidden=(32, 32), num_steps=32), num_envs=ENVS, seed=5)


def _run(name: str, learner: str) -> tuple[Any, dict[str, Any]]:
    torch.set_num_threads(1)
    data = upload(synthetic_bars(1_500, seed=2))
    env = MarketEnv(data, ENVS, MarketEnvConfig(window=8, episode_length=64), seed=5)
    agent = _agent(name, env)
    schedule = schedule_for(agent) if name == "dqn" else OnPolicySchedule(agent.config.num_steps)
    cfg = LoopConfig(
        total_steps=2_048,
        seed=5,
        eval_every=0,
        final_eval=False,
        overlap=True,
        overlap_learner=learner,
        plot=False,
        tensorboard=False,
        progress=False,
        checkpoint_seconds=0,
    )
    return agent, run_training(agent, env, schedule, cfg)


@pytest.mark.parametrize("name", ["dqn", "ppo"])
def test_process_learner_equals_inline_on_the_market_env(name: str) -> None:
    inline_agent, inline = _run(name, "inline")
    process_agent, process = _run(name, "process")
    assert inline_agent.updates > 0 and process["global_step"] == inline["global_step"] == 2_048
    assert_same_tree(_state(inline_agent), _state(process_agent))


def _state(agent: Any) -> dict[str, Any]:
    # PPO's learning rate in the optimizer's param group is what the last update set in the inline
    # learner and what a load sets (the next update's) in this process: every update sets it
    # again, so it is left out (as in tests/toolkit/test_overlap_ppo.py); every tensor is compared
    state = agent.state_dict()
    if isinstance(agent, PPOAgent):
        for group in state["optimizer"]["optimizer"]["param_groups"]:
            group.pop("lr")
    return state


def test_train_cli_overlaps_on_market_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """(The CLI runs on one torch thread, its --threads default.)"""
    run = tmp_path / "run"
    args = [
        "train",
        "--agent",
        "dqn",
        "--env",
        "market:synthetic,bars=1500",
        "--set",
        "env.window=8",
        "--set",
        "env.episode_length=64",
        "--set",
        "learning_starts=256",
        "--num-envs",
        "4",
        "--steps",
        "1024",
        "--overlap",
        "--no-progress",
        "--no-tensorboard",
        "--run-dir",
        str(run),
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "buy-and-hold" in out
    assert set(json.loads((run / "test_report.json").read_text())) >= {"agent", "buy_and_hold"}
    saved = load_checkpoint(run / CHECKPOINT_NAME)
    # the overlapped actor stepped the env (its side is a checkpoint section), no collector did
    assert "overlap" in saved and "collector" not in saved
    assert saved["loop"]["step"] == 1024 and saved["schedule"]["updates"] > 0
