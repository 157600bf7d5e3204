"""``python -m tritonrl train``: train a registered agent preset on a gymnasium environment.

Checks every flag before anything is written, builds the agent from its preset, and runs
[`tritonrl.toolkit.training.loop.run_training`][tritonrl.toolkit.training.loop.run_training] in a crash-safe
run folder; ``market:`` sources go to [`tritonrl.toolkit.training.market`][tritonrl.toolkit.training.market].
See docs/pages/training.md ("Command line") and docs/pages/scaling.md.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tritonrl.cli.common import (
    UsageError,
    add_output_flags,
    add_run_folder_flags,
    add_seed_device_flags,
    add_set_flag,
    check_no_overwrite,
    check_range,
    check_threads,
    default_run_dir,
    end_rank,
    parse_device,
    parse_overrides,
    plain,
    probe_run_dir,
    refuse_failed_allocation,
    report_interrupted,
    run_dir_from_flag,
    stop_on_signals,
)
from tritonrl.toolkit.checks import MAX_SEED  # light: ``--help`` must not import the loop

__all__ = ["add_parser", "run", "split_overrides"]

DEFAULT_AGENT = "rainbow"
DEFAULT_ENV = "CartPole-v1"
MAX_ENVS = 65_536
"""Most environments (``--num-envs``, ``--eval-episodes``): each is a gymnasium env in this process
(CartPole: about 60 KB each), so a typo like 10**8 would exhaust memory instead of failing."""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``train`` subcommand to ``python -m tritonrl``'s parser."""
    p = subparsers.add_parser(
        "train",
        help="train an agent preset on a gymnasium environment",
        description=plain(__doc__.splitlines()[0]),
    )
    p.add_argument(
        "--agent",
        default=DEFAULT_AGENT,
        help=f"agent preset (default {DEFAULT_AGENT}); `--agent list` lists them",
    )
    p.add_argument(
        "--env",
        default=None,
        help=f"gymnasium environment id, market:SOURCE (synthetic[,ar=F], googl, eurusd, csv=PATH) or "
        f"portfolio:SOURCE (synthetic[,assets=N][,signal=F], sp500, csv=PATH, csv-fill=PATH) "
        f"(default: the preset's, else {DEFAULT_ENV})",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="environment steps (default: the tuned entry's budget for --env, else the preset's)",
    )
    add_seed_device_flags(
        p,
        threads_help="torch CPU threads, at most the CPU count (default 1: small RL networks run fastest "
        "on one thread, and a thread pool beside other busy processes slows down many times)",
    )
    p.add_argument(
        "--num-envs",
        type=int,
        default=None,
        help=f"parallel environments, at most {MAX_ENVS} (default: the tuned entry's for --env, else "
        "the preset's)",
    )
    add_run_folder_flags(
        p,
        default="runs/<agent>-<env>-s<seed>",
        resume_help="continue from the run dir's checkpoint (without one: start fresh, with a notice)",
    )
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=0,
        help="env steps between checkpoints (default 0: none by steps; --checkpoint-minutes "
        "still applies, and a checkpoint is always saved at the end, on SIGINT and on SIGTERM)",
    )
    p.add_argument(
        "--checkpoint-minutes",
        type=float,
        default=10.0,
        help="wall-time minutes between checkpoints, saved at the first metric flush past them "
        "(default 10; 0: off)",
    )
    p.add_argument(
        "--eval-every",
        type=int,
        default=None,
        help="env steps between greedy evaluations (0: at the end only; default: the preset's, "
        "which also stops the run at the environment's solved score)",
    )
    p.add_argument(
        "--eval-episodes",
        type=int,
        default=10,
        help=f"episodes per evaluation, run in parallel, 1 to {MAX_ENVS} (default 10)",
    )
    p.add_argument("--log-every", type=int, default=2048, help="env steps between metric flushes")
    p.add_argument("--target-return", type=float, default=None, help="stop once an evaluation reaches this")
    p.add_argument(
        "--no-tuned",
        action="store_true",
        help="the preset's own config, budget and env count even where it has settings tuned for --env",
    )
    p.add_argument(
        "--overlap",
        action="store_true",
        help="learn while acting (acting lags by one train_freq interval, PPO's by one rollout): "
        "in a second process on a CPU, on a CUDA stream of its own on CUDA; market envs too",
    )
    add_set_flag(p, help="override an agent config field (repeatable); env.FIELD=VALUE: a market env field")
    add_output_flags(p)
    p.set_defaults(run=run)
    return p


def _validate(args: argparse.Namespace) -> None:
    """Check every flag of ``train`` before anything is built, trained or written.

    Raises:
        UsageError: the first bad flag, named with its allowed range.
    """
    if not args.agent:
        raise UsageError("--agent must not be empty (`--agent list` lists the presets)")
    if not args.env:
        raise UsageError("--env must not be empty (a gymnasium id such as CartPole-v1)")
    check_range("--steps", args.steps, 1)
    check_range("--seed", args.seed, 0, MAX_SEED, " (numpy seeds take 32 bits, gymnasium no negatives)")
    parse_device(args.device)
    check_threads(args.threads)
    check_range("--num-envs", args.num_envs, 1, MAX_ENVS)
    run_dir_from_flag(args.run_dir, _default_run_dir(args))
    check_range("--checkpoint-every", args.checkpoint_every, 0, why=" (0: at the end only)")
    if not (math.isfinite(args.checkpoint_minutes) and args.checkpoint_minutes >= 0):
        raise UsageError(f"--checkpoint-minutes must be a finite number >= 0, got {args.checkpoint_minutes}")
    check_range("--eval-every", args.eval_every, 0, why=" (0: at the end only)")
    check_range("--eval-episodes", args.eval_episodes, 1, MAX_ENVS)
    check_range("--log-every", args.log_every, 1)
    if args.target_return is not None and not math.isfinite(args.target_return):
        raise UsageError(
            f"--target-return must be a finite number, got {args.target_return} (to evaluate "
            "without stopping, leave it out and give --eval-every)"
        )
    parse_overrides(args.overrides)


def _preset_env(agent: str) -> str:
    """The environment of ``--agent``'s preset when ``--env`` is not given (an unknown agent gets
    `DEFAULT_ENV` here and its error where the preset is resolved)."""
    from tritonrl.cli.registry import get_agent

    try:
        env = get_agent(agent).default_env
    except ValueError:
        return DEFAULT_ENV
    return env if env is not None else DEFAULT_ENV


def _default_run_dir(args: argparse.Namespace) -> Path:
    return default_run_dir(args.agent, args.env, f"s{args.seed}")


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    """The command line's flags (what every rank must be given alike)."""
    return {
        k: v
        for k, v in sorted(vars(args).items())
        if v is None or isinstance(v, (str, int, float, bool, list))
    }


ENV_SET_PREFIX = "env."
"""``--set env.FIELD=VALUE`` sets a field of the market env config, not of the agent config."""


def split_overrides(overrides: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``--set`` items as (agent config fields, ``env.``-prefixed env config fields without the prefix)."""
    agent = {k: v for k, v in overrides.items() if not k.startswith(ENV_SET_PREFIX)}
    env = {k.removeprefix(ENV_SET_PREFIX): v for k, v in overrides.items() if k.startswith(ENV_SET_PREFIX)}
    return agent, env


@dataclass
class _Plan:
    """What ``train``'s flags resolve to before anything is built (this rank's share)."""

    spec: Any
    """The preset (`tritonrl.toolkit.preset.Preset`)."""
    overrides: dict[str, str]
    """``--set`` items for the agent config (``env.*`` ones aside)."""
    market: bool
    defaults: Any
    """Where the CLI's defaults come from: the preset, or its market ones
    ([`MarketPreset`][tritonrl.toolkit.preset.MarketPreset])."""
    device: torch.device
    steps: int
    eval_every: int
    target_return: float | None
    local_envs: int
    """This rank's environments."""
    env_seed: int
    run_dir: Path
    ckpt: Path
    meta: tuple[tuple[str, str], ...]
    """The run's identity in the checkpoint (agent, env, environments, market env config)."""
    tuned: Any = None
    """The preset's `tritonrl.toolkit.preset.Tuned` settings for ``--env`` (``None``: none, or a market)."""


def _build(args: argparse.Namespace, ctx: Any) -> tuple[Any, Any, Any, Any, Any, Any]:
    """The preset, agent, env, schedule, loop config and market run (``None`` off market data) of this rank.

    Raises:
        UsageError: any bad argument (before anything is written), on every rank alike.
    """
    from tritonrl.toolkit.distributed import on_main

    plan = _plan(args, ctx)
    # rank 0 reads the run folder (the other ranks may be on nodes without it) and tells them
    saved_config, saved_meta = on_main(ctx, lambda: _read_saved(args, plan))
    # a market run starts from the preset's market overrides; a resumed one from its checkpoint
    build_overrides: dict[str, Any] = plan.overrides
    if plan.market and saved_config is None:
        build_overrides = {**plan.defaults.overrides, **plan.overrides}
    env, run = _make_env(args, plan, build_overrides, saved_config, saved_meta)
    agent = _make_agent(args, ctx, plan, env, build_overrides, saved_config)
    if plan.tuned is not None and saved_config is None and ctx.is_main:  # a resume keeps its config
        _say_tuned(args, plan)
    if run is not None and not args.overlap:  # an overlapped run steps the market env itself
        from tritonrl.toolkit.training.market import market_collector

        try:
            run.collector = market_collector(agent, env, sync_every=1)
        except (ValueError, TypeError) as exc:
            env.close()
            raise UsageError(f"agent {args.agent!r} on {args.env}: {exc}") from None
    try:
        schedule = plan.spec.schedule(agent)
        cfg = _loop_config(args, plan)
        if args.overlap:
            from tritonrl.toolkit.training.overlap import check_overlap

            check_overlap(
                agent, schedule, run.collector if run is not None else None, learner=cfg.overlap_learner
            )
    except ValueError as exc:  # UsageError included; LoopConfig repeats _validate's checks
        env.close()
        raise UsageError(str(exc)) from None
    try:  # last: the only check that writes (and it leaves nothing behind); rank 0's folder
        on_main(ctx, lambda: probe_run_dir(plan.run_dir))
    except UsageError:
        env.close()
        raise
    return plan.spec, agent, env, schedule, cfg, run


def _plan(args: argparse.Namespace, ctx: Any) -> _Plan:
    """Check the flags and resolve them: the preset, its defaults, the device, this rank's environments.

    Raises:
        UsageError: the first bad flag, an unknown agent, ``--set env.*`` without a market env, or
            a ``--num-envs`` the world size does not divide.
    """
    import gymnasium as gym
    from tritonrl.cli.registry import get_agent
    from tritonrl.toolkit.distributed import DistributedError
    from tritonrl.toolkit.training.loop import CHECKPOINT_NAME
    from tritonrl.toolkit.training.market import is_market, market_preset
    from tritonrl.toolkit.training.portfolio import is_portfolio

    try:
        ctx.check_same("the command line", _flags(args))
    except DistributedError as exc:
        raise UsageError(str(exc)) from None
    _validate(args)
    try:
        spec = get_agent(args.agent)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    overrides, env_overrides = split_overrides(parse_overrides(args.overrides))
    market = is_market(args.env) or is_portfolio(args.env)
    if env_overrides and not market:
        raise UsageError(
            "--set env.FIELD=VALUE sets a market or portfolio environment's field (--env market:... or "
            "portfolio:...)"
        )
    defaults = market_preset(spec) if market else spec
    tuned = None if market or args.no_tuned else spec.tuned.get(args.env)
    device = ctx.device if ctx.enabled else parse_device(args.device)
    torch.set_num_threads(args.threads)
    steps = args.steps if args.steps is not None else _tuned_or(tuned, "budget", defaults.default_steps)
    eval_every = args.eval_every if args.eval_every is not None else defaults.default_eval_every
    target_return = args.target_return
    if target_return is None and args.eval_every is None and eval_every > 0 and not market:
        # the preset's periodic evaluation stops the run once the env's registered score is reached
        try:
            target_return = gym.spec(args.env).reward_threshold
        except gym.error.Error:
            target_return = None  # unknown id: make_vec_env reports it below
    num_envs = args.num_envs
    if num_envs is None:
        num_envs = _tuned_or(tuned, "num_envs", defaults.default_num_envs)
    try:
        local_envs = ctx.shard(num_envs, "--num-envs")  # this rank's environments
    except DistributedError as exc:
        raise UsageError(str(exc)) from None
    run_dir = run_dir_from_flag(args.run_dir, _default_run_dir(args))
    return _Plan(
        spec=spec,
        overrides=overrides,
        market=market,
        defaults=defaults,
        device=device,
        steps=steps,
        eval_every=eval_every,
        target_return=target_return,
        local_envs=local_envs,
        env_seed=args.seed + ctx.rank * local_envs,
        run_dir=run_dir,
        ckpt=run_dir / CHECKPOINT_NAME,
        meta=(("agent", args.agent), ("env", args.env), ("num_envs", str(num_envs))),
        tuned=tuned,
    )


def _tuned_or(tuned: Any, name: str, default: int) -> int:
    """The tuned entry's ``name`` (``budget``, ``num_envs``) if it sets one, else ``default``."""
    value = getattr(tuned, name, None) if tuned is not None else None
    return default if value is None else int(value)


def _say_tuned(args: argparse.Namespace, plan: _Plan) -> None:
    """Print (stderr) the tuned settings the run starts from, and which ones ``--set`` replaced."""
    tuned = plan.tuned
    kept = ", ".join(f"{k}={v!r}" for k, v in tuned.overrides.items() if k not in plan.overrides)
    replaced = [k for k in tuned.overrides if k in plan.overrides]
    line = f"tuned settings for {args.agent} on {args.env} ({tuned.source}): {kept or 'none kept'}"
    if replaced:
        line += f"; --set replaces {', '.join(replaced)}"
    if tuned.budget is not None and args.steps is None:
        line += f"; {tuned.budget} steps"
    if tuned.num_envs is not None and args.num_envs is None:
        line += f"; {tuned.num_envs} env{'s' if tuned.num_envs != 1 else ''}"
    decay = tuned.overrides.get("lr_decay_steps") if "lr_decay_steps" not in plan.overrides else None
    if decay is not None and plan.steps > decay:  # an annealed rate that would end before the run does
        line += (
            f"; the rate holds at its final value from step {decay} on (--set lr_decay_steps={plan.steps})"
        )
    print(line, file=sys.stderr)


def _read_saved(args: argparse.Namespace, plan: _Plan) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """Rank 0: the saved agent config and identity (``None, {}`` without a checkpoint to resume).

    Raises:
        UsageError: a checkpoint without ``--resume``, unreadable, or of another agent, env or
            number of environments.
    """
    from tritonrl.toolkit.checkpoint import CheckpointError, brief, load_checkpoint
    from tritonrl.toolkit.runstate import section, training_sections

    ckpt = plan.ckpt
    if not check_no_overwrite(ckpt, args.resume):
        return None, {}
    try:  # the run's config is the saved one, this command's --set on top (see docs: Training)
        # the header alone: the run loads the whole checkpoint once, when it resumes
        saved = training_sections(load_checkpoint(ckpt, tensors=False), str(ckpt))
        saved_config = section(saved["agent"], "config", str(ckpt), "the agent config")
    except CheckpointError as exc:
        raise UsageError(str(exc)) from None
    for key, value in plan.meta:
        if saved["meta"].get(key) != value:
            raise UsageError(
                f"{ckpt} was made with {key}={brief(saved['meta'].get(key), 60)}, "
                f"this run has {key}={value!r}"
            )
    if not isinstance(saved_config, dict):
        raise UsageError(f"{ckpt}: the agent config is a {type(saved_config).__name__}, not a dict")
    return saved_config, dict(saved["meta"])


def _make_env(
    args: argparse.Namespace,
    plan: _Plan,
    overrides: dict[str, Any],
    saved_config: dict[str, Any] | None,
    saved_meta: dict[str, Any],
) -> tuple[Any, Any]:
    """This rank's vector env and, on market data, the market run's parts (else ``None``).

    Raises:
        UsageError: an unknown env, a missing extra, a bad market source or env field, or a
            market env other than the checkpoint's.
    """
    from tritonrl.toolkit.envs.vector import make_vec_env

    try:
        if not plan.market:
            return make_vec_env(args.env, plan.local_envs, plan.env_seed, device=plan.device), None
        with refuse_failed_allocation(f"--env {args.env}", plan.device):  # what no estimate foresaw
            run = _market_run(
                args,
                plan.spec,
                overrides,
                saved_config,
                plan.steps,
                plan.local_envs,
                plan.device,
                seed=plan.env_seed,
            )
        env_json = json.dumps(run.env_config.to_dict(), sort_keys=True)
        plan.meta += (("market_env", env_json),)
        if saved_config is not None and saved_meta.get("market_env") != env_json:
            run.env.close()
            raise UsageError(
                f"{plan.ckpt} was made with the env config {saved_meta.get('market_env')}, this run "
                f"has {env_json} (--set env.* must match the checkpoint's)"
            )
    except ValueError as exc:  # UsageError included
        raise UsageError(str(exc)) from None
    return run.env, run


def _make_agent(
    args: argparse.Namespace,
    ctx: Any,
    plan: _Plan,
    env: Any,
    overrides: dict[str, Any],
    saved_config: dict[str, Any] | None,
) -> Any:
    """The agent of this rank; on a resume, the saved config with ``--set`` on top.

    Raises:
        UsageError: a bad config key or value, a space the agent cannot drive, or a resume that
            changes a fixed field (the env is closed first).
    """
    from tritonrl.toolkit.config import config_changes, fixed_changes, format_change

    sets = " ".join(f"--set {item}" for item in args.overrides) or "the preset's sizes"
    try:
        with refuse_failed_allocation(sets, plan.device):  # what no estimate foresaw
            agent = plan.spec.build(
                env.single_observation_space,
                env.single_action_space,
                num_envs=plan.local_envs,
                device=plan.device,
                seed=args.seed,
                total_steps=plan.steps,
                overrides=overrides,
                config=saved_config,
                dist=ctx,
                env=None if plan.tuned is None else args.env,  # the tuned settings; ignored on a resume
            )
        before = None if saved_config is None else type(agent.config).from_dict(saved_config)
    except (ValueError, TypeError) as exc:
        env.close()
        raise UsageError(f"agent {args.agent!r} on {args.env}: {exc}") from None
    if before is None:
        return agent
    assert saved_config is not None  # before is built from it
    fixed = fixed_changes(before, agent.config)
    if fixed:
        env.close()
        listed = ", ".join(format_change(k, *v) for k, v in fixed.items())
        raise UsageError(f"--resume cannot change {listed}: start a new run")
    # --set changes are reported; PPO's total_steps follows --steps, which the user just typed
    changes = {k: v for k, v in config_changes(before, agent.config).items() if k in plan.overrides}
    if changes and ctx.is_main:
        print(
            "resume: applying " + ", ".join(format_change(k, *v) for k, v in changes.items()),
            file=sys.stderr,
        )
    # resumable fields newer than the checkpoint take their defaults: say which
    absent = [k for k in agent.config.to_dict() if k not in saved_config and k not in plan.overrides]
    if absent and ctx.is_main:
        print(
            "resume: the checkpoint predates "
            + ", ".join(f"{k} (using {getattr(agent.config, k)!r})" for k in absent),
            file=sys.stderr,
        )
    return agent


def _loop_config(args: argparse.Namespace, plan: _Plan) -> Any:
    """The `tritonrl.toolkit.training.loop.LoopConfig` of the run; ``ValueError`` out of range."""
    from tritonrl.toolkit.training.loop import LoopConfig

    return LoopConfig(
        total_steps=plan.steps,
        seed=args.seed,
        run_dir=str(plan.run_dir),
        log_every=args.log_every,
        eval_every=plan.eval_every,
        eval_episodes=args.eval_episodes,
        target_return=plan.target_return,
        checkpoint_every=args.checkpoint_every,
        checkpoint_seconds=60.0 * args.checkpoint_minutes,
        resume=args.resume,
        progress=not args.no_progress,
        tensorboard=not args.no_tensorboard,
        meta=plan.meta,
        overlap=args.overlap,
    )


def _market_run(
    args: argparse.Namespace,
    spec: Any,
    overrides: dict[str, Any],
    saved_config: dict[str, Any] | None,
    steps: int,
    num_envs: int,
    device: torch.device,
    *,
    seed: int,
) -> Any:
    """The market data, env and evaluator of ``--env market:...`` for this rank.

    Raises:
        ValueError: a bad source, option, env field, or data too short.
    """
    from tritonrl.toolkit.training.market import build_market_run, env_config_for
    from tritonrl.toolkit.training.portfolio import build_portfolio_run, is_portfolio, portfolio_env_config

    agent_config = spec.configure(overrides, config=saved_config, total_steps=steps)
    _, env_overrides = split_overrides(parse_overrides(args.overrides))
    if is_portfolio(args.env):
        config = portfolio_env_config(agent_config, env_overrides)
        return build_portfolio_run(args.env, num_envs, config, device=device, seed=seed)
    env_config = env_config_for(agent_config, env_overrides)
    return build_market_run(args.env, num_envs, env_config, device=device, seed=seed)


def run(args: argparse.Namespace) -> int:
    """Run ``train``; the exit status (0 done, 1 error, 2 usage error, 130 / 143 interrupted).

    Under ``torchrun`` every rank ends with the same status (a rank that fails alone with 1) and the
    process exits here (``os._exit``) once it has left the group.
    """
    if args.agent == "list":  # the presets, one a line on stdout: a listing, not a mistake
        from tritonrl.cli.registry import list_agents

        for spec in list_agents():
            print(f"{spec.name:<16} {spec.kind:<10} {spec.description}")
        return 0
    try:
        import tritonrl.toolkit.training.loop  # noqa: F401 (the training dependencies, checked here)
    except ModuleNotFoundError as exc:  # a core dependency missing (gymnasium on a bare GPU machine)
        if exc.name is None or exc.name.startswith("tritonrl"):
            raise
        print(
            f"error: training needs the {exc.name.split('.')[0]} package, which is not installed "
            f"(pip install {exc.name.split('.')[0]})",
            file=sys.stderr,
        )
        return 2
    if args.env is None:  # after the dependency check: the preset registry imports the agents
        args.env = _preset_env(args.agent)
    from tritonrl.toolkit import distributed

    if not distributed.launched_by_torchrun():
        return _train(args, distributed.SINGLE_PROCESS)
    try:
        ctx = distributed.init_distributed(args.device)
    except distributed.DistributedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    end_rank(ctx, lambda: _train(args, ctx))


def _test_report(args: argparse.Namespace, agent: Any, market: Any, run_dir: str) -> None:
    """Print (and save in the run folder) the test-period report of a market or portfolio run."""
    from tritonrl.toolkit.training.portfolio import is_portfolio

    if is_portfolio(args.env):
        from tritonrl.toolkit.backtest.report import format_summary
        from tritonrl.toolkit.training.portfolio import portfolio_report

        print(format_summary(portfolio_report(agent, market, seed=args.seed, run_dir=run_dir)))
        return
    from tritonrl.toolkit.envs.market.evaluate import format_report
    from tritonrl.toolkit.training.market import market_report

    print(format_report(market_report(agent, market, seed=args.seed, run_dir=run_dir)))


def _train(args: argparse.Namespace, ctx: Any) -> int:
    """`run` once the process knows its place (``ctx``); rank 0 prints, the other ranks
    print only the errors that may be theirs alone (training errors, prefixed ``rank R:``)."""
    from tritonrl.toolkit.checkpoint import CheckpointError
    from tritonrl.toolkit.runfolder import RunFolderBusy
    from tritonrl.toolkit.training.loop import TrainingError, run_training

    def error(message: str, *, agreed: bool) -> None:
        if ctx.is_main:
            print(f"error: {message}", file=sys.stderr)
        elif not agreed:
            print(f"rank {ctx.rank}: error: {message}", file=sys.stderr)

    try:
        spec, agent, env, schedule, cfg, market = _build(args, ctx)
    except UsageError as exc:  # every rank raises it alike: rank 0 says it
        error(str(exc), agreed=True)
        return 2
    except KeyboardInterrupt:
        if ctx.is_main:
            print("interrupted by SIGINT before training started: nothing saved", file=sys.stderr)
        return 130
    try:
        with stop_on_signals() as (should_stop, received):
            evaluator = market.evaluator if market is not None else None
            collector = market.collector if market is not None else None
            summary = run_training(
                agent,
                env,
                schedule,
                cfg,
                should_stop=should_stop,
                evaluator=evaluator,
                collector=collector,
                dist=ctx,
            )
            if market is not None and summary["stopped"] is None and ctx.is_main:
                _test_report(args, agent, market, cfg.run_dir)
    except (CheckpointError, RunFolderBusy) as exc:  # before training: raised on every rank alike
        error(str(exc), agreed=True)
        return 2
    except TrainingError as exc:
        error(str(exc), agreed=False)
        return 1
    except OSError as exc:  # preparing the run folder (lock file, moving an earlier run aside)
        where = f"{exc.filename}: " if exc.filename is not None else ""
        error(f"cannot prepare the run folder {cfg.run_dir}: {where}{exc.strerror or exc}", agreed=True)
        return 1
    finally:
        env.close()
    if not ctx.is_main:
        return (
            128 + int(received[0] if received else signal.SIGINT)
            if summary["stopped"] == "should_stop"
            else 0
        )
    if summary["stopped"] == "should_stop":
        return report_interrupted(received, summary["global_step"], summary["checkpoint"])
    final = summary["final_eval"]
    line = f"{spec.name} on {args.env}: {summary['global_step']} steps in {summary['wall_s']:.1f} s"
    if final is not None and "report" in final:  # a market run: one pass over the validation period
        line += f", validation log return {final['mean_return']:.3f} (Sharpe {final['sharpe']:.2f})"
    elif final is not None:
        line += f", greedy evaluation {final['mean_return']:.1f} +- {final['std_return']:.1f}"
    if summary["reached_target_at"] is not None:
        line += f", target reached at step {summary['reached_target_at']}"
    print(line)
    files = [
        n
        for n in (
            "metrics.csv",
            "curve.png",
            "equity.png",
            "test_report.json",
            "tearsheet",
            Path(summary["checkpoint"] or "").name,
        )
        if n and (Path(cfg.run_dir) / n).exists()
    ]
    print(f"run folder: {cfg.run_dir} ({', '.join(files)})")
    return 0
