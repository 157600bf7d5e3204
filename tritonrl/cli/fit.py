"""``tritonrl fit``: train a registered forecaster on market bars, or on any numeric series of a CSV
file, with [`fit`][tritonrl.toolkit.forecast.fit].

Follows ``train``'s rules (`tritonrl.cli.common`); under ``torchrun`` it trains data-parallel
over windows and rank 0 alone writes and prints. The models come from
[`tritonrl.cli.registry.forecasters`][tritonrl.cli.registry.forecasters]. See docs/pages/forecasting.md.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tritonrl.cli.common import (
    UsageError,
    add_output_flags,
    add_run_folder_flags,
    add_seed_device_flags,
    add_set_flag,
    check_fits,
    check_no_overwrite,
    check_range,
    check_threads,
    count_parameters,
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
from tritonrl.toolkit import distributed
from tritonrl.toolkit.distributed import DistContext, DistributedError
from tritonrl.toolkit.forecast import (
    CHECKPOINT_NAME,
    FIT_FORMAT,
    REPORT_NAME,
    SCHEDULES,
    TARGET_MODES,
    FitConfig,
    FitError,
    WindowData,
    check_length,
    fit,
    format_report,
    load_windows,
    market_inputs,
    resolve_target_mode,
)

__all__ = ["DEFAULT_DATA", "add_parser", "run"]

DEFAULT_DATA = "market:synthetic,ar=0.3"
DESCRIPTION = "Train a registered forecaster on market bars or on any numeric series of a CSV file."
_INT_FLAGS = (
    ("epochs", 1),
    ("batch_size", 1),
    ("warmup_steps", 0),
    ("patience", 1),
    ("season", 1),
    ("log_every", 1),
)
"""The integer flags of `FitConfig` and their lowest value (checked in the CLI's wording)."""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``fit`` subcommand to ``python -m tritonrl``'s parser."""
    p = subparsers.add_parser(
        "fit",
        help="train a forecaster on market bars",
        description=DESCRIPTION,
    )
    p.add_argument("--model", default=None, help="forecaster name (`--list` lists them)")
    p.add_argument("--list", action="store_true", help="list the registered forecasters and exit")
    p.add_argument(
        "--data",
        default=DEFAULT_DATA,
        help="market:SOURCE: synthetic[,ar=F,seed=N,bars=N], googl, eurusd, csv=PATH (OHLCV bars, or any "
        "numeric series with --target); series:synthetic[,kind=K,n=N,seed=S,period=P] (a generated "
        f"test series: kind shift, step, trend, regime, seasons or all) (default {DEFAULT_DATA})",
    )
    p.add_argument("--window", type=int, default=64, help="bars per input window (default 64)")
    p.add_argument("--horizon", type=int, default=1, help="bars forecast ahead (default 1)")
    p.add_argument(
        "--target",
        default=None,
        help="market bars: log_return (default), close, or a feature column (price_z, volatility, ...); "
        "a series CSV: the column(s) to forecast, COL[,COL...] (default y)",
    )
    p.add_argument(
        "--target-mode",
        default=FitConfig().target_mode,
        choices=TARGET_MODES,
        help="how the model's output is read: level (the target itself), change (a level target "
        "fitted as the change from the window's last value, reported in levels) or auto (change for a "
        "level target unless the model normalises its inputs, as patchtst does) (default auto)",
    )
    p.add_argument(
        "--features",
        default=None,
        help="a series CSV: exogenous input columns COL[,COL...] (default: only the targets' history)",
    )
    p.add_argument(
        "--series-id",
        default=None,
        help="a series CSV: the column naming each row's series (default unique_id when present)",
    )
    p.add_argument(
        "--time",
        default=None,
        help="a series CSV: the time column (default ds, datetime, timestamp, date or time)",
    )
    d = FitConfig()
    p.add_argument(
        "--epochs", type=int, default=d.epochs, help=f"at most this many epochs (default {d.epochs})"
    )
    p.add_argument(
        "--batch-size", type=int, default=d.batch_size, help=f"windows per step (default {d.batch_size})"
    )
    p.add_argument("--lr", type=float, default=d.lr, help=f"peak learning rate (default {d.lr})")
    p.add_argument(
        "--weight-decay", type=float, default=d.weight_decay, help=f"AdamW (default {d.weight_decay})"
    )
    p.add_argument("--grad-clip", type=float, default=d.grad_clip, help=f"0: none (default {d.grad_clip})")
    p.add_argument("--schedule", default=d.schedule, help=f"{', '.join(SCHEDULES)} (default {d.schedule})")
    p.add_argument("--warmup-steps", type=int, default=d.warmup_steps, help=f"(default {d.warmup_steps})")
    p.add_argument(
        "--patience", type=int, default=d.patience, help=f"early stopping epochs (default {d.patience})"
    )
    p.add_argument(
        "--season", type=int, default=d.season, help=f"seasonal-naive season in bars (default {d.season})"
    )
    p.add_argument(
        "--log-every", type=int, default=d.log_every, help=f"steps per metric row (default {d.log_every})"
    )
    add_seed_device_flags(p, threads_help="torch CPU threads (default 1)")
    add_run_folder_flags(
        p, default="runs/fit-<model>-<data>-s<seed>", resume_help="continue from the run dir's checkpoint"
    )
    add_set_flag(p, help="a model hyperparameter (repeatable), e.g. --set hidden=32")
    add_output_flags(p)
    p.set_defaults(run=run)
    return p


_RESERVED = ("window", "num_features", "horizon", "num_targets", "device", "dtype", "target_channels")
"""Constructor arguments the command passes itself (``--window``, ``--horizon``, the data, ``--device``)."""


def _model_kwargs(items: list[str], cls: type, model: str) -> dict[str, Any]:
    """``--set KEY=VALUE`` as keyword arguments of ``cls`` (Python literals, else strings), type-checked.

    Raises:
        UsageError: a key the constructor does not take or the command sets itself, or a value of
            another type than the annotation's.
    """
    params = dict(inspect.signature(cls).parameters)
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    known = [k for k, p in params.items() if p.kind in named and k not in _RESERVED]
    out: dict[str, Any] = {}
    for key, text in parse_overrides(items).items():
        if not key.isidentifier() or key in _RESERVED:
            raise UsageError(
                f"--set {key}=...: not a model hyperparameter (window, horizon: their own flags)"
            )
        if key not in known and not open_ended:
            raise UsageError(
                f"--set {key}=...: model {model!r} has no hyperparameter {key!r}; its hyperparameters: "
                f"{', '.join(known) or 'none'}"
            )
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            value = text
        out[key] = _typed(model, key, text, value, params[key].annotation if key in params else None)
    return out


_TYPES: dict[str, Callable[[Any], bool]] = {
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "None": lambda v: v is None,
}


def _typed(model: str, key: str, text: str, value: Any, annotation: Any) -> Any:
    """``value`` if it has a type of ``annotation``, ``text`` itself for a ``str`` one.

    Raises:
        UsageError: ``--set KEY=TEXT: model M takes int for KEY, got str``.
    """
    names = annotation.__name__ if isinstance(annotation, type) else annotation
    kinds = [n.strip() for n in names.split("|")] if isinstance(names, str) else []
    if not kinds or any(k not in _TYPES for k in kinds):
        return value
    if any(_TYPES[k](value) for k in kinds):
        return value
    if "str" in kinds:
        return text
    raise UsageError(
        f"--set {key}={text}: model {model!r} takes {' or '.join(kinds)} for {key}, got "
        f"{type(value).__name__} {value!r}"
    )


def _default_run_dir(args: argparse.Namespace) -> Path:
    return default_run_dir("fit", args.model, args.data.removeprefix("market:"), f"s{args.seed}")


def _prepare(
    args: argparse.Namespace, ctx: DistContext = distributed.SINGLE_PROCESS
) -> tuple[Any, tuple[WindowData, ...], FitConfig, Path, dict[str, str]]:
    """Everything ``fit`` needs, every check before anything is written (the write probe last, rank 0).

    Raises:
        UsageError: the first bad argument, or a model or data that would not fit in memory.
    """
    from tritonrl.cli.registry import forecasters

    device, config = _check_flags(args, ctx)
    run_dir = run_dir_from_flag(args.run_dir, _default_run_dir(args))
    registry = forecasters()
    if args.model not in registry:
        known = ", ".join(sorted(registry)) or "none registered"
        raise UsageError(f"unknown model {args.model!r}; known models: {known} (`tritonrl fit --list`)")
    kwargs = _model_kwargs(args.overrides, registry[args.model], args.model)
    table = _series_table(args)
    if table is not None and _takes(registry[args.model], "revin"):
        # a series' level drifts out of its train range: RevIN centred on each window's last value
        kwargs.setdefault("revin", True)
        if kwargs["revin"]:
            kwargs.setdefault("revin_anchor", "last")
    meta = {"data_spec": args.data, "model_kwargs": json.dumps(kwargs, sort_keys=True, default=str)}
    if table is not None:
        meta.update(features=",".join(table.features), series=",".join(table.ids), time=table.time_column)
    _check_resume(args, run_dir / CHECKPOINT_NAME, meta)
    torch.set_num_threads(args.threads)
    model, windows = _build(args, registry[args.model], kwargs, device, config, table)
    if ctx.is_main:
        probe_run_dir(run_dir)  # last: the only check that writes (and it leaves nothing behind)
    return model, windows, config, run_dir, meta


def _series_table(args: argparse.Namespace) -> Any:
    """The `SeriesTable` of a non-market ``--data csv=PATH`` or of
    ``--data series:synthetic,...``, else ``None``; sets ``args.target``.

    Raises:
        UsageError: a series flag without a CSV, or a file the series loader refuses.
    """
    from tritonrl.toolkit.forecast import is_market_csv, load_series, parse_synthetic_spec, read_header

    spec = args.data.strip().removeprefix("market:")
    series_flags = [f"--{k.replace('_', '-')}" for k in ("features", "series_id", "time") if getattr(args, k)]
    if spec.startswith("series:"):  # a generated test series (one column y, no features)
        if series_flags or args.target not in (None, "y"):
            bad = ", ".join([*series_flags, *([] if args.target in (None, "y") else ["--target"])])
            raise UsageError(f"{bad}: --data {spec} is one series with the single column y")
        try:
            table = parse_synthetic_spec(spec)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        args.target = "y"
        return table
    try:
        if spec.startswith("csv=") and spec[4:]:
            header = read_header(spec[4:])
            features = [args.features] if args.features else []
            if args.time or not is_market_csv(header, args.target, features, args.series_id):
                table = load_series(
                    spec[4:], args.target, features=args.features, series_id=args.series_id, time=args.time
                )
                args.target = ",".join(table.targets)
                return table
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if series_flags:
        raise UsageError(f"{', '.join(series_flags)}: only for --data csv=PATH of a numeric series")
    args.target = args.target or "log_return"
    return None


def _check_flags(args: argparse.Namespace, ctx: DistContext) -> tuple[torch.device, FitConfig]:
    """The device and the `FitConfig` of the flags, each checked (`UsageError`)."""
    from tritonrl.toolkit.checks import MAX_SEED

    if not args.model:
        raise UsageError("--model is required (`tritonrl fit --list` lists the forecasters)")
    check_range("--window", args.window, 1)
    check_range("--horizon", args.horizon, 1)
    check_range("--seed", args.seed, 0, MAX_SEED)
    check_threads(args.threads)
    device = ctx.device if ctx.enabled else parse_device(args.device)
    for name, low in _INT_FLAGS:
        value = getattr(args, name)
        if value < low:
            raise UsageError(f"--{name.replace('_', '-')} must be an int >= {low}, got {value}")
    try:
        config = FitConfig(
            epochs=args.epochs,
            batch_size=args.batch_size,
            lr=args.lr,
            weight_decay=args.weight_decay,
            grad_clip=args.grad_clip,
            schedule=args.schedule,
            warmup_steps=args.warmup_steps,
            patience=args.patience,
            season=args.season,
            log_every=args.log_every,
            seed=args.seed,
            target_mode=args.target_mode,
        )
    except ValueError as exc:
        flag = str(exc).split(" ", 1)[0].replace("_", "-")
        raise UsageError(f"--{flag} {str(exc).split(' ', 1)[1]}") from None
    if ctx.enabled:  # the global batch splits evenly over the ranks
        try:
            ctx.shard(config.batch_size, "--batch-size")
        except DistributedError as exc:
            raise UsageError(str(exc)) from None
    if config.season > args.window:
        raise UsageError(f"--season {config.season} is longer than the window {args.window}")
    return device, config


def _check_resume(args: argparse.Namespace, ckpt: Path, meta: dict[str, str]) -> None:
    """With a checkpoint in the run folder: ``--resume`` given, and the checkpoint made by this run.

    Raises:
        UsageError: no ``--resume``, an unreadable or foreign checkpoint, another run's identity.
    """
    from tritonrl.toolkit.checkpoint import CheckpointError, load_checkpoint

    if not check_no_overwrite(ckpt, args.resume):
        return
    try:
        saved = load_checkpoint(ckpt, tensors=False)
    except CheckpointError as exc:
        raise UsageError(str(exc)) from None
    if not isinstance(saved, dict) or saved.get("format") != FIT_FORMAT:
        raise UsageError(f"{ckpt}: not a forecaster training checkpoint (`tritonrl fit` writes those)")
    saved_meta: dict[str, Any] = saved["meta"] if isinstance(saved.get("meta"), dict) else {}
    mine = {
        "model": args.model,
        "window": str(args.window),
        "horizon": str(args.horizon),
        "target": args.target,
        **meta,
    }
    for key, value in mine.items():
        if saved_meta.get(key) != value:
            raise UsageError(f"{ckpt} was made with {key}={saved_meta.get(key)!r}, this run has {value!r}")


def _build(
    args: argparse.Namespace,
    cls: type,
    kwargs: dict[str, Any],
    device: torch.device,
    config: FitConfig,
    table: Any = None,
) -> tuple[Any, tuple[WindowData, WindowData, WindowData]]:
    """The model and the windows, after refusing what would not fit in memory (`_check_memory`).

    Raises:
        UsageError: bad hyperparameters or data, or a model or data too large for this machine.
    """
    from tritonrl.toolkit.bars import source_bars
    from tritonrl.toolkit.forecast.series import check_series_length, series_windows
    from tritonrl.toolkit.precision import PrecisionError, training_dtype

    what = f"model {args.model!r}"
    if table is None:
        targets = 1
        inputs, channels = market_inputs(args.target)
    else:
        inputs, targets = len(table.columns), len(table.targets)
        channels = tuple(range(targets))
    # the channel of each target's own history; a model class that takes none gets the default
    extra = {} if channels == tuple(range(targets)) else {"target_channels": channels}

    def make(on: torch.device) -> Any:
        return cls(args.window, inputs, args.horizon, targets, device=on, **extra, **kwargs)

    params = count_parameters(make, what)
    try:
        dtype = training_dtype(device)
        if table is None:
            with refuse_failed_allocation(f"--data {args.data}", torch.device("cpu")):
                bars = source_bars(args.data)  # a synthetic source too large for memory is refused before
            check_length(bars, args.window, args.horizon)
        else:
            check_series_length(table, args.window, args.horizon)
    except (ValueError, PrecisionError) as exc:
        raise UsageError(str(exc)) from None
    rows = len(bars) if table is None else len(table) + 2 * len(table.ids) * (args.window - 1)
    _check_memory(args, rows, params, device, dtype, config.batch_size, table)
    with refuse_failed_allocation(f"--model {args.model}{_sets(args)} on --data {args.data}", device):
        try:
            if table is None:
                windows = load_windows(bars, args.window, args.horizon, target=args.target, device=device)
            else:
                windows = series_windows(table, args.window, args.horizon, device=device, dtype=dtype)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        torch.manual_seed(config.seed)  # the model's initialisation
        try:
            model = make(device)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"{what}: {exc}") from None
    try:  # the mode fits the target and the model (fit checks it again)
        resolve_target_mode(config.target_mode, windows[0], bool(getattr(model, "normalizes_input", False)))
    except ValueError as exc:
        raise UsageError(f"--target-mode {config.target_mode}: {exc}") from None
    return model, windows


def _takes(cls: type, name: str) -> bool:
    """Whether ``cls``'s constructor has a keyword argument ``name``."""
    return name in inspect.signature(cls).parameters


def _loses_to_baseline(report: dict[str, Any], model: Any) -> str | None:
    """One line when the trained model's validation MSE is above the naive or the seasonal naive
    forecast's (the report holds both), naming what may help; ``None`` when it beats both."""
    val = report.get("validation", {})
    mse = val.get("model", {}).get("mse")
    worse = [
        f"{name.replace('_', ' ')} ({val[name]['mse']:.4g})"
        for name in ("naive", "seasonal_naive")
        if mse is not None and name in val and val[name]["mse"] < mse
    ]
    if not worse:
        return None
    if _takes(type(model), "revin") and not getattr(model, "revin", False):
        hint = "--set revin=True (each window normalised, for a level that drifts)"
    elif (
        "series" not in report.get("meta", {})  # market bars: a level target can be read as a change
        and report.get("target_mode") == "level"
        and report.get("target") not in ("log_return", "return")
    ):
        hint = "--target-mode change"
    else:
        hint = "a longer --window, more --epochs, or another --model"
    return (
        f"note: on the validation split the model (MSE {mse:.4g}) loses to the {' and the '.join(worse)}; "
        f"try {hint}"
    )


def _sets(args: argparse.Namespace) -> str:
    """The ``--set`` items as typed (`` --set hidden=32``), for messages."""
    return "".join(f" --set {item}" for item in args.overrides)


def _check_memory(
    args: argparse.Namespace,
    bars: int,
    params: int | None,
    device: torch.device,
    dtype: torch.dtype,
    batch: int,
    table: Any = None,
) -> None:
    """Refuse a run whose data, model (``params``; ``None``: not counted) and batch would not fit in
    memory, naming the flag of the largest part. Activations are not counted.

    Raises:
        UsageError: ``"<flag> needs X (...) on cpu; this machine has Y available"``.
    """
    from tritonrl.toolkit.bars import FEATURES, upload_memory

    item = dtype.itemsize
    if table is None:
        upload_host, upload_device = upload_memory(bars, dtype)
        host = {"preparing the data": sum(upload_host.values())}
        inputs = market_inputs(args.target)[0]
        # a level channel (close): the f32 level, and the features copied with it (peak: both copies)
        extra = 0 if inputs == len(FEATURES) else 4 + inputs * item
        on_device = {"the data": sum(upload_device.values()) + bars * (2 * 4 + 2 * 8 + extra)}
    else:
        inputs = len(table.columns)
        host = {"preparing the data": bars * (2 * inputs * 8 + 3 * 8)}
        on_device = {"the data": bars * (inputs * (item + 4) + len(table.targets) * 4 + 3 * 8)}
    on_device["a batch"] = min(batch, bars) * args.window * inputs * item
    if params is not None:
        masters = 2 * 4 if item < 4 else 0  # f32 master weights and their gradients
        # weights, gradients and best weights in dtype; the AdamW moments in f32
        on_device["the model and its optimizer"] = params * (3 * item + 2 * 4 + masters)
        host["its checkpoint"] = params * (2 * item + 2 * 4 + masters // 2)
    model = on_device.get("the model and its optimizer", 0) + host.get("its checkpoint", 0)
    flags = {
        f"--data {args.data}": host["preparing the data"] + on_device["the data"],
        f"--model {args.model}{_sets(args)} ({params or 0:,} parameters)": model,
        f"--batch-size {batch} --window {args.window}": on_device["a batch"],
    }
    check_fits(max(flags, key=lambda k: flags[k]), on_device, host, device)


def run(args: argparse.Namespace) -> int:
    """Run ``fit``; the exit status (0 done, 1 error, 2 usage error, 130 / 143 interrupted).

    Under ``torchrun`` the ranks join the process group first and leave it together
    (`end_rank`); rank 0 alone prints.
    """
    launched = distributed.launched_by_torchrun()
    if args.list and launched and os.environ.get("RANK", "0") != "0":
        return 0
    if args.list or not launched:
        return _run(args, distributed.SINGLE_PROCESS)
    try:
        parse_device(args.device)
        ctx = distributed.init_distributed(args.device)
    except (UsageError, DistributedError) as exc:
        if os.environ.get("RANK", "0") == "0":  # every rank meets the same error: one line
            print(f"error: {exc}", file=sys.stderr)
        return 2
    end_rank(ctx, lambda: _run(args, ctx))


def _run(args: argparse.Namespace, ctx: DistContext) -> int:
    from tritonrl.toolkit.checkpoint import CheckpointError
    from tritonrl.toolkit.runfolder import RunFolderBusy

    if args.list:
        from tritonrl.cli.registry import forecasters

        for name, cls in sorted(forecasters().items()):
            doc = (cls.__doc__ or "").strip().splitlines()
            kind = "sequence" if getattr(cls, "causal", False) else "window"
            print(f"{name:<14} {kind:<9} {plain(doc[0]) if doc else ''}")
        return 0
    say = ctx.is_main  # rank 0 prints; every error below is met by every rank (fit agrees them)
    failed: UsageError | None = None
    try:
        model, (train, validation, test), config, run_dir, meta = _prepare(args, ctx)
    except UsageError as exc:
        failed = exc
    except KeyboardInterrupt:
        if say:
            print("interrupted by SIGINT before training started: nothing saved", file=sys.stderr)
        return 130
    # a check can fail on some ranks alone (rank 0's write probe): every rank stops, rank 0 says why
    errors = ctx.all_gather_objects(None if failed is None else str(failed))
    first = next(((r, e) for r, e in enumerate(errors) if e is not None), None)
    if first is not None:
        if say:
            print(f"error: {'' if first[0] == 0 else f'rank {first[0]}: '}{first[1]}", file=sys.stderr)
        return 2
    try:
        with stop_on_signals() as (should_stop, received):
            report = fit(
                model,
                train,
                validation,
                test,
                config,
                run_dir=run_dir,
                resume=args.resume,
                progress=not args.no_progress,
                tensorboard=not args.no_tensorboard,
                should_stop=should_stop,
                meta=meta,
                dist=ctx,
            )
    except (CheckpointError, RunFolderBusy, DistributedError, ValueError, TypeError) as exc:
        if say:
            print(f"error: {exc}", file=sys.stderr)
        return 2
    except FitError as exc:
        if say:
            print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # a write: rank 0's
        where = f"{exc.filename}: " if exc.filename is not None else ""
        print(f"error: writing the run folder {run_dir}: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1
    if report["stopped"] == "should_stop":
        if not say:
            return 128 + int(received[0] if received else signal.SIGINT)  # as report_interrupted
        return report_interrupted(received, report["global_step"], report["checkpoint"])
    if not say:
        return 0
    print(format_report(report))
    loses = _loses_to_baseline(report, model)
    if loses:
        print(loses)
    print(
        f"{args.model} on {args.data}: {report['epochs']} epochs ({report['stopped']}), best epoch "
        f"{report['best_epoch']}, {report['global_step']} steps in {report['wall_s']:.1f} s "
        f"({report['windows_per_s']:,.0f} windows/s)"
    )
    print(f"run folder: {run_dir} (metrics.csv, {CHECKPOINT_NAME}, {REPORT_NAME})")
    return 0
