"""``fit`` guards what ``train`` guards: every mistake in a ``fit`` flag is one ``error:`` line,
exit status 2, no traceback and nothing written; models and data too large for this machine are
refused before they are allocated; a run refused after taking its folder's lock leaves no
``.lock`` behind (tritonrl/cli/common.py, tritonrl/cli/fit.py, toolkit/runfolder.py,
toolkit/lifecycle.py).

:data:`FIT_CASES` is the ``fit`` table (argv -> regex the one stderr line must match), run
in-process like ``tests/toolkit/test_cli_errors.py`` with the working directory a fresh
``tmp_path`` (the default ``runs/...`` folder would land there): exit 2, one ``error:`` line,
nothing on stdout, no ``Traceback``, ``tmp_path`` unchanged. ``{run}`` and ``{tmp}`` are replaced by
``tmp_path/"run"`` and ``tmp_path``. A row's ``free`` replaces the free memory the checks see.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import tritonrl.toolkit.checks as checks
from tritonrl.cli import main
from tritonrl.toolkit.runfolder import LOCK_NAME, RunFolderBusy, RunLock

QUICK = ("--no-progress", "--no-tensorboard", "--epochs", "1", "--data", "market:synthetic,bars=300")


def fit(*args: str, run_dir: bool = True) -> tuple[str, ...]:
    """A small ``fit`` argv (the default MLP, 300 synthetic bars, window 8) with ``args`` appended."""
    base = ("fit", "--model", "mlp", "--window", "8", *QUICK)
    return (*base, *args, *(("--run-dir", "{run}") if run_dir else ()))


def _file(tmp: Path) -> None:
    (tmp / "run").write_text("not a folder\n")


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    match: str
    """Regex searched in the one stderr line."""
    setup: Callable[[Path], None] | None = None
    free: int | None = None
    """Bytes of free memory ``tritonrl.toolkit.checks.available_memory`` reports (``None``: the real)."""


TB = r"[\d.]+ [TP]B"
FIT_CASES = [
    # --- the run folder: `fit --run-dir ""` trained into the current folder
    Case("run-dir-empty", fit("--run-dir", "", run_dir=False), r"^error: --run-dir must not be empty$"),
    Case("run-dir-blank", fit("--run-dir", "  ", run_dir=False), r"--run-dir must not be empty"),
    Case("run-dir-nul", fit("--run-dir", "a\0b", run_dir=False), r"--run-dir 'a\\x00b' contains a NUL"),
    Case("run-dir-is-a-file", fit(), r"--run-dir .*/run is not a folder", setup=_file),
    Case("run-dir-dev-null", fit("--run-dir", "/dev/null", run_dir=False), r"/dev/null is not a folder"),
    # --- memory: counted on the meta device and refused before anything is allocated
    Case(
        "hidden-beyond-int64",
        fit("--set", "hidden=10000000000"),
        r"model 'mlp': a tensor too large to exist \(Storage size calculation overflowed",
    ),
    Case(
        "hidden-huge",
        fit("--set", "hidden=3000000"),
        rf"^error: --model mlp --set hidden=3000000 \(9,000,153,000,001 parameters\) "
        rf"needs {TB} \(.*the model and its optimizer {TB}.*\) on cpu; this machine has [\d.]+ [kMGT]?B "
        "available$",
    ),
    Case(
        "gru-hidden-huge",
        fit("--model", "gru", "--set", "hidden=100000000"),
        rf"--model gru .* parameters\) needs {TB} .* this machine has",
    ),
    Case(
        "layers-huge",
        fit("--set", "layers=100000000"),
        r"model 'mlp': more than 10,000 parameter tensors",
    ),
    Case("tcn-depth-huge", fit("--model", "tcn", "--set", "depth=1000000"), r"model 'tcn': more than 10,000"),
    Case(
        "default-model-small-machine",
        fit(),
        r"^error: --model mlp \(22,913 parameters\) needs .* on cpu; this machine has 100.0 kB available$",
        free=100_000,
    ),
    Case(
        "data-small-machine",
        fit("--data", "market:synthetic,bars=4000"),
        r"^error: --data market:synthetic,bars=4000 needs [\d.]+ MB \(preparing the data .*the data .*\) "
        r"on cpu; this machine has 600.0 kB available$",
        free=600_000,
    ),
    # --- synthetic bars: refused before generating
    Case(
        "bars-huge",
        fit("--data", "market:synthetic,bars=10000000000"),
        rf"^error: market:synthetic,bars=10000000000 needs {TB} \(generating 10000000000 bars {TB}\) on cpu; "
        r"this machine has .* available$",
    ),
    Case(
        "bars-overflow-float64",
        fit("--data", "market:synthetic,bars=4000000,regimes=1"),
        r"synthetic_bars\(n=4000000\): the price leaves the float64 range at bar \d+",
    ),
    Case("bars-1", fit("--data", "market:synthetic,bars=1"), r"bars=1: need bars >= 2"),
    Case("bars-negative", fit("--data", "market:synthetic,bars=-5"), r"bars=-5: need bars >= 2"),
    Case("bars-float", fit("--data", "market:synthetic,bars=1e9"), r"bars='1e9' is not a valid int"),
    Case("seed-negative-data", fit("--data", "market:synthetic,seed=-1"), r"seed=-1: need seed >= 0"),
    Case(
        "regimes-huge",
        fit("--data", "market:synthetic,regimes=100000000000"),
        r"regimes=100000000000: need 1 <= regimes <= bars \(5000\)",
    ),
    Case("ar-nan", fit("--data", "market:synthetic,ar=nan"), r"ar=nan: need -1 < ar < 1"),
    Case("data-unknown", fit("--data", "market:nowhere"), r"unknown market source 'nowhere'"),
    Case("data-csv-missing", fit("--data", "csv={tmp}/none.csv"), r"none\.csv: no such file$"),
    # --- a numeric series CSV (--target, --features, --series-id, --time)
    Case("features-without-csv", fit("--features", "temp"), r"^error: --features: only for --data csv=PATH"),
    Case("series-id-without-csv", fit("--series-id", "k"), r"^error: --series-id: only for --data csv=PATH"),
    Case(
        "time-missing",
        fit("--data", "csv={tmp}/s.csv", "--time", "when"),
        r"s\.csv: missing column 'when' \(the time column; header: ds, y\)$",
        setup=lambda tmp: (tmp / "s.csv").write_text("ds,y\n" + "".join(f"{i},{i % 5}\n" for i in range(80))),
    ),
    Case(
        "target-missing",
        fit("--data", "csv={tmp}/s.csv", "--target", "sales"),
        r"s\.csv: missing column 'sales' \(--target; header: ds, y\)$",
        setup=lambda tmp: (tmp / "s.csv").write_text("ds,y\n" + "".join(f"{i},{i % 5}\n" for i in range(80))),
    ),
    # --- sizes
    Case("window-0", fit("--window", "0"), r"--window must be >= 1, got 0"),
    Case("window-huge", fit("--window", "10000000000"), r"has 300 bars, too few for window \+ horizon"),
    Case("horizon-0", fit("--horizon", "0"), r"--horizon must be >= 1, got 0"),
    Case(
        "horizon-huge", fit("--horizon", "10000000000"), r"too few for window \+ horizon = 8 \+ 10000000000"
    ),
    Case("epochs-0", fit("--epochs", "0"), r"--epochs must be an int >= 1, got 0"),
    Case("batch-size-0", fit("--batch-size", "0"), r"--batch-size must be an int >= 1, got 0"),
    Case("batch-size-negative", fit("--batch-size", "-3"), r"--batch-size must be an int >= 1, got -3"),
    Case("warmup-negative", fit("--warmup-steps", "-1"), r"--warmup-steps must be an int >= 0"),
    Case("patience-0", fit("--patience", "0"), r"--patience must be an int >= 1"),
    Case("season-0", fit("--season", "0"), r"--season must be an int >= 1"),
    Case("season-longer-than-window", fit("--season", "9"), r"--season 9 is longer than the window 8"),
    Case("log-every-0", fit("--log-every", "0"), r"--log-every must be an int >= 1"),
    Case("epochs-not-an-int", fit("--epochs", "1e3"), r"argument --epochs: invalid int value: '1e3'"),
    # --- the optimizer
    Case("lr-nan", fit("--lr", "nan"), r"--lr must be a finite number, got nan"),
    Case("lr-inf", fit("--lr", "inf"), r"--lr must be a finite number, got inf"),
    Case("lr-negative", fit("--lr=-1"), r"--lr must be > 0, got -1.0"),
    Case("weight-decay-nan", fit("--weight-decay", "nan"), r"--weight-decay must be a finite number"),
    Case("grad-clip-nan", fit("--grad-clip", "nan"), r"--grad-clip must be a finite number"),
    Case("schedule-bogus", fit("--schedule", "bogus"), r"--schedule must be one of cosine, linear, constant"),
    Case("target-mode-bogus", fit("--target-mode", "bogus"), r"--target-mode: invalid choice: 'bogus'"),
    Case(
        "target-mode-change-of-a-return",
        fit("--target-mode", "change"),
        r"--target-mode change: target_mode 'change' reads the forecast as a change of a level target",
    ),
    Case("target-bogus", fit("--target", "bogus"), r"unknown target 'bogus'; choose log_return, close"),
    # --- --set: known keys, annotated types
    Case(
        "set-unknown-key",
        fit("--set", "nosuch=1"),
        r"--set nosuch=\.\.\.: model 'mlp' has no hyperparameter 'nosuch'; its hyperparameters: hidden, "
        r"layers, dropout, revin, revin_anchor$",
    ),
    Case(
        "set-str-for-int", fit("--set", "hidden=abc"), r"--set hidden=abc: model 'mlp' takes int for hidden"
    ),
    Case("set-float-for-int", fit("--set", "hidden=1.5"), r"takes int for hidden, got float 1.5"),
    Case("set-bool-for-int", fit("--set", "layers=True"), r"takes int for layers, got bool True"),
    Case("set-str-for-float", fit("--set", "dropout=abc"), r"takes float for dropout, got str 'abc'"),
    Case(
        "set-int-for-bool", fit("--model", "dlinear", "--set", "individual=1"), r"takes bool for individual"
    ),
    Case(
        "set-out-of-range", fit("--set", "hidden=-1"), r"model 'mlp': hidden must be a positive int, got -1"
    ),
    Case("set-reserved", fit("--set", "window=3"), r"--set window=\.\.\.: not a model hyperparameter"),
    Case("set-no-value", fit("--set", "hidden"), r"--set expects KEY=VALUE, got 'hidden'"),
    Case(
        "set-bad-choice", fit("--model", "transformer", "--set", "positions=1"), r"positions='1' is unknown"
    ),
    # --- the rest
    Case("model-missing", ("fit", *QUICK, "--run-dir", "{run}"), r"--model is required"),
    Case("model-unknown", fit("--model", "nope"), r"unknown model 'nope'; known models: .*mlp"),
    Case("seed-negative", fit("--seed", "-1"), r"--seed must be between 0 and 4294967295, got -1"),
    Case("threads-0", fit("--threads", "0"), r"--threads must be between 1 and \d+"),
    Case("device-mps", fit("--device", "mps"), r"--device 'mps' is not supported"),
]


def _snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` (hidden ones too) with its bytes (``None`` for a folder)."""
    return {
        str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes()) for p in sorted(root.rglob("*"))
    }


def _call(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    threads = torch.get_num_threads()
    try:
        code = main(argv)
    finally:
        torch.set_num_threads(threads)
    out, err = capsys.readouterr()
    return code, out, err


def _assert_one_line(code: int, out: str, err: str, match: str) -> None:
    assert code == 2, err
    assert "Traceback" not in out + err and out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and re.search(match, lines[0]), lines[0]


@pytest.mark.parametrize("case", FIT_CASES, ids=[c.id for c in FIT_CASES])
def test_fit_mistake_is_one_line(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    if case.setup is not None:
        case.setup(tmp_path)
    if case.free is not None:
        monkeypatch.setattr(checks, "available_memory", lambda device: case.free)
    before = _snapshot(tmp_path)
    argv = [a.format(run=tmp_path / "run", tmp=tmp_path) for a in case.argv]
    code, out, err = _call(argv, capsys)
    _assert_one_line(code, out, err, case.match)
    assert _snapshot(tmp_path) == before  # no run folder, no .lock, nothing in the current folder


def test_fit_table_covers_every_fit_flag() -> None:
    """Every ``fit`` flag that takes a value has a row (a new flag needs its mistakes here)."""
    from tritonrl.cli.fit import add_parser

    parser = argparse.ArgumentParser()
    p = add_parser(parser.add_subparsers())
    flags = {a.option_strings[0] for a in p._actions if a.option_strings and a.nargs != 0}
    tested = {a.split("=")[0] for c in FIT_CASES for a in c.argv if a.startswith("--")}
    assert flags - tested == set()


def test_fit_estimate_passes_a_normal_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The estimate refuses only what does not fit: the table's small model trains with 1 GB free."""
    monkeypatch.setattr(checks, "available_memory", lambda device: 10**9)
    code, _, err = _call([a.format(run=tmp_path / "run") for a in fit()], capsys)
    assert code == 0, err
    assert (tmp_path / "run" / "checkpoint.safetensors").is_file()


def test_count_parameters_matches_the_real_model() -> None:
    """The meta-device count is the parameter count of the model built on the CPU (exact: same shapes)."""
    from tritonrl.cli.common import count_parameters
    from tritonrl.cli.registry import forecasters

    for name, cls in sorted(forecasters().items()):
        real = cls(16, 6, 2, 1, device="cpu")
        want = sum(t.numel() for t in (*real.parameters(), *real.buffers()))
        assert count_parameters(lambda on, cls=cls: cls(16, 6, 2, 1, device=on), name) == want, name


# ----------------------------------------------------------------------------- train


def train(*args: str) -> tuple[str, ...]:
    return ("train", "--no-progress", "--no-tensorboard", "--steps", "64", "--eval-episodes", "2", *args)


TRAIN_CASES = [
    Case("train-run-dir-blank", train("--run-dir", " "), r"^error: --run-dir must not be empty$"),
    Case(
        "train-market-bars-huge",
        train("--agent", "ppo", "--env", "market:synthetic,bars=10000000000", "--run-dir", "{run}"),
        rf"^error: market:synthetic,bars=10000000000 needs {TB} \(generating .*\) on cpu; this machine has",
    ),
    Case(
        "train-market-regimes-huge",
        train("--agent", "ppo", "--env", "market:synthetic,regimes=100000000000", "--run-dir", "{run}"),
        r"regimes=100000000000: need 1 <= regimes <= bars",
    ),
    Case(
        "train-market-upload-small-machine",
        train("--agent", "ppo", "--env", "market:synthetic,bars=4000", "--run-dir", "{run}"),
        r"^error: uploading the 4000 bars of 'synthetic' needs [\d.]+ MB .* this machine has 600.0 kB "
        "available$",
        free=600_000,
    ),
]


@pytest.mark.parametrize("case", TRAIN_CASES, ids=[c.id for c in TRAIN_CASES])
def test_train_mistake_is_one_line(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("gymnasium")
    monkeypatch.chdir(tmp_path)
    if case.free is not None:
        monkeypatch.setattr(checks, "available_memory", lambda device: case.free)
    before = _snapshot(tmp_path)
    code, out, err = _call([a.format(run=tmp_path / "run") for a in case.argv], capsys)
    _assert_one_line(code, out, err, case.match)
    assert _snapshot(tmp_path) == before


def _overcommit_mode() -> str:
    try:
        return Path("/proc/sys/vm/overcommit_memory").read_text().strip()
    except OSError:
        return "unknown"


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (
            ("--agent", "ppo", "--set", "hidden=1000000000000"),
            r"--set hidden=1000000000000 needs [\d.]+ [TP]B",
        ),
        (("--agent", "dqn", "--set", "torso_width=1000000000000"), r"--set torso_width=1000000000000 needs"),
        (("--agent", "ppo", "--set", "num_steps=1000000000000"), r"--set num_steps=1000000000000 needs"),
    ],
)
def test_train_allocation_too_large_is_one_line(
    argv: tuple[str, ...],
    match: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A network or rollout of terabytes fails at its first allocation: one line, before anything
    is written (under ``overcommit_memory=1`` the kernel would promise it and kill the process
    later, so the test needs the heuristic or strict mode)."""
    pytest.importorskip("gymnasium")
    if _overcommit_mode() not in ("0", "2"):
        pytest.skip(f"vm.overcommit_memory={_overcommit_mode()}: a huge allocation may succeed")
    monkeypatch.chdir(tmp_path)
    code, out, err = _call(list(train(*argv, "--run-dir", str(tmp_path / "run"))), capsys)
    _assert_one_line(code, out, err, rf"agent '\w+' on CartPole-v1: {match} .* on cpu; this machine has")
    assert list(tmp_path.iterdir()) == []


def test_failed_allocation_wording(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's CPU allocator error and numpy's MemoryError both become one ``needs X`` line; other
    RuntimeErrors pass untouched."""
    from tritonrl.cli.common import UsageError, refuse_failed_allocation

    monkeypatch.setattr(checks, "available_memory", lambda device: 24 * 10**9)
    cpu = torch.device("cpu")
    torch_text = (
        "[enforce fail at alloc_cpu.cpp:127] ... you tried to allocate 160000000000 bytes. Error code 12"
    )
    for exc, asked in (
        (
            RuntimeError(
                f"{torch_text} (Cannot allocate memory)  DefaultCPUAllocator: can't allocate memory"
            ),
            "160.0 GB",
        ),
        (MemoryError("Unable to allocate 74.5 GiB for an array with shape (10000000000,)"), "74.5 GiB"),
    ):
        with pytest.raises(UsageError) as info, refuse_failed_allocation("--set hidden=1", cpu):
            raise exc
        assert str(info.value) == (
            f"--set hidden=1 needs {asked} for one allocation on cpu; this machine has 24.0 GB available"
        )
    with pytest.raises(RuntimeError, match="^shapes do not match$"), refuse_failed_allocation("x", cpu):
        raise RuntimeError("shapes do not match")


# ----------------------------------------------------------------------------- no .lock after a refusal

FIT_SMALL = fit()


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder of the table's small ``fit`` run (trained once for this module)."""
    run = tmp_path_factory.mktemp("fitted") / "run"
    argv = [a.format(run=run) for a in FIT_SMALL]
    threads = torch.get_num_threads()
    try:
        assert main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    return run


def test_fit_refused_after_the_lock_leaves_no_lock(
    fitted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--resume`` with a fixed setting changed is refused by the trainer after it locked the
    folder (the checkpoint's header alone cannot tell): the folder is left exactly as it was."""
    capsys.readouterr()
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(fitted / "checkpoint.safetensors", run)  # a copied checkpoint: no .lock beside it
    before = _snapshot(tmp_path)
    argv = [a.format(run=run) for a in (*FIT_SMALL, "--resume", "--batch-size", "32")]
    code, out, err = _call(argv, capsys)
    _assert_one_line(code, out, err, r"resume cannot change batch_size \(checkpoint 64, now 32\)")
    assert _snapshot(tmp_path) == before  # no .lock


def test_fit_refused_with_an_earlier_lock_file_keeps_it_as_it_was(
    fitted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The earlier run's (empty) ``.lock`` is not this run's to remove: it stays, unchanged."""
    capsys.readouterr()
    run = tmp_path / "run"
    shutil.copytree(fitted, run)
    assert (run / LOCK_NAME).read_bytes() == b""
    before = _snapshot(tmp_path)
    argv = [a.format(run=run) for a in (*FIT_SMALL, "--resume", "--lr", "0.01")]
    code, out, err = _call(argv, capsys)
    _assert_one_line(code, out, err, r"resume cannot change lr")
    assert _snapshot(tmp_path) == before


def test_train_refused_after_the_lock_leaves_no_lock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint whose header reads but whose tensors are cut is refused when the loop loads it,
    after the lock: exit 2, and the folder holds what it held (no ``.lock``)."""
    pytest.importorskip("gymnasium")
    small = ("--agent", "ppo", "--num-envs", "2", "--set", "num_steps=16", "--set", "hidden=8")
    source = tmp_path / "source"
    code, _, err = _call(list(train(*small, "--run-dir", str(source))), capsys)
    assert code == 0, err
    run = tmp_path / "run"
    run.mkdir()
    data = (source / "checkpoint.safetensors").read_bytes()
    (run / "checkpoint.safetensors").write_bytes(data[: len(data) - 64])  # the header stays whole
    shutil.rmtree(source)
    before = _snapshot(tmp_path)
    code, out, err = _call(list(train(*small, "--resume", "--run-dir", str(run))), capsys)
    _assert_one_line(code, out, err, r"checkpoint\.safetensors")
    assert _snapshot(tmp_path) == before


def test_lock_undo_removes_what_acquire_created(tmp_path: Path) -> None:
    run = tmp_path / "a" / "b" / "run"
    lock = RunLock(run).acquire()
    assert (run / LOCK_NAME).read_text().startswith(f"process {os.getpid()} ")
    lock.release(undo=True)
    assert list(tmp_path.iterdir()) == []  # the lock file and the three folders it made
    run.mkdir(parents=True)
    (run / LOCK_NAME).write_bytes(b"")  # an earlier run's lock file: kept by undo
    RunLock(run).acquire().release(undo=True)
    assert [p.name for p in run.iterdir()] == [LOCK_NAME] and (run / LOCK_NAME).read_bytes() == b""


def test_lock_file_removed_by_its_holder_is_not_a_lock(tmp_path: Path) -> None:
    """A process that opened the lock file before its holder removed it (``undo``) does not hold the
    folder with it: the next acquire creates and locks a new file, and a third one is refused."""
    first = RunLock(tmp_path).acquire()
    stale = os.open(tmp_path / LOCK_NAME, os.O_RDWR)  # opened by a process about to lock it
    try:
        first.release(undo=True)
        second = RunLock(tmp_path).acquire()
        assert os.fstat(stale).st_ino != os.stat(tmp_path / LOCK_NAME).st_ino
        with pytest.raises(RunFolderBusy, match=f"in use by process {os.getpid()}"):
            RunLock(tmp_path).acquire()
        second.release()
    finally:
        os.close(stale)
