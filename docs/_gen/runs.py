"""Make the learning runs behind ``docs/pages/results.md`` and store them under ``docs/data/learning/``.

Each group (a preset on its reference environment) runs for a fixed number of steps with several
seeds, one torch thread, through the CLI (``python -m tritonrl train --no-tuned``: the preset's own
settings, not an entry's). An explicit ``--eval-every`` means no early stop at the solved score, so
every seed's curve covers the same steps. Stored per run: ``<group>-s<seed>.csv`` (its
``metrics.csv``) and, for market runs, ``<group>-s<seed>.test.json`` (its ``test_report.json``
without the equity curves); plus ``meta.json``: the groups, the commands, where and when they ran.

    PYTHONPATH=. python docs/_gen/runs.py [--work DIR]       # from the repository root; ~45 min on 2 cores
    PYTHONPATH=. python docs/_gen/runs.py --only NAME ...    # (re)run some groups into the stored meta.json

With ``--only``, the other groups' runs and machine stay as stored; each group run then records its
own ``machine`` (the top-level one is where the full set ran).

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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "data" / "learning"
SEEDS = (1, 2, 3)

# name, agent, env, steps, eval_every, threshold (steps-to-threshold on eval/mean_return; None: none),
# flags (extra `train` flags: --overlap runs the same preset and budget overlapped)
GROUPS: tuple[dict[str, object], ...] = (
    {"name": "ppo-CartPole-v1", "agent": "ppo", "env": "CartPole-v1", "steps": 100_000, "eval_every": 5_000,
     "threshold": 475.0, "flags": []},
    {"name": "ppo-CartPole-v1-overlap", "agent": "ppo", "env": "CartPole-v1", "steps": 100_000,
     "eval_every": 5_000, "threshold": 475.0, "flags": ["--overlap"]},
    {"name": "dqn-CartPole-v1", "agent": "dqn", "env": "CartPole-v1", "steps": 50_000, "eval_every": 2_500,
     "threshold": 475.0, "flags": []},
    {"name": "dqn-CartPole-v1-overlap", "agent": "dqn", "env": "CartPole-v1", "steps": 50_000,
     "eval_every": 2_500, "threshold": 475.0, "flags": ["--overlap"]},
    {"name": "rainbow-CartPole-v1", "agent": "rainbow", "env": "CartPole-v1", "steps": 50_000,
     "eval_every": 2_500, "threshold": 475.0, "flags": []},
    {"name": "dqn-market-synthetic-ar0.3", "agent": "dqn", "env": "market:synthetic,ar=0.3", "steps": 50_000,
     "eval_every": 5_000, "threshold": None, "flags": []},
    {"name": "dqn-market-synthetic-ar0.3-overlap", "agent": "dqn", "env": "market:synthetic,ar=0.3",
     "steps": 50_000, "eval_every": 5_000, "threshold": None, "flags": ["--overlap"]},
    {"name": "sac-Pendulum-v1", "agent": "sac", "env": "Pendulum-v1", "steps": 20_000, "eval_every": 2_000,
     "threshold": -250.0, "flags": []},
    {"name": "td3-Pendulum-v1", "agent": "td3", "env": "Pendulum-v1", "steps": 20_000, "eval_every": 2_000,
     "threshold": -250.0, "flags": []},
)  # fmt: skip


def _run_info() -> dict[str, object]:
    """The bench runner's :func:`~tritonrl.cli.bench.run_info` (machine, versions, commit, date)."""
    from tritonrl.cli.bench import run_info

    return run_info()


def _strip_equity(report: object) -> object:
    """A test report without its long lists (the equity curves): the summary numbers only."""
    if isinstance(report, dict):
        return {k: _strip_equity(v) for k, v in report.items() if not isinstance(v, list)}
    return report


def main(argv: list[str] | None = None) -> int:
    """Run every group and seed, copy the results into ``docs/data/learning/``; the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None, help="run folders (default: a temporary folder)")
    parser.add_argument("--only", nargs="+", default=None, metavar="NAME", help="run these groups only")
    args = parser.parse_args(argv)
    names = [str(g["name"]) for g in GROUPS]
    unknown = sorted(set(args.only or ()) - set(names))
    if unknown:
        parser.error(f"unknown group(s) {unknown}; the groups: {names}")
    todo = [g for g in GROUPS if args.only is None or g["name"] in args.only]
    work = args.work or Path(tempfile.mkdtemp(prefix="tritonrl-docs-runs-"))
    DATA.mkdir(parents=True, exist_ok=True)
    commands, walls = [], {}
    for seed in SEEDS:
        for g in todo:
            run_dir = work / f"{g['name']}-s{seed}"
            cmd = [
                sys.executable, "-m", "tritonrl", "train", "--no-tuned", "--agent", str(g["agent"]),
                "--env", str(g["env"]), "--steps", str(g["steps"]), "--eval-every", str(g["eval_every"]),
                "--seed", str(seed), "--threads", "1", *g["flags"],  # type: ignore[misc]
                "--run-dir", str(run_dir), "--no-tensorboard", "--no-progress",
            ]  # fmt: skip
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, cwd=ROOT)
            walls[run_dir.name] = round(time.perf_counter() - t0, 1)
            commands.append(" ".join(["python", *cmd[1:-4], "--run-dir", "RUN_DIR", *cmd[-2:]]))
            shutil.copy(run_dir / "metrics.csv", DATA / f"{run_dir.name}.csv")
            report = run_dir / "test_report.json"
            if report.is_file():
                stripped = _strip_equity(json.loads(report.read_text()))
                (DATA / f"{run_dir.name}.test.json").write_text(json.dumps(stripped, indent=1) + "\n")
    machine = {**_run_info(), "torch_threads": 1}  # each run's --threads, not this process's
    if args.only is None:
        meta = {"machine": machine, "seeds": list(SEEDS), "groups": list(GROUPS), "wall_s": walls,
                "commands": commands}  # fmt: skip
    else:  # merge into the stored runs, in GROUPS' order; these groups record where they ran
        meta = json.loads((DATA / "meta.json").read_text())
        stored = {g["name"]: g for g in meta["groups"]}
        stored.update({str(g["name"]): {**g, "machine": machine} for g in todo})
        meta["groups"] = [stored[n] for n in names if n in stored]
        meta["wall_s"].update(walls)
        meta["commands"] = [c for c in meta["commands"] if c not in commands] + commands
    (DATA / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"stored {len(walls)} runs in {DATA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
