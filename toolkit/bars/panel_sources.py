"""Panel sources: `synthetic_panel` (seeded correlated assets, optionally with a planted
cross-sectional signal), `sp500_panel` (the 20 S&P 500 stocks skfolio ships) and `source_panel`
(the ``portfolio:...`` spec of ``--env``). See docs/pages/portfolio.md."""

from __future__ import annotations

import csv
import gzip
import importlib.util
import math
from pathlib import Path

import numpy as np
from tritonrl.toolkit.bars.csvbars import _periods_per_year
from tritonrl.toolkit.bars.panel import Panel, load_panel
from tritonrl.toolkit.bars.sources import synthetic_options
from tritonrl.toolkit.checks import check_memory

__all__ = ["SP500_FILE", "source_panel", "sp500_panel", "synthetic_panel"]


def synthetic_panel(
    n: int = 3000,
    *,
    assets: int = 8,
    seed: int = 0,
    signal: float = 0.0,
    correlation: float = 0.4,
    drift: float = 2e-4,
    vol: float = 0.012,
    name: str = "synthetic",
) -> Panel:
    """Seeded daily bars of ``assets`` correlated stocks: one market factor (a share
    ``correlation`` of each asset's variance) plus idiosyncratic noise, volatilities spread over
    ``vol * [0.7, 1.4]``, business days from 2000-01-03.

    ``signal > 0`` plants a cross-sectional signal: a standard normal score ``z[t, i]`` (demeaned
    across the assets) moves asset ``i``'s log volume at bar ``t`` by ``z`` and its next log return
    by ``signal * sigma_i * z``: the volume of bar ``t`` predicts which assets rise at ``t + 1``.

    Raises:
        ValueError: an argument out of range.
    """
    if n < 2 or assets < 2 or not 0.0 <= correlation < 1.0 or vol <= 0 or signal < 0:
        raise ValueError(
            f"synthetic_panel(n={n}, assets={assets}, correlation={correlation}, vol={vol}, "
            f"signal={signal}): "
            "need n >= 2, assets >= 2, 0 <= correlation < 1, vol > 0, signal >= 0"
        )
    rng = np.random.default_rng(seed)
    sigma = vol * np.geomspace(0.7, 1.4, assets)
    market = rng.standard_normal(n)[:, None]
    idio = rng.standard_normal((n, assets))
    shock = sigma * (math.sqrt(correlation) * market + math.sqrt(1.0 - correlation) * idio)
    z = rng.standard_normal((n, assets))
    z -= z.mean(axis=1, keepdims=True)
    log_ret = drift - 0.5 * sigma**2 + shock
    log_ret[1:] += signal * sigma * z[:-1]  # bar t's score moves bar t+1's return
    log_ret[0] = 0.0
    close = 100.0 * np.exp(np.cumsum(log_ret, axis=0))
    open_ = np.concatenate((close[:1], close[:-1]), axis=0) * np.exp(0.1 * shock)
    spread = np.abs(rng.standard_normal((2, n, assets))) * (0.5 * sigma)
    volume = 1e6 * np.exp(z + 0.25 * rng.standard_normal((n, assets)))
    days = np.busday_offset("2000-01-03", np.arange(n), roll="forward").astype("datetime64[s]")
    return Panel(
        name=name,
        time=days,
        symbols=tuple(f"A{i:02d}" for i in range(assets)),
        open=open_,
        high=np.maximum(open_, close) * np.exp(spread[0]),
        low=np.minimum(open_, close) * np.exp(-spread[1]),
        close=close,
        volume=volume,
        filled=np.zeros((n, assets), dtype=bool),
        periods_per_year=252.0,
    )


SP500_FILE = "sp500_dataset.csv.gz"
"""The file of daily closes of 20 S&P 500 stocks (1990-2022) inside skfolio's wheel."""


def sp500_panel() -> Panel:
    """The 20 S&P 500 stocks' daily closes skfolio ships (``skfolio/datasets/data``), read without
    importing skfolio and never fetched: closes only (open, high and low are the close).

    Raises:
        ValueError: skfolio is not installed, or its file is missing or malformed.
    """
    spec = importlib.util.find_spec("skfolio")
    hint = "pip install 'tritonrl[portfolio]' (skfolio ships the data)"
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"portfolio:sp500 reads the data skfolio ships, which is not installed: {hint}")
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / SP500_FILE
    if not path.is_file():
        raise ValueError(f"{path} is missing from the installed skfolio: {hint}")
    with gzip.open(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], [r for r in rows[1:] if r]
    if len(header) < 3 or header[0].strip().lower() != "date":
        raise ValueError(f"{path}: expected a Date column then the assets' closes, got {header[:3]}")
    try:
        time = np.array([r[0][:10] for r in body], dtype="datetime64[D]").astype("datetime64[s]")
        close = np.array([[float(x) for x in r[1:]] for r in body])
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    if close.shape[1] != len(header) - 1 or not np.all(np.isfinite(close)) or np.any(close <= 0):
        raise ValueError(f"{path}: a missing, non-finite or non-positive close")
    if np.any(np.diff(time.astype(np.int64)) <= 0):
        raise ValueError(f"{path}: dates are not strictly increasing")
    return Panel(
        name="sp500",
        time=time,
        symbols=tuple(h.strip() for h in header[1:]),
        open=close.copy(),
        high=close.copy(),
        low=close.copy(),
        close=close,
        volume=np.zeros_like(close),
        filled=np.zeros(close.shape, dtype=bool),
        periods_per_year=_periods_per_year(time),
    )


_SYNTHETIC_OPTIONS = {"seed": int, "bars": int, "assets": int, "signal": float, "correlation": float}


def source_panel(spec: str) -> Panel:
    """A `Panel` for ``--env portfolio:SPEC`` (the prefix is optional).

    ``synthetic[,assets=N][,bars=N][,seed=N][,signal=F][,correlation=F]``, ``sp500``,
    ``csv=PATH`` or ``csv-fill=PATH`` (missing bars carried forward and flagged; the rest of the
    spec is the path, commas included).

    Raises:
        ValueError: an unknown source or option, a malformed value, or what the source raises.
    """
    spec = spec.strip().removeprefix("portfolio:")
    known = (
        "synthetic[,assets=N][,bars=N][,seed=N][,signal=F][,correlation=F], sp500, csv=PATH, csv-fill=PATH"
    )
    for prefix, fill in (("csv=", False), ("csv-fill=", True)):
        if spec.startswith(prefix):
            if not spec[len(prefix) :]:
                raise ValueError(f"portfolio:{prefix} needs a path: portfolio:{prefix}PATH")
            return load_panel(spec[len(prefix) :], fill=fill)
    head, *options = [part.strip() for part in spec.split(",")]
    if head == "sp500":
        if options:
            raise ValueError(f"portfolio:sp500 takes no options (got {', '.join(options)}); known: {known}")
        return sp500_panel()
    if head != "synthetic":
        raise ValueError(f"unknown portfolio source {spec!r}; known: {known}")
    kwargs = synthetic_options(f"portfolio:{spec}", options, _SYNTHETIC_OPTIONS)
    n, assets = int(kwargs.get("n", 3000)), int(kwargs.get("assets", 8))
    if n < 2 or assets < 2 or int(kwargs.get("seed", 0)) < 0:
        raise ValueError(f"portfolio:{spec}: need bars >= 2, assets >= 2, seed >= 0")
    check_memory(f"portfolio:{spec}", {f"generating {n} x {assets} bars": 16 * 8 * n * assets}, "cpu")
    return synthetic_panel(**kwargs)  # type: ignore[arg-type]
