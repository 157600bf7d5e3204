"""Every command-line mistake: one ``error:`` line on stderr, exit status 2, nothing written.

One table, :data:`CASES`: argv -> exit code -> a regex the single stderr line must match. Each row
runs in-process through ``tritonrl.cli.commands`` with the working directory set to a fresh
``tmp_path`` (so the default ``runs/...`` folder would land there too), and the test asserts:
the exit code, exactly one stderr line starting with ``error:`` and matching the row, nothing on
stdout, no ``Traceback``, and every file and folder under ``tmp_path`` unchanged (no run folder
created, nothing in an existing one changed).

To add a row, append a :class:`Case`. ``train(...)`` builds a small ``train`` argv with
``--run-dir {run}``; ``{run}``, ``{tmp}`` and ``{repo}`` are replaced by ``tmp_path/"run"``,
``tmp_path`` and the repository root.
A row may carry ``env`` (applied with ``monkeypatch.setenv``), ``setup`` (prepares ``tmp_path``
before the snapshot), ``fault`` (an ``OSError`` injected into the run-folder write probe) and
``hide`` (modules made unimportable for the call, to stand for an extra that is not installed).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from tritonrl.cli import main

REPO = Path(__file__).resolve().parents[2]
SMALL = ("--no-tuned", "--no-progress", "--no-tensorboard", "--steps", "64", "--eval-episodes", "2")


def train(*args: str, run_dir: bool = True) -> tuple[str, ...]:
    """A ``train`` argv for a small PPO run in ``{run}`` with ``args`` appended (later flags win)."""
    return ("train", "--agent", "ppo", *SMALL, *args, *(("--run-dir", "{run}") if run_dir else ()))


def _file(rel: str) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        (tmp / rel).write_text("not a folder\n")

    return setup


DQN_SMALL = (
    "--set",
    "torso_width=32",
    "--set",
    "learning_starts=100",
    "--set",
    "train_freq=64",
    "--set",
    "gradient_steps=4",
    "--set",
    "batch_size=32",
)
PPO_SMALL = ("--no-tuned", "--num-envs", "2", "--set", "num_steps=16")
_TRAINED = {"dqn": ("--agent", "dqn", "--steps", "400", *DQN_SMALL), "ppo": ("--agent", "ppo", *PPO_SMALL)}
_cache = tempfile.TemporaryDirectory(prefix="tritonrl-cli-errors-")  # one trained run per agent, copied


def _trained(agent: str, *, truncate: int | None = None) -> Callable[[Path], None]:
    """A run folder holding a real checkpoint of ``agent`` (trained once per session by the CLI,
    copied to ``tmp/run``); ``truncate``: cut the checkpoint to that many bytes."""

    def setup(tmp: Path) -> None:
        source = Path(_cache.name) / agent
        if not source.exists():
            argv = [a.format(run=source) for a in train(*_TRAINED[agent])]
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
                assert main(argv) == 0, err.getvalue()
        shutil.copytree(source, tmp / "run")
        if truncate is not None:
            ckpt = tmp / "run" / "checkpoint.safetensors"
            ckpt.write_bytes(ckpt.read_bytes()[:truncate])

    return setup


def _existing_run(tmp: Path) -> None:
    """A run folder with history, which a refused command must leave exactly as it is."""
    run = tmp / "run"
    (run / "tb").mkdir(parents=True)
    (run / "metrics.csv").write_text("global_step,charts/episodic_return\n64,12.0\n")
    (run / "tb" / "events.out").write_bytes(b"\x00\x01events")


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    match: str
    """Regex searched in the one stderr line (after ``error: ``)."""
    code: int = 2
    env: tuple[tuple[str, str], ...] = ()
    setup: Callable[[Path], None] | None = None
    fault: tuple[str, int] | None = None
    """``("open", errno)``: creating a file under ``tmp_path`` fails; ``("fsync", errno)``: its sync fails."""
    hide: tuple[str, ...] = ()


CASES = [
    # --- item 7: every flag checked before training (this one failed after training, with a traceback)
    Case(
        "eval-episodes-0",
        train("--eval-episodes", "0"),
        r"--eval-episodes must be between 1 and 65536, got 0",
    ),
    Case("eval-episodes-negative", train("--eval-episodes", "-1"), r"--eval-episodes must be .*got -1"),
    Case(
        "eval-episodes-huge", train("--eval-episodes", "100000000"), r"--eval-episodes must be between 1 and"
    ),
    Case("steps-0", train("--steps", "0"), r"--steps must be >= 1, got 0"),
    Case("steps-negative", train("--steps", "-64"), r"--steps must be >= 1, got -64"),
    Case("num-envs-0", train("--num-envs", "0"), r"--num-envs must be between 1 and 65536, got 0"),
    Case("num-envs-huge", train("--num-envs", "100000000"), r"--num-envs must be between 1 and 65536"),
    Case("threads-0", train("--threads", "0"), r"--threads must be between 1 and \d+ \(the CPU count"),
    Case("threads-huge", train("--threads", "1000000"), r"--threads must be between 1 and \d+"),  # segfaulted
    Case("eval-every-negative", train("--eval-every", "-5"), r"--eval-every must be >= 0 .*got -5"),
    Case("checkpoint-every-negative", train("--checkpoint-every", "-5"), r"--checkpoint-every must be >= 0"),
    Case(
        "checkpoint-minutes-negative",
        train("--checkpoint-minutes=-1"),
        r"--checkpoint-minutes must be a finite number >= 0, got -1.0",
    ),
    Case(
        "checkpoint-minutes-nan",
        train("--checkpoint-minutes", "nan"),
        r"--checkpoint-minutes must be a finite number >= 0, got nan",
    ),
    Case("log-every-negative", train("--log-every", "-5"), r"--log-every must be >= 1, got -5"),
    Case("log-every-0", train("--log-every", "0"), r"--log-every must be >= 1, got 0"),
    Case(
        "target-return-nan",
        train("--target-return", "nan"),
        r"--target-return must be a finite number, got nan",
    ),
    Case(
        "target-return-inf",
        train("--target-return", "inf"),
        r"--target-return must be a finite number, got inf",
    ),
    Case("target-return-minus-inf", train("--target-return=-inf"), r"--target-return must be a finite"),
    # argparse takes "-inf" after a space for an option (a negative number like -1 is fine)
    Case(
        "target-return-minus-inf-spaced",
        train("--target-return", "-inf"),
        r"--target-return: expected one argument",
    ),
    # --- seeds: numpy's global seed takes 32 bits, gymnasium refuses negatives, torch takes 64 bits
    Case(
        "seed-negative-default-run-dir",
        train("--seed", "-1", run_dir=False),
        r"--seed must be between 0 and 4294967295 .*got -1$",
    ),
    Case(
        "seed-2**70",
        train("--seed", str(2**70)),
        r"--seed must be between 0 and 4294967295 .*got 1180591620717411303424",
    ),
    # --- devices
    Case(
        "device-mps",
        train("--device", "mps"),
        r"--device 'mps' is not supported \(supported: cpu, cuda, cuda:N, auto\)",
    ),
    Case("device-meta", train("--device", "meta"), r"--device 'meta' is not supported"),
    Case("device-cpu-1", train("--device", "cpu:1"), r"--device 'cpu:1' is not supported"),
    Case(
        "device-not-a-device", train("--device", "cuda:x"), r"--device 'cuda:x' is not a device \(supported"
    ),
    Case("device-empty", train("--device", ""), r"--device '' is not a device"),
    Case(
        "device-cuda-99",
        train("--device", "cuda:99"),
        r"--device 'cuda:99': (CUDA is not available|this machine has \d+ CUDA device)",
    ),
    # --- environments
    Case(
        "env-extra-box2d-missing",
        train("--env", "LunarLander-v3"),
        r"environment 'LunarLander-v3' needs a package that is not installed: "
        r".*pip install \"gymnasium\[box2d\]\"",
        hide=("Box2D",),
    ),
    Case(
        "env-extra-mujoco-missing",
        train("--env", "Ant-v5", "--agent", "ppo-continuous"),
        r"environment 'Ant-v5' needs a package that is not installed: .*gymnasium\[mujoco\]",
        hide=("mujoco",),
    ),
    Case(
        "env-extra-jax-missing",
        train("--env", "phys2d/CartPole-v1"),
        r"environment 'phys2d/CartPole-v1' needs a package that is not installed: .*gymnasium\[jax\]",
        hide=("jax",),
    ),
    Case("env-unknown", train("--env", "NoSuch-v0"), r"unknown environment id 'NoSuch-v0'$"),
    Case(
        "env-misspelt",
        train("--env", "LunarLandr-v3"),
        r"unknown environment id 'LunarLandr-v3' \(did you mean LunarLander-v3",
    ),
    Case(
        "env-wrong-case",
        train("--env", "cartpole-v1"),
        r"unknown environment id 'cartpole-v1' \(did you mean CartPole-v1",
    ),
    Case(
        "env-atari-without-ale",
        train("--env", "ALE/Pong-v5"),
        r"environment 'ALE/Pong-v5' needs ale-py: pip install \"tritonrl\[atari\]\"$",
        hide=("ale_py",),
    ),
    Case("env-empty", train("--env", ""), r"--env must not be empty"),
    Case(
        "env-agent-cannot-drive",
        train("--env", "Pendulum-v1", "--agent", "dqn"),
        r"agent 'dqn' on Pendulum-v1: .*Discrete",
    ),
    Case(
        "env-observation-not-a-box", train("--env", "FrozenLake-v1"), r"observation_space must be a flat Box"
    ),
    Case(
        "env-ppo-needs-discrete",
        train("--env", "Pendulum-v1"),
        r"agent 'ppo' on Pendulum-v1: policy 'discrete' needs a Discrete action space",
    ),
    Case(
        "env-ppo-flow-needs-box",
        train("--agent", "ppo-flow", "--env", "CartPole-v1"),
        r"agent 'ppo-flow' on CartPole-v1: policy 'flow' needs a flat Box action space",
    ),
    Case(
        "env-rainbow-needs-discrete",
        train("--agent", "rainbow", "--env", "Pendulum-v1"),
        r"Discrete and MultiDiscrete",
    ),
    # --- agents and --set
    Case("agent-empty", train("--agent", ""), r"--agent must not be empty"),
    Case("agent-misspelt", train("--agent", "rainbo"), r"unknown agent 'rainbo'; known agents: .*rainbow"),
    Case("set-empty-key", train("--set", "=3"), r"--set expects KEY=VALUE, got '=3'"),
    Case("set-blank-key", train("--set", " =3"), r"--set expects KEY=VALUE, got ' =3'"),
    Case("set-no-value", train("--set", "lr"), r"--set expects KEY=VALUE, got 'lr'"),
    Case(
        "set-unknown-key",
        train("--set", "nosuch=3"),
        r"unknown config key 'nosuch' for PPOConfig; known keys: ",
    ),
    Case(
        "set-unknown-key-names-the-run",
        train("--env", "CartPole-v1", "--set", "learning_rate=1"),
        r"agent 'ppo' on CartPole-v1: unknown config key 'learning_rate' for PPOConfig",
    ),
    Case("set-unknown-key-dqn", train("--agent", "dqn", "--set", "lrr=1"), r"unknown config key 'lrr'"),
    Case("set-not-a-number", train("--set", "lr=abc"), r"lr='abc' is not a valid float"),
    Case("set-not-an-int", train("--set", "num_steps=abc"), r"num_steps='abc' is not a valid int"),
    Case("set-not-a-choice-dqn", train("--agent", "dqn", "--set", "distribution=c52"), r"distribution='c52'"),
    Case("set-lr-inf", train("--set", "lr=inf"), r"lr=inf must be a finite number"),
    Case("set-lr-inf-dqn", train("--agent", "dqn", "--set", "lr=inf"), r"lr=inf must be a finite number"),
    Case("set-hidden-0", train("--set", "hidden=0"), r"hidden=\(0,\): each item must be >= 1, got 0"),
    Case(
        "set-buffer-huge",
        train("--agent", "dqn", "--set", "buffer_size=1e11"),
        r"buffer_size=100000000000 needs [\d.]+ TB .* available",
    ),
    Case(
        "backend-bogus",
        train(),
        r"TRITONRL_BACKEND='bogus' is not a backend; allowed values: ",
        env=(("TRITONRL_BACKEND", "bogus"),),
    ),
    Case(
        "backend-triton-on-cpu",
        train(),
        r"TRITONRL_BACKEND=triton.*(interpreter|CUDA|GPU)",
        env=(("TRITONRL_BACKEND", "triton"), ("TRITON_INTERPRET", "0")),
    ),
    Case(
        "backend-bogus-dqn",
        train("--agent", "dqn"),
        r"TRITONRL_BACKEND='bogus' is not a backend",
        env=(("TRITONRL_BACKEND", "bogus"),),
    ),
    # --- run folders
    Case("run-dir-empty", train("--run-dir", "", run_dir=False), r"--run-dir must not be empty"),
    Case("run-dir-is-a-file", train(), r"--run-dir .*/run is not a folder", setup=_file("run")),
    Case(
        "run-dir-under-a-file",
        train("--run-dir", "{tmp}/f/run", run_dir=False),
        r"--run-dir .*/f/run is under .*/f, which is not a folder",
        setup=_file("f"),
    ),
    Case(
        "resume-run-dir-is-a-file", train("--resume"), r"--run-dir .*/run is not a folder", setup=_file("run")
    ),
    Case(
        "run-dir-dev-null",
        train("--run-dir", "/dev/null", run_dir=False),
        r"--run-dir /dev/null is not a folder",
    ),
    # read-only and full disks are fault-injected (as root, chmod does not stop writes): the errno
    # a read-only mount (EROFS), a folder without write permission (EACCES) or a full disk (ENOSPC,
    # often only at fsync) gives when the write probe creates or syncs its file
    Case(
        "run-dir-read-only-fs",
        train(),
        r"--run-dir .*/run is not writable: the file system is read-only",
        fault=("open", errno.EROFS),
    ),
    Case(
        "run-dir-read-only-existing",
        train("--resume"),
        r"--run-dir .*/run is not writable: the file system is read-only",
        setup=_existing_run,
        fault=("open", errno.EROFS),
    ),
    Case(
        "run-dir-no-permission",
        train("--run-dir", "{tmp}/a/b/run", run_dir=False),
        r"--run-dir .*/a/b/run is not writable: permission denied",
        fault=("open", errno.EACCES),
    ),
    Case(
        "run-dir-disk-full",
        train("--run-dir", "{tmp}/a/b/run", run_dir=False),
        r"--run-dir .*/a/b/run is not writable: the disk is full",
        fault=("fsync", errno.ENOSPC),
    ),
    Case(
        "run-dir-disk-full-existing",
        train("--resume"),
        r"--run-dir .*/run is not writable: the disk is full",
        setup=_existing_run,
        fault=("fsync", errno.ENOSPC),
    ),
    # --- an existing checkpoint: never overwritten without --resume; --resume refuses another run's
    Case(
        "checkpoint-without-resume-dqn",
        train("--agent", "dqn", *DQN_SMALL),
        r"already holds a checkpoint: pass --resume",
        setup=_trained("dqn"),
    ),
    Case(
        "checkpoint-without-resume-ppo",
        train(*PPO_SMALL),
        r"already holds a checkpoint: pass --resume",
        setup=_trained("ppo"),
    ),
    Case(
        "resume-other-agent-dqn",
        train("--agent", "rainbow", "--resume"),
        r"was made with agent='dqn', this run has agent='rainbow'",
        setup=_trained("dqn"),
    ),
    Case(
        "resume-other-agent-ppo",
        train("--agent", "ppo-lstm", *PPO_SMALL, "--resume"),
        r"was made with agent='ppo', this run has agent='ppo-lstm'",
        setup=_trained("ppo"),
    ),
    Case(
        "resume-other-env-dqn",
        train("--agent", "dqn", "--env", "CartPoleNoVel-v1", "--resume"),
        r"env='CartPole-v1'",
        setup=_trained("dqn"),
    ),
    Case(
        "resume-changes-train-freq",
        train("--agent", "dqn", "--resume", "--steps", "800", *DQN_SMALL, "--set", "train_freq=32"),
        r"--resume cannot change train_freq \(checkpoint 64, now 32\)",
        setup=_trained("dqn"),
    ),
    Case(
        "resume-changes-buffer-size",
        train("--agent", "dqn", "--resume", "--steps", "800", *DQN_SMALL, "--set", "buffer_size=20000"),
        r"--resume cannot change buffer_size \(checkpoint 50000",
        setup=_trained("dqn"),
    ),
    Case(
        "resume-truncated-checkpoint",
        train(*PPO_SMALL, "--resume"),
        r"truncated",
        setup=_trained("ppo", truncate=100),
    ),
    # --- argparse's own mistakes are one line too
    Case(
        "seed-not-an-int",
        train("--seed", "1.5"),
        r"argument --seed: invalid int value: '1.5' \(see `python -m tritonrl train --help`\)",
    ),
    Case("steps-float-notation", train("--steps", "1e4"), r"argument --steps: invalid int value: '1e4'"),
    Case(
        "target-return-not-a-number",
        train("--target-return", "abc"),
        r"argument --target-return: invalid float value",
    ),
    Case("unknown-flag", train("--seeds", "3"), r"unrecognized arguments: --seeds 3"),
    Case("no-command", (), r"the following arguments are required: command"),
    Case("unknown-command", ("trian",), r"invalid choice: 'trian'"),
    # --- bench
    Case(
        "bench-unknown",
        ("bench", "--dir", "{repo}/benchmarks", "nosuchbench"),
        r"unknown benchmark 'nosuchbench'; known benchmarks: .*ppo_loop",
    ),
    Case(
        "bench-two-unknown",
        ("bench", "--dir", "{repo}/benchmarks", "--quick", "nosuch", "other"),
        r"unknown benchmarks 'nosuch', 'other'; known",
    ),
    Case("bench-no-folder", ("bench", "--dir", "{tmp}/nowhere"), r"no benchmark folder at .*/nowhere"),
]


def _snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (``None`` for a folder)."""
    return {
        str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes()) for p in sorted(root.rglob("*"))
    }


def _inject(monkeypatch: pytest.MonkeyPatch, root: Path, fault: tuple[str, int]) -> None:
    """Make ``os.open`` (or ``os.fsync`` of a file opened with it) fail for paths under ``root``."""
    where, err = fault
    real_open, real_fsync = os.open, os.fsync
    fds: set[int] = set()

    def fake_open(path, flags, mode=0o777, *, dir_fd=None):
        under = str(Path(path).absolute()).startswith(str(root))
        if under and where == "open" and flags & os.O_CREAT:
            raise OSError(err, os.strerror(err), str(path))
        fd = real_open(path, flags, mode, dir_fd=dir_fd)
        if under:
            fds.add(fd)
        return fd

    def fake_fsync(fd):
        if where == "fsync" and fd in fds:
            raise OSError(err, os.strerror(err))
        return real_fsync(fd)

    monkeypatch.setattr(os, "open", fake_open)
    monkeypatch.setattr(os, "fsync", fake_fsync)


def _hide(monkeypatch: pytest.MonkeyPatch, modules: tuple[str, ...]) -> None:
    """Make ``modules`` unimportable (and forget gymnasium env modules that imported them)."""
    for name in modules:
        for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            monkeypatch.delitem(sys.modules, loaded)
        monkeypatch.setitem(sys.modules, name, None)
    for loaded in [
        m
        for m in sys.modules
        if m.startswith(("gymnasium.envs.box2d", "gymnasium.envs.mujoco", "gymnasium.envs.phys2d"))
    ]:
        monkeypatch.delitem(sys.modules, loaded)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_cli_mistake_is_one_line(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if case.argv[:1] == ("train",):
        pytest.importorskip("gymnasium")
    threads = torch.get_num_threads()
    monkeypatch.chdir(tmp_path)
    for key, value in case.env:
        monkeypatch.setenv(key, value)
    if case.setup is not None:
        case.setup(tmp_path)
    before = _snapshot(tmp_path)
    argv = [a.format(run=tmp_path / "run", tmp=tmp_path, repo=REPO) for a in case.argv]
    _hide(monkeypatch, case.hide)
    if case.fault is not None:
        _inject(monkeypatch, tmp_path, case.fault)
    try:
        code = main(argv)
    finally:
        monkeypatch.undo()
        torch.set_num_threads(threads)
    out, err = capsys.readouterr()
    assert code == case.code, err
    assert "Traceback" not in err + out
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and re.search(case.match, lines[0]), lines[0]
    assert _snapshot(tmp_path) == before  # no run folder created, nothing in an existing one changed


def test_table_covers_every_train_flag() -> None:
    """Every ``train`` flag that takes a value has at least one row (a new flag needs its mistakes here)."""
    import argparse

    from tritonrl.cli.train import add_parser

    parser = argparse.ArgumentParser()
    p = add_parser(parser.add_subparsers())
    flags = {a.option_strings[0] for a in p._actions if a.option_strings and a.nargs != 0}
    tested = {a for c in CASES for a in c.argv if a.startswith("--")}
    assert flags - tested == set()


def test_probe_leaves_nothing_behind_on_success(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("gymnasium")
    run = tmp_path / "a" / "run"
    args = train("--set", "num_steps=16", "--set", "hidden=16", "--num-envs", "2")
    argv = [a.format(run=run) for a in args]
    assert main(argv) == 0, capsys.readouterr().err
    assert run.is_dir() and not list(run.glob(".write-probe-*"))


def test_entry_point_exit_status() -> None:
    """Through ``python -m tritonrl`` (``sys.exit(main())``): status 2 and the one line."""
    proc = subprocess.run(
        [sys.executable, "-m", "tritonrl", "bench", "nosuchbench"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith("error: unknown benchmark 'nosuchbench'; known benchmarks: ")
    assert proc.stdout == ""


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("total_steps", 0),
        ("total_steps", 1.5),
        ("seed", -1),
        ("seed", 2**32),
        ("log_every", 0),
        ("eval_every", -1),
        ("eval_episodes", 0),
        ("checkpoint_every", -1),
        ("stop_at", -1),
        ("target_return", float("nan")),
        ("target_return", float("inf")),
        ("log_every", True),
    ],
)
def test_loop_config_rejects_impossible_values(field: str, value: object) -> None:
    pytest.importorskip("gymnasium")
    from tritonrl.toolkit.training.loop import LoopConfig

    kwargs = {"total_steps": 100, field: value}
    with pytest.raises(ValueError, match=rf"^LoopConfig\.{field} must be"):
        LoopConfig(**kwargs)


def test_seed_limit_matches_the_loop() -> None:
    pytest.importorskip("gymnasium")
    from tritonrl.cli.train import MAX_SEED as CLI_MAX_SEED
    from tritonrl.toolkit.training.loop import MAX_SEED

    assert CLI_MAX_SEED == MAX_SEED == 2**32 - 1


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0,
    reason="root writes through permission bits (the table's EACCES/EROFS rows inject it)",
)
def test_read_only_folder_without_injection(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same refusal from a real chmod 0o555 folder, where permission bits do stop writes."""
    pytest.importorskip("gymnasium")
    _existing_run(tmp_path)
    run = tmp_path / "run"
    before = _snapshot(tmp_path)
    run.chmod(0o555)
    try:
        code = main([a.format(run=run) for a in train("--resume")])
    finally:
        run.chmod(0o755)
    err = capsys.readouterr().err
    assert code == 2
    assert re.fullmatch(r"error: --run-dir .*/run is not writable: permission denied\n", err), err
    assert _snapshot(tmp_path) == before


def test_agent_list_is_a_listing_not_a_mistake(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--agent list`` prints one preset a line on stdout, exit 0, and writes nothing."""
    from tritonrl.cli.registry import list_agents

    monkeypatch.chdir(tmp_path)
    assert main(["train", "--agent", "list"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert [line.split()[0] for line in out.splitlines()] == [s.name for s in list_agents()]
    assert list(tmp_path.iterdir()) == []


def test_default_run_dir_is_one_plain_folder_name() -> None:
    """Env ids and data specs with ``/ : , =`` or spaces give one folder of plain characters."""
    from tritonrl.cli.common import default_run_dir

    assert default_run_dir("dqn", "CartPole-v1", "s1") == Path("runs/dqn-CartPole-v1-s1")
    assert default_run_dir("dqn", "ALE/Pong-v5", "s1") == Path("runs/dqn-ALE_Pong-v5-s1")
    odd = default_run_dir("rainbow", "market:csv=/data/my bars.csv,x", "s2")
    assert odd.parent == Path("runs") and odd.name == "rainbow-market_csv__data_my_bars.csv_x-s2"
