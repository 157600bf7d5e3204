"""The tear sheet of a portfolio backtest: five PNG figures and one self-contained HTML page.

[`write_tearsheet`][tritonrl.toolkit.backtest.tearsheet.write_tearsheet] draws the equity, drawdown,
weights, turnover and rolling Sharpe of a strategy against its baselines and writes them, with the
metrics table, into a folder; every file is written atomically. matplotlib (the ``train`` extra) is
imported inside it. Imports the toolkit core only. See docs/pages/market.md.
"""

from __future__ import annotations

import base64
import html
import io
import math
import numbers
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tritonrl.toolkit.checkpoint import atomic_write_bytes

__all__ = ["FIGURES", "HTML_NAME", "write_tearsheet"]

FIGURES = ("equity", "drawdown", "weights", "turnover", "rolling_sharpe")
"""The figures, in page order; each is written as ``<name>.png``."""
HTML_NAME = "tearsheet.html"
MAX_BANDS = 10  # weight bands besides cash: more assets show the 9 largest and "other"
_REQUIRED = (
    *("title", "periods_per_year", "fill", "strategy", "dates", "equity"),
    *("weights", "symbols", "turnover", "folds", "metrics"),
)
_DASH = "\u2013"  # what a missing or NaN metric shows


def write_tearsheet(
    folder: str | Path, report: Mapping[str, Any], *, rolling_window: int = 63
) -> dict[str, Path]:
    """Write the tear sheet of a backtest into ``folder`` (created if missing).

    ``report`` (T periods, N assets): ``title`` str; ``periods_per_year`` float; ``fill`` str (when
    orders fill, e.g. ``"next_open"``); ``dates`` T+1 ISO dates (the first is the start); ``equity``
    name -> T+1 values from 1.0, the strategy under the name ``strategy``, the others baselines;
    ``weights`` ``[T][N+1]`` the strategy's weights held after each decision (cash first); ``symbols``
    the N asset names; ``turnover`` T floats; optional ``costs`` T floats (cost paid per period, a
    fraction of equity); ``folds`` the dates where a walk-forward fold starts (may be empty);
    ``metrics`` name -> metric name -> value (numbers shown to 4 significant digits, thousands grouped
    from 10,000; NaN as a dash).

    Writes ``equity.png``, ``drawdown.png``, ``weights.png``, ``turnover.png``, ``rolling_sharpe.png``
    (annualised Sharpe over the last ``rolling_window`` periods) and ``tearsheet.html`` (the table and
    the five figures inline, nothing remote). Everything is rendered before the first write, each file
    is written atomically and the page last: a failure leaves no half-written file, and one before the
    page no new page.

    Returns:
        The six paths by name (``"equity"``, ..., ``"html"``).

    Raises:
        ValueError: a key of ``report`` is missing or its value is malformed or of the wrong length (one
            line naming the key), or ``rolling_window`` is below 2.
        ModuleNotFoundError: matplotlib is not installed (the ``train`` extra).
        OSError: a file cannot be written (the error names it).
    """
    if isinstance(rolling_window, bool) or not isinstance(rolling_window, int) or rolling_window < 2:
        raise ValueError(f"rolling_window must be an int >= 2, got {rolling_window!r}")
    data = _checked(report)
    pngs = _render(data, rolling_window)  # imports matplotlib: nothing is written without it
    page = _page(data, pngs, rolling_window)
    folder = Path(folder)
    paths = {name: folder / f"{name}.png" for name in FIGURES}
    for name in FIGURES:
        atomic_write_bytes(paths[name], pngs[name])
    paths["html"] = folder / HTML_NAME
    atomic_write_bytes(paths["html"], page.encode("utf-8"))
    return paths


# -- validation: the report as arrays, or one ValueError naming the key


def _bad(key: str, why: str, *, item: str | None = None) -> ValueError:
    """``report['key'] why`` (``report['key']['item']`` with ``item``)."""
    return ValueError(f"report[{key!r}]{'' if item is None else f'[{item!r}]'} {why}")


def _floats(
    key: str, value: Any, shape: tuple[int, ...], *, item: str | None = None, positive: bool = False
) -> np.ndarray:
    """``value`` (``report[key]``, or its ``item``) as a finite f64 array of ``shape``."""
    try:
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise _bad(key, f"must hold numbers of shape {shape}", item=item) from None
    if a.shape != shape:
        t = shape[0] - 1 if key == "equity" else shape[0]
        why = f"has shape {a.shape}, expected {shape} (T = len(report['dates']) - 1 = {t})"
        raise _bad(key, why, item=item)
    if not np.isfinite(a).all():
        raise _bad(key, "holds a NaN or infinite value", item=item)
    if positive and not (a > 0).all():
        raise _bad(key, "holds a value <= 0 (equity must stay positive)", item=item)
    return a


def _strings(key: str, value: Any) -> list[str]:
    if (
        isinstance(value, str)
        or not isinstance(value, Sequence)
        or not all(isinstance(s, str) for s in value)
    ):
        raise _bad(key, f"must be a list of str, got {type(value).__name__}")
    return list(value)


def _dates(key: str, value: Any) -> np.ndarray:
    """ISO dates as ``datetime64``, strictly increasing."""
    texts = _strings(key, value)
    try:
        d = np.array([np.datetime64(s) for s in texts], dtype="datetime64" if not texts else None)
    except ValueError:
        raise _bad(key, "holds a string that is not an ISO date") from None
    if d.size and (np.diff(d) <= np.timedelta64(0)).any():
        raise _bad(key, "must be strictly increasing")
    return d


def _checked(report: Mapping[str, Any]) -> dict[str, Any]:
    """The report's values, checked and converted (arrays in f64, dates in ``datetime64``)."""
    if not isinstance(report, Mapping):
        raise ValueError(f"report must be a mapping, got {type(report).__name__}")
    for key in _REQUIRED:
        if key not in report:
            raise _bad(key, "is missing")
    for key in ("title", "fill", "strategy"):
        if not isinstance(report[key], str):
            raise _bad(key, f"must be a str, got {type(report[key]).__name__}")
    ppy = report["periods_per_year"]
    if isinstance(ppy, bool) or not isinstance(ppy, numbers.Real) or not 0 < float(ppy) < math.inf:
        raise _bad("periods_per_year", f"must be a positive finite number, got {ppy!r}")
    dates = _dates("dates", report["dates"])
    if dates.size < 2:
        raise _bad("dates", f"needs at least 2 dates (the start and one period), got {dates.size}")
    t = dates.size - 1
    if not isinstance(report["equity"], Mapping) or not report["equity"]:
        raise _bad("equity", "must be a non-empty mapping of name -> T+1 values")
    equity = {
        str(k): _floats("equity", v, (t + 1,), item=str(k), positive=True)
        for k, v in report["equity"].items()
    }
    strategy = report["strategy"]
    if strategy not in equity:
        raise _bad("strategy", f"{strategy!r} is not a name of report['equity'] ({sorted(equity)})")
    symbols = _strings("symbols", report["symbols"])
    weights = _floats("weights", report["weights"], (t, len(symbols) + 1))
    turnover = _floats("turnover", report["turnover"], (t,))
    costs = None if report.get("costs") is None else _floats("costs", report["costs"], (t,))
    folds = _dates("folds", report["folds"])
    if not np.isin(folds, dates).all():
        raise _bad("folds", "holds a date that is not in report['dates']")
    metrics = report["metrics"]
    if not isinstance(metrics, Mapping) or not all(isinstance(m, Mapping) for m in metrics.values()):
        raise _bad("metrics", "must be a mapping of name -> {metric name: value}")
    return {
        "title": report["title"],
        "ppy": float(ppy),
        "fill": report["fill"],
        "strategy": strategy,
        "dates": dates,
        "equity": {strategy: equity.pop(strategy), **equity},  # the strategy first
        "symbols": symbols,
        "weights": weights,
        "turnover": turnover,
        "costs": costs,
        "folds": folds,
        "metrics": {str(k): dict(v) for k, v in metrics.items()},
    }


# -- the figures


def _drawdown(equity: np.ndarray) -> np.ndarray:
    """``equity / running peak - 1`` (0 at a new high, negative below it)."""
    return equity / np.maximum.accumulate(equity) - 1.0


def _rolling_sharpe(equity: np.ndarray, window: int, periods_per_year: float) -> np.ndarray:
    """Annualised Sharpe of the last ``window`` simple returns, ``[T - window + 1]`` (NaN where flat)."""
    r = equity[1:] / equity[:-1] - 1.0
    if r.size < window:
        return np.empty(0)
    w = np.lib.stride_tricks.sliding_window_view(r, window)
    std = w.std(axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(std > 1e-12, w.mean(axis=1) / std * math.sqrt(periods_per_year), np.nan)


def _weight_bands(weights: np.ndarray, symbols: list[str]) -> tuple[np.ndarray, list[str]]:
    """``[bands, T]`` and their labels: cash, then each asset, or past `MAX_BANDS` assets the 9 largest
    by mean weight (in asset order) and ``other``."""
    cash, assets = weights[:, 0], weights[:, 1:]
    if len(symbols) <= MAX_BANDS:
        return np.vstack([cash, assets.T]), ["cash", *symbols]
    top = np.sort(np.argsort(-assets.mean(axis=0), kind="stable")[: MAX_BANDS - 1])
    rest = np.setdiff1d(np.arange(len(symbols)), top)
    other = assets[:, rest].sum(axis=1)
    labels = ["cash", *(symbols[i] for i in top), f"other ({rest.size})"]
    return np.vstack([cash, assets[:, top].T, other]), labels


def _new_axes(title: str) -> tuple[Any, Any]:
    """A figure on the Agg canvas (no pyplot state) and its one axes, dates on x."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    locator = AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return fig, ax


def _finish(
    fig: Any, ax: Any, data: Mapping[str, Any], *, legend_axes: Sequence[Any] = (), stacked: bool = False
) -> bytes:
    """Fold lines, the whole period on x, one legend outside on the right (``stacked``: top band first, as
    drawn), and the PNG's bytes."""
    for i, day in enumerate(data["folds"]):
        ax.axvline(day, color="0.35", linestyle="--", linewidth=1, label="fold start" if i == 0 else None)
    ax.set_xlim(data["dates"][0], data["dates"][-1])
    handles, labels = [], []
    for a in (ax, *legend_axes):
        h, lab = a.get_legend_handles_labels()
        handles += h
        labels += lab
    if stacked:  # the bands top first, as drawn; the fold line stays last
        n = len(handles) - (1 if len(data["folds"]) else 0)
        handles, labels = handles[:n][::-1] + handles[n:], labels[:n][::-1] + labels[n:]
    if handles:
        fig.legend(handles, labels, loc="outside right upper", fontsize=9, frameon=False)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def _style(data: Mapping[str, Any], name: str, i: int) -> dict[str, Any]:
    """The strategy thick and on top, each baseline thinner in its own colour (same in every figure)."""
    if name == data["strategy"]:
        return {"color": "C0", "linewidth": 2.0, "zorder": 3, "label": f"{name} (strategy)"}
    return {"color": f"C{i % 9 + 1}", "linewidth": 1.1, "alpha": 0.9, "zorder": 2, "label": name}


def _equity_png(data: Mapping[str, Any]) -> bytes:
    fig, ax = _new_axes("Equity (net of costs)")
    for i, (name, eq) in enumerate(data["equity"].items()):
        ax.plot(data["dates"], eq, **_style(data, name, i))
    ax.axhline(1.0, color="0.6", linewidth=0.8)
    ax.set_ylabel("equity (start = 1)")
    return _finish(fig, ax, data)


def _drawdown_png(data: Mapping[str, Any]) -> bytes:
    from matplotlib.ticker import PercentFormatter

    fig, ax = _new_axes("Drawdown from the running peak")
    for i, (name, eq) in enumerate(data["equity"].items()):
        style = _style(data, name, i)
        dd = _drawdown(eq)
        if name == data["strategy"]:
            ax.fill_between(data["dates"], dd, 0.0, color="C0", alpha=0.15, linewidth=0)
        else:
            style["linewidth"] = 0.9
        ax.plot(data["dates"], dd, **style)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylabel("drawdown")
    return _finish(fig, ax, data)


def _weights_png(data: Mapping[str, Any]) -> bytes:
    import matplotlib

    bands, labels = _weight_bands(data["weights"], data["symbols"])
    held = np.hstack([bands, bands[:, -1:]])  # each row held until the next date: a step after it
    tab10, tab20 = matplotlib.colormaps["tab10"], matplotlib.colormaps["tab20"]
    palette = [tab10(i) for i in (0, 1, 2, 3, 4, 5, 6, 8, 9)] + [tab20(1)]  # tab10's grey is cash's
    colors = ["0.82", *palette[: len(labels) - 1]]
    if labels[-1].startswith("other"):
        colors[-1] = "0.45"
    fig, ax = _new_axes(f"Weights held by {data['strategy']} (cash first)")
    ax.stackplot(data["dates"], held, labels=labels, colors=colors, step="post", linewidth=0)
    ax.set_ylabel("weight (fraction of equity)")
    return _finish(fig, ax, data, stacked=True)


def _turnover_png(data: Mapping[str, Any]) -> bytes:
    from matplotlib.ticker import PercentFormatter

    fig, ax = _new_axes("Turnover per period, at the decision's date")
    decided = data["dates"][:-1]
    ax.vlines(decided, 0.0, data["turnover"], color="C0", linewidth=1.2, label="turnover")
    ax.set_ylabel("turnover (sum of |weight changes|)")
    ax.set_ylim(bottom=0.0)
    twins = []
    if data["costs"] is not None:
        twin = ax.twinx()
        twin.plot(
            decided, np.cumsum(data["costs"]), color="C3", linewidth=1.6, label="costs paid (cumulative)"
        )
        twin.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=2))
        twin.set_ylabel("cumulative costs (% of equity)", color="C3")
        twin.set_ylim(bottom=0.0)
        twins.append(twin)
    return _finish(fig, ax, data, legend_axes=twins)


def _sharpe_png(data: Mapping[str, Any], window: int) -> bytes:
    fig, ax = _new_axes(f"Rolling Sharpe over {window} periods (annualised)")
    t = len(data["dates"]) - 1
    if t < window:
        ax.text(0.5, 0.5, f"fewer than {window} periods", ha="center", va="center", transform=ax.transAxes)
    for i, (name, eq) in enumerate(data["equity"].items()):
        sharpe = _rolling_sharpe(eq, window, data["ppy"])
        if sharpe.size:
            ax.plot(data["dates"][window:], sharpe, **_style(data, name, i))
    ax.axhline(0.0, color="0.6", linewidth=0.8)
    ax.set_ylabel("Sharpe (annualised)")
    return _finish(fig, ax, data)


def _render(data: Mapping[str, Any], window: int) -> dict[str, bytes]:
    """Every figure's PNG bytes, by name (`FIGURES` order)."""
    return {
        "equity": _equity_png(data),
        "drawdown": _drawdown_png(data),
        "weights": _weights_png(data),
        "turnover": _turnover_png(data),
        "rolling_sharpe": _sharpe_png(data, window),
    }


# -- the page


def _format_value(value: Any) -> str:
    """A metric as the page shows it: 4 significant digits, whole thousands grouped from 10,000 (to
    1e15), an int whole, NaN (or no value) a dash, infinities as signs."""
    if value is None:
        return _DASH
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return str(value)
    v = float(value)
    if math.isnan(v):
        return _DASH
    if math.isinf(v):
        return "\u221e" if v > 0 else "-\u221e"
    if 1e4 <= abs(v) < 1e15:
        return f"{v:,.0f}"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    return f"{v:.4g}"


def _table(data: Mapping[str, Any]) -> str:
    """The metrics table: one row per name (the strategy first, then the baselines, then any other)."""
    metrics: dict[str, dict[str, Any]] = data["metrics"]
    names = [*data["equity"], *(n for n in metrics if n not in data["equity"])]
    columns: list[str] = []
    for name in names:
        columns += [c for c in metrics.get(name, {}) if c not in columns]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    rows = []
    for name in names:
        cells = "".join(
            f"<td>{html.escape(_format_value(metrics.get(name, {}).get(c)))}</td>" for c in columns
        )
        mark = ' class="strategy"' if name == data["strategy"] else ""
        rows.append(f"<tr{mark}><th>{html.escape(name)}</th>{cells}</tr>")
    return f"<table><thead><tr><th></th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1040px; color: #222; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } .sub { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: 1em 0 2em; font-size: 0.92em; }
th, td { padding: 0.3em 0.8em; border-bottom: 1px solid #ddd; } td { text-align: right; }
thead th { border-bottom: 2px solid #888; } tbody th { text-align: left; }
tr.strategy { background: #eef4fb; font-weight: 600; }
figure { margin: 0 0 1.5em; } figure img { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: 0.9em; } footer { color: #444; font-size: 0.9em; }
"""

_CAPTIONS = {
    "equity": "Equity of the strategy and each baseline, net of costs.",
    "drawdown": "Fall from the running peak of equity.",
    "weights": "Weights the strategy held after each decision (cash first).",
    "turnover": "Turnover per decision; the cumulative costs paid on the right axis when reported.",
    "rolling_sharpe": "Annualised Sharpe ratio of the last {w} period returns.",
}


def _footnote(data: Mapping[str, Any], window: int) -> str:
    """How to read the page: timing, fills, costs, and what the figures compute."""
    return (
        "<footer><h2>How to read this</h2><p>Each decision is taken at a period's close on what was "
        f"known then; its orders fill at <b>{html.escape(data['fill'])}</b>. Equity, drawdown, Sharpe "
        "and the metrics are net of the trading costs paid. Drawdown is the fall from the running peak; "
        "the rolling Sharpe is the mean over the standard deviation of the last "
        f"{window} period returns, times the square root of {data['ppy']:g} periods a year. Dashed "
        "vertical lines mark where a walk-forward fold starts.</p></footer>"
    )


def _page(data: Mapping[str, Any], pngs: Mapping[str, bytes], window: int) -> str:
    """The tear sheet as one HTML page: no script, and nothing loaded from anywhere else."""
    e = html.escape
    dates = data["dates"]
    periods = len(dates) - 1
    span = f"{np.datetime_as_string(dates[0])} to {np.datetime_as_string(dates[-1])}"
    uris = {name: "data:image/png;base64," + base64.b64encode(pngs[name]).decode("ascii") for name in FIGURES}
    figures = "".join(
        f'<figure><img alt="{name}" src="{uris[name]}">'
        f"<figcaption>{e(_CAPTIONS[name].format(w=window))}</figcaption></figure>\n"
        for name in FIGURES
    )
    folds = (
        f"{len(data['folds'])} walk-forward fold starts (dashed lines)"
        if len(data["folds"])
        else "no walk-forward folds"
    )
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{e(data['title'])}</title><style>{_CSS}</style></head><body>\n"
        f"<h1>{e(data['title'])}</h1>\n"
        f'<p class="sub">{e(span)}: {periods} periods ({data["ppy"]:g} a year), {e(folds)}; '
        f"strategy {e(data['strategy'])}.</p>\n"
        f"{_table(data)}\n{figures}"
        f"{_footnote(data, window)}\n"
        f"</body></html>\n"
    )
