"""Backtest: `metrics` (the statistics of per-period returns: Sharpe, drawdown, standard errors,
the deflated Sharpe ratio, one summary dict) and `baselines` (equal weight, buy and hold, minimum
variance, momentum from training closes). May import numpy, the toolkit core, ``bars``, ``kernels``.
"""

from tritonrl.toolkit.backtest.baselines import (
    Baseline,
    baselines,
    buy_and_hold,
    equal_weight,
    minimum_variance,
    momentum,
)
from tritonrl.toolkit.backtest.metrics import (
    EULER_GAMMA,
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

__all__ = [
    "EULER_GAMMA",
    "Baseline",
    "annual_return",
    "annual_volatility",
    "baselines",
    "buy_and_hold",
    "calmar_ratio",
    "deflated_sharpe_ratio",
    "equal_weight",
    "expected_max_sharpe",
    "max_drawdown",
    "minimum_variance",
    "momentum",
    "performance_summary",
    "probabilistic_sharpe_ratio",
    "sharpe_bootstrap_interval",
    "sharpe_ratio",
    "sharpe_standard_error",
    "sortino_ratio",
    "total_return",
    "turnover",
]
