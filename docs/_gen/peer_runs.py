"""Learning runs side by side with an unmodified CleanRL script, stored under ``docs/data/peers/``.

For each group (a preset and the CleanRL script of the same algorithm, on one environment) and
seed: ``python -m tritonrl train`` and the CleanRL script at its defaults with the same
``--total-timesteps``, both on one CPU thread (``--threads 1``; ``OMP_NUM_THREADS=1`` for the
script, which sets no thread count). Runs go ``--jobs`` at a time, in order of seed, so that a
budget cut short still leaves whole pairs. Stored per run: ``<impl>-<group>-s<seed>.csv`` with
one row per finished training episode (``global_step,episodic_return``: the exploring policy's
return, what CleanRL prints and logs) and, for tritonrl, its ``metrics.csv`` as
``tritonrl-<group>-s<seed>.metrics.csv`` (greedy evaluations included); plus ``meta.json``.

CleanRL's scripts pin ``gymnasium==0.29.1`` (they read ``infos["final_observation"]``, which
gymnasium 1.x dropped), so the script runs with that gymnasium first on its ``PYTHONPATH`` and
the MuJoCo ``-v4`` environments (``-v5`` needs gymnasium >= 1.0); tritonrl runs the same ``-v4``
environments with the gymnasium of its own environment. Nothing of the script is changed::

    git clone https://github.com/vwxyzjn/cleanrl /tmp/cleanrl
    pip install --target /tmp/cleanrl-deps tyro
    pip install --no-deps --target /tmp/gym029 gymnasium==0.29.1
    PYTHONPATH=. python docs/_gen/peer_runs.py --cleanrl /tmp/cleanrl \
        --peer-path /tmp/gym029:/tmp/cleanrl-deps        # needs the mujoco extra; hours on 2 cores

Then ``python docs/_gen/results.py`` adds the curves to the results page.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "data" / "peers"
SEEDS = (1, 2, 3)
STEPS = 50_000

SAC_SCRIPT = "cleanrl/sac_continuous_action.py"
# name, tritonrl preset, CleanRL script (relative to the checkout), environment
GROUPS: tuple[dict[str, str], ...] = (
    {"name": "sac-HalfCheetah-v4", "agent": "sac", "script": SAC_SCRIPT, "env": "HalfCheetah-v4"},
    {"name": "sac-Hopper-v4", "agent": "sac", "script": SAC_SCRIPT, "env": "Hopper-v4"},
)

_EPISODE = re.compile(r"global_step=(\d+), episodic_return=\[?\s*([-+0-9.eE]+)")


def _episodes_from_metrics(metrics: Path) -> list[tuple[int, float]]:
    """tritonrl's training episodes: the rows of ``metrics.csv`` with an episodic return (the mean
    of the episodes that ended in that log interval, at the interval's last step)."""
    out = []
    with metrics.open() as f:
        for row in csv.DictReader(f):
            value = row.get("charts/episodic_return", "")
            if value:
                out.append((int(row["global_step"]), float(value)))
    return out


def _write(path: Path, rows: list[tuple[int, float]]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["global_step", "episodic_return"])
        w.writerows(rows)


def _run_ours(g: dict[str, str], seed: int, steps: int, work: Path) -> float:
    run_dir = work / f"tritonrl-{g['name']}-s{seed}"
    cmd = [
        sys.executable, "-m", "tritonrl", "train", "--no-tuned", "--agent", g["agent"], "--env", g["env"],
        "--steps", str(steps), "--eval-every", str(steps // 10), "--eval-episodes", "5", "--seed", str(seed),
        "--threads", "1", "--run-dir", str(run_dir), "--no-tensorboard", "--no-progress",
    ]  # fmt: skip
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    shutil.copy(run_dir / "metrics.csv", DATA / f"{run_dir.name}.metrics.csv")
    _write(DATA / f"{run_dir.name}.csv", _episodes_from_metrics(run_dir / "metrics.csv"))
    return wall


def _run_peer(g: dict[str, str], seed: int, steps: int, work: Path, cleanrl: Path, peer_path: str) -> float:
    name = f"cleanrl-{g['name']}-s{seed}"
    cmd = [sys.executable, str(cleanrl / g["script"]), "--env-id", g["env"], "--total-timesteps", str(steps),
           "--seed", str(seed), "--no-cuda"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(cleanrl), peer_path])}
    cwd = work / name  # the script writes runs/ into its working directory
    cwd.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, check=True, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    (cwd / "stdout.txt").write_text(done.stdout)
    rows = [(int(m[1]), float(m[2])) for m in _EPISODE.finditer(done.stdout)]
    if not rows:
        raise RuntimeError(f"{name}: no episode lines in the script's output")
    _write(DATA / f"{name}.csv", rows)
    return wall


def main(argv: list[str] | None = None) -> int:
    """Run every group and seed for both implementations; the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cleanrl", type=Path, required=True, help="a CleanRL git checkout (its commit is stored)"
    )
    parser.add_argument("--peer-path", default="", help="PYTHONPATH entries for the script (its pinned deps)")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (one CPU thread each)")
    parser.add_argument("--work", type=Path, default=None, help="run folders (default: a temporary folder)")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="tritonrl-peer-runs-"))
    DATA.mkdir(parents=True, exist_ok=True)
    git = ["git", "-C", str(args.cleanrl), "rev-parse", "HEAD"]
    commit = subprocess.run(git, capture_output=True, text=True)
    jobs: list[tuple[str, Callable[[], float]]] = []
    for seed in args.seeds:
        for g in GROUPS:
            ours = functools.partial(_run_ours, g, seed, args.steps, work)
            peer = functools.partial(_run_peer, g, seed, args.steps, work, args.cleanrl, args.peer_path)
            jobs += [(f"tritonrl-{g['name']}-s{seed}", ours), (f"cleanrl-{g['name']}-s{seed}", peer)]
    walls: dict[str, float] = {}

    def one(job: tuple[str, Callable[[], float]]) -> None:
        name, fn = job
        walls[name] = round(fn(), 1)
        print(f"{name}: {walls[name]} s", flush=True)

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(one, jobs))
    from tritonrl.cli.bench import run_info

    meta = {
        "machine": {**run_info(), "torch_threads": 1},
        "steps": args.steps,
        "seeds": args.seeds,
        "groups": list(GROUPS),
        "cleanrl_commit": commit.stdout.strip() or None,
        "wall_s": walls,
    }
    (DATA / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"stored {len(walls)} runs in {DATA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
