"""Baseline portfolios from a training window's closes ``train_close [T, N]`` alone (nothing
after the window can reach them): equal weight, buy and hold, long-only minimum variance and
momentum; `baselines` gives the four. Weights are ``[N + 1]`` f64, CASH FIRST, non-negative,
summing to 1. A bad argument raises one ValueError line naming it. Imports numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Baseline", "baselines", "buy_and_hold", "equal_weight", "minimum_variance", "momentum"]


@dataclass(frozen=True, eq=False)
class Baseline:
    """Weights ``[N + 1]`` (cash first, read-only), restored every period (``rebalance``) or
    bought at the start and left to drift (``rebalance=False``)."""

    name: str
    weights: np.ndarray
    rebalance: bool

    def __post_init__(self) -> None:
        w = np.array(self.weights, dtype=np.float64)
        if w.ndim != 1 or w.size < 2 or not np.isfinite(w).all() or (w < 0).any():
            raise ValueError(f"weights must be [N + 1] finite and >= 0 (cash first), got {self.weights!r}")
        if abs(float(w.sum()) - 1.0) > 1e-9:
            raise ValueError(f"weights must sum to 1, got {float(w.sum())!r}")
        w.setflags(write=False)
        object.__setattr__(self, "weights", w)


def _count(name: str, value: object, low: int, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high]`` (``high`` optional)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if low <= value and (high is None or value <= high):
            return int(value)
    bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
    raise ValueError(f"{name} must be an int {bound}, got {value!r}")


def _closes(train_close: object, min_rows: int) -> np.ndarray:
    """``train_close`` checked: ``[T >= min_rows, N >= 1]`` finite closes > 0, as f64."""
    try:
        c = np.asarray(train_close, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"train_close must be an array of numbers, got {type(train_close).__name__}"
        ) from None
    if c.ndim != 2 or c.shape[0] < min_rows or c.shape[1] < 1:
        raise ValueError(f"train_close must be [T >= {min_rows}, N >= 1] closes, got shape {c.shape}")
    bad = np.argwhere(~(np.isfinite(c) & (c > 0)))
    if bad.size:
        t, n = (int(i) for i in bad[0])
        raise ValueError(f"train_close must be finite and > 0, got {c[t, n]} at row {t}, asset {n}")
    return c


def _with_cash(assets: np.ndarray) -> np.ndarray:
    """``[0, assets...]``."""
    return np.concatenate([[0.0], assets])


def equal_weight(n_assets: int) -> Baseline:
    """``1 / N`` in each asset, rebalanced."""
    n = _count("n_assets", n_assets, 1)
    return Baseline("equal_weight", _with_cash(np.full(n, 1.0 / n)), rebalance=True)


def buy_and_hold(n_assets: int) -> Baseline:
    """``1 / N`` in each asset at the start, never rebalanced."""
    n = _count("n_assets", n_assets, 1)
    return Baseline("buy_and_hold", _with_cash(np.full(n, 1.0 / n)), rebalance=False)


def _budget_solution(cov: np.ndarray, free: np.ndarray) -> np.ndarray:
    """``argmin w' cov w`` with ``sum(w) = 1``, ``w = 0`` off ``free`` (KKT; lstsq if singular)."""
    idx = np.flatnonzero(free)
    k = idx.size
    kkt = np.zeros((k + 1, k + 1))
    kkt[:k, :k] = cov[np.ix_(idx, idx)]
    kkt[:k, k] = -1.0
    kkt[k, :k] = 1.0
    rhs = np.zeros(k + 1)
    rhs[k] = 1.0
    try:
        sol = np.linalg.solve(kkt, rhs)
    except np.linalg.LinAlgError:
        sol = np.linalg.lstsq(kkt, rhs, rcond=None)[0]
    w = np.zeros(cov.shape[0])
    w[idx] = sol[:k]
    return w


def _simplex_min_variance(cov: np.ndarray, tol: float = 1e-12) -> np.ndarray:
    """``argmin w' cov w`` on the simplex by the primal active-set method from equal weights:
    exact up to rounding after finitely many steps."""
    n = cov.shape[0]
    scale = float(np.trace(cov)) / n
    if scale <= 0.0:  # no asset moves: every portfolio has variance 0
        return np.full(n, 1.0 / n)
    cov = cov / scale  # unit mean variance, so that the tolerances are relative
    w, free = np.full(n, 1.0 / n), np.ones(n, dtype=bool)
    for _ in range(50 * n + 50):
        step = _budget_solution(cov, free) - w
        if np.max(np.abs(step)) <= tol:
            grad = cov @ w
            price = grad - float(grad[free].mean())  # the bound multipliers where ~free
            price[free] = 0.0
            j = int(np.argmin(price))
            if price[j] >= -1e-10:
                w = np.maximum(w, 0.0)
                return w / w.sum()
            free[j] = True
            continue
        shrinking = np.flatnonzero(free & (step < 0))
        ratios = w[shrinking] / -step[shrinking]
        alpha, blocking = 1.0, -1
        if ratios.size and ratios.min() < 1.0:
            k = int(np.argmin(ratios))
            alpha, blocking = float(ratios[k]), int(shrinking[k])
        w = w + alpha * step
        if blocking >= 0:
            w[blocking], free[blocking] = 0.0, False
    raise RuntimeError(f"the minimum-variance active set did not converge for {n} assets")


def minimum_variance(train_close: np.ndarray, *, shrinkage: float = 0.0) -> Baseline:
    """Long-only, fully invested minimum variance of the log returns' sample covariance ``S``
    (ddof=1) shrunk to ``(1 - shrinkage) * S + shrinkage * diag(S)``, solved exactly; rebalanced.
    Needs ``T >= 3``; ``shrinkage`` in [0, 1]."""
    c = _closes(train_close, 3)
    ok = isinstance(shrinkage, (int, float)) and not isinstance(shrinkage, bool)
    if not ok or not 0.0 <= shrinkage <= 1.0:
        raise ValueError(f"shrinkage must be a number in [0, 1], got {shrinkage!r}")
    cov = np.atleast_2d(np.cov(np.diff(np.log(c), axis=0), rowvar=False, ddof=1))
    cov = (1.0 - shrinkage) * cov + shrinkage * np.diag(np.diag(cov))
    return Baseline("minimum_variance", _with_cash(_simplex_min_variance(cov)), rebalance=True)


def momentum(
    train_close: np.ndarray, *, lookback: int = 252, skip: int = 21, top: int | None = None
) -> Baseline:
    """Equal weight over the ``top`` assets (default ``max(1, N // 4)``) of largest gain
    ``close[e] / close[s] - 1``, ``e = T - 1 - skip``, ``s = max(0, e - lookback)`` (a lookback
    longer than the window is clipped to it); ties to the lower index; rebalanced. ``skip`` in
    ``[0, T - 2]``."""
    c = _closes(train_close, 2)
    t, n = c.shape
    lookback, skip = _count("lookback", lookback, 1), _count("skip", skip, 0, t - 2)
    k = max(1, n // 4) if top is None else _count("top", top, 1, n)
    end = t - 1 - skip
    gains = c[end] / c[max(0, end - lookback)] - 1.0
    chosen = np.argsort(-gains, kind="stable")[:k]
    assets = np.zeros(n)
    assets[chosen] = 1.0 / k
    return Baseline("momentum", _with_cash(assets), rebalance=True)


def baselines(train_close: np.ndarray) -> tuple[Baseline, ...]:
    """(`equal_weight`, `buy_and_hold`, `minimum_variance`, `momentum`) with their defaults
    (``skip`` clipped to ``T - 2``)."""
    c = _closes(train_close, 3)
    n = c.shape[1]
    return (equal_weight(n), buy_and_hold(n), minimum_variance(c), momentum(c, skip=min(21, c.shape[0] - 2)))
