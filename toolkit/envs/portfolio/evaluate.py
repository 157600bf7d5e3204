"""One pass of a policy over a whole period (`run_period`): the per-step record the walk-forward
backtest and the tear sheet read, and the training loop's validation hook (`PortfolioEvaluator`).
See docs/pages/portfolio.md."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tritonrl.toolkit.bars.paneldata import PanelData
from tritonrl.toolkit.envs.portfolio.env import PortfolioEnv, PortfolioEnvConfig

__all__ = ["HoldPolicy", "PortfolioEvaluator", "hold_policy", "run_period", "weights_policy"]

Policy = Callable[[torch.Tensor], Any]


def run_period(
    policy: Policy, data: PanelData, config: PortfolioEnvConfig, *, seed: int = 0
) -> dict[str, Any]:
    """Step ``policy`` (``obs [1, D] -> action``) once through ``data``: from decision row
    ``W - 1`` to the last, one env, every cost of ``config``.

    Returns:
        ``dates`` (``[S + 1]`` ISO dates of the equity points), ``log_returns`` ``[S]``,
        ``equity`` ``[S + 1]`` from 1.0, ``weights`` ``[S, N + 1]`` held after each step,
        ``turnover`` and ``costs`` ``[S]``, ``symbols`` and ``periods_per_year`` (numpy f64).

    Raises:
        ValueError: data shorter than ``window + 1`` rows, or as `PortfolioEnv`.
    """
    decisions = len(data) - config.window
    cfg = dataclasses.replace(config, random_start=False, episode_length=max(decisions, 1))
    env = PortfolioEnv(data, 1, cfg, seed=seed)
    obs, _ = env.reset(seed=seed)
    rewards, weights, turnover, costs = [], [], [], []
    with torch.no_grad():
        for _ in range(decisions):
            obs, reward, terminated, truncated, info = env.step(policy(obs))
            rewards.append(info["equity"])
            weights.append(info["weights"][0])
            turnover.append(info["turnover"])
            costs.append(info["cost"])
            if bool(terminated[0]) or bool(truncated[0]):
                break
    equity = torch.cat(rewards).double().cpu().numpy()
    steps = len(equity)
    first = config.window - 1
    return {
        "dates": [str(d)[:10] for d in data.time[first : first + steps + 1]],
        "log_returns": np.diff(np.log(np.concatenate(([1.0], equity)))),
        "equity": np.concatenate(([1.0], equity)),
        "weights": torch.stack(weights).double().cpu().numpy(),
        "turnover": torch.cat(turnover).double().cpu().numpy(),
        "costs": torch.cat(costs).double().cpu().numpy(),
        "symbols": list(data.symbols),
        "periods_per_year": float(data.periods_per_year),
    }


def weights_policy(weights: np.ndarray | torch.Tensor, device: torch.device | str = "cpu") -> Policy:
    """A policy for ``actions="weights"`` that targets the fixed ``[N + 1]`` weights every step."""
    w = torch.as_tensor(np.asarray(weights, dtype=np.float32), device=device)[None]
    return lambda obs: w.expand(obs.shape[0], -1)


class HoldPolicy:
    """Buy ``weights`` ``[N + 1]`` at the first step, then hold: NaN rows, which a
    ``actions="weights"`` env reads as "no trade" (the drifted weights are kept, nothing is paid)."""

    def __init__(self, weights: np.ndarray | torch.Tensor, device: torch.device | str = "cpu") -> None:
        self.first = weights_policy(weights, device)
        self.started = False

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        action = self.first(obs)
        if self.started:
            return torch.full_like(action, float("nan"))
        self.started = True
        return action


def hold_policy(weights: np.ndarray | torch.Tensor, device: torch.device | str = "cpu") -> HoldPolicy:
    """A `HoldPolicy` of ``weights``."""
    return HoldPolicy(weights, device)


class PortfolioEvaluator:
    """The training loop's ``evaluate_policy`` hook: one greedy pass over ``data`` (the
    validation period) with `run_period`; ``episodes`` is ignored."""

    def __init__(self, data: PanelData, env_config: PortfolioEnvConfig) -> None:
        self.data, self.env_config = data, env_config
        self.last: dict[str, Any] | None = None

    def evaluate_policy(self, policy: Policy, episodes: int, seed: int) -> dict[str, Any]:
        """``{"mean_return": log growth, "std_return": 0, "mean_length", "sharpe", "turnover",
        "report"}`` (``report``: the three figures again, as a market run's evaluation has one)."""
        del episodes
        rec = run_period(policy, self.data, self.env_config, seed=seed)
        self.last = rec
        r = rec["log_returns"]
        sd = float(r.std(ddof=1)) if len(r) > 1 else 0.0
        sharpe = float(r.mean() / sd * math.sqrt(rec["periods_per_year"])) if sd > 0 else 0.0
        turnover = float(rec["turnover"].mean()) if len(r) else 0.0
        return {
            "mean_return": float(r.sum()),
            "std_return": 0.0,
            "mean_length": float(len(r)),
            "sharpe": sharpe,
            "turnover": turnover,
            "report": {"log_return": float(r.sum()), "sharpe": sharpe, "turnover": turnover},
        }
