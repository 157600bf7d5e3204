"""Run folders survive kills, restarts and a second trainer (issue 15, items 1, 2, 6 and 10).

Faults are injected where they hurt: a process killed (``os._exit`` in a forked child) inside
the atomic rewrite of ``metrics.csv`` or in the middle of an append, a rename that fails, a
restart before the first checkpoint, a resume after TensorBoard wrote past the checkpoint.
"""

from __future__ import annotations

import csv
import errno
import io
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("gymnasium")

import tritonrl.toolkit.checkpoint as ckpt_mod
import tritonrl.toolkit.logger as logger_mod
from tritonrl.cli import main
from tritonrl.toolkit.checkpoint import atomic_write_bytes, load_checkpoint, remove_stale_temps
from tritonrl.toolkit.envs.vector import make_vec_env
from tritonrl.toolkit.logger import MetricLogger, read_csv, repair_csv
from tritonrl.toolkit.runfolder import RunFolderBusy, RunLock
from tritonrl.toolkit.training.loop import LoopConfig, TrainingError, run_training
from tritonrl.toolkit.training.onpolicy import OnPolicySchedule


class Toy:
    """Random actions from torch's global RNG and a counter that 'learns' (enough to test resume)."""

    def __init__(self) -> None:
        self.seen = torch.zeros(())
        self.reward_sum = torch.zeros(())

    def act(self, obs: torch.Tensor, explore: bool = True) -> torch.Tensor:
        if not explore:
            return torch.zeros(obs.shape[0], dtype=torch.long)
        return torch.randint(0, 2, (obs.shape[0],))

    def observe(self, obs, action, reward, next_obs, terminated, truncated) -> None:
        self.seen += obs.shape[0]
        self.reward_sum += reward.sum()

    def update(self) -> dict[str, torch.Tensor]:
        return {"losses/toy": self.reward_sum / self.seen, "losses/noise": torch.rand(())}

    def state_dict(self) -> dict[str, Any]:
        return {"seen": self.seen, "reward_sum": self.reward_sum}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.seen = state["seen"].clone()
        self.reward_sum = state["reward_sum"].clone()


def _run(run_dir: Path, should_stop: Any = None, **kw: Any) -> dict[str, Any]:
    # flushes at 64, 96 (checkpoint), 128, 192 (checkpoint; eval/mean_return first appears: a
    # rewrite), 256, 288 (checkpoint), 320, 384, 400
    env = make_vec_env("CartPole-v1", 4, seed=7)
    opts: dict[str, Any] = {
        "total_steps": 400,
        "seed": 7,
        "run_dir": str(run_dir),
        "log_every": 64,
        "eval_every": 160,
        "eval_episodes": 2,
        "checkpoint_every": 96,
        "tensorboard": False,
        "plot": False,
    }
    opts.update(kw)
    try:
        return run_training(Toy(), env, OnPolicySchedule(8), LoopConfig(**opts), should_stop=should_stop)
    finally:
        env.close()


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return [{k: v for k, v in r.items() if k != "charts/SPS"} for r in csv.DictReader(f)]


@pytest.fixture(scope="module")
def full_rows(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, str]]:
    run = tmp_path_factory.mktemp("full")
    _run(run)
    return _rows(run / "metrics.csv")


# ----------------------------------------------------------------------------- metrics.csv


def test_nan_is_written_as_nan_and_empty_stays_not_logged(tmp_path: Path) -> None:
    log = MetricLogger(tmp_path, tensorboard=False)
    log.log(1, {"losses/a": torch.tensor(float("nan")), "losses/b": 2.0})
    log.flush(1)
    log.log(2, {"losses/b": float("inf")})
    log.flush(2)
    log.close()
    assert (tmp_path / "metrics.csv").read_text().splitlines() == [
        "global_step,losses/a,losses/b",
        "1,nan,2.0",
        "2,,inf",
    ]
    rows = read_csv(tmp_path / "metrics.csv")
    assert rows[0]["losses/a"] != rows[0]["losses/a"]  # NaN
    assert "losses/a" not in rows[1] and rows[1]["losses/b"] == float("inf")


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("global_step,a\n1,2.0\n2,3.0,9\n", "line 3"),  # merged / extra field
        ("global_step,a\n1,2.0\n2,[1]\n", "line 3"),  # not a number
        ("global_step,a\n1,2.0\n2,3.", "line 3 is cut short"),  # a kill mid-append
    ],
)
def test_read_csv_names_a_damaged_line(tmp_path: Path, text: str, line: str) -> None:
    (tmp_path / "m.csv").write_text(text)
    with pytest.raises(ValueError, match=line):
        read_csv(tmp_path / "m.csv")


def test_repair_keeps_good_rows_up_to_the_step(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text("global_step,a,b\n1,1.0,\n2,2.0,nan\n3,x,1\n4,4.0,4.0,4.0\n5,5.0,1\n6,6.")
    assert repair_csv(path, 5) == (3, 3)
    assert path.read_text() == "global_step,a,b\n1,1.0,\n2,2.0,nan\n5,5.0,1\n"
    assert repair_csv(path, 2) == (2, 0)
    assert path.read_text() == "global_step,a,b\n1,1.0,\n2,2.0,nan\n"
    path.write_text("garbage\n1,2\n")
    with pytest.raises(ValueError, match="not a metrics file"):
        repair_csv(path, 5)
    # files written before this version end their lines with \r\n (the csv module's default)
    path.write_bytes(b"global_step,a\r\n1,1.0\r\n2,nan\r\n3,3.0\r\n")
    assert [r["global_step"] for r in read_csv(path)] == [1.0, 2.0, 3.0]
    assert repair_csv(path, 2) == (2, 0)
    assert path.read_text() == "global_step,a\n1,1.0\n2,nan\n"


def test_a_failed_rewrite_leaves_every_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = MetricLogger(tmp_path, tensorboard=False)
    for step in (1, 2, 3):
        log.log(step, {"a": float(step)})
        log.flush(step)
    before = (tmp_path / "metrics.csv").read_text()

    def no_space(src: str, dst: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt_mod.os, "replace", no_space)
    log.log(4, {"a": 4.0, "b": 1.0})  # a new column: the file is rewritten
    with pytest.raises(OSError, match=r"No space left on device: '.*metrics\.csv'"):
        log.flush(4)
    log.close()
    assert (tmp_path / "metrics.csv").read_text() == before
    assert not list(tmp_path.glob(".metrics.csv.*.tmp"))


class _Killed(Exception):
    pass


def _fault(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Patch the writes so that the child dies (``os._exit(9)``) at ``mode``; see the test."""
    real_fdopen, real_replace, real_open = os.fdopen, os.replace, open
    rewrites = {"n": 0}

    def in_eval_rewrite() -> bool:  # the third rewrite adds eval/mean_return, after checkpoint 96
        return rewrites["n"] == 3

    real_atomic = logger_mod.atomic_write_bytes

    def counting_atomic(path: Path, payload: bytes) -> None:
        rewrites["n"] += 1
        real_atomic(path, payload)

    monkeypatch.setattr(logger_mod, "atomic_write_bytes", counting_atomic)

    if mode == "mid-temp-write":

        class HalfWriter(io.BufferedWriter):
            def write(self, b):  # type: ignore[override]
                super().write(bytes(b)[: len(b) // 2])
                self.flush()
                os._exit(9)

        def fdopen(fd: int, *a: Any, **k: Any):
            if in_eval_rewrite():
                return HalfWriter(io.FileIO(fd, "wb"))
            return real_fdopen(fd, *a, **k)

        monkeypatch.setattr(ckpt_mod.os, "fdopen", fdopen)
    elif mode == "before-rename":

        def replace(src: str, dst: str) -> None:
            if in_eval_rewrite() and str(dst).endswith("metrics.csv"):
                os._exit(9)
            real_replace(src, dst)

        monkeypatch.setattr(ckpt_mod.os, "replace", replace)
    elif mode == "after-rename":

        def fsync_dir(folder: Path) -> None:
            if in_eval_rewrite():
                os._exit(9)

        monkeypatch.setattr(ckpt_mod, "_fsync_dir", fsync_dir)
    elif mode == "mid-append":
        appends = {"n": 0}

        def fake_open(file: Any, mode_: str = "r", *a: Any, **k: Any):
            f = real_open(file, mode_, *a, **k)
            if mode_ == "a" and str(file).endswith("metrics.csv"):
                appends["n"] += 1
                if appends["n"] == 3:  # the row of step 288, past checkpoint 192
                    raw = f.write

                    def write(s: str) -> int:
                        raw(s[: len(s) // 2])
                        f.flush()
                        os._exit(9)

                    f.write = write  # type: ignore[method-assign]
            return f

        monkeypatch.setattr(logger_mod, "open", fake_open, raising=False)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="kills a forked child (POSIX only)")
@pytest.mark.parametrize("mode", ["mid-temp-write", "before-rename", "after-rename", "mid-append"])
def test_killed_while_writing_metrics_then_resumed_matches_the_uninterrupted_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    full_rows: list[dict[str, str]],
    mode: str,
    capfd: pytest.CaptureFixture[str],
) -> None:
    run = tmp_path / "run"
    pid = os.fork()
    if pid == 0:  # the child trains until the injected fault kills it
        code = 1
        try:
            _fault(mode, monkeypatch)
            _run(run)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 9, f"the fault {mode} did not fire"
    before = _rows(run / "metrics.csv") if mode != "mid-append" else None
    if before is not None:  # a kill inside a rewrite leaves the old file or the new one, whole
        assert [r["global_step"] for r in before][:4] == ["64", "96", "128", "192"][: len(before)]
        assert len(before) >= 3
    capfd.readouterr()
    summary = _run(run, resume=True)
    assert summary["global_step"] == 400
    assert _rows(run / "metrics.csv") == full_rows
    assert not list(run.glob(".*.tmp"))
    err = capfd.readouterr().err
    if mode == "mid-append":
        assert err.count("\n") == 1 and "dropped 1 damaged line" in err
    else:
        assert err == ""


# ----------------------------------------------------------------------------- restarts


def test_restart_before_the_first_checkpoint_moves_the_dead_run_aside(
    tmp_path: Path, full_rows: list[dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    _run(run, checkpoint_every=0, checkpoint_seconds=0, stop_at=250)  # dies before any save
    assert not (run / "checkpoint.safetensors").exists()
    dead = _rows(run / "metrics.csv")
    assert [r["global_step"] for r in dead] == ["64", "128", "192"]
    capsys.readouterr()
    _run(run)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"notice: {run} held files of an earlier run: moved to")
    assert _rows(run / "metrics.csv") == full_rows  # each step once
    (stale,) = run.glob("stale-*")
    assert _rows(stale / "metrics.csv") == dead


def test_resume_without_a_checkpoint_says_so_and_starts_fresh(
    tmp_path: Path, full_rows: list[dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    _run(run, checkpoint_every=0, checkpoint_seconds=0, stop_at=150)
    capsys.readouterr()
    summary = _run(run, resume=True)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(
        f"notice: --resume: {run} holds no checkpoint.safetensors: starting a fresh "
        "run; the earlier run's files moved to "
    )
    assert summary["global_step"] == 400 and _rows(run / "metrics.csv") == full_rows
    # an empty folder: the notice alone
    _run(tmp_path / "empty", resume=True, total_steps=16)
    assert "the earlier run" not in capsys.readouterr().err


def test_tensorboard_holds_each_tag_step_once_after_a_resume(tmp_path: Path) -> None:
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    pytest.importorskip("torch.utils.tensorboard")

    def pairs(run: Path) -> list[tuple[str, int]]:
        acc = ea.EventAccumulator(str(run))
        acc.Reload()
        return sorted(
            (tag, e.step) for tag in acc.Tags()["scalars"] for e in acc.Scalars(tag) if tag != "charts/SPS"
        )

    _run(tmp_path / "full", tensorboard=True, checkpoint_every=192)
    # checkpoint at 192, flush at 256, stop at 260: the events of step 256 lie past the checkpoint
    # and are written again by the resumed run
    _run(tmp_path / "cut", tensorboard=True, checkpoint_every=192, stop_at=260)
    assert any(step == 256 for _, step in pairs(tmp_path / "cut"))
    _run(tmp_path / "cut", tensorboard=True, checkpoint_every=192, resume=True)
    got = pairs(tmp_path / "cut")
    assert len(got) == len(set(got)), "a (tag, step) pair appears twice"
    assert got == pairs(tmp_path / "full")


# ----------------------------------------------------------------------------- one writer


def test_a_second_trainer_is_refused_with_the_holder_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    with RunLock(run):
        with pytest.raises(RunFolderBusy, match=rf"{run} is in use by process {os.getpid()} on host "):
            _run(run, total_steps=16)
        code = main(
            [
                "train",
                "--no-tuned",
                "--agent",
                "ppo",
                "--no-progress",
                "--no-tensorboard",
                "--steps",
                "64",
                "--num-envs",
                "2",
                "--set",
                "num_steps=16",
                "--set",
                "hidden=8",
                "--eval-episodes",
                "1",
                "--run-dir",
                str(run),
            ]
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2
        assert len(err) == 1
        assert err[0].startswith(f"error: {run} is in use by process {os.getpid()} on host ")
        assert "(started " in err[0]
        assert sorted(p.name for p in run.iterdir()) == [".lock"]  # nothing written
    _run(run, total_steps=16)  # released by the holder: free again
    assert (run / "checkpoint.safetensors").exists()


def test_the_lock_is_released_when_training_fails(tmp_path: Path) -> None:
    class Broken(Toy):
        def observe(self, *args: Any) -> None:
            raise ValueError("observations hold NaN")

    env = make_vec_env("CartPole-v1", 2, seed=0)
    with pytest.raises(TrainingError, match="observations hold NaN"):
        run_training(
            Broken(),
            env,
            OnPolicySchedule(4),
            LoopConfig(total_steps=8, run_dir=str(tmp_path), tensorboard=False),
        )
    env.close()
    RunLock(tmp_path).acquire().release()


# ----------------------------------------------------------------------------- temporary files


def test_stale_temp_files_go_at_the_start_and_at_each_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for name in (".checkpoint.safetensors.abc123.tmp", ".metrics.csv.x1.tmp"):
        (run / name).write_bytes(b"partial")
    (run / ".other.safetensors.q.tmp").write_bytes(b"not ours")
    saves = {"n": 0}
    real_save = ckpt_mod.save_checkpoint

    def save_after_a_kill(path: Path, state: Any) -> None:
        saves["n"] += 1
        if saves["n"] == 2:  # as if a killed process had left one behind since the last save
            assert not list(run.glob(".checkpoint.safetensors.*.tmp"))
            (run / ".checkpoint.safetensors.zz.tmp").write_bytes(b"partial")
        real_save(path, state)

    import tritonrl.toolkit.lifecycle as loop_mod  # the run lifecycle writes the checkpoint

    monkeypatch.setattr(loop_mod, "save_checkpoint", save_after_a_kill)
    monkeypatch.setattr(loop_mod, "remove_stale_temps", _spy_removals(remove_stale_temps))
    _run(run)
    assert saves["n"] == 5  # 96, 192, 288, 384 and the end
    assert sorted(p.name for p in run.glob(".*.tmp")) == [".other.safetensors.q.tmp"]
    assert _REMOVED == [
        ".checkpoint.safetensors.abc123.tmp",
        ".metrics.csv.x1.tmp",
        ".checkpoint.safetensors.zz.tmp",
    ]


_REMOVED: list[str] = []


def _spy_removals(real: Any) -> Any:
    _REMOVED.clear()

    def spy(path: Path) -> list[Path]:
        removed = real(path)
        _REMOVED.extend(p.name for p in removed)
        return removed

    return spy


def test_atomic_write_fsyncs_the_folder_after_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync-dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync-file")
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        events.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(ckpt_mod.os, "fsync", fsync)
    monkeypatch.setattr(ckpt_mod.os, "replace", replace)
    atomic_write_bytes(tmp_path / "f.bin", b"abc")
    assert events == ["fsync-file", "rename", "fsync-dir"]
    assert (tmp_path / "f.bin").read_bytes() == b"abc"


def test_checkpoint_saves_by_wall_time_at_a_flush(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved_at: list[int] = []
    import tritonrl.toolkit.lifecycle as loop_mod  # the run lifecycle writes the checkpoint

    real_save = loop_mod.save_checkpoint

    def spy(path: Path, state: Any) -> None:
        saved_at.append(state["loop"]["step"])
        real_save(path, state)

    monkeypatch.setattr(loop_mod, "save_checkpoint", spy)
    _run(tmp_path / "run", checkpoint_every=0, checkpoint_seconds=1e-9)
    assert saved_at == [64, 128, 192, 256, 320, 384, 400]  # every flush, never between flushes
    assert load_checkpoint(tmp_path / "run" / "checkpoint.safetensors")["loop"]["step"] == 400
    # saving by time adds no metric row: the same rows as a run that saves only at the end
    _run(tmp_path / "end-only", checkpoint_every=0, checkpoint_seconds=0)
    assert _rows(tmp_path / "run" / "metrics.csv") == _rows(tmp_path / "end-only" / "metrics.csv")


@pytest.mark.parametrize("minutes", ["-1", "nan", "inf"])
def test_checkpoint_minutes_must_be_a_finite_number(
    minutes: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "train",
            "--no-tuned",
            "--agent",
            "ppo",
            "--no-progress",
            "--run-dir",
            str(tmp_path / "run"),
            "--checkpoint-minutes",
            minutes,
        ]
    )
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: --checkpoint-minutes must be a finite number >= 0, got {float(minutes)}"
    ]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("at", [64, 72, 96])  # on a log flush, between flushes, on a checkpoint
def test_a_stop_request_writes_each_step_once_and_saves_there(at: int, tmp_path: Path) -> None:
    """``should_stop`` (a signal) at a step that was just flushed (or saved) adds no second row."""
    steps: list[int] = []

    def should_stop() -> bool:
        steps.append(0)
        return len(steps) * 4 >= at  # 4 envs: the k-th poll is at step 4k

    summary = _run(tmp_path, should_stop=should_stop)
    assert summary["stopped"] == "should_stop" and summary["global_step"] == at
    rows = [int(r["global_step"]) for r in read_csv(tmp_path / "metrics.csv")]
    assert len(rows) == len(set(rows)) and rows[-1] == at, rows
    assert load_checkpoint(tmp_path / "checkpoint.safetensors")["loop"]["step"] == at
