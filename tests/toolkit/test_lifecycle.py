"""The one run lifecycle (toolkit/lifecycle.py): a toy step function driven through it, and the RL
loop and the forecaster trainer both going through it (the same lock, stop and checkpoint code)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from tritonrl.toolkit import lifecycle
from tritonrl.toolkit.checkpoint import load_checkpoint
from tritonrl.toolkit.distributed import SINGLE_PROCESS
from tritonrl.toolkit.lifecycle import RunLifecycle, crossed, first_nonfinite
from tritonrl.toolkit.logger import read_csv
from tritonrl.toolkit.runfolder import RunFolderBusy


def _toy_run(
    run_dir: Path, steps: int, *, resume: bool = False, stop_at: int | None = None
) -> dict[str, Any]:
    """A toy run: one "step" adds 1 to a counter and logs it; every 4 steps a flush and a save."""
    life = RunLifecycle(run_dir, SINGLE_PROCESS)
    with life:
        state = {"step": 0}
        if life.begin(resume):
            state = dict(load_checkpoint(life.ckpt_path)["toy"])
            life.resumed(state["step"])
        life.open(
            life.checkpoint_step, lambda moved: [f"moved to {moved}"] if moved else [], tensorboard=False
        )
        while state["step"] < steps:
            prev = state["step"]
            state["step"] += 1
            assert life.logger is not None
            life.logger.log(state["step"], {"losses/toy": float(state["step"])})
            if crossed(prev, state["step"], 4):
                means = life.flush(state["step"])
                assert first_nonfinite(means, lambda n: n.startswith("losses/")) is None
                life.save(state["step"], lambda snapshot=dict(state): {"format": "toy", "toy": snapshot})
            if stop_at is not None and life.stop_requested(lambda: state["step"] >= stop_at):
                break
        return {"step": state["step"], "checkpoint": life.written(), "checkpoint_step": life.checkpoint_step}


def test_a_toy_step_function_runs_stops_and_resumes_through_the_lifecycle(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    first = _toy_run(run, 12, stop_at=8)
    assert first == {"step": 8, "checkpoint": str(run / "checkpoint.safetensors"), "checkpoint_step": 8}
    (run / "metrics.csv").open("a").write("12,99")  # a row past the checkpoint, cut by a kill
    second = _toy_run(run, 12, resume=True)
    assert second["step"] == 12 and second["checkpoint_step"] == 12
    assert [r["global_step"] for r in read_csv(run / "metrics.csv")] == [4, 8, 12]
    assert "dropped 1 damaged line" in capsys.readouterr().err
    _toy_run(run, 4)  # a fresh run moves the earlier one aside
    assert "notice: moved to" in capsys.readouterr().err
    assert [r["global_step"] for r in read_csv(run / "metrics.csv")] == [4]


def test_lock_refusal_divergence_and_time_cadence(tmp_path: Path) -> None:
    run = tmp_path / "run"
    holder = RunLifecycle(run, SINGLE_PROCESS)
    with holder:
        assert holder.begin(False) is False
        with pytest.raises(RunFolderBusy):
            RunLifecycle(run, SINGLE_PROCESS).begin(False)
        holder.save(3, lambda: {"format": "toy"})
        assert holder.kept() == "the last good checkpoint (step 3) is kept"
    with pytest.raises(ValueError, match="^no overwrite$"):
        RunLifecycle(run, SINGLE_PROCESS).begin(False, refuse_overwrite="no overwrite")
    assert RunLifecycle(None, SINGLE_PROCESS).kept() == "no run folder, nothing saved"
    timed = RunLifecycle(run, SINGLE_PROCESS, checkpoint_seconds=5.0)
    assert not timed.due_by_time(timed.t_saved + 4.9) and timed.due_by_time(timed.t_saved + 5.0)
    params = [torch.ones(2), torch.tensor([1.0, math.inf])]
    assert first_nonfinite({"losses/a": 1.0, "charts/b": math.nan}, lambda n: n.startswith("losses/")) is None
    assert first_nonfinite({"losses/a": math.nan}, lambda n: n.startswith("losses/")) == "losses/a"
    assert first_nonfinite({}, lambda n: True, params) == "parameters"


def _spy_on_lifecycle(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """Record every lock, stop poll and checkpoint write of :class:`RunLifecycle`."""
    calls: list[tuple[str, Any]] = []
    begin, save, stop = RunLifecycle.begin, RunLifecycle.save, RunLifecycle.stop_requested

    def spy_begin(self, resume, **kw):
        calls.append(("begin", resume))
        return begin(self, resume, **kw)

    def spy_save(self, step, state):
        calls.append(("save", step))
        return save(self, step, state)

    def spy_stop(self, should_stop):
        asked = stop(self, should_stop)
        if asked:
            calls.append(("stop", True))
        return asked

    monkeypatch.setattr(RunLifecycle, "begin", spy_begin)
    monkeypatch.setattr(RunLifecycle, "save", spy_save)
    monkeypatch.setattr(RunLifecycle, "stop_requested", spy_stop)
    return calls


def test_the_loop_and_the_fit_stop_and_save_through_the_same_lifecycle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop request (what SIGTERM sets) ends both runs through RunLifecycle: one lock, the stop
    seen by its poll, one checkpoint written by its save, which names the step it holds."""
    pytest.importorskip("gymnasium")
    from tritonrl.agents.ppo import PPOAgent, PPOConfig
    from tritonrl.toolkit.bars import synthetic_bars
    from tritonrl.toolkit.envs.vector import make_vec_env
    from tritonrl.toolkit.forecast import FitConfig, fit, load_windows
    from tritonrl.toolkit.training.loop import LoopConfig, run_training
    from tritonrl.toolkit.training.onpolicy import OnPolicySchedule

    calls = _spy_on_lifecycle(monkeypatch)
    env = make_vec_env("CartPole-v1", 2, seed=1)
    agent = PPOAgent(
        env.single_observation_space, env.single_action_space, num_envs=2, config=PPOConfig(num_steps=8)
    )
    polls = iter([False] * 5 + [True] * 1000)
    cfg = LoopConfig(
        total_steps=200, run_dir=str(tmp_path / "rl"), log_every=4, tensorboard=False, plot=False
    )
    summary = run_training(agent, env, OnPolicySchedule(8), cfg, should_stop=lambda: next(polls))
    assert summary["stopped"] == "should_stop" and summary["checkpoint_step"] == 12
    assert calls == [("begin", False), ("stop", True), ("save", 12)]
    assert load_checkpoint(tmp_path / "rl" / lifecycle.CHECKPOINT_NAME)["loop"]["step"] == 12

    calls.clear()
    train, val, test = load_windows(synthetic_bars(300, seed=1), 8, 1)
    model = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(8 * train.num_features, 1), torch.nn.Unflatten(1, (1, 1))
    )
    stop = iter([True] * 1000)
    report = fit(
        model,
        train,
        val,
        test,
        FitConfig(epochs=3, batch_size=16, log_every=2),
        run_dir=tmp_path / "fc",
        tensorboard=False,
        should_stop=lambda: next(stop),
    )
    assert report["stopped"] == "should_stop" and report["global_step"] == 2
    assert calls == [("begin", False), ("stop", True), ("save", 2)]
    assert load_checkpoint(tmp_path / "fc" / lifecycle.CHECKPOINT_NAME)["loop"]["global_step"] == 2
