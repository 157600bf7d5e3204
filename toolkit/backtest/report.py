"""The text summary of a backtest report (`format_summary`): one row per strategy and baseline."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["format_summary"]

_COLUMNS = (
    ("annual_return", "ann.ret", "{:+.1%}"),
    ("annual_volatility", "ann.vol", "{:.1%}"),
    ("sharpe", "Sharpe", "{:+.2f}"),
    ("sharpe_se", "SE", "{:.2f}"),
    ("sharpe_low", "low", "{:+.2f}"),
    ("sharpe_high", "high", "{:+.2f}"),
    ("max_drawdown", "maxDD", "{:.1%}"),
    ("turnover", "turnover", "{:.3f}"),
    ("costs", "costs", "{:.2%}"),
)


def format_summary(report: Mapping[str, Any]) -> str:
    """The report's title and its metrics as a fixed-width table (Sharpe with its bootstrap
    interval, ``low`` .. ``high``); the strategy's deflated Sharpe ratio below."""
    metrics: Mapping[str, Mapping[str, float]] = report["metrics"]
    width = max(len(n) for n in metrics) + 2
    lines = [str(report["title"]), " " * width + " ".join(f"{h:>9}" for _, h, _ in _COLUMNS)]
    for name, m in metrics.items():
        cells = []
        for key, _, fmt in _COLUMNS:
            v = m.get(key, math.nan)
            cells.append(f"{'-' if v is None or not math.isfinite(v) else fmt.format(v):>9}")
        lines.append(f"{name:<{width}}" + " ".join(cells))
    strategy = metrics.get(report["strategy"], {})
    if "deflated_sharpe" in strategy:
        lines.append(f"deflated Sharpe ratio of {report['strategy']}: {strategy['deflated_sharpe']:.3f}")
    return "\n".join(lines)
