"""Backtests of portfolio strategies: `metrics` (the statistics of per-period returns: Sharpe and
its standard errors, drawdown, the deflated Sharpe ratio, one summary dict), `baselines` (equal
weight, buy and hold, minimum variance, momentum from training closes), `walkforward` (rolling
folds, a period beside the baselines, the stitched record; it imports the portfolio env, hence
gymnasium: not re-exported here), `tearsheet` and `report`. May import
the toolkit core, ``envs`` and ``bars``; never ``training``, ``cli`` or ``agents``. See
docs/pages/portfolio.md.
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
