"""Data-parallel training from the command line (``torchrun`` subprocesses of
``python -m tritonrl train`` on 2 gloo ranks, CPU): one run folder written by rank 0,
resume on two ranks and on one, errors agreed by every rank, a dead rank detected.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

from dist_cli import FIXED_LENGTH_ID, episode_length
from dist_run import free_port
from tritonrl.toolkit.checkpoint import load_checkpoint
from tritonrl.toolkit.logger import read_csv

LOCAL_ENVS = 2


ROOT = Path(__file__).resolve().parents[2]
DIST_CLI = ROOT / "tests" / "dist_cli.py"
QUIET = ["--no-progress", "--no-tensorboard", "--eval-every", "0", "--eval-episodes", "2"]
PPO_TINY = ["--agent", "ppo", "--set", "num_steps=16", "--set", "hidden=16", "--set", "num_minibatches=2"]
DQN_TINY = [
    "--agent",
    "dqn",
    *("--set", "torso_width=16", "--set", "batch_size=16", "--set", "buffer_size=512"),
    *("--set", "learning_starts=64", "--set", "train_freq=16", "--set", "target_update_every=8"),
]


def _proc_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    env.update(OMP_NUM_THREADS="1", TRITONRL_DIST_TIMEOUT="30")
    env.update(extra)
    return env


@dataclass
class Launch:
    returncode: int
    out: list[str]  # stdout of each rank
    err: list[str]  # stderr of each rank
    launcher: str  # torchrun's own output


def _torchrun(args: list[str], tmp: Path, *, nproc: int = 2, timeout: float = 240, **env: str) -> Launch:
    """``torchrun --standalone --nproc-per-node N [tests/dist_cli.py | -m tritonrl] ARGS``
    (the test script when ``--env FixedLength-v0`` is asked for); each rank's output from its log."""
    logs = Path(tempfile.mkdtemp(dir=tmp, prefix="torchrun-logs-"))
    target = [str(DIST_CLI)] if FIXED_LENGTH_ID in args else ["-m", "tritonrl"]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        "--log-dir",
        str(logs),
        "--redirects",
        "3",
        *target,
        *args,
    ]
    proc = subprocess.run(cmd, cwd=tmp, env=_proc_env(**env), capture_output=True, text=True, timeout=timeout)
    out, err = [], []
    for rank in range(nproc):
        found = sorted(logs.glob(f"*/attempt_*/{rank}"))
        assert found, f"no log folder of rank {rank}: {proc.stderr[-2000:]}"
        out.append((found[-1] / "stdout.log").read_text())
        err.append((found[-1] / "stderr.log").read_text())
    return Launch(proc.returncode, out, err, proc.stdout + proc.stderr)


def _single(args: list[str], tmp: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    target = [str(DIST_CLI)] if FIXED_LENGTH_ID in args else ["-m", "tritonrl"]
    return subprocess.run(
        [sys.executable, *target, *args],
        cwd=tmp,
        env=_proc_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _no_warnings(text: str) -> str:
    """A rank's stderr without Python warnings from libraries (not the program's output)."""
    return "\n".join(line for line in text.splitlines() if "Warning" not in line and line.strip()).strip()


@pytest.mark.heavy
def test_cli_two_ranks_write_one_run_folder_and_resume_on_two_and_on_one(tmp_path: Path) -> None:
    """(a) ``train`` (DQN) under torchrun on FixedLength-v0: rank 0 alone prints and writes, and
    each metric row's mean return is the mean over the episodes both ranks finished in that
    interval (the lengths follow from the seeds: envs 0, 1 on rank 0 and 2, 3 on rank 1).
    (c) That checkpoint (each rank's replay buffer its own part) goes on on 2 ranks (no notice)
    and on 1 rank (one notice line: the shared state goes on, the replay starts empty); exact
    resume is tested at the loop level above."""
    run = tmp_path / "run"
    seed, num_envs, log_every, steps = 1, 4, 96, 960
    base = ["train", "--env", FIXED_LENGTH_ID, *DQN_TINY, *QUIET, "--seed", str(seed)]
    base += ["--num-envs", str(num_envs), "--log-every", str(log_every)]
    res = _torchrun([*base, "--steps", str(steps), "--run-dir", str(run)], tmp_path)
    assert res.returncode == 0, res.err
    assert "dqn on FixedLength-v0: 960 steps" in res.out[0] and f"run folder: {run}" in res.out[0]
    assert res.out[1] == "" and _no_warnings(res.err[1]) == "", (res.out[1], res.err[1])
    assert {p.name for p in run.iterdir()} <= {".lock", "metrics.csv", "checkpoint.safetensors", "curve.png"}

    lengths = [episode_length(seed + g) for g in range(num_envs)]  # the global env g's seed
    assert len(set(lengths[:2]) & set(lengths[2:])) == 0  # the two ranks' episodes differ
    rows = [r for r in read_csv(run / "metrics.csv") if "charts/episodic_return" in r]  # not the final eval's
    assert [int(r["global_step"]) for r in rows] == list(range(log_every, steps + 1, log_every))
    prev = 0
    for row in rows:
        now = int(row["global_step"])  # vector steps (prev/4, now/4]: env g ends an episode every L_g
        ends = [L for L in lengths for v in range(prev // num_envs + 1, now // num_envs + 1) if v % L == 0]
        assert row["charts/episodic_return"] == pytest.approx(sum(ends) / len(ends), rel=1e-12)
        assert row["charts/episodic_length"] == row["charts/episodic_return"]  # a reward of 1 a step
        prev = now
    ckpt = load_checkpoint(run / "checkpoint.safetensors", tensors=False)
    assert ckpt["meta"]["world_size"] == 2 and ckpt["loop"]["step"] == steps and len(ckpt["ranks"]) == 1

    one = tmp_path / "one"
    shutil.copytree(run, one)
    both = _torchrun([*base, "--steps", "1280", "--run-dir", str(run), "--resume"], tmp_path)
    assert both.returncode == 0, both.err
    assert "notice" not in both.err[0] and "dqn on FixedLength-v0: 1280 steps" in both.out[0]
    assert load_checkpoint(run / "checkpoint.safetensors", tensors=False)["meta"]["world_size"] == 2

    alone = _single([*base, "--steps", "1280", "--run-dir", str(one), "--resume"], tmp_path)
    assert alone.returncode == 0, alone.stderr
    assert alone.stderr.count("notice:") == 1 and "written by 2 ranks, this run has 1" in alone.stderr
    assert "dqn on FixedLength-v0: 1280 steps" in alone.stdout
    after = load_checkpoint(one / "checkpoint.safetensors", tensors=False)
    assert after["meta"]["world_size"] == 1 and after["loop"]["step"] == 1280 and "ranks" not in after


def test_cli_num_envs_not_divisible_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    """(d) ``--num-envs 3`` on 2 ranks: exit 2, the DistributedError line once (rank 0), no run folder."""
    run = tmp_path / "run"
    res = _torchrun(["train", *PPO_TINY, *QUIET, "--num-envs", "3", "--run-dir", str(run)], tmp_path)
    assert res.returncode != 0
    assert res.err[0].strip().splitlines()[-1] == (
        "error: --num-envs=3 is not divisible by the world size 2: use a multiple of 2 (each of the "
        "2 ranks takes an equal share)"
    )
    assert _no_warnings(res.err[1]) == "" and res.out == ["", ""]
    assert "exitcode  : 2" in res.launcher  # torchrun reports the ranks' status
    assert not run.exists()


def _plain_ranks(args: list[list[str]], cwd: Path, **env: str) -> list[subprocess.Popen[str]]:
    """One process per entry of ``args`` (rank = index) with the variables torchrun would set,
    but no torchrun: nothing tears the group down when one of them fails."""
    port = free_port()
    world = len(args)
    procs = []
    for rank, rank_args in enumerate(args):
        variables = {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank)}
        variables |= {"LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        procs.append(
            subprocess.Popen(
                [sys.executable, str(DIST_CLI), *rank_args],
                cwd=cwd,
                env=_proc_env(**variables, **env),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return procs


def _wait(procs: list[subprocess.Popen[str]], timeout: float) -> tuple[list[float], list[tuple[str, str]]]:
    """Each process's exit time (``time.monotonic()``) and output; kills them all after ``timeout``."""
    deadline = time.monotonic() + timeout
    ended: dict[int, float] = {}
    try:
        while len(ended) < len(procs) and time.monotonic() < deadline:
            for i, p in enumerate(procs):
                if i not in ended and p.poll() is not None:
                    ended[i] = time.monotonic()
            time.sleep(0.05)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    outs = [p.communicate() for p in procs]
    assert len(ended) == len(procs), f"ranks still running after {timeout} s: {outs}"
    return [ended[i] for i in range(len(procs))], outs


def test_cli_a_dead_rank_fails_the_other_within_the_timeout_and_keeps_the_checkpoint(tmp_path: Path) -> None:
    """(e) Rank 1 crashes (``os._exit``) after the checkpoint of step 256. Launched without
    torchrun, so nothing tears rank 0 down but its own collectives: it must exit with status 1
    and one error line within the collective timeout (10 s here) of rank 1's death, and the
    checkpoint of step 256 must be intact."""
    run = tmp_path / "run"
    args = ["train", "--env", FIXED_LENGTH_ID, *PPO_TINY, *QUIET, "--num-envs", "4", "--log-every", "64"]
    args += ["--steps", "100000", "--checkpoint-every", "256", "--run-dir", str(run)]
    # rank 1 dies at its 100th vector step (global step 400), after the checkpoint of step 256
    procs = _plain_ranks([args, args], tmp_path, TRITONRL_DIST_TIMEOUT="10", DIST_TEST_DIE_AT="100")
    (t0, t1), outs = _wait(procs, 180)
    assert procs[1].returncode == 3
    assert procs[0].returncode == 1, outs[0]
    last = outs[0][1].strip().splitlines()[-1]
    assert last.startswith("error: ") and "the last good checkpoint (step 256) is kept" in last, last
    # the 10 s timeout, plus slack for a busy 2-core machine (usually the error comes at once)
    assert t0 - t1 < 10 + 20, t0 - t1
    ckpt = load_checkpoint(run / "checkpoint.safetensors")
    assert ckpt["loop"]["step"] == 256 and ckpt["meta"]["world_size"] == 2
    assert not list(run.glob("*.tmp*"))


def test_cli_ranks_given_different_flags_exit_2_before_writing(tmp_path: Path) -> None:
    """Rank 1 started with another ``--seed``: both ranks exit 2 at once, rank 0 names the flag."""
    run = tmp_path / "run"
    args = ["train", "--env", FIXED_LENGTH_ID, *PPO_TINY, *QUIET, "--num-envs", "4", "--run-dir", str(run)]
    procs = _plain_ranks([[*args, "--seed", "1"], [*args, "--seed", "2"]], tmp_path)
    _, outs = _wait(procs, 120)
    assert [p.returncode for p in procs] == [2, 2], outs
    line = outs[0][1].strip().splitlines()[-1]
    assert line.startswith("error: the command line differs across ranks") and "seed" in line, line
    assert _no_warnings(outs[1][1]) == "" and outs[1][0] == ""
    assert not run.exists()


@pytest.mark.learning
def test_cli_ppo_on_two_ranks_solves_cartpole_within_the_single_process_budget(tmp_path: Path) -> None:
    """(b) The ``ppo`` preset, 2 ranks x 4 envs (the preset's 8), seed 1, reaches a greedy mean of
    475 within 100,000 env steps, the budget of tests/agents/test_ppo_learning.py. Takes 2-4 min
    on a busy 2-core machine."""
    args = ["train", "--agent", "ppo", "--env", "CartPole-v1", "--num-envs", "8", "--steps", "100000"]
    args += ["--eval-every", "5000", "--target-return", "475", "--seed", "1", "--no-progress"]
    res = _torchrun([*args, "--no-tensorboard", "--run-dir", str(tmp_path / "run")], tmp_path, timeout=900)
    assert res.returncode == 0, res.err
    found = re.search(r"target reached at step (\d+)", res.out[0])
    assert found is not None, res.out[0]
    print(f"\nppo 2 ranks x 4 envs: 475 reached at step {found.group(1)} (budget 100000)")
    assert int(found.group(1)) <= 100_000
