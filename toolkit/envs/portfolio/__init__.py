"""The portfolio environment: allocations over several assets and cash on the device
(`PortfolioEnv`), the action-to-weights maps and one pass over a period. Reads its bars from
``toolkit.bars`` (`PanelData`). See docs/pages/portfolio.md."""

from tritonrl.toolkit.envs.portfolio.env import PortfolioEnv, PortfolioEnvConfig
from tritonrl.toolkit.envs.portfolio.evaluate import (
    HoldPolicy,
    PortfolioEvaluator,
    hold_policy,
    run_period,
    weights_policy,
)
from tritonrl.toolkit.envs.portfolio.weights import discrete_portfolios, target_weights

__all__ = [
    "HoldPolicy",
    "PortfolioEnv",
    "PortfolioEnvConfig",
    "PortfolioEvaluator",
    "discrete_portfolios",
    "hold_policy",
    "run_period",
    "target_weights",
    "weights_policy",
]
