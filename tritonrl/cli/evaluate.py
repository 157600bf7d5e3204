"""``tritonrl evaluate``: greedy evaluation of run folders' checkpoints, and statistics across runs.

Each run's policy module plays ``--episodes`` episodes on held-out seeds (``--seed`` onwards, the
same for every run), written to ``RUN_DIR/evaluation.json``. Runs of one (preset, env) form a group:
its mean, median and IQM over runs with stratified-bootstrap intervals, and for two groups on one
env the probability of improvement (`tritonrl.toolkit.scores`). Any failure is one ``error:``
line, exit status 2. See docs/pages/training.md ("Evaluating runs").
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "evaluate_run", "run", "summarize"]

DESCRIPTION = "Evaluate run folders' policies greedily on held-out seeds, with intervals across runs."

EVAL_SEED = 1_000_000
"""``--seed``'s default: far from training's (the run's seed, and seed + 100,000 for its evaluations)."""

RESULT_NAME = "evaluation.json"
"""The per-run result, written into the run folder."""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``evaluate`` subcommand to ``python -m tritonrl``'s parser."""
    from tritonrl.cli.common import MAX_SEED

    p = subparsers.add_parser(
        "evaluate", help="greedy evaluation of run folders, intervals across runs", description=DESCRIPTION
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run folders of `tritonrl train`")
    p.add_argument("--episodes", type=int, default=30, help="episodes per run, in parallel (default 30)")
    p.add_argument(
        "--seed",
        type=int,
        default=EVAL_SEED,
        help=f"the first episode's seed, 0 to {MAX_SEED} (default {EVAL_SEED})",
    )
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default cpu)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--reps", type=int, default=50_000, help="bootstrap replicates (default 50000)")
    p.add_argument("--confidence", type=float, default=0.95, help="interval coverage (default 0.95)")
    p.add_argument("--bootstrap-seed", type=int, default=0, help="the bootstrap's seed (default 0)")
    p.add_argument("--out", default=None, metavar="PATH", help="also write the summary as JSON")
    p.set_defaults(run=run)
    return p


def evaluate_run(run_dir: Path, *, episodes: int, seed: int, device: str = "cpu") -> dict[str, Any]:
    """Evaluate ``run_dir``'s checkpoint greedily: ``{agent, env, step, episodes, seed, returns,
    lengths, mean_return, std_return}``, also written (atomically) to ``run_dir/evaluation.json``.

    Raises:
        ValueError: no run folder or checkpoint, a market or portfolio run (`tritonrl backtest`
            evaluates those), or an agent the registry lacks.
        CheckpointError: a damaged checkpoint.
    """
    from tritonrl.cli.common import load_run_agent
    from tritonrl.toolkit.envs.vector import evaluate
    from tritonrl.toolkit.runfolder import atomic_write_text

    agent, state = load_run_agent(run_dir, device)
    meta = state["meta"]
    env_id = str(meta.get("env", ""))
    if env_id.startswith(("market:", "portfolio:")):
        raise ValueError(f"{run_dir}: a {env_id.split(':')[0]} run; `tritonrl backtest` evaluates those")
    loop: dict[str, Any] = state["loop"] if isinstance(state.get("loop"), dict) else {}
    result = evaluate(agent.eval_policy(), env_id, episodes, seed, device=agent.device)
    out = {
        "run_dir": str(run_dir),
        "agent": meta.get("agent"),
        "env": env_id,
        "step": loop.get("step"),
        "episodes": episodes,
        "seed": seed,
        "mean_return": float(result["mean_return"]),
        "std_return": float(result["std_return"]),
        "returns": [float(r) for r in result["returns"]],
        "lengths": [int(n) for n in result["lengths"]],
    }
    atomic_write_text(run_dir / RESULT_NAME, json.dumps(out, indent=1) + "\n")
    return out


def summarize(
    results: list[dict[str, Any]], *, reps: int = 50_000, confidence: float = 0.95, seed: int = 0
) -> dict[str, Any]:
    """Group per-run results by ``(agent, env)``; each group's mean, median and IQM of the runs' mean
    returns with bootstrap intervals, and the probability of improvement of every pair of groups on
    one env. Raises ``ValueError`` as `tritonrl.toolkit.scores.bootstrap_interval`."""
    from tritonrl.toolkit.scores import bootstrap_interval

    groups: dict[tuple[str, str], list[float]] = {}
    for r in results:
        groups.setdefault((str(r["agent"]), str(r["env"])), []).append(float(r["mean_return"]))
    kw: dict[str, Any] = {"reps": reps, "confidence": confidence, "seed": seed}
    out: dict[str, Any] = {"confidence": confidence, "reps": reps, "bootstrap_seed": seed, "groups": []}
    for (agent, env), scores in groups.items():
        row: dict[str, Any] = {"agent": agent, "env": env, "runs": len(scores), "scores": scores}
        for stat in ("mean", "median", "iqm"):
            est, lo, hi = bootstrap_interval(stat, scores, **kw)
            row[stat] = {"estimate": est, "lower": lo, "upper": hi}
        out["groups"].append(row)
    out["improvement"] = []
    for (a, sa), (b, sb) in itertools.permutations(groups.items(), 2):
        if a[1] == b[1]:
            est, lo, hi = bootstrap_interval("probability_of_improvement", sa, sb, **kw)
            out["improvement"].append(
                {"env": a[1], "x": a[0], "y": b[0], "estimate": est, "lower": lo, "upper": hi}
            )
    return out


def _format(summary: dict[str, Any]) -> str:
    pct = f"{100 * summary['confidence']:g}%"
    head = f"{'agent':<16} {'env':<22} {'runs':>4}  {'IQM':>9} ({pct} interval)      "
    lines = [head + f"{'mean':>9}  {'median':>9}"]
    for g in summary["groups"]:
        iqm = g["iqm"]
        lines.append(
            f"{g['agent']:<16} {g['env']:<22} {g['runs']:>4}  {iqm['estimate']:>9.2f} "
            f"({iqm['lower']:>9.2f} .. {iqm['upper']:>9.2f})  {g['mean']['estimate']:>9.2f}  "
            f"{g['median']['estimate']:>9.2f}"
        )
    for p in summary["improvement"]:
        interval = f"({p['lower']:.3f} .. {p['upper']:.3f})"
        lines.append(f"P({p['x']} > {p['y']}) on {p['env']}: {p['estimate']:.3f} {interval}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """``evaluate``: the exit code (0, or 2 after one ``error:`` line)."""
    import torch
    from tritonrl.cli.common import MAX_SEED, check_range, check_threads, parse_device
    from tritonrl.cli.train import MAX_ENVS
    from tritonrl.toolkit.checkpoint import CheckpointError
    from tritonrl.toolkit.runfolder import atomic_write_text

    try:
        check_range("--episodes", args.episodes, 1, MAX_ENVS)  # one env per episode, as --eval-episodes
        check_range("--reps", args.reps, 1)
        check_range("--seed", args.seed, 0, MAX_SEED)
        check_range("--bootstrap-seed", args.bootstrap_seed, 0, MAX_SEED)
        check_threads(args.threads)
        if not 0.0 < args.confidence < 1.0:
            raise ValueError(f"--confidence must be in (0, 1), got {args.confidence}")
        dirs = [Path(d) for d in args.run_dirs]
        if len({d.resolve() for d in dirs}) != len(dirs):
            raise ValueError("a run folder is named twice")
        device = str(parse_device(args.device))
        torch.set_num_threads(args.threads)
        results = [evaluate_run(d, episodes=args.episodes, seed=args.seed, device=device) for d in dirs]
        summary = summarize(results, reps=args.reps, confidence=args.confidence, seed=args.bootstrap_seed)
        summary["episodes"], summary["seed"] = args.episodes, args.seed
        keys = ("run_dir", "agent", "env", "step", "mean_return")
        summary["runs"] = [{k: r[k] for k in keys} for r in results]
        if args.out is not None:
            atomic_write_text(Path(args.out), json.dumps(summary, indent=1) + "\n")
    except (CheckpointError, ValueError, TypeError, OSError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for r in results:
        print(
            f"{r['run_dir']}: {r['agent']} on {r['env']} (step {r['step']}): {r['mean_return']:.2f} "
            f"+- {r['std_return']:.2f} over {r['episodes']} episodes"
        )
    print(_format(summary))
    return 0
