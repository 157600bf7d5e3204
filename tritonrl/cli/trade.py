"""``tritonrl trade``: run an exported market policy on bars, one at a time, as the env decided.

The artifact's sidecar carries the market rules; the bars stream through a
[`LiveTrader`][tritonrl.toolkit.envs.market.live.LiveTrader], one trade CSV row per bar, and a rerun on
the same ``--out`` resumes without repeating or losing a decision. A portfolio policy's bars (a
long panel CSV) stream through a [`PortfolioTrader`][tritonrl.toolkit.envs.portfolio.live.PortfolioTrader].
Bad input is one ``error:`` line and exit status 2. See docs/pages/using-policies.md.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "run"]

DESCRIPTION = "Run an exported market policy on a stream of bars, as the env decided (a trade CSV)."


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``trade`` subcommand to ``python -m tritonrl``'s parser."""
    p = subparsers.add_parser("trade", help="run an exported market policy on bars", description=DESCRIPTION)
    p.add_argument(
        "exported", help="the artifact of `tritonrl export` (its sidecar <artifact>.json beside it)"
    )
    p.add_argument(
        "--bars",
        required=True,
        help="csv=PATH (an OHLCV file), or any market source: synthetic[,ar=F,seed=N,bars=N], googl, eurusd; "
        "for a portfolio policy, a long CSV of several assets (date, symbol, open, high, low, close, volume)",
    )
    p.add_argument(
        "--out", required=True, help="the trade CSV (an existing one is resumed; a portfolio's must be new)"
    )
    p.add_argument(
        "--start",
        default=None,
        metavar="TIME",
        help="the first bar to decide at, ISO 8601 (default: the first bar whose window is full)",
    )
    p.add_argument(
        "--gaps",
        choices=("refuse", "fill"),
        default="refuse",
        help="a gap in the bars: refuse it (default), or fill it with flat bars and hold the position "
        "(a portfolio: a missing bar of an asset, carried forward from its last close)",
    )
    p.add_argument(
        "--max-gap",
        type=float,
        default=None,
        metavar="SECONDS",
        help="the largest spacing that is not a gap (default: the largest spacing before --start)",
    )
    p.set_defaults(run=run)
    return p


def _prepare(args: argparse.Namespace) -> tuple[Any, Any]:
    """The trader and the bars of ``args``, every input checked (the trade CSV is opened last).

    Raises:
        ValueError: a missing or unreadable artifact or sidecar, a sidecar without ``market``,
            unreadable bars, a bad flag, an ``--out`` that is not a trade CSV.
    """
    from tritonrl.toolkit.bars import source_bars
    from tritonrl.toolkit.envs.market.live import LiveTrader, market_from_sidecar
    from tritonrl.toolkit.export import load_exported

    if args.max_gap is not None and not (math.isfinite(args.max_gap) and args.max_gap > 0):
        raise ValueError(f"--max-gap must be a positive number of seconds, got {args.max_gap}")
    artifact = Path(args.exported)
    if not artifact.is_file():
        raise ValueError(f"{artifact}: no such artifact")
    try:
        policy = load_exported(artifact)
    except (OSError, RuntimeError) as exc:  # torch's loaders raise RuntimeError on a damaged file
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValueError(f"{artifact}: cannot be loaded ({first})") from None
    if policy.sidecar.get("portfolio"):
        return _prepare_portfolio(args, policy)
    spec = market_from_sidecar(policy.sidecar)
    bars = source_bars(args.bars)
    start, device, obs_dtype = _start_and_device(args, policy, bars.time, spec.env_config.window, "bars")
    trader = LiveTrader(
        policy,
        spec.env_config,
        args.out,
        features=spec.features,
        start=start,
        gaps=args.gaps,
        max_gap=args.max_gap,
        device=device,
        obs_dtype=obs_dtype,
    )
    return trader, bars


def _start_and_device(
    args: argparse.Namespace, policy: Any, times: Any, window: int, what: str
) -> tuple[Any, str, Any]:
    """The first decision time (``--start``, else the first full window), the artifact's device
    and its observation dtype; ``ValueError`` for too few ``times``, a start after them, or CUDA
    missing here."""
    import torch
    from tritonrl.toolkit.envs.market.live import as_time

    if len(times) < window:
        raise ValueError(f"--bars {args.bars}: {len(times)} {what}, fewer than the policy's window {window}")
    start = as_time(args.start) if args.start is not None else times[window - 1]
    if start > times[-1]:
        raise ValueError(f"--start {start}: after the last bar ({times[-1]})")
    device = str(policy.sidecar.get("device", "cpu"))
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"{args.exported}: exported on {device}, and CUDA is not available here")
    obs_dtype = getattr(torch, str(policy.sidecar.get("observation", {}).get("dtype", "float32")))
    return start, device, obs_dtype


def _prepare_portfolio(args: argparse.Namespace, policy: Any) -> tuple[Any, Any]:
    """The `PortfolioTrader` and the panel of ``args`` for a policy with a ``portfolio`` sidecar.

    Raises:
        ValueError: unreadable bars, other symbols than the sidecar's, a bad flag, an existing ``--out``.
    """
    from tritonrl.toolkit.bars.panel import load_panel
    from tritonrl.toolkit.envs.portfolio.live import PortfolioTrader, portfolio_from_sidecar

    spec = portfolio_from_sidecar(policy.sidecar)
    if args.max_gap is not None:
        raise ValueError("--max-gap is for one asset's bars; a portfolio's calendar is the panel's")
    path = str(args.bars)
    for prefix in ("csv=", "csv-fill="):
        path = path.removeprefix(prefix)
    fill = args.gaps == "fill" or str(args.bars).startswith("csv-fill=")
    panel = load_panel(path, fill=fill)
    symbols = spec.symbols if spec.symbols is not None else panel.symbols
    if set(panel.symbols) != set(symbols):
        raise ValueError(
            f"--bars {args.bars}: the symbols {', '.join(panel.symbols)}; the policy trades "
            f"{', '.join(symbols)}"
        )
    if len(symbols) != spec.num_assets:
        raise ValueError(f"--bars {args.bars}: {len(symbols)} assets; the policy trades {spec.num_assets}")
    start, device, obs_dtype = _start_and_device(args, policy, panel.time, spec.env_config.window, "rows")
    trader = PortfolioTrader(
        policy,
        spec.env_config,
        symbols,
        args.out,
        start=start,
        fill=fill,
        device=device,
        obs_dtype=obs_dtype,
    )
    return trader, panel


def _run_portfolio(args: argparse.Namespace, trader: Any, panel: Any) -> int:
    """Feed the panel to ``trader``; the exit status as `run`'s."""
    try:
        with trader:
            rows = trader.run(panel)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted: {args.out} holds every bar decided so far", file=sys.stderr)
        return 130
    ended = f" (ended: {trader.ended})" if trader.ended else ""
    print(
        f"{trader.decisions} decisions over {len(rows)} bars; equity {trader.equity:.6g} at "
        f"{trader.last_time}{ended}; {args.out}"
    )
    return 0


def run(args: argparse.Namespace) -> int:
    """Run the ``trade`` subcommand; the exit status: 0 done, 2 refused (one ``error:`` line),
    130 interrupted (the rows written so far stay; run again to resume)."""
    try:
        trader, bars = _prepare(args)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from tritonrl.toolkit.bars.panel import Panel

    if isinstance(bars, Panel):
        return _run_portfolio(args, trader, bars)
    try:
        with trader:
            trader.run(bars)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted: {args.out} holds every bar decided so far; run again to resume", file=sys.stderr)
        return 130
    resumed = f" ({trader.resumed} rows resumed)" if trader.resumed else ""
    print(
        f"{trader.decisions} decisions, {trader.filled} filled bars{resumed}; equity {trader.equity:.6g} "
        f"at {trader.last_time}; {args.out}"
    )
    return 0
