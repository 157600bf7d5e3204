"""``tritonrl backtest``: walk-forward evaluation of a portfolio preset.

K rolling folds of train / validation / test periods in time order; the agent is trained afresh
on each fold's train period (its validation period is the loop's evaluation), then acts greedily
on the fold's test period beside four baselines fitted on the same train period, with the same
costs. The test periods are stitched into one out-of-sample record per seed: a report, a tear
sheet, and a summary across seeds. See docs/pages/portfolio.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path
from typing import Any

import torch
from tritonrl.cli.common import (
    UsageError,
    add_seed_device_flags,
    add_set_flag,
    check_range,
    check_threads,
    default_run_dir,
    parse_device,
    parse_overrides,
    plain,
    probe_run_dir,
    run_dir_from_flag,
)
from tritonrl.toolkit.checks import MAX_SEED

__all__ = ["add_parser", "run"]

DEFAULT_AGENT = "ppo-portfolio"
SUMMARY_NAME = "summary.json"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``backtest`` subcommand to ``python -m tritonrl``'s parser."""
    p = subparsers.add_parser(
        "backtest",
        help="walk-forward backtest of a portfolio preset beside four baselines",
        description=plain(__doc__.splitlines()[0]),
    )
    p.add_argument("--agent", default=DEFAULT_AGENT, help=f"a portfolio preset (default {DEFAULT_AGENT})")
    p.add_argument("--env", default=None, help="portfolio:SOURCE (default: the preset's)")
    p.add_argument("--folds", type=int, default=4, help="walk-forward folds (default 4)")
    p.add_argument("--steps", type=int, default=None, help="env steps per fold (default: the preset's)")
    p.add_argument("--seeds", type=int, default=1, help="seeds, from --seed on (default 1)")
    p.add_argument("--num-envs", type=int, default=None, help="environments (default: the preset's)")
    p.add_argument(
        "--train", type=float, default=0.5, help="share of the bars in each fold's train period (default 0.5)"
    )
    p.add_argument(
        "--validation", type=float, default=0.1, help="share in each fold's validation period (default 0.1)"
    )
    p.add_argument(
        "--trials",
        type=int,
        default=1,
        help="configurations tried before this one (the deflated Sharpe ratio's N; default 1)",
    )
    p.add_argument("--run-dir", default=None, help="output folder (default runs/backtest-AGENT-ENV-sSEED)")
    add_seed_device_flags(p, threads_help="torch CPU threads (default 1)")
    add_set_flag(
        p, help="override an agent config field (repeatable); env.FIELD=VALUE: a portfolio env field"
    )
    p.set_defaults(run=run)
    return p


def _check(args: argparse.Namespace) -> tuple[Any, dict[str, str], dict[str, str], Path]:
    """The preset, agent and env overrides and the run folder; `UsageError` at the first bad flag."""
    from tritonrl.cli.registry import get_agent
    from tritonrl.cli.train import split_overrides
    from tritonrl.toolkit.training.portfolio import is_portfolio

    try:
        spec = get_agent(args.agent)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.env is None:
        if not (spec.default_env and is_portfolio(spec.default_env)):
            raise UsageError(f"--env must be given: --agent {args.agent} has no portfolio:SOURCE default")
        args.env = spec.default_env
    if not is_portfolio(args.env):
        raise UsageError(f"--env must be portfolio:SOURCE, got {args.env!r}")
    check_range("--folds", args.folds, 1, 100)
    check_range("--steps", args.steps, 1)
    check_range("--seeds", args.seeds, 1, 100)
    check_range("--num-envs", args.num_envs, 1, 65_536)
    check_range("--trials", args.trials, 1)
    check_range("--seed", args.seed, 0, MAX_SEED)
    check_threads(args.threads)
    parse_device(args.device)
    agent_sets, env_sets = split_overrides(parse_overrides(args.overrides))
    run_dir = run_dir_from_flag(
        args.run_dir, default_run_dir("backtest", args.agent, args.env, f"s{args.seed}")
    )
    if (run_dir / SUMMARY_NAME).exists():
        raise UsageError(f"{run_dir} already holds a backtest ({SUMMARY_NAME}): choose another --run-dir")
    return spec, agent_sets, env_sets, run_dir


def run(args: argparse.Namespace) -> int:
    """Run ``backtest``; the exit status (0 done, 1 error, 2 usage error)."""
    try:
        spec, agent_sets, env_sets, run_dir = _check(args)
        plan = _prepare(args, spec, agent_sets, env_sets)
        probe_run_dir(run_dir)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from tritonrl.toolkit.backtest.report import format_summary
    from tritonrl.toolkit.backtest.walkforward import walk_forward
    from tritonrl.toolkit.training.portfolio import save_report

    summary: dict[str, Any] = {
        "agent": args.agent,
        "env": args.env,
        "folds": args.folds,
        "steps": plan["steps"],
        "trials": args.trials,
        "seeds": {},
    }
    for seed in range(args.seed, args.seed + args.seeds):
        folder = run_dir / f"seed{seed}"
        train_fold = functools.partial(_train_fold, args, spec, plan, seed, folder=folder)
        try:
            report = walk_forward(
                train_fold,
                plan["data"],
                plan["env_config"],
                folds=args.folds,
                train=args.train,
                validation=args.validation,
                seed=seed,
                trials=args.trials,
                strategy=args.agent,
            )
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2 if seed == args.seed else 1
        save_report(report, folder)
        print(format_summary(report))
        summary["seeds"][str(seed)] = report["metrics"]
    from tritonrl.toolkit.runfolder import atomic_write_text

    atomic_write_text(run_dir / SUMMARY_NAME, json.dumps(summary, indent=1) + "\n")
    print(f"backtest folder: {run_dir} ({SUMMARY_NAME}, seed*/test_report.json, seed*/tearsheet/)")
    return 0


def _prepare(
    args: argparse.Namespace, spec: Any, agent_sets: dict[str, str], env_sets: dict[str, str]
) -> dict[str, Any]:
    """The panel on the device, the env config and the run's sizes; `UsageError` when bad."""
    from tritonrl.toolkit.bars.panel_sources import source_panel
    from tritonrl.toolkit.bars.paneldata import upload_panel
    from tritonrl.toolkit.training.market import market_preset
    from tritonrl.toolkit.training.portfolio import PORTFOLIO_PREFIX, portfolio_env_config

    torch.set_num_threads(args.threads)
    defaults = market_preset(spec)
    steps = args.steps if args.steps is not None else defaults.default_steps
    overrides = {**defaults.overrides, **agent_sets}
    try:
        agent_config = spec.configure(overrides, total_steps=steps)
        env_config = portfolio_env_config(agent_config, env_sets)
        device = parse_device(args.device)
        data = upload_panel(source_panel(args.env.removeprefix(PORTFOLIO_PREFIX)), device)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    num_envs = args.num_envs if args.num_envs is not None else defaults.default_num_envs
    return {
        "steps": steps,
        "overrides": overrides,
        "env_config": env_config,
        "device": device,
        "data": data,
        "num_envs": num_envs,
    }


def _train_fold(
    args: argparse.Namespace,
    spec: Any,
    plan: dict[str, Any],
    seed: int,
    k: int,
    train: Any,
    validation: Any,
    *,
    folder: Path,
) -> Any:
    """Train a fresh agent on ``train`` (``validation``: its end-of-run evaluation); its greedy policy."""
    from tritonrl.toolkit.envs.portfolio import PortfolioEnv, PortfolioEvaluator
    from tritonrl.toolkit.training.collector import Collector
    from tritonrl.toolkit.training.loop import LoopConfig, run_training
    from tritonrl.toolkit.training.market import greedy_policy

    env: Any = PortfolioEnv(train, plan["num_envs"], plan["env_config"], seed=seed + 1000 * k)
    env.reset(seed=seed + 1000 * k)
    agent = spec.build(
        env.single_observation_space,
        env.single_action_space,
        num_envs=plan["num_envs"],
        device=plan["device"],
        seed=seed,
        total_steps=plan["steps"],
        overrides=plan["overrides"],
    )
    cfg = LoopConfig(
        total_steps=plan["steps"],
        seed=seed,
        run_dir=str(folder / f"fold{k}"),
        log_every=4096,
        eval_every=0,
        progress=False,
        tensorboard=False,
    )
    result = run_training(
        agent,
        env,
        spec.schedule(agent),
        cfg,
        evaluator=PortfolioEvaluator(validation, plan["env_config"]),
        collector=Collector(agent, env),
    )
    final = result.get("final_eval") or {}
    print(
        f"seed {seed} fold {k}: {result['global_step']} steps in {result['wall_s']:.0f} s, validation "
        f"log return {final.get('mean_return', float('nan')):+.3f}",
        file=sys.stderr,
    )
    return greedy_policy(agent)
