"""Exact resume of overlapped runs (``LoopConfig(overlap=True)`` with ``checkpoint_every`` and
``resume``).

As tests/toolkit/test_resume.py for sequential runs: a run stopped part-way (``stop_at``) and
resumed from its last checkpoint ends where the uninterrupted overlapped run ends (agent state
compared exactly, evaluations, metric rows but ``charts/SPS``), with the global RNGs disturbed in
between. The checkpoints fall between sync points, so the staged steps, the actor's snapshot (one
interval behind the learner), its generator and the learner's metrics not yet logged all have to
come back. About 30 s here in all (2 shared cores).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

from helpers import assert_same_tree, metric_rows, overlap_loop
from tritonrl.agents.dqn import DQNAgent
from tritonrl.agents.dqn import preset as dqn_preset
from tritonrl.agents.sac import SACAgent, TD3Agent
from tritonrl.agents.sac import preset as sac_preset
from tritonrl.toolkit.envs.vector import make_vec_env
from tritonrl.toolkit.training.loop import run_training
from tritonrl.toolkit.training.offpolicy import schedule_for
from tritonrl.toolkit.training.overlap import Overlap

DQN_TINY = {"learning_starts": 200, "train_freq": 64, "gradient_steps": 8, "target_update_every": 32}
SAC_TINY = {
    "hidden": (16, 16),
    "batch_size": 16,
    "buffer_size": 1_000,
    "learning_starts": 96,
    "train_freq": 16,
    "gradient_steps": 4,
}
# (agent, learner, env id, envs, total steps, checkpoint_every, stop_at): checkpoints off the sync points
CASES = {
    "dqn-process": ("dqn", "process", "CartPole-v1", 2, 1_600, 400, 1_000),
    "sac-process": ("sac", "process", "Pendulum-v1", 1, 400, 100, 250),
    "td3-inline": ("td3", "inline", "Pendulum-v1", 1, 400, 100, 250),
}


def _run(case: str, run_dir: Path, **kw: Any) -> tuple[Any, dict[str, Any]]:
    name, learner, env_id, num_envs, total, every, _ = CASES[case]
    torch.set_num_threads(1)
    env = make_vec_env(env_id, num_envs, seed=4)
    space = (env.single_observation_space, env.single_action_space)
    if name == "dqn":
        agent: Any = DQNAgent(*space, dqn_preset(name, **DQN_TINY), num_envs=num_envs, seed=4)
    else:
        cls = SACAgent if name == "sac" else TD3Agent
        agent = cls(*space, sac_preset(name, **SAC_TINY), num_envs=num_envs, seed=4)
    kw.setdefault("checkpoint_every", every)
    cfg = overlap_loop(
        learner,
        run_dir,
        total_steps=total,
        seed=4,
        log_every=every // 2,
        eval_every=total // 2,
        eval_episodes=1,
        **kw,
    )
    try:
        return agent, run_training(agent, env, schedule_for(agent), cfg)
    finally:
        env.close()


_rows = metric_rows


@pytest.mark.parametrize("case", list(CASES))
def test_stopped_and_resumed_overlapped_run_matches_the_uninterrupted_run(case: str, tmp_path: Path) -> None:
    stop_at = CASES[case][6]
    full_agent, full = _run(case, tmp_path / "full")
    _, stopped = _run(case, tmp_path / "split", stop_at=stop_at)
    assert stopped["interrupted"] and stopped["global_step"] == stop_at
    torch.manual_seed(12345)  # disturb every global RNG in between
    resumed_agent, resumed = _run(case, tmp_path / "split", resume=True)
    assert resumed["global_step"] == full["global_step"]
    assert full_agent.updates > 0
    assert_same_tree(full_agent.state_dict(), resumed_agent.state_dict())
    assert resumed["evaluations"] == full["evaluations"]
    rows = _rows(tmp_path / "full" / "metrics.csv")
    assert any(k.startswith("losses/") and v for row in rows for k, v in row.items())
    assert rows == _rows(tmp_path / "split" / "metrics.csv")


def test_checkpoints_leave_an_overlapped_run_unchanged(tmp_path: Path) -> None:
    # a checkpoint waits for the learner and copies its state, but changes nothing either side does
    with_ckpt, a = _run("sac-process", tmp_path / "a")
    without, b = _run("sac-process", tmp_path / "b", checkpoint_every=0)
    assert_same_tree(with_ckpt.state_dict(), without.state_dict())
    assert a["evaluations"] == b["evaluations"]
    assert _rows(tmp_path / "a" / "metrics.csv") == _rows(tmp_path / "b" / "metrics.csv")


def test_wall_time_checkpoints_of_an_overlapped_run_resume_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a period of ~0 s: every metric flush (every 50 steps) saves by wall time, between sync points
    # (every 16 steps); the run dies at 230 without saving and resumes from the save at 200
    import tritonrl.toolkit.lifecycle as lifecycle

    saved_at: list[int] = []
    real_save = lifecycle.save_checkpoint

    def spy(path: Path, state: Any) -> None:
        saved_at.append(state["loop"]["step"])
        real_save(path, state)

    full_agent, full = _run("sac-process", tmp_path / "full", checkpoint_every=0)
    monkeypatch.setattr(lifecycle, "save_checkpoint", spy)
    timed = {"checkpoint_every": 0, "checkpoint_seconds": 1e-9}
    _, stopped = _run("sac-process", tmp_path / "split", stop_at=230, **timed)
    assert stopped["interrupted"] and saved_at == [50, 100, 150, 200]
    torch.manual_seed(12345)  # disturb every global RNG in between
    resumed_agent, resumed = _run("sac-process", tmp_path / "split", resume=True, **timed)
    assert saved_at[4:] == [250, 300, 350, 400]  # the last step's save is the run's last: no second one
    assert resumed["global_step"] == full["global_step"] and full_agent.updates > 0
    assert_same_tree(full_agent.state_dict(), resumed_agent.state_dict())
    assert resumed["evaluations"] == full["evaluations"]
    assert _rows(tmp_path / "full" / "metrics.csv") == _rows(tmp_path / "split" / "metrics.csv")


def test_a_sequential_run_resumes_an_overlapped_checkpoint(tmp_path: Path) -> None:
    # the checkpoint at step 200 holds 8 steps staged since the sync point at 192: the sequential
    # run observes them first, so its agent has seen every env step at the end
    _, stopped = _run("sac-process", tmp_path / "run", stop_at=250)
    assert stopped["global_step"] == 250
    agent, resumed = _run("sac-process", tmp_path / "run", resume=True, overlap=False)
    assert resumed["global_step"] == 400
    assert agent.env_steps == 400


def test_a_damaged_overlap_section_is_refused_before_loading() -> None:
    env = make_vec_env("Pendulum-v1", 1, seed=0)
    try:
        agent = SACAgent(env.single_observation_space, env.single_action_space, sac_preset("sac", **SAC_TINY))
        overlap = Overlap(agent, schedule_for(agent), env.step, 1, "inline")
        good = overlap.state_dict()
        overlap.check_state_dict(good)  # what a checkpoint holds before the first step
        with pytest.raises(ValueError, match="needs 'actor', 'staged' and 'pending'"):
            overlap.check_state_dict({"actor": good["actor"]})
        bad = {**good, "actor": {**good["actor"], "snapshot": good["actor"]["snapshot"][:-1]}}
        with pytest.raises(ValueError, match="snapshot does not match"):
            overlap.check_state_dict(bad)
        with pytest.raises(ValueError, match="staged steps need the fields"):
            overlap.check_state_dict({**good, "staged": {"obs": torch.zeros(1, 1, 3)}})
    finally:
        env.close()
