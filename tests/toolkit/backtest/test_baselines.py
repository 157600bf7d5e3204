"""The baseline portfolios (toolkit/backtest/baselines.py): weights on the simplex with cash first,
minimum variance against skfolio and in closed form, momentum on planted winners, and bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonrl.toolkit.backtest import (
    Baseline,
    baselines,
    buy_and_hold,
    equal_weight,
    minimum_variance,
    momentum,
)


def _panel(seed: int, t: int = 400, n: int = 6, common: float = 0.002) -> np.ndarray:
    """``[t, n]`` closes from correlated log returns (a random mixing plus one common factor)."""
    rng = np.random.default_rng(seed)
    mix = rng.normal(size=(n, n)) * 0.3
    log_returns = rng.normal(0, 0.01, (t - 1, n)) @ mix + rng.normal(0, common, (t - 1, 1))
    return 100.0 * np.exp(np.vstack([np.zeros((1, n)), np.cumsum(log_returns, axis=0)]))


def _assert_on_simplex(b: Baseline, n: int) -> None:
    assert b.weights.shape == (n + 1,) and b.weights.dtype == np.float64
    assert (b.weights >= 0).all()
    assert b.weights.sum() == pytest.approx(1.0, abs=1e-12)
    assert b.weights[0] == 0.0  # every baseline is fully invested: no cash


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), t=st.integers(3, 300), n=st.integers(1, 12))
def test_every_baseline_is_on_the_simplex(seed: int, t: int, n: int) -> None:
    found = baselines(_panel(seed, t, n))
    assert [b.name for b in found] == ["equal_weight", "buy_and_hold", "minimum_variance", "momentum"]
    assert [b.rebalance for b in found] == [True, False, True, True]
    for b in found:
        _assert_on_simplex(b, n)


def test_equal_weight_and_buy_and_hold() -> None:
    np.testing.assert_array_equal(equal_weight(4).weights, [0.0, 0.25, 0.25, 0.25, 0.25])
    np.testing.assert_array_equal(buy_and_hold(4).weights, equal_weight(4).weights)
    assert equal_weight(4).rebalance and not buy_and_hold(4).rebalance
    with pytest.raises(ValueError):
        equal_weight(4).weights[1] = 0.5  # read-only


def _skfolio_min_variance(log_returns: np.ndarray) -> np.ndarray:
    opt = pytest.importorskip("skfolio.optimization")
    skfolio = pytest.importorskip("skfolio")
    model = opt.MeanRisk(
        objective_function=opt.ObjectiveFunction.MINIMIZE_RISK,
        risk_measure=skfolio.RiskMeasure.VARIANCE,
        solver_params={"tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-10},
    )
    # In percent: the weights do not depend on the scale, and at daily variances (~1e-6) CLARABEL's
    # absolute gap tolerance would leave ~1e-4 in the weights.
    return model.fit(100.0 * log_returns).weights_


@pytest.mark.parametrize(("seed", "n"), [(0, 2), (1, 3), (2, 5), (3, 8), (4, 12), (5, 20)])
def test_minimum_variance_matches_skfolio(seed: int, n: int) -> None:
    """skfolio's MeanRisk (minimum variance, long only, budget 1) within 1e-5 on the weights: an
    interior-point solver stops at its tolerance (1e-10 gap here, ~1e-6 in the weights), the active
    set is exact. Ours is also no worse in variance and satisfies the KKT conditions."""
    close = _panel(seed, 400, n)
    log_returns = np.diff(np.log(close), axis=0)
    ours = minimum_variance(close).weights[1:]
    theirs = _skfolio_min_variance(log_returns)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5)
    cov = np.cov(log_returns, rowvar=False)
    assert ours @ cov @ ours <= theirs @ cov @ theirs * (1 + 1e-12)
    grad = cov @ ours
    level = grad[ours > 0].mean()
    np.testing.assert_allclose(grad[ours > 0], level, rtol=1e-9)  # equal marginal variance where held
    assert (grad[ours == 0] >= level * (1 - 1e-9)).all()  # and no less where not


def _diagonal_panel(variances: np.ndarray, t: int = 200, seed: int = 0) -> np.ndarray:
    """Closes whose log returns have exactly uncorrelated sample columns of sample variance ``variances``."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(t - 1, variances.size))
    q, _ = np.linalg.qr(z - z.mean(axis=0))  # orthonormal and centred columns
    log_returns = q * np.sqrt(variances * (t - 2)) + 1e-4
    return np.exp(np.vstack([np.zeros((1, variances.size)), np.cumsum(log_returns, axis=0)]))


def test_minimum_variance_closed_form_on_a_diagonal_covariance() -> None:
    """Weights proportional to 1 / variance (all positive, so no bound binds); 1e-9: rounding of the
    QR and the covariance."""
    variances = np.array([1e-4, 4e-4, 2.5e-5, 1e-4, 9e-4])
    close = _diagonal_panel(variances)
    cov = np.cov(np.diff(np.log(close), axis=0), rowvar=False)
    np.testing.assert_allclose(cov, np.diag(variances), rtol=0, atol=1e-12)
    want = (1 / variances) / (1 / variances).sum()
    np.testing.assert_allclose(minimum_variance(close).weights[1:], want, rtol=1e-9)
    full = _panel(3, 300, 5)  # full shrinkage: the diagonal of any covariance
    var = np.diff(np.log(full), axis=0).var(axis=0, ddof=1)
    np.testing.assert_allclose(
        minimum_variance(full, shrinkage=1.0).weights[1:], (1 / var) / (1 / var).sum(), rtol=1e-9
    )


def test_minimum_variance_leaves_out_a_dominated_asset() -> None:
    """An asset that is another plus independent noise gets weight 0 (the long-only bound binds)."""
    rng = np.random.default_rng(4)
    a = rng.normal(0, 0.01, 300)
    log_returns = np.stack([a, a + rng.normal(0, 0.01, 300), rng.normal(0, 0.01, 300)], axis=1)
    close = np.exp(np.vstack([np.zeros((1, 3)), np.cumsum(log_returns, axis=0)]))
    w = minimum_variance(close).weights
    assert w[2] == 0.0 and w[1] > 0 and w[3] > 0


def test_momentum_picks_the_planted_winners() -> None:
    """Eight random walks; assets 2 and 5 gain 0.3% a bar over the lookback window. A crash of a
    winner and a spike of a loser inside the last ``skip`` bars change nothing."""
    rng = np.random.default_rng(1)
    t, n = 300, 8
    log_returns = rng.normal(0, 0.005, (t - 1, n))
    log_returns[:, [2, 5]] += 0.003
    log_returns[-21:, 2] -= 0.05
    log_returns[-21:, 0] += 0.05
    close = np.exp(np.vstack([np.zeros((1, n)), np.cumsum(log_returns, axis=0)]))
    b = momentum(close)
    np.testing.assert_array_equal(np.flatnonzero(b.weights[1:]), [2, 5])  # top quarter: 2 of 8
    np.testing.assert_array_equal(b.weights[[3, 6]], [0.5, 0.5])
    assert np.flatnonzero(momentum(close, skip=0).weights[1:]).tolist() == [0, 5]  # the spike counts now
    assert np.flatnonzero(momentum(close, top=1).weights[1:]).tolist() in ([2], [5])
    assert momentum(close, lookback=10_000).weights.tolist() == momentum(close, lookback=t).weights.tolist()


def test_momentum_lookback_window() -> None:
    """Only ``close[e] / close[e - lookback]`` counts: a gain before the lookback window is ignored."""
    close = np.ones((100, 4))
    close[:50, 1] = 0.5  # asset 1 doubled at bar 50
    close[70:, 2] = 1.2  # asset 2 gained 20% at bar 70
    assert np.flatnonzero(momentum(close, lookback=40, skip=5).weights[1:]).tolist() == [2]
    assert np.flatnonzero(momentum(close, lookback=99, skip=5).weights[1:]).tolist() == [1]
    assert np.flatnonzero(momentum(close, lookback=10, skip=35).weights[1:]).tolist() == [0]  # ties: lowest


def test_only_the_training_window_is_read() -> None:
    """The functions take the training closes alone: changing every row after the window changes
    no baseline, changing the window's last row does."""
    close = _panel(7, 500, 6)
    later = close.copy()
    later[300:] *= np.random.default_rng(0).uniform(0.2, 5.0, later[300:].shape)
    for a, b in zip(baselines(close[:300]), baselines(later[:300]), strict=True):
        np.testing.assert_array_equal(a.weights, b.weights)  # exact: the same inputs
    moved = close[:300].copy()
    moved[-22, :] *= np.array([3.0, 1, 1, 1, 1, 1])
    assert momentum(moved).weights[1] == 1.0


BAD = [
    (lambda: minimum_variance(np.ones(10)), "train_close must be \\[T >= 3, N >= 1\\]"),
    (lambda: minimum_variance(np.ones((2, 3))), "train_close must be"),
    (lambda: momentum(np.array([[1.0, np.nan], [1.0, 2.0]])), "finite and > 0, got nan at row 0, asset 1"),
    (lambda: baselines(np.array([[1.0, 0.0]] * 5)), "train_close must be finite and > 0"),
    (lambda: minimum_variance(np.ones((5, 2)), shrinkage=1.5), "shrinkage must be"),
    (lambda: momentum(np.ones((5, 2)), skip=4), "skip must be an int in \\[0, 3\\]"),
    (lambda: momentum(np.ones((5, 2)), lookback=0), "lookback must be an int >= 1"),
    (lambda: momentum(np.ones((5, 2)), skip=0, top=3), "top must be an int in \\[1, 2\\]"),
    (lambda: equal_weight(0), "n_assets must be"),
    (lambda: Baseline("x", np.array([0.5, 0.6]), True), "weights must sum to 1"),
    (lambda: Baseline("x", np.array([-0.5, 1.5]), True), "weights must be"),
]


@pytest.mark.parametrize(("call", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_inputs_raise_one_line(call, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        call()
    assert "\n" not in str(info.value)
