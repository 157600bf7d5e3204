"""The backtest statistics (toolkit/backtest/metrics.py) against empyrical, the Sharpe standard
errors against their formulas and a Monte-Carlo simulation, the deflated Sharpe ratio against
Bailey and Lopez de Prado's worked example and scipy, the bootstrap interval, and bad inputs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tritonrl.toolkit.backtest import (
    annual_return,
    annual_volatility,
    calmar_ratio,
    deflated_sharpe_ratio,
    expected_max_sharpe,
    max_drawdown,
    performance_summary,
    probabilistic_sharpe_ratio,
    sharpe_bootstrap_interval,
    sharpe_ratio,
    sharpe_standard_error,
    sortino_ratio,
    total_return,
    turnover,
)

# Two computations of the same f64 formula (ours and empyrical's) differ only by rounding: the
# order of a mean or a product. 1e-9 relative is loose for that, tight for any real difference.
RTOL, ATOL = 1e-9, 1e-12


def _series() -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    return [
        ("normal", rng.normal(5e-4, 0.01, 500)),
        ("student-t", 0.01 * rng.standard_t(3, 252)),
        ("losing", rng.normal(-1e-3, 0.02, 120)),
        ("short", np.array([0.01, -0.02, 0.03, -0.01, 0.005])),
        ("only gains", np.array([0.01, 0.02, 0.0, 0.03])),
        ("constant gain", np.full(10, 0.01)),
        ("zeros", np.zeros(10)),
        ("ruin", np.array([0.1, -1.0, 0.0])),
    ]


SERIES = _series()


def _empyrical_values(ep, r: np.ndarray, ppy: float) -> dict[str, float]:
    return {
        "annual_return": ep.annual_return(r, annualization=ppy),
        "annual_volatility": ep.annual_volatility(r, annualization=ppy),
        "sharpe": ep.sharpe_ratio(r, annualization=ppy),
        "sortino": ep.sortino_ratio(r, annualization=ppy),
        "max_drawdown": -ep.max_drawdown(r),  # empyrical's drawdown is negative, ours positive
        "calmar": ep.calmar_ratio(r, annualization=ppy),
    }


def _our_values(r: np.ndarray, ppy: float) -> dict[str, float]:
    return {
        "annual_return": annual_return(r, ppy),
        "annual_volatility": annual_volatility(r, ppy),
        "sharpe": sharpe_ratio(r, ppy),
        "sortino": sortino_ratio(r, ppy),
        "max_drawdown": max_drawdown(r),
        "calmar": calmar_ratio(r, ppy),
    }


def _assert_matches_empyrical(r: np.ndarray, ppy: float) -> None:
    ep = pytest.importorskip("empyrical")
    with np.errstate(all="ignore"):
        want = _empyrical_values(ep, r, ppy)
    got = _our_values(r, ppy)
    for key, value in want.items():
        # NaN and inf where empyrical gives them (assert_allclose treats equal infs and NaNs as equal)
        np.testing.assert_allclose(got[key], value, rtol=RTOL, atol=ATOL, err_msg=key)


@pytest.mark.parametrize(("name", "r"), SERIES, ids=[name for name, _ in SERIES])
@pytest.mark.parametrize("ppy", [252, 12, 365.25])
def test_matches_empyrical(name: str, r: np.ndarray, ppy: float) -> None:
    _assert_matches_empyrical(r, ppy)


@settings(max_examples=150, deadline=None)
@given(
    bp=hnp.arrays(np.int64, st.integers(5, 500), elements=st.integers(-4999, 4999)),
    ppy=st.sampled_from([12, 52, 252]),
)
def test_matches_empyrical_on_any_series(bp: np.ndarray, ppy: int) -> None:
    """Returns in basis points, in (-0.5, 0.5): real returns, no subnormal rounding artefacts."""
    _assert_matches_empyrical(bp / 1e4, ppy)


def test_signs_and_special_values() -> None:
    r = np.array([0.1, -0.2, 0.05])
    assert max_drawdown(r) == pytest.approx(0.2, rel=1e-12)  # positive: the fall from 1.1 to 0.88
    assert max_drawdown(np.array([0.01, 0.02])) == 0.0
    assert math.isnan(calmar_ratio(np.array([0.01, 0.02]), 252))  # no drawdown: NaN, as empyrical
    assert max_drawdown(np.array([0.1, -1.0])) == 1.0
    assert annual_return(np.array([0.1, -1.0]), 12) == -1.0
    assert total_return(r) == pytest.approx(1.1 * 0.8 * 1.05 - 1.0, rel=1e-12)
    assert sharpe_ratio(np.full(5, 0.01), 252) == math.inf
    assert math.isnan(sharpe_ratio(np.zeros(5), 252))
    assert sharpe_ratio(-r, 252) == -sharpe_ratio(r, 252)
    assert sortino_ratio(np.array([0.01, 0.02]), 252) == math.inf


def test_lo_standard_error_is_its_formula() -> None:
    """Lo (2002) iid and Mertens (2002) by hand, moments from scipy; 1e-12: the same formula."""
    stats = pytest.importorskip("scipy.stats")
    r = np.random.default_rng(3).normal(8e-4, 0.012, 750)
    sr = r.mean() / r.std(ddof=1)
    t = r.size
    want = math.sqrt((1 + sr**2 / 2) / t) * math.sqrt(252)
    assert sharpe_standard_error(r, 252) == pytest.approx(want, rel=1e-12)
    skew, kurt = stats.skew(r), stats.kurtosis(r, fisher=True) + 3.0
    want = math.sqrt((1 - skew * sr + (kurt - 1) / 4 * sr**2) / (t - 1)) * math.sqrt(252)
    assert sharpe_standard_error(r, 252, non_normal=True) == pytest.approx(want, rel=1e-10)


def _simulated_sharpes(draws: np.ndarray) -> np.ndarray:
    return draws.mean(axis=1) / draws.std(axis=1, ddof=1)


def test_lo_standard_error_matches_simulation() -> None:
    """The std of the sample Sharpe over 4000 iid normal series of length 250 (true SR 0.2) is within
    10% of Lo's formula (the simulation's own error on a std is ~1%)."""
    rng = np.random.default_rng(11)
    t, sr = 250, 0.2
    draws = 0.01 * rng.normal(sr, 1.0, (4000, t))  # scaled to returns > -1; the Sharpe is scale-free
    simulated = float(_simulated_sharpes(draws).std())
    formula = float(np.mean([sharpe_standard_error(d, 1.0) for d in draws[:200]]))
    assert abs(simulated / formula - 1.0) < 0.10
    assert abs(simulated / math.sqrt((1 + sr**2 / 2) / t) - 1.0) < 0.10


def test_non_normal_standard_error_matches_simulation() -> None:
    """Skewed returns (exponential: skew 2, kurtosis 9) at true SR 0.3: the non-normal formula at the
    true moments is within 10% of the simulated std, and the iid one is not (it is ~34% high)."""
    rng = np.random.default_rng(12)
    t, sr = 250, 0.3
    draws = 0.01 * (rng.exponential(1.0, (4000, t)) - 1.0 + sr)  # Sharpe sr
    simulated = float(_simulated_sharpes(draws).std())
    mertens = math.sqrt((1 - 2 * sr + (9 - 1) / 4 * sr**2) / (t - 1))
    assert abs(simulated / mertens - 1.0) < 0.10
    assert abs(simulated / math.sqrt((1 + sr**2 / 2) / t) - 1.0) > 0.2


def test_deflated_sharpe_worked_example() -> None:
    """Bailey and Lopez de Prado (2014), "The Deflated Sharpe Ratio", the numerical example: 100 trials
    with annualised Sharpe variance 1/2, an annualised SR of 2.5 over 1250 days (250 a year), skewness
    -3, kurtosis 10: SR0 = 0.1132 per day and DSR = 0.9004 (the paper's 4 digits: tolerance 5e-5)."""
    sr0 = expected_max_sharpe(100, 0.5 / 250)
    assert sr0 == pytest.approx(0.1132, abs=5e-5)
    assert probabilistic_sharpe_ratio(2.5 / math.sqrt(250), sr0, 1250, -3.0, 10.0) == pytest.approx(
        0.9004, abs=5e-5
    )


def _dsr_by_hand(r: np.ndarray, trials: int, variance: float | None) -> float:
    stats = pytest.importorskip("scipy.stats")
    norm = stats.norm
    sr, t = r.mean() / r.std(ddof=1), r.size
    skew, kurt = stats.skew(r), stats.kurtosis(r, fisher=False)
    v = (1 + sr**2 / 2) / t if variance is None else variance
    g = np.euler_gamma
    sr0 = (
        0.0
        if trials == 1
        else math.sqrt(v) * ((1 - g) * norm.ppf(1 - 1 / trials) + g * norm.ppf(1 - 1 / (trials * np.e)))
    )
    return float(norm.cdf((sr - sr0) * math.sqrt(t - 1) / math.sqrt(1 - skew * sr + (kurt - 1) / 4 * sr**2)))


@pytest.mark.parametrize("variance", [None, 4e-4])
@pytest.mark.parametrize("trials", [1, 2, 10, 1000])
def test_deflated_sharpe_matches_scipy(trials: int, variance: float | None) -> None:
    """Against the formula written with scipy's normal: 1e-10, two implementations of Phi and Phi^-1."""
    r = 0.01 * np.random.default_rng(5).standard_t(4, 1000) + 1e-3
    got = deflated_sharpe_ratio(r, trials=trials, trial_sharpe_variance=variance)
    assert got == pytest.approx(_dsr_by_hand(r, trials, variance), abs=1e-10)
    assert 0.0 <= got <= 1.0


def test_deflated_sharpe_falls_with_trials() -> None:
    r = np.random.default_rng(6).normal(1e-3, 0.01, 500)
    values = [deflated_sharpe_ratio(r, trials=n) for n in (1, 2, 5, 10, 100, 10_000)]
    assert all(a > b for a, b in zip(values[:-1], values[1:], strict=True))
    sr = r.mean() / r.std(ddof=1)
    assert values[0] == probabilistic_sharpe_ratio(sr, 0.0, r.size, *_moments(r))  # exact: PSR(0)


def _moments(r: np.ndarray) -> tuple[float, float]:
    d = r - r.mean()
    m2 = np.mean(d**2)
    return float(np.mean(d**3) / m2**1.5), float(np.mean(d**4) / m2**2)


@pytest.mark.parametrize("block", [None, 10])
def test_bootstrap_interval(block: int | None) -> None:
    r = np.random.default_rng(8).normal(6e-4, 0.01, 600)
    interval = sharpe_bootstrap_interval(r, 252, block=block, seed=3)
    assert interval == sharpe_bootstrap_interval(r, 252, block=block, seed=3)  # exact: same seed
    assert interval != sharpe_bootstrap_interval(r, 252, block=block, seed=4)
    low, high = interval
    assert low < sharpe_ratio(r, 252) < high
    short_low, short_high = sharpe_bootstrap_interval(r[:60], 252, block=block, seed=3)
    assert short_high - short_low > 2 * (high - low)  # ~sqrt(10) times wider with a tenth of the data
    narrow_low, narrow_high = sharpe_bootstrap_interval(r, 252, block=block, seed=3, level=0.5)
    assert low < narrow_low < narrow_high < high


def test_bootstrap_width_matches_lo() -> None:
    """For iid normal returns the 95% iid bootstrap spans about 2 * 1.96 Lo standard errors (10%)."""
    r = np.random.default_rng(9).normal(5e-4, 0.01, 1000)
    low, high = sharpe_bootstrap_interval(r, 252, draws=4000)
    assert (high - low) / (2 * 1.959964 * sharpe_standard_error(r, 252)) == pytest.approx(1.0, rel=0.1)


def test_turnover() -> None:
    w = np.array([[0.0, 0.5, 0.5], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert turnover(w) == pytest.approx((0.5 + 1.0) / 2, rel=1e-15)
    held = np.array([[1.0, 0.0, 0.0], [0.0, 0.6, 0.4], [0.0, 1.0, 0.0]])
    assert turnover(w, held) == pytest.approx((1.0 + 0.4 + 1.0) / 3, rel=1e-15)
    assert turnover(np.ones((4, 2)) / 2) == 0.0


def test_summary() -> None:
    r = np.random.default_rng(10).normal(5e-4, 0.01, 300)
    costs = np.full(300, 1e-4)
    s = performance_summary(r, 252, trials=20, turnover=0.05, costs=costs, seed=2)
    assert json.loads(json.dumps(s)) == s
    assert s["periods"] == 300
    assert s["sharpe"] == sharpe_ratio(r, 252)  # exact: the same function
    assert s["max_drawdown"] == max_drawdown(r) > 0  # exact: the same function
    assert (s["sharpe_low"], s["sharpe_high"]) == sharpe_bootstrap_interval(r, 252, seed=2)  # exact
    assert s["deflated_sharpe"] == deflated_sharpe_ratio(r, trials=20)  # exact: the same function
    assert s["annual_turnover"] == pytest.approx(0.05 * 252, rel=1e-15)
    assert s["cost_drag"] == pytest.approx(1e-4 * 252, rel=1e-12)
    assert s["sharpe_gross"] > s["sharpe"]
    assert "turnover" not in performance_summary(r, 252)


BAD = [
    (lambda: sharpe_ratio(np.zeros((3, 2)), 252), "r must be a 1-D"),
    (lambda: sharpe_ratio(np.array([0.1, np.nan, 0.2]), 252), "r must be finite .* at period 1"),
    (lambda: max_drawdown(np.array([0.1, np.inf])), "r must be finite"),
    (lambda: annual_return(np.array([0.1, -1.5]), 252), "r must be finite simple returns >= -1"),
    (lambda: annual_volatility(np.array([0.1]), 252), "r must hold at least 2 periods"),
    (lambda: sortino_ratio(["a", "b"], 252), "r must be an array of numbers"),
    (lambda: sharpe_ratio(np.zeros(3), 0), "periods_per_year must be a finite number > 0"),
    (lambda: calmar_ratio(np.zeros(3), math.nan), "periods_per_year"),
    (lambda: sharpe_bootstrap_interval(np.zeros(3), 252, level=1.0), "level must be"),
    (lambda: sharpe_bootstrap_interval(np.zeros(3), 252, draws=0), "draws must be an int >= 1"),
    (lambda: sharpe_bootstrap_interval(np.zeros(3), 252, block=0), "block must be an int >= 1"),
    (lambda: deflated_sharpe_ratio(np.ones(3), trials=0), "trials must be an int >= 1"),
    (
        lambda: deflated_sharpe_ratio(np.ones(3), trials=2, trial_sharpe_variance=-1.0),
        "trial_sharpe_variance",
    ),
    (lambda: turnover(np.zeros(3)), "weights must be a finite"),
    (lambda: turnover(np.zeros((1, 3))), "weights must hold at least 2"),
    (lambda: turnover(np.zeros((2, 3)), np.zeros((2, 2))), "held must be"),
    (lambda: performance_summary(np.zeros(3), 252, costs=np.zeros(2)), "costs must be"),
    (lambda: performance_summary(np.zeros(3), 252, turnover=-0.1), "turnover must be"),
]


@pytest.mark.parametrize(("call", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_inputs_raise_one_line(call, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        call()
    assert "\n" not in str(info.value)
