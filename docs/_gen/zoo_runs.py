"""The zoo table's runs behind the results page's "The zoo table" section, stored under ``docs/data/zoo/``.

Each entry is a preset on a gymnasium env at its tuned settings (``agents/*/tuned.py``; none: the
preset's), trained on 5 seeds through the CLI (``python -m tritonrl train``), one torch thread each,
``--jobs`` runs at a time. A run evaluates greedily every ``eval_every`` steps (10 episodes) and never
stops early, so the curve shows whether it falls back after reaching the threshold. A run folder
with ``done.json`` is skipped: an interrupted sweep resumes. Then every final checkpoint is
evaluated by ``tritonrl evaluate``'s `evaluate_run` (30 episodes on the held-out seeds). Stored per
run: ``<preset>-<env>-s<seed>.csv`` (the greedy evaluations of its ``metrics.csv``) and
``.eval.json`` (the final evaluation); plus ``meta.json``: the entries, commands, wall times and the
machine.

    PYTHONPATH=. python docs/_gen/zoo_runs.py [--jobs 2] [--work runs/zoo] [--only PRESET/ENV ...]

``heldout`` re-runs the entries chosen by sweeps (`HELDOUT`) on seeds they were not picked on, at
the entry and at the preset's settings (``--no-tuned``): their curves only, under ``heldout/``.

Then ``python docs/_gen/results.py`` rewrites the page and its figures from the stored data.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "data" / "zoo"
SEEDS = (1, 2, 3, 4, 5)
HELDOUT_SEEDS = (11, 12, 13, 14, 15)
EPISODES = 30
"""Episodes of each run's final evaluation (on `tritonrl.cli.evaluate.EVAL_SEED` onwards)."""

# preset, env, steps, eval_every, in the order they ran. Budgets are the tuned entries'
# (``budget``), else the preset's; ppo-continuous on Pendulum-v1 runs the zoo's 100k.
ENTRIES: tuple[tuple[str, str, int, int], ...] = (
    ("dqn", "Acrobot-v1", 50_000, 2_500),
    ("double", "Acrobot-v1", 50_000, 2_500),
    ("sac", "Pendulum-v1", 20_000, 2_000),
    ("td3", "Pendulum-v1", 20_000, 2_000),
    ("sac", "InvertedPendulum-v5", 20_000, 2_000),
    ("td3", "InvertedPendulum-v5", 50_000, 5_000),
    ("ppo-continuous", "Pendulum-v1", 100_000, 5_000),
    ("qrdqn", "Acrobot-v1", 100_000, 5_000),
    ("ppo", "Acrobot-v1", 1_000_000, 50_000),
    ("ppo-continuous", "InvertedPendulum-v5", 100_000, 5_000),
    ("dqn", "MountainCar-v0", 120_000, 5_000),
    ("qrdqn", "MountainCar-v0", 120_000, 5_000),
    ("dqn", "LunarLander-v3", 100_000, 5_000),
    ("ppo", "CartPole-v1", 100_000, 5_000),
    ("dqn", "CartPole-v1", 50_000, 2_500),
    ("double", "CartPole-v1", 50_000, 2_500),
    ("qrdqn", "CartPole-v1", 50_000, 2_500),
    ("dueling", "CartPole-v1", 50_000, 2_500),
    ("rainbow", "CartPole-v1", 50_000, 2_500),
    ("noisy", "CartPole-v1", 50_000, 2_500),
    ("c51", "CartPole-v1", 50_000, 2_500),
    ("ppo", "LunarLander-v3", 1_000_000, 50_000),
)


HELDOUT: tuple[tuple[str, str], ...] = (
    ("dqn", "CartPole-v1"),
    ("double", "CartPole-v1"),
    ("qrdqn", "CartPole-v1"),
    ("dueling", "CartPole-v1"),
    ("noisy", "CartPole-v1"),
    ("c51", "CartPole-v1"),
)
"""Entries whose settings sweeps here picked on seeds 1-10 (``agents/dqn/tuned.py``'s ``_CARTPOLE`` and
``_CARTPOLE_3STEP``): `HELDOUT_SEEDS` are none of those."""


def key(preset: str, env: str) -> str:
    return f"{preset}/{env}"


def stem(preset: str, env: str, seed: int) -> str:
    return f"{preset}-{env}-s{seed}"


def run_dir(work: Path, preset: str, env: str, seed: int, settings: str | None = None) -> Path:
    """A run's folder: ``work/preset/env/s<seed>``; a held-out run's (``settings`` ``"tuned"`` or
    ``"preset"``) ``work/heldout/preset/env/<settings>/s<seed>``."""
    if settings is None:
        return work / preset / env / f"s{seed}"
    return work / "heldout" / preset / env / settings / f"s{seed}"


def command(
    preset: str, env: str, steps: int, eval_every: int, seed: int, run_dir: Path, tuned: bool = True
) -> list[str]:
    return [
        sys.executable, "-m", "tritonrl", "train", "--agent", preset, "--env", env, "--steps", str(steps),
        "--seed", str(seed), "--eval-every", str(eval_every), "--log-every", str(eval_every),
        "--eval-episodes", "10", "--threads", "1", "--no-progress", "--no-tensorboard",
        "--checkpoint-minutes", "0", "--run-dir", str(run_dir), *(() if tuned else ("--no-tuned",)),
    ]  # fmt: skip


def _train(work: Path, entry: tuple[str, str, int, int], seed: int, settings: str | None = None) -> str:
    """One run into its `run_dir` (``settings="preset"``: with ``--no-tuned``)."""
    preset, env, steps, eval_every = entry
    folder = run_dir(work, preset, env, seed, settings)
    if (folder / "done.json").is_file():
        return f"{key(preset, env)} s{seed}: done before"
    folder.mkdir(parents=True, exist_ok=True)
    cmd = command(preset, env, steps, eval_every, seed, folder, tuned=settings != "preset")
    start = time.perf_counter()
    with open(folder / "train.log", "w") as log:
        env_vars = {**os.environ, "OMP_NUM_THREADS": "1"}
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=env_vars, cwd=ROOT)
    wall = time.perf_counter() - start
    if rc != 0:
        return f"{key(preset, env)} s{seed}: FAILED rc={rc} (see {folder / 'train.log'})"
    first = (folder / "train.log").read_text().splitlines()[:1]
    (folder / "done.json").write_text(json.dumps({"wall_s": wall, "command": cmd, "first_line": first}))
    return f"{key(preset, env)} s{seed}: {wall:.0f} s"


def _copy_curve(run: Path, dest: Path) -> None:
    """Write the greedy evaluations of ``run/metrics.csv`` (step, mean return) to ``dest``."""
    with (run / "metrics.csv").open() as f:
        evals = [r for r in csv.DictReader(f) if r.get("eval/mean_return")]
    rows = [(r["global_step"], r["eval/mean_return"]) for r in evals]
    with dest.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["global_step", "eval/mean_return"])
        w.writerows(rows)


def _collect(work: Path, entries: list[tuple[str, str, int, int]], seeds: list[int]) -> dict[str, object]:
    """Evaluate every finished run and copy its evaluations into `DATA`; the stored entries."""
    import torch
    from tritonrl.cli.evaluate import EVAL_SEED, evaluate_run

    torch.set_num_threads(1)
    DATA.mkdir(parents=True, exist_ok=True)
    stored: dict[str, object] = {}
    for preset, env, steps, eval_every in entries:
        runs = [(s, run_dir(work, preset, env, s)) for s in seeds]
        if not all((d / "done.json").is_file() for _, d in runs):
            print(f"{key(preset, env)}: not every seed has finished; left out")
            continue
        walls, first = {}, ""
        for seed, d in runs:
            done = json.loads((d / "done.json").read_text())
            walls[seed] = round(done["wall_s"], 1)
            first = first or (done["first_line"][0] if done["first_line"] else "")
            _copy_curve(d, DATA / f"{stem(preset, env, seed)}.csv")
            result = evaluate_run(d, episodes=EPISODES, seed=EVAL_SEED)
            result.pop("run_dir")
            (DATA / f"{stem(preset, env, seed)}.eval.json").write_text(json.dumps(result) + "\n")
        stored[key(preset, env)] = {
            "preset": preset, "env": env, "steps": steps, "eval_every": eval_every, "wall_s": walls,
            "tuned": first if first.startswith("tuned settings") else None,
            "command": " ".join(["python", *command(preset, env, steps, eval_every, 1, Path("RUN_DIR"))[1:]]),
        }  # fmt: skip
        print(f"{key(preset, env)}: stored {len(runs)} runs")
    return stored


def _collect_heldout(work: Path, entries: list[tuple[str, str, int, int]]) -> dict[str, object]:
    """Copy the held-out runs' greedy evaluations into ``DATA/heldout``; ``heldout.json``'s entries."""
    out = DATA / "heldout"
    out.mkdir(parents=True, exist_ok=True)
    stored: dict[str, object] = {}
    for preset, env, steps, _ in entries:
        walls: dict[str, dict[int, float]] = {}
        for settings in ("tuned", "preset"):
            runs = [(s, run_dir(work, preset, env, s, settings)) for s in HELDOUT_SEEDS]
            if not all((d / "done.json").is_file() for _, d in runs):
                print(f"{key(preset, env)} {settings}: not every held-out seed has finished; left out")
                break
            walls[settings] = {}
            for seed, d in runs:
                walls[settings][seed] = round(json.loads((d / "done.json").read_text())["wall_s"], 1)
                _copy_curve(d, out / f"{stem(preset, env, seed)}-{settings}.csv")
        else:
            stored[key(preset, env)] = {"preset": preset, "env": env, "steps": steps, "wall_s": walls}
            print(f"{key(preset, env)}: stored {2 * len(HELDOUT_SEEDS)} held-out runs")
    return stored


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("run", "collect", "all", "heldout"), nargs="?", default="all")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "zoo", help="run folders")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (one torch thread each)")
    parser.add_argument("--only", nargs="*", default=None, metavar="PRESET/ENV")
    args = parser.parse_args(argv)
    entries = [e for e in ENTRIES if args.only is None or key(e[0], e[1]) in args.only]
    if args.what == "heldout":
        entries = [e for e in entries if (e[0], e[1]) in HELDOUT]
        print(f"held-out runs: {len(entries)} entries x {len(HELDOUT_SEEDS)} seeds x 2 settings")
        print("torch: one thread a run (--threads 1, OMP_NUM_THREADS=1)")
        jobs = [(e, s, t) for e in entries for t in ("tuned", "preset") for s in HELDOUT_SEEDS]
        with ThreadPoolExecutor(args.jobs) as pool:
            for line in pool.map(lambda job: _train(args.work, *job), jobs):
                print(line, flush=True)
        path = DATA / "heldout.json"
        held = json.loads(path.read_text()) if path.is_file() else {}
        if held.get("seeds") != list(HELDOUT_SEEDS):  # runs on other seeds do not compare: dropped
            held = {"entries": {}}
            for stale in (DATA / "heldout").glob("*.csv"):
                stale.unlink()
        held["entries"].update(_collect_heldout(args.work, entries))
        held.update({"seeds": list(HELDOUT_SEEDS), "jobs": max(args.jobs, held.get("jobs", 0))})
        path.write_text(json.dumps(held, indent=1) + "\n")
        return 0
    if args.what in ("run", "all"):
        print(f"zoo runs: {len(entries)} entries x {len(SEEDS)} seeds, {args.jobs} at a time")
        print("torch: one thread a run (--threads 1, OMP_NUM_THREADS=1)")
        jobs = [(e, s) for e in entries for s in SEEDS]
        with ThreadPoolExecutor(args.jobs) as pool:
            for line in pool.map(lambda job: _train(args.work, *job), jobs):
                print(line, flush=True)
    if args.what in ("collect", "all"):
        from tritonrl.cli.bench import run_info

        meta_path = DATA / "meta.json"
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {"entries": {}}
        meta["entries"].update(_collect(args.work, entries, list(SEEDS)))
        jobs = max(args.jobs, meta.get("jobs", 0))  # the most at a time over every sweep stored
        meta.update({"machine": {**run_info(), "torch_threads": 1}, "seeds": list(SEEDS), "jobs": jobs,
                     "episodes": EPISODES})  # fmt: skip
        meta_path.write_text(json.dumps(meta, indent=1) + "\n")
        print(f"stored {len(meta['entries'])} entries in {DATA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
