"""Overlapped acting and learning (``LoopConfig(overlap=True)``, :mod:`tritonrl.toolkit.training.overlap`).

The in-process (``inline``) learner is the oracle of the lagged semantics; the process learner
must reproduce it bit for bit on a CPU (same computation, moved to another process: exact
comparisons). The error tests check that a learner failure surfaces in the main process with its
message and that no learner process outlives a run, a killed main process included. About 50 s here
in all (2 shared cores).
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

from helpers import assert_same_tree, metric_rows, overlap_loop
from tritonrl.agents.dqn import DQNAgent, preset
from tritonrl.agents.ppo import PPOAgent
from tritonrl.toolkit.checkpoint import load_checkpoint
from tritonrl.toolkit.envs.vector import make_vec_env
from tritonrl.toolkit.lifecycle import CHECKPOINT_NAME
from tritonrl.toolkit.training.base import TrainingError
from tritonrl.toolkit.training.collector import Collector
from tritonrl.toolkit.training.loop import LoopConfig, run_training
from tritonrl.toolkit.training.offpolicy import schedule_for
from tritonrl.toolkit.training.onpolicy import OnPolicySchedule
from tritonrl.toolkit.training.overlap import check_overlap, resolve_learner

SMALL = {"learning_starts": 500, "train_freq": 64, "gradient_steps": 8, "target_update_every": 32}


def _run(
    learner: str,
    *,
    steps: int = 2_500,
    num_envs: int = 1,
    name: str = "dqn",
    seed: int = 3,
    run_dir: Path | None = None,
    agent_class: type[DQNAgent] = DQNAgent,
    should_stop: Any = None,
) -> tuple[DQNAgent, dict[str, Any]]:
    torch.set_num_threads(1)
    env = make_vec_env("CartPole-v1", num_envs, seed=seed)
    agent = agent_class(
        env.single_observation_space,
        env.single_action_space,
        preset(name, **SMALL),
        num_envs=num_envs,
        seed=seed,
    )
    cfg = overlap_loop(
        learner, run_dir, total_steps=steps, seed=seed, eval_every=1_000, eval_episodes=3, log_every=500
    )
    try:
        summary = run_training(agent, env, schedule_for(agent), cfg, should_stop=should_stop)
    finally:
        env.close()
    return agent, summary


def _metric_rows(run_dir: Path) -> list[dict[str, str]]:
    rows = metric_rows(run_dir)
    assert rows and "losses/td_loss" in rows[0]
    return rows


@pytest.mark.parametrize(
    ("name", "num_envs"),
    [("dqn", 1), ("dqn", 3), ("rainbow", 2)],  # 3 envs: sync intervals of 21 or 22 vector steps
)
def test_process_learner_is_bit_identical_to_inline(tmp_path: Path, name: str, num_envs: int) -> None:
    inline, s_inline = _run("inline", name=name, num_envs=num_envs, run_dir=tmp_path / "inline")
    proc, s_proc = _run("process", name=name, num_envs=num_envs, run_dir=tmp_path / "process")
    assert inline.updates == proc.updates > 0
    assert_same_tree(inline.state_dict(), proc.state_dict())
    assert s_inline["evaluations"] == s_proc["evaluations"]
    assert s_inline["recent_return"] == s_proc["recent_return"]
    assert _metric_rows(tmp_path / "inline") == _metric_rows(tmp_path / "process")
    saved = [load_checkpoint(tmp_path / d / CHECKPOINT_NAME)["agent"] for d in ("inline", "process")]
    assert_same_tree(saved[0], saved[1], "checkpoint")  # the final checkpoint holds the learner's state
    assert_same_tree(saved[1], proc.state_dict(), "checkpoint")


def test_stream_learner_is_the_inline_learner_off_cuda(tmp_path: Path) -> None:
    # off CUDA the stream learner has no stream: the inline learner with its metrics read one sync
    # point later (at finish, not at start); the runs, their checkpoints and metric rows are equal
    inline, s_inline = _run("inline", num_envs=2, run_dir=tmp_path / "inline")
    stream, s_stream = _run("stream", num_envs=2, run_dir=tmp_path / "stream")
    assert inline.updates == stream.updates > 0
    assert_same_tree(inline.state_dict(), stream.state_dict())
    assert s_inline["evaluations"] == s_stream["evaluations"]
    assert _metric_rows(tmp_path / "inline") == _metric_rows(tmp_path / "stream")


class _FakeStream:
    """Stands in for ``torch.cuda.Stream``: records what is ordered after what in ``log``."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log, self.device = name, log, torch.device("cuda", 0)

    def wait_stream(self, other: _FakeStream) -> None:
        self.log.append(f"{self.name} waits for {other.name}")

    def __enter__(self) -> None:
        self.log.append(f"enter {self.name}")

    def __exit__(self, *exc: object) -> None:
        self.log.append(f"exit {self.name}")


def test_stream_learner_orders_its_rounds_between_the_sync_points(monkeypatch: pytest.MonkeyPatch) -> None:
    # what the stream learner asks of CUDA, with the streams replaced by recorders: its round is
    # queued on its own stream after what the current stream holds, and the current stream waits
    # for the round before the metrics are read (and the snapshot is refreshed)
    from tritonrl.toolkit.training import overlap

    log: list[str] = []
    current = _FakeStream("current", log)
    monkeypatch.setattr(torch.cuda, "Stream", lambda device: _FakeStream("learner", log))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: current)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: s)

    class Agent:
        device = "cuda"

    def due(agent: Any, schedule: Any, staging: Any, rows: int, step: int) -> list[dict[str, torch.Tensor]]:
        log.append(f"round {step}")
        return [{"loss": torch.tensor(float(step))}]

    monkeypatch.setattr(overlap, "_due", due)
    learner = overlap._StreamLearner(Agent(), None, [None, None])
    learner.start(0, 3, 64)
    log.append("actor acts")
    packed = learner.finish()
    assert log == [
        "learner waits for current",
        "enter learner",
        "round 64",
        "exit learner",
        "actor acts",
        "current waits for learner",
    ]
    assert [(names, values.tolist()) for names, values in packed] == [(("loss",), [64.0])]


def test_auto_picks_the_process_learner_on_the_cpu_and_the_stream_learner_on_cuda() -> None:
    assert resolve_learner("auto", "cpu") == "process"
    assert resolve_learner("auto", torch.device("cuda", 1)) == "stream"
    assert resolve_learner("inline", "cuda") == "inline"
    assert resolve_learner("process", "cpu") == "process"
    with pytest.raises(
        ValueError, match="overlap_learner must be one of 'auto', 'process', 'stream', 'inline', got 'x'"
    ):
        resolve_learner("x", "cpu")


def test_same_seed_twice_gives_the_same_run() -> None:
    a, sa = _run("process", num_envs=2, steps=2_000)
    b, sb = _run("process", num_envs=2, steps=2_000)
    assert_same_tree(a.state_dict(), b.state_dict())
    assert sa["evaluations"] == sb["evaluations"]


class _Recording(DQNAgent):
    """Records the learner's update count each time the actor's snapshot is refreshed."""

    loads: list[int]

    def lagged_actor(self) -> Any:
        actor = super().lagged_actor()
        self.loads = []
        load = actor.load

        def recording_load(tensors: Any) -> None:
            self.loads.append(self.updates)
            load(tensors)

        actor.load = recording_load  # type: ignore[method-assign]
        return actor


def test_inline_actor_acts_one_sync_interval_behind() -> None:
    # sync points at every multiple of train_freq=64; updates from learning_starts=500 on (8 per
    # sync point). At sync point k the actor gets the weights after the updates of sync point k-1.
    agent, _ = _run("inline", steps=1_000, agent_class=_Recording)
    syncs = list(range(64, 1_000, 64))
    due = [8 * sum(1 for s in syncs[:i] if s >= 500) for i in range(len(syncs))]  # updates before sync i
    assert agent.loads[: len(syncs)] == due
    assert agent.loads[-1] == agent.updates  # the final drain: the actor holds the last weights


class _Boom(DQNAgent):
    """Fails on its third update (in the learner process), after writing its pid to ``pid_file``."""

    pid_file: Path
    exit_code: int | None = None

    def update(self) -> dict[str, torch.Tensor]:
        if self.updates == 0:
            self.pid_file.write_text(str(os.getpid()))
        if self.updates == 2:
            if self.exit_code is not None:
                os._exit(self.exit_code)
            raise ValueError("boom at update 3")
        return super().update()


def _gone(pid_file: Path) -> None:
    pid = int(pid_file.read_text())
    assert pid != os.getpid()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # joined: not even a zombie
    assert multiprocessing.active_children() == []


def _boom(tmp_path: Path, exit_code: int | None = None) -> type[_Boom]:
    return type("Boom", (_Boom,), {"pid_file": tmp_path / "pid", "exit_code": exit_code})


def test_learner_exception_surfaces_with_its_message(tmp_path: Path) -> None:
    with pytest.raises(TrainingError, match=r"learner process: ValueError: boom at update 3 \(at step \d+\)"):
        _run("process", steps=1_500, agent_class=_boom(tmp_path))
    _gone(tmp_path / "pid")


def test_learner_death_surfaces(tmp_path: Path) -> None:
    with pytest.raises(TrainingError, match=r"the learner process exited \(code 7\)"):
        _run("process", steps=1_500, agent_class=_boom(tmp_path, exit_code=7))
    _gone(tmp_path / "pid")


def test_keyboard_interrupt_leaves_no_learner_process(tmp_path: Path) -> None:
    class Pid(DQNAgent):
        def update(self) -> dict[str, torch.Tensor]:
            if self.updates == 0:
                (tmp_path / "pid").write_text(str(os.getpid()))
            return super().update()

    calls = [0]

    def interrupt() -> bool:
        calls[0] += 1
        if calls[0] == 800:  # the learner has updated at the sync point of step 576
            raise KeyboardInterrupt
        return False

    with pytest.raises(KeyboardInterrupt):
        _run("process", steps=1_500, agent_class=Pid, should_stop=interrupt)
    _gone(tmp_path / "pid")


def test_overlap_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    LoopConfig(total_steps=10, overlap=True, resume=True, checkpoint_every=5, run_dir=str(tmp_path))  # exact
    with pytest.raises(ValueError, match="overlap_learner"):
        LoopConfig(total_steps=10, overlap=True, overlap_learner="thread")
    env = make_vec_env("CartPole-v1", 2, seed=0)
    try:
        ppo = PPOAgent(env.single_observation_space, env.single_action_space, num_envs=2)

        class NoActor:  # an agent without the overlap protocol
            device = "cpu"

        with pytest.raises(ValueError, match=r"NoActor has no lagged_actor\(\)/learner_tensors\(\)"):
            check_overlap(NoActor(), OnPolicySchedule(8))
        with pytest.raises(ValueError, match="off-policy schedule .* or an on-policy one"):
            check_overlap(ppo, object())
        dqn = DQNAgent(env.single_observation_space, env.single_action_space, num_envs=2)
        with pytest.raises(ValueError, match="not with a collector or a data-parallel run"):
            check_overlap(dqn, schedule_for(dqn), collector=Collector(dqn, env))
        with pytest.raises(ValueError, match="not with a collector or a data-parallel run"):
            check_overlap(dqn, schedule_for(dqn), distributed=True)
        check_overlap(dqn, schedule_for(dqn))  # what run_training(overlap=True) accepts

        class OnCuda:  # the protocol, on CUDA (nothing here touches the device)
            device = "cuda"

            def learner_tensors(self) -> list[torch.Tensor]:
                return []

            def lagged_actor(self) -> Any:
                return None

        with pytest.raises(ValueError, match=r"overlap_learner='process' forks .* on cuda: use 'stream'"):
            check_overlap(OnCuda(), schedule_for(dqn), learner="process")
        for learner in ("auto", "stream", "inline"):
            check_overlap(OnCuda(), schedule_for(dqn), learner=learner)
    finally:
        env.close()


_KILLED_MAIN = """
import os, sys, torch
from tritonrl.agents.dqn import DQNAgent, preset
from tritonrl.toolkit.envs.vector import make_vec_env
from tritonrl.toolkit.training.loop import LoopConfig, run_training
from tritonrl.toolkit.training.offpolicy import schedule_for

class Pid(DQNAgent):
    def update(self):
        if self.updates == 0:
            with open(sys.argv[1], "w") as f:
                f.write(str(os.getpid()))
        return super().update()

torch.set_num_threads(1)
env = make_vec_env("CartPole-v1", 1, seed=0)
agent = Pid(env.single_observation_space, env.single_action_space,
            preset("dqn", learning_starts=200, train_freq=16, gradient_steps=1), seed=0)
run_training(agent, env, schedule_for(agent), LoopConfig(total_steps=10**7, overlap=True, final_eval=False,
                                                         plot=False, tensorboard=False))
"""


def _running(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status  # a zombie has exited (its new parent reaps it)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_learner_exits_when_the_main_process_is_killed(tmp_path: Path) -> None:
    # SIGKILL runs no cleanup in the main process: the learner sees its pipe close and ends
    pid_file = tmp_path / "pid"
    main = subprocess.Popen([sys.executable, "-c", _KILLED_MAIN, str(pid_file)], env={**os.environ})
    try:
        deadline = time.monotonic() + 120
        while not (pid_file.exists() and pid_file.read_text()) and main.poll() is None:
            assert time.monotonic() < deadline, "the learner never updated"
            time.sleep(0.1)
        assert main.poll() is None, "the training script ended early"
        pid = int(pid_file.read_text())
        assert _running(pid)
        main.kill()
        main.wait()
        deadline = time.monotonic() + 20
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(pid), "the learner process outlived its killed main process"
    finally:
        if main.poll() is None:
            main.kill()
            main.wait()
