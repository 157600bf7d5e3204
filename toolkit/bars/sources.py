"""Bar sources: `synthetic_bars`, `anytrading_bars` (the series gym-anytrading ships)
and [`source_bars`][tritonrl.toolkit.bars.sources.source_bars] (the ``market:...`` spec of ``--env`` and
``--data``). See docs/pages/market.md."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
from tritonrl.toolkit.bars.csvbars import load_csv
from tritonrl.toolkit.bars.types import Bars
from tritonrl.toolkit.checks import check_memory

__all__ = ["ANYTRADING_FILES", "anytrading_bars", "source_bars", "synthetic_bars"]


_MAX_LOG_PRICE = math.log(np.finfo(np.float64).max) - 1.0
"""The largest ``|log price|`` `synthetic_bars` accepts (one below float64's limit: room for
the spread of the high and the low)."""


def synthetic_bars(
    n: int = 5000,
    *,
    seed: int = 0,
    ar: float = 0.0,
    regimes: int = 2,
    drift: float = 2e-4,
    vol: float = 0.01,
    switch_prob: float = 0.01,
    start_price: float = 100.0,
    name: str = "synthetic",
) -> Bars:
    """Seeded daily bars from regime-switching geometric Brownian motion, with volume.

    A Markov chain leaves its regime with probability ``switch_prob`` per bar; regime ``k`` has
    drift ``drift * m_k`` (``m`` from 3 down to -1) and volatility ``vol * s_k`` (``s`` from 0.6 up
    to 1.6). Log-return deviations are AR(1) with lag-1 autocorrelation ``ar`` and variance
    ``sigma_k**2``; ``ar=0, regimes=1`` is a pure random walk. Business days from 2000-01-03.

    Raises:
        ValueError: an argument out of range, or a price path that leaves the float64 range.
    """
    if n < 2 or regimes < 1 or not -1.0 < ar < 1.0 or vol <= 0 or start_price <= 0:
        raise ValueError(
            f"synthetic_bars(n={n}, regimes={regimes}, ar={ar}, vol={vol}, start_price={start_price}): "
            "need n >= 2, regimes >= 1, -1 < ar < 1, vol > 0, start_price > 0"
        )
    if not 0.0 <= switch_prob <= 1.0:
        raise ValueError(f"switch_prob={switch_prob} is not a probability")
    rng = np.random.default_rng(seed)
    if regimes == 1:
        state = np.zeros(n, dtype=np.int64)
        drifts, vols = np.array([drift]), np.array([vol])
    else:
        moves = (rng.random(n) < switch_prob) * rng.integers(1, regimes, n)
        state = (int(rng.integers(regimes)) + np.cumsum(moves)) % regimes
        drifts = drift * np.linspace(3.0, -1.0, regimes)
        vols = vol * np.geomspace(0.6, 1.6, regimes)
    sigma = vols[state]
    noise = math.sqrt(1.0 - ar * ar) * sigma * rng.standard_normal(n)
    x = noise
    if ar != 0.0:
        x = np.empty(n)
        x[0] = noise[0] / math.sqrt(1.0 - ar * ar)  # the stationary variance sigma**2 from the start
        for t in range(1, n):
            x[t] = ar * x[t - 1] + noise[t]
    growth = np.cumsum(drifts[state] + x)  # the log price over log(start_price)
    beyond = np.flatnonzero(np.abs(growth + math.log(start_price)) > _MAX_LOG_PRICE)
    if beyond.size:
        raise ValueError(
            f"synthetic_bars(n={n}): the price leaves the float64 range at bar {int(beyond[0])} (the "
            "drift compounds over the bars): ask for fewer bars, or a smaller drift"
        )
    close = start_price * np.exp(growth)
    open_ = np.concatenate(([start_price], close[:-1]))
    spread = np.abs(rng.standard_normal((2, n))) * (0.5 * sigma)
    volume = 1e6 * (sigma / vol) * np.exp(0.5 * np.abs(x) / sigma + 0.25 * rng.standard_normal(n))
    days = np.busday_offset("2000-01-03", np.arange(n), roll="forward")
    return Bars(
        name=name,
        time=days.astype("datetime64[s]"),
        open=open_,
        high=np.maximum(open_, close) * np.exp(spread[0]),
        low=np.minimum(open_, close) * np.exp(-spread[1]),
        close=close,
        volume=volume,
        periods_per_year=252.0,
    )


ANYTRADING_FILES = {"googl": "STOCKS_GOOGL.csv", "eurusd": "FOREX_EURUSD_1H_ASK.csv"}


def anytrading_bars(which: str) -> Bars:
    """The daily GOOGL (``"googl"``) or hourly EUR/USD ask (``"eurusd"``) bars gym-anytrading ships.

    Found without importing the package (its import pulls in pandas and gymnasium).

    Raises:
        ValueError: an unknown ``which``, or gym-anytrading is not installed (or lacks the file).
    """
    if which not in ANYTRADING_FILES:
        raise ValueError(f"unknown gym-anytrading series {which!r}; known: {', '.join(ANYTRADING_FILES)}")
    spec = importlib.util.find_spec("gym_anytrading")
    hint = "pip install 'tritonrl[market]' (gym-anytrading 2.0.0)"
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            f"market:{which} reads the data gym-anytrading ships, which is not installed: {hint}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / ANYTRADING_FILES[which]
    if not path.is_file():
        raise ValueError(f"{path} is missing from the installed gym-anytrading: {hint}")
    return load_csv(path, name=which)


_SYNTHETIC_OPTIONS = {"ar": float, "seed": int, "bars": int, "regimes": int}


def source_bars(spec: str) -> Bars:
    """Bars for the part of ``--env market:SPEC`` after ``market:`` (the prefix is also accepted).

    ``synthetic[,ar=F][,seed=N][,bars=N][,regimes=N]``, ``googl``, ``eurusd`` or ``csv=PATH`` (the
    rest of the spec is the path, commas included).

    Raises:
        ValueError: an unknown source or option, a malformed value, or whatever the source raises.
    """
    spec = spec.strip().removeprefix("market:")
    known = "synthetic[,ar=F][,seed=N][,bars=N][,regimes=N], googl, eurusd, csv=PATH"
    if spec.startswith("csv="):
        if not spec[4:]:
            raise ValueError("market:csv= needs a path: market:csv=PATH")
        return load_csv(spec[4:])
    head, *options = [part.strip() for part in spec.split(",")]
    if head in ANYTRADING_FILES:
        if options:
            raise ValueError(f"market:{head} takes no options (got {', '.join(options)}); known: {known}")
        return anytrading_bars(head)
    if head != "synthetic":
        raise ValueError(f"unknown market source {spec!r}; known: {known}")
    kwargs = synthetic_options(f"market:{spec}", options, _SYNTHETIC_OPTIONS)
    _check_synthetic(spec, kwargs)
    return synthetic_bars(**kwargs)  # type: ignore[arg-type]


def synthetic_options(where: str, options: list[str], table: dict[str, type]) -> dict[str, float | int]:
    """``KEY=VALUE`` items of a synthetic source spec as keyword arguments, each converted by its
    type in ``table`` (``bars`` becomes ``n``); ``ValueError`` naming ``where`` at an unknown key
    or a value that does not convert."""
    kwargs: dict[str, float | int] = {}
    for option in options:
        key, sep, text = option.partition("=")
        key = key.strip()
        if not sep or key not in table:
            raise ValueError(f"unknown option {option!r} in {where}; synthetic takes {', '.join(table)}")
        try:
            kwargs["n" if key == "bars" else key] = table[key](text.strip())
        except ValueError:
            raise ValueError(f"{where}: {key}={text!r} is not a valid {table[key].__name__}") from None
    return kwargs


SYNTHETIC_BYTES_PER_BAR = 16 * 8
"""Host bytes `synthetic_bars` holds per bar at its peak (some 16 float64 arrays of ``n``: the
regime path, the noise and AR(1) path, prices, spreads, volumes, times)."""


def _check_synthetic(spec: str, kwargs: dict[str, float | int]) -> None:
    """Raise ``ValueError`` at a ``market:synthetic`` option out of range or bars that would not fit
    in this machine's free memory, before anything is generated."""
    n = int(kwargs.get("n", 5000))
    checks = (
        ("bars", n >= 2, "bars >= 2"),
        ("seed", int(kwargs.get("seed", 0)) >= 0, "seed >= 0"),
        ("regimes", 1 <= int(kwargs.get("regimes", 2)) <= n, f"1 <= regimes <= bars ({n})"),
        ("ar", -1.0 < float(kwargs.get("ar", 0.0)) < 1.0, "-1 < ar < 1"),
    )
    for key, ok, bound in checks:
        if not ok:
            raise ValueError(f"market:{spec}: {key}={kwargs['n' if key == 'bars' else key]}: need {bound}")
    check_memory(f"market:{spec}", {f"generating {n} bars": n * SYNTHETIC_BYTES_PER_BAR}, "cpu")
