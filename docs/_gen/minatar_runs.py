"""MinAtar learning runs behind the results page's MinAtar section, stored under ``docs/data/minatar/``.

Each group is a pixel preset (``dqn-minatar``, ``rainbow-minatar``) on a MinAtar game, run with
several seeds through the CLI (``python -m tritonrl train``), one torch thread each,
``--jobs`` runs at a time, in order of seed (a budget cut short still leaves whole seeds). The
games are the ``-v0`` ids: the full set of 6 actions, as in the runs that Young & Tian (2019)
published. Stored per run: ``<group>-s<seed>.csv`` (its ``metrics.csv``: training-episode returns
per log interval, greedy evaluations); plus ``meta.json``: the groups, the commands, and where
and when they ran.

    PYTHONPATH=. python docs/_gen/minatar_runs.py [--jobs 2]   # needs the minatar extra; ~75 min on 2 cores

Then ``python docs/_gen/results.py`` rewrites the page and its figures from the stored data.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "data" / "minatar"
SEEDS = (1, 2, 3)

# name, preset, env, steps, eval_every. The budgets are what two cores of this project's machine
# give in an hour or so (dqn-minatar ~300 steps/s, rainbow-minatar ~160 steps/s, one thread each):
# far short of the paper's 5M frames, so the page compares at the same step.
GROUPS: tuple[dict[str, object], ...] = (
    {"name": "dqn-minatar-Breakout-v0", "agent": "dqn-minatar", "env": "MinAtar/Breakout-v0",
     "steps": 250_000, "eval_every": 50_000},
    {"name": "dqn-minatar-SpaceInvaders-v0", "agent": "dqn-minatar", "env": "MinAtar/SpaceInvaders-v0",
     "steps": 250_000, "eval_every": 50_000},
    {"name": "rainbow-minatar-Breakout-v0", "agent": "rainbow-minatar", "env": "MinAtar/Breakout-v0",
     "steps": 100_000, "eval_every": 25_000},
    {"name": "rainbow-minatar-SpaceInvaders-v0", "agent": "rainbow-minatar",
     "env": "MinAtar/SpaceInvaders-v0", "steps": 100_000, "eval_every": 25_000},
)  # fmt: skip


def _command(g: dict[str, object], seed: int, run_dir: Path) -> list[str]:
    return [
        sys.executable, "-m", "tritonrl", "train", "--agent", str(g["agent"]), "--env", str(g["env"]),
        "--steps", str(g["steps"]), "--eval-every", str(g["eval_every"]), "--eval-episodes", "10",
        "--seed", str(seed), "--threads", "1", "--run-dir", str(run_dir), "--no-tensorboard", "--no-progress",
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Run every group and seed, copy each ``metrics.csv`` into ``docs/data/minatar/``; the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (one CPU thread each)")
    parser.add_argument("--work", type=Path, default=None, help="run folders (default: a temporary folder)")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="tritonrl-minatar-runs-"))
    DATA.mkdir(parents=True, exist_ok=True)
    jobs = [(g, seed) for seed in args.seeds for g in GROUPS]
    walls: dict[str, float] = {}
    commands: list[str] = []

    def one(job: tuple[dict[str, object], int]) -> None:
        g, seed = job
        run_dir = work / f"{g['name']}-s{seed}"
        cmd = _command(g, seed, run_dir)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        walls[run_dir.name] = round(time.perf_counter() - t0, 1)
        shutil.copy(run_dir / "metrics.csv", DATA / f"{run_dir.name}.csv")
        commands.append(" ".join(["python", *cmd[1:-4], "--run-dir", "RUN_DIR", *cmd[-2:]]))
        print(f"{run_dir.name}: {walls[run_dir.name]} s", flush=True)

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(one, jobs))
    from tritonrl.cli.bench import run_info

    meta = {"machine": {**run_info(), "torch_threads": 1}, "seeds": args.seeds, "jobs": args.jobs,
            "groups": list(GROUPS), "wall_s": walls, "commands": sorted(commands)}  # fmt: skip
    (DATA / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"stored {len(walls)} runs in {DATA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
