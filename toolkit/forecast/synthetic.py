"""Deterministic synthetic test series that can fail a forecaster (`SYNTHETIC_KINDS`): level shifts,
a single step, a trend, a noise regime change, several seasonalities, or all but the step, on top
of a learnable daily cycle plus AR(1) signal. `synthetic_series` returns a one-series
[`SeriesTable`][tritonrl.toolkit.forecast.series.SeriesTable]; `parse_synthetic_spec` reads
``series:synthetic,...``. See docs/pages/forecasting.md ("Test series").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tritonrl.kernels.validate import check_int
from tritonrl.toolkit.forecast.series import SeriesTable

__all__ = ["SYNTHETIC_KINDS", "parse_synthetic_spec", "synthetic_series", "synthetic_values"]

SYNTHETIC_KINDS = ("shift", "step", "trend", "regime", "seasons", "all")
"""The kinds of `synthetic_values` (``step``: one level shift of +2 half-way, inside the train rows of
a 70/15/15 split, so validation and test lie at the new level; ``all`` combines the other four)."""
_MAX_ROWS = 1_000_000
"""The most rows a synthetic series may have (8 MB of f64; the AR(1) recursion is a Python loop)."""


def _segments(rng: np.random.Generator, n: int, low: int, high: int) -> np.ndarray:
    """``[n]`` int64 segment number of each row, segments ``low .. high - 1`` rows long."""
    lengths = rng.integers(low, high, size=n // low + 1)
    return np.repeat(np.arange(lengths.size), lengths)[:n]


def synthetic_values(kind: str = "all", n: int = 3000, seed: int = 0, *, period: int = 24) -> np.ndarray:
    """The series of ``kind``, ``[n]`` f64, a function of ``(kind, n, seed, period)`` alone.

    Raises:
        ValueError: an unknown ``kind``, ``n`` outside ``2 .. 1_000_000``, ``seed < 0`` or ``period < 2``.
    """
    if kind not in SYNTHETIC_KINDS:
        known = ", ".join(SYNTHETIC_KINDS)
        raise ValueError(f"unknown synthetic series kind {kind!r}; choose one of {known}")
    check_int("n", n, low=2)
    if n > _MAX_ROWS:
        raise ValueError(f"n must be at most {_MAX_ROWS:,} rows, got {n:,}")
    check_int("seed", seed, low=0)
    check_int("period", period, low=2)
    rng = np.random.default_rng(seed)
    e, w = rng.standard_normal(n), rng.standard_normal(n)
    level_seg, noise_seg = _segments(rng, n, 150, 450), _segments(rng, n, 200, 600)
    levels = rng.choice(np.array([-1.5, 0.0, 1.5]), size=int(level_seg[-1]) + 1)
    a = np.zeros(n)
    for i in range(1, n):  # AR(1), std 0.3 / sqrt(1 - 0.64) = 0.5
        a[i] = 0.8 * a[i - 1] + 0.3 * e[i]
    t = np.arange(n, dtype=np.float64)
    day = 2 * np.pi * t / period
    y = np.sin(day) + 0.4 * np.sin(2 * day + 0.7) + a
    every = kind == "all"
    noise_std = np.where(noise_seg % 2 == 0, 0.05, 0.6) if every or kind == "regime" else 0.2
    y += noise_std * w
    if every or kind == "shift":
        y += levels[level_seg]
    if kind == "step":
        y += np.where(t >= n // 2, 2.0, 0.0)
    if every or kind == "trend":
        y += 3.0 * t / n
    if every or kind == "seasons":
        y += 0.8 * np.sin(day / 7 + 0.3)
    return y


def synthetic_series(kind: str = "all", n: int = 3000, seed: int = 0, *, period: int = 24) -> SeriesTable:
    """`synthetic_values` as a one-series table ``synthetic-<kind>`` (target ``y``, integer
    times); raises as it does."""
    values = synthetic_values(kind, n, seed, period=period)
    name = f"synthetic-{kind}"
    return SeriesTable(
        name=name,
        path=Path(name),
        time_column="ds",
        targets=("y",),
        features=(),
        ids=("",),
        starts=(0, n),
        time=np.arange(n, dtype=np.int64),
        lines=np.arange(2, n + 2, dtype=np.int64),
        values=values[:, None],
    )


_OPTIONS = {"kind": str, "n": int, "seed": int, "period": int}


def parse_synthetic_spec(spec: str) -> SeriesTable:
    """The table of ``--data series:synthetic[,kind=K][,n=N][,seed=S][,period=P]`` (the
    ``series:`` prefix optional), e.g. ``series:synthetic,kind=trend,n=2000``.

    Raises:
        ValueError: another source, an unknown option, a malformed value, or what
            [`synthetic_values`][tritonrl.toolkit.forecast.synthetic.synthetic_values] refuses.
    """
    body = spec.strip().removeprefix("series:")
    head, *options = [part.strip() for part in body.split(",")]
    known = "series:synthetic[,kind=K][,n=N][,seed=S][,period=P]"
    if head != "synthetic":
        raise ValueError(f"unknown series source {spec!r}; known: {known}")
    kwargs: dict[str, str | int] = {}
    for option in options:
        key, sep, text = option.partition("=")
        key = key.strip()
        if not sep or key not in _OPTIONS:
            raise ValueError(f"unknown option {option!r} in {spec}; synthetic takes {', '.join(_OPTIONS)}")
        try:
            kwargs[key] = _OPTIONS[key](text.strip())
        except ValueError:
            kind = _OPTIONS[key].__name__
            raise ValueError(f"{spec}: {key}={text.strip()!r} is not a valid {kind}") from None
    return synthetic_series(**kwargs)  # type: ignore[arg-type]
