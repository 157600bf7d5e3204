"""Performance statistics of per-period simple returns ``r [T]`` (risk-free 0), numpy f64.

Empyrical's definitions (drawdown positive), Sharpe standard errors (Lo 2002, Mertens 2002), a
seeded bootstrap interval, the deflated Sharpe ratio (Bailey and Lopez de Prado 2014), turnover
and `performance_summary`. A bad argument raises one ValueError line naming it: ``r`` must be 1-D,
at least 2 finite simple returns >= -1; ``periods_per_year`` finite and > 0. Imports numpy and
the standard library only.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

__all__ = [
    "EULER_GAMMA",
    "annual_return",
    "annual_volatility",
    "calmar_ratio",
    "deflated_sharpe_ratio",
    "expected_max_sharpe",
    "max_drawdown",
    "performance_summary",
    "probabilistic_sharpe_ratio",
    "sharpe_bootstrap_interval",
    "sharpe_ratio",
    "sharpe_standard_error",
    "sortino_ratio",
    "total_return",
    "turnover",
]

EULER_GAMMA = 0.5772156649015329
"""The Euler-Mascheroni constant of the expected maximum Sharpe ratio."""

_NORMAL = NormalDist()
_BOOTSTRAP_CELLS = 1 << 22  # resampled returns held at once by the bootstrap


def _returns(r: object, name: str = "r") -> np.ndarray:
    """``r`` checked (see the module docstring), as f64."""
    try:
        a = np.asarray(r, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an array of numbers, got {type(r).__name__}") from None
    if a.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of per-period returns, got shape {a.shape}")
    if a.size < 2:
        raise ValueError(f"{name} must hold at least 2 periods, got {a.size}")
    bad = np.flatnonzero(~np.isfinite(a) | (a < -1.0))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{name} must be finite simple returns >= -1, got {a[i]} at period {i}")
    return a


def _positive(name: str, value: object, *, zero: bool = False) -> float:
    """``value`` as a finite float > 0 (>= 0 with ``zero``)."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        if math.isfinite(value) and (value > 0 or (zero and value == 0)):
            return float(value)
    raise ValueError(f"{name} must be a finite number {'>=' if zero else '>'} 0, got {value!r}")


def _count(name: str, value: object, low: int) -> int:
    """``value`` as an int >= ``low``."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= low:
        return int(value)
    raise ValueError(f"{name} must be an int >= {low}, got {value!r}")


def _divide(num: float, den: float) -> float:
    """``num / den`` in IEEE floats (inf or NaN for 0 ``den``), as empyrical's ratios."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.divide(np.float64(num), np.float64(den)))


def _std(a: np.ndarray) -> float:
    """std(ddof=1), exactly 0 for constant ``a`` (empyrical's zero dispersion)."""
    return 0.0 if a.max() == a.min() else float(a.std(ddof=1))


def _sharpe(a: np.ndarray) -> float:
    """The per-period Sharpe ratio ``mean / std(ddof=1)``."""
    return _divide(float(a.mean()), _std(a))


def _moments(a: np.ndarray) -> tuple[float, float]:
    """(skewness, kurtosis): the biased ``m3 / m2**1.5`` and ``m4 / m2**2`` (3 for a normal)."""
    d = a - a.mean()
    m2, m3, m4 = (float(np.mean(d**k)) for k in (2, 3, 4))
    return _divide(m3, m2**1.5), _divide(m4, m2 * m2)


def total_return(r: np.ndarray) -> float:
    """``prod(1 + r) - 1``."""
    return float(np.prod(1.0 + _returns(r)) - 1.0)


def annual_return(r: np.ndarray, periods_per_year: float) -> float:
    """The compound annual growth rate ``prod(1 + r) ** (ppy / T) - 1`` (empyrical's)."""
    a, ppy = _returns(r), _positive("periods_per_year", periods_per_year)
    with np.errstate(over="ignore"):
        return float(np.prod(1.0 + a) ** (1.0 / (a.size / ppy)) - 1.0)


def annual_volatility(r: np.ndarray, periods_per_year: float) -> float:
    """``std(r, ddof=1) * sqrt(ppy)`` (empyrical's)."""
    a, ppy = _returns(r), _positive("periods_per_year", periods_per_year)
    return float(a.std(ddof=1)) * math.sqrt(ppy)


def sharpe_ratio(r: np.ndarray, periods_per_year: float) -> float:
    """``mean(r) / std(r, ddof=1) * sqrt(ppy)`` (empyrical's): inf or NaN for constant ``r``."""
    a, ppy = _returns(r), _positive("periods_per_year", periods_per_year)
    return _sharpe(a) * math.sqrt(ppy)


def sortino_ratio(r: np.ndarray, periods_per_year: float) -> float:
    """``mean(r) / sqrt(mean(min(r, 0) ** 2)) * sqrt(ppy)`` (empyrical's, required return 0)."""
    a, ppy = _returns(r), _positive("periods_per_year", periods_per_year)
    downside = math.sqrt(float(np.mean(np.minimum(a, 0.0) ** 2)))
    return _divide(float(a.mean()), downside) * math.sqrt(ppy)


def max_drawdown(r: np.ndarray) -> float:
    """``max(1 - equity / running peak)`` of the equity ``[1, cumprod(1 + r)]``: POSITIVE, in
    [0, 1] (empyrical's ``max_drawdown`` is its negation)."""
    equity = np.concatenate([[1.0], np.cumprod(1.0 + _returns(r))])
    peak = np.maximum.accumulate(equity)
    return float(np.max((peak - equity) / peak))


def calmar_ratio(r: np.ndarray, periods_per_year: float) -> float:
    """``annual_return / max_drawdown`` (empyrical's): NaN without a drawdown or if infinite."""
    drawdown = max_drawdown(r)
    _positive("periods_per_year", periods_per_year)
    if not drawdown > 0.0:
        return math.nan
    ratio = annual_return(r, periods_per_year) / drawdown
    return ratio if math.isfinite(ratio) else math.nan


def sharpe_standard_error(r: np.ndarray, periods_per_year: float, *, non_normal: bool = False) -> float:
    """Standard error of the annualised Sharpe: ``sqrt(v * ppy)``, ``v`` the variance of the
    per-period ``SR``. iid normal (Lo 2002, eq. 8): ``v = (1 + SR**2 / 2) / T``. ``non_normal``
    (Mertens 2002 as in Opdyke 2007 and Bailey and Lopez de Prado 2014):
    ``v = (1 - skew * SR + (kurt - 1) / 4 * SR**2) / (T - 1)``, moments as scipy's biased ones."""
    a, ppy = _returns(r), _positive("periods_per_year", periods_per_year)
    sr = _sharpe(a)
    if non_normal:
        skew, kurt = _moments(a)
        v = max(1.0 - skew * sr + (kurt - 1.0) / 4.0 * sr * sr, 0.0) / (a.size - 1)
    else:
        v = (1.0 + sr * sr / 2.0) / a.size
    return math.sqrt(v * ppy)


def _row_sharpes(x: np.ndarray) -> np.ndarray:
    """Per-row Sharpe of ``x [D, T]``; NaN for constant rows."""
    std = x.std(axis=1, ddof=1)
    std[x.max(axis=1) == x.min(axis=1)] = np.nan
    return x.mean(axis=1) / std


def _resample(rng: np.random.Generator, draws: int, t: int, block: int | None) -> np.ndarray:
    """``[draws, t]`` indices: iid, or the stationary bootstrap (Politis and Romano 1994):
    geometric blocks of mean length ``block``, uniform starts, wrapping circularly."""
    starts = rng.integers(0, t, size=(draws, t))
    if block is None:
        return starts
    new = rng.random((draws, t)) < 1.0 / block
    new[:, 0] = True
    steps = np.arange(t)
    run_start = np.maximum.accumulate(np.where(new, steps, 0), axis=1)
    return (np.take_along_axis(starts, run_start, axis=1) + steps - run_start) % t


def sharpe_bootstrap_interval(
    r: np.ndarray,
    periods_per_year: float,
    *,
    level: float = 0.95,
    draws: int = 2000,
    block: int | None = None,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile interval ``(low, high)`` at ``level`` of the annualised Sharpe over ``draws``
    resamples from ``np.random.default_rng(seed)``: iid, or the stationary bootstrap of mean block
    ``block``. Constant resamples are dropped ((NaN, NaN) if all are). Raises ValueError: ``level``
    not in (0, 1), ``draws``/``block`` not an int >= 1, ``seed`` not an int >= 0."""
    a, ppy = _returns(r), _positive("periods_per_year", periods_per_year)
    if not isinstance(level, (int, float)) or isinstance(level, bool) or not 0.0 < level < 1.0:
        raise ValueError(f"level must be a number in (0, 1), got {level!r}")
    draws, seed = _count("draws", draws, 1), _count("seed", seed, 0)
    block = None if block is None else _count("block", block, 1)
    rng, t = np.random.default_rng(seed), a.size
    sharpes = np.empty(draws)
    chunk = max(1, _BOOTSTRAP_CELLS // t)
    for lo in range(0, draws, chunk):
        n = min(chunk, draws - lo)
        sharpes[lo : lo + n] = _row_sharpes(a[_resample(rng, n, t, block)])
    sharpes = sharpes[np.isfinite(sharpes)] * math.sqrt(ppy)
    if sharpes.size == 0:
        return math.nan, math.nan
    low, high = np.quantile(sharpes, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return float(low), float(high)


def expected_max_sharpe(trials: int, variance: float) -> float:
    """``SR0 = sqrt(V) * ((1 - g) * Phi^-1(1 - 1/N) + g * Phi^-1(1 - 1/(N e)))``, the expected
    maximum Sharpe of ``N = trials`` null trials of variance ``V`` (Bailey and Lopez de Prado 2014);
    0 for one trial. Raises ValueError: ``trials`` < 1, ``variance`` < 0."""
    n, variance = _count("trials", trials, 1), _positive("variance", variance, zero=True)
    if n == 1:
        return 0.0
    z = (1.0 - EULER_GAMMA) * _NORMAL.inv_cdf(1.0 - 1.0 / n) + EULER_GAMMA * _NORMAL.inv_cdf(
        1.0 - 1.0 / (n * math.e)
    )
    return math.sqrt(variance) * z


def probabilistic_sharpe_ratio(
    sharpe: float, benchmark: float, periods: int, skewness: float, kurtosis: float
) -> float:
    """``Phi((SR - SR*) * sqrt(T - 1) / sqrt(1 - skew * SR + (kurt - 1) / 4 * SR**2))``, per-period
    units, kurtosis non-excess (Bailey and Lopez de Prado 2012). Raises ValueError: ``periods`` < 2."""
    t = _count("periods", periods, 2)
    var = max(1.0 - skewness * sharpe + (kurtosis - 1.0) / 4.0 * sharpe * sharpe, 0.0)
    z = _divide((sharpe - benchmark) * math.sqrt(t - 1), math.sqrt(var))
    return math.nan if math.isnan(z) else _NORMAL.cdf(z)


def deflated_sharpe_ratio(r: np.ndarray, *, trials: int, trial_sharpe_variance: float | None = None) -> float:
    """DSR (Bailey and Lopez de Prado 2014), in [0, 1]: the PSR of ``r``'s per-period Sharpe
    against ``expected_max_sharpe(trials, V)`` (PSR(0) for one trial). ``V`` is
    ``trial_sharpe_variance`` (per-period units: an annualised variance / ppy), by default Lo's
    ``(1 + SR**2 / 2) / T``. NaN for constant ``r``."""
    a = _returns(r)
    sr = _sharpe(a)
    _count("trials", trials, 1)
    if trial_sharpe_variance is not None:
        _positive("trial_sharpe_variance", trial_sharpe_variance, zero=True)
    if not math.isfinite(sr):
        return math.nan
    variance = (1.0 + sr * sr / 2.0) / a.size if trial_sharpe_variance is None else trial_sharpe_variance
    return probabilistic_sharpe_ratio(sr, expected_max_sharpe(trials, variance), a.size, *_moments(a))


def turnover(weights: np.ndarray, held: np.ndarray | None = None) -> float:
    """Mean one-way turnover ``mean_t sum_k |weights[t] - prev[t]| / 2`` of ``weights [T, K]``,
    ``prev`` being ``held [T, K]`` (the drifted weights before each trade) or else the previous row."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 2 or not np.isfinite(w).all():
        raise ValueError(f"weights must be a finite [T, K] array, got shape {w.shape}")
    if held is None:
        if w.shape[0] < 2:
            raise ValueError(f"weights must hold at least 2 periods without held, got {w.shape[0]}")
        return float(np.abs(np.diff(w, axis=0)).sum(axis=1).mean() / 2.0)
    h = np.asarray(held, dtype=np.float64)
    if h.shape != w.shape or not np.isfinite(h).all():
        raise ValueError(f"held must be a finite array of weights' shape {w.shape}, got shape {h.shape}")
    return float(np.abs(w - h).sum(axis=1).mean() / 2.0)


def performance_summary(
    r: np.ndarray,
    periods_per_year: float,
    *,
    trials: int = 1,
    turnover: float | None = None,
    costs: np.ndarray | None = None,
    seed: int = 0,
) -> dict[str, float]:
    """All of the above for net returns ``r`` in one JSON-able dict: ``periods``, ``total_return``,
    ``annual_return``, ``annual_volatility``, ``sharpe``, ``sortino``, ``max_drawdown``, ``calmar``,
    ``sharpe_se`` (Lo), ``sharpe_low``/``sharpe_high`` (95% iid bootstrap), ``deflated_sharpe``.
    ``turnover`` (a figure) adds ``turnover``, ``annual_turnover``; ``costs [T]`` (per-period, already
    in ``r``) adds ``cost_drag`` (``mean * ppy``) and ``sharpe_gross`` (the Sharpe of ``r + costs``)."""
    a, ppy = _returns(r), _positive("periods_per_year", periods_per_year)
    low, high = sharpe_bootstrap_interval(a, ppy, seed=seed)
    out: dict[str, float] = {
        "periods": a.size,
        "total_return": total_return(a),
        "annual_return": annual_return(a, ppy),
        "annual_volatility": annual_volatility(a, ppy),
        "sharpe": sharpe_ratio(a, ppy),
        "sortino": sortino_ratio(a, ppy),
        "max_drawdown": max_drawdown(a),
        "calmar": calmar_ratio(a, ppy),
        "sharpe_se": sharpe_standard_error(a, ppy),
        "sharpe_low": low,
        "sharpe_high": high,
        "deflated_sharpe": deflated_sharpe_ratio(a, trials=trials),
    }
    if turnover is not None:
        out["turnover"] = _positive("turnover", turnover, zero=True)
        out["annual_turnover"] = out["turnover"] * ppy
    if costs is not None:
        c = np.asarray(costs, dtype=np.float64)
        if c.shape != a.shape or not np.isfinite(c).all():
            raise ValueError(f"costs must be a finite array of r's shape {a.shape}, got shape {c.shape}")
        out["cost_drag"] = float(c.mean()) * ppy
        out["sharpe_gross"] = sharpe_ratio(a + c, ppy)
    return out
