"""Evaluation over a whole held-out period: the greedy policy against buy-and-hold and random.

[`evaluate_market`][tritonrl.toolkit.envs.market.evaluate.evaluate_market] runs the period as one episode of
``2 + random_runs`` rows stepped together (the policy, buy-and-hold, random runs) and computes every figure on
the host in f64; [`MarketEvaluator`][tritonrl.toolkit.envs.market.evaluate.MarketEvaluator] is the training
loop's hook for it; [`plot_equity`][tritonrl.toolkit.envs.market.evaluate.plot_equity] draws a run folder's
``equity.png``. See docs/pages/market.md ("The test-period report").
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tritonrl.toolkit.bars.types import MarketData
from tritonrl.toolkit.runfolder import save_figure

__all__ = ["MarketEvaluator", "evaluate_market", "format_report", "plot_equity", "strategy_figures"]

Policy = Callable[[torch.Tensor], torch.Tensor]


def strategy_figures(rewards: np.ndarray, positions: np.ndarray, periods_per_year: float) -> dict[str, Any]:
    """The figures of one strategy over a period, in f64.

    Args:
        rewards: ``[n]`` per-decision rewards (log returns net of costs).
        positions: ``[n]`` the position held after each decision (``p_t``), in [-1, 1].

    Returns:
        ``total_return``, ``annual_return``, ``sharpe`` (sample std; 0 when rewards do not vary),
        ``max_drawdown``, ``turnover`` (from a flat start), ``mean_position``, ``log_return``
        (``sum r``) and ``equity`` (a list of ``n + 1`` floats starting at 1).

    Raises:
        ValueError: empty or mismatched inputs.
    """
    r = np.asarray(rewards, dtype=np.float64)
    p = np.asarray(positions, dtype=np.float64)
    if r.ndim != 1 or r.shape != p.shape or r.size == 0:
        raise ValueError(f"rewards {r.shape} and positions {p.shape} must be equal, non-empty 1-D arrays")
    log_equity = np.concatenate([[0.0], np.cumsum(r)])
    equity = np.exp(log_equity)
    peak = np.maximum.accumulate(equity)
    std = float(r.std(ddof=1)) if r.size > 1 else 0.0
    sharpe = float(r.mean()) / std * math.sqrt(periods_per_year) if std > 1e-12 else 0.0
    return {
        "total_return": float(equity[-1] - 1.0),
        "annual_return": float(math.expm1(float(r.mean()) * periods_per_year)),
        "sharpe": sharpe,
        "max_drawdown": float((1.0 - equity / peak).max()),
        "turnover": float(np.abs(np.diff(p, prepend=0.0)).sum()),
        "mean_position": float(p.mean()),
        "log_return": float(log_equity[-1]),
        "equity": equity.tolist(),
    }


def _period_config(env_config: Any, decisions: int) -> Any:
    """``env_config`` with the episode made the whole period: no random start, no drawdown stop."""
    return dataclasses.replace(env_config, random_start=False, max_drawdown=1.0, episode_length=decisions)


def _row_actions(
    chosen: torch.Tensor, rows: int, discrete: bool, gen: torch.Generator, device: torch.device
) -> torch.Tensor:
    """One step's actions: row 0 ``chosen``, row 1 long, the others uniform from ``gen``."""
    if discrete:
        actions = torch.empty(rows, dtype=torch.long, device=device)
        actions[0] = chosen.to(device=device, dtype=torch.long).reshape(1)
        actions[1] = 2  # long
        actions[2:] = torch.randint(0, 3, (rows - 2,), generator=gen, device=device)
    else:
        actions = torch.empty(rows, 1, dtype=torch.float32, device=device)
        actions[0] = chosen.to(device=device, dtype=torch.float32).reshape(1)
        actions[1] = 1.0
        actions[2:] = torch.rand(rows - 2, 1, generator=gen, device=device) * 2.0 - 1.0
    return actions


def _random_figures(r: np.ndarray, p: np.ndarray, periods_per_year: float) -> dict[str, Any]:
    """The mean figures of the random runs (columns of ``[n, runs]``), with ``sharpe_std`` and ``runs``."""
    runs = [strategy_figures(r[:, i], p[:, i], periods_per_year) for i in range(r.shape[1])]
    mean: dict[str, Any] = {k: float(np.mean([f[k] for f in runs])) for k in runs[0] if k != "equity"}
    mean["equity"] = np.mean([f["equity"] for f in runs], axis=0).tolist()
    mean["sharpe_std"] = float(np.std([f["sharpe"] for f in runs], ddof=1)) if len(runs) > 1 else 0.0
    mean["runs"] = len(runs)
    return mean


@torch.no_grad()
def evaluate_market(
    policy: Policy,
    data: MarketData,
    env_config: Any,
    *,
    seed: int = 0,
    random_runs: int = 16,
    steps: bool = False,
) -> dict[str, Any]:
    """Run ``policy`` greedily over all of ``data`` (one period) beside buy-and-hold and random.

    Args:
        policy: greedy ``policy(obs [1, W*F + 1]) -> action`` (``[1]`` int64 or ``[1, 1]`` float),
            called with the agent's row alone, as a live stream decides (a matmul's rounding may
            depend on the batch size). Its ``reset(mask [1] bool)``, if any, is called first.
        data: the period, with ``window - 1`` warm-up rows before its first decision.
        env_config: a [`MarketEnvConfig`][tritonrl.toolkit.envs.market.env.MarketEnvConfig];
            ``random_start``, ``max_drawdown`` and ``episode_length`` are overridden.
        random_runs: rows acting at random (0: the report has no ``random`` entry).
        steps: also return the agent's decisions one by one (``"steps"``).

    Returns:
        ``{"period", "agent", "buy_and_hold", "random", "sharpe_stderr"}`` with figures as in
        [`strategy_figures`][tritonrl.toolkit.envs.market.evaluate.strategy_figures]; with ``steps``, also
            ``"steps"``: ``[n]`` numpy arrays
        ``time``, ``action``, ``position``, ``reward``.

    Raises:
        ValueError: ``data`` holds no decision after the warm-up, or ``random_runs < 0``.
    """
    from tritonrl.toolkit.envs.market.env import MarketEnv

    if isinstance(random_runs, bool) or not isinstance(random_runs, int) or random_runs < 0:
        raise ValueError(f"random_runs must be an int >= 0, got {random_runs!r}")
    window = int(env_config.window)
    decisions = len(data) - window
    if decisions < 1:
        raise ValueError(
            f"the period {data.name!r} has {len(data)} rows: it needs more than window={window} "
            "(window - 1 warm-up rows, then at least one decision and the bar after it)"
        )
    rows = 2 + random_runs
    env = MarketEnv(data, rows, _period_config(env_config, decisions), seed=seed)
    device = env.device
    discrete = env_config.actions == "discrete"
    gen = torch.Generator(device=device).manual_seed(int(seed))
    obs, _ = env.reset(seed=seed)
    reset = getattr(policy, "reset", None)
    if reset is not None:
        reset(torch.ones(1, dtype=torch.bool, device=device))
    rewards = torch.empty(decisions, rows, dtype=torch.float32, device=device)
    positions = torch.empty(decisions, rows, dtype=torch.float32, device=device)
    taken = torch.empty(decisions, dtype=torch.long if discrete else torch.float32, device=device)
    try:
        for k in range(decisions):
            chosen = policy(obs[:1])  # the agent's row alone, as a live stream decides
            actions = _row_actions(chosen, rows, discrete, gen, device)
            if steps:
                taken[k] = actions[0].reshape(())
            obs, reward, _, _, info = env.step(actions)
            rewards[k] = reward
            positions[k] = info["position"].reshape(rows)
    finally:
        env.close()
    r = rewards.double().cpu().numpy()  # the one read of the episode
    p = positions.double().cpu().numpy()
    ppy = float(data.periods_per_year)
    report: dict[str, Any] = {
        "period": {
            "name": data.name,
            "start": str(data.time[window - 1]),
            "end": str(data.time[-1]),
            "decisions": decisions,
            "periods_per_year": ppy,
        },
        "agent": strategy_figures(r[:, 0], p[:, 0], ppy),
        "buy_and_hold": strategy_figures(r[:, 1], p[:, 1], ppy),
        "sharpe_stderr": math.sqrt(ppy / decisions),
    }
    if random_runs:
        report["random"] = _random_figures(r[:, 2:], p[:, 2:], ppy)
    if steps:
        report["steps"] = {
            "time": np.asarray(data.time[window - 1 : window - 1 + decisions]).astype("datetime64[s]"),
            "action": taken.cpu().numpy(),
            "position": positions[:, 0].cpu().numpy(),
            "reward": rewards[:, 0].cpu().numpy(),
        }
    return report


class MarketEvaluator:
    """The training loop's ``evaluate_policy`` hook for a market run: one greedy pass over ``data``
    (the validation period) with `evaluate_market`; ``episodes`` is ignored."""

    def __init__(self, data: MarketData, env_config: Any, *, random_runs: int = 0) -> None:
        self.data, self.env_config, self.random_runs = data, env_config, random_runs
        self.last: dict[str, Any] | None = None

    def evaluate_policy(self, policy: Policy, episodes: int, seed: int) -> dict[str, Any]:
        """Evaluate ``policy`` on the period; ``{"mean_return", "std_return" (0), "sharpe",
        "buy_and_hold_return", "report"}``."""
        del episodes
        report = evaluate_market(policy, self.data, self.env_config, seed=seed, random_runs=self.random_runs)
        self.last = report
        agent = report["agent"]
        return {
            "mean_return": agent["log_return"],
            "std_return": 0.0,
            "mean_length": float(report["period"]["decisions"]),
            "sharpe": agent["sharpe"],
            "buy_and_hold_return": report["buy_and_hold"]["log_return"],
            "report": report,
        }


_ROWS = (("agent", "agent (greedy)"), ("buy_and_hold", "buy-and-hold"), ("random", "random"))


def format_report(report: Mapping[str, Any]) -> str:
    """A small text table of `evaluate_market`'s report (one line per strategy)."""
    period = report["period"]
    lines = [
        f"test period {period['name']} {period['start']} .. {period['end']} "
        f"({period['decisions']} decisions; Sharpe standard error {report['sharpe_stderr']:.2f})",
        f"{'strategy':<16} {'return':>9} {'Sharpe':>7} {'max DD':>7} {'turnover':>9}",
    ]
    for key, label in _ROWS:
        f = report.get(key)
        if f is None:
            continue
        spread = f" (+- {f['sharpe_std']:.2f} over {f['runs']} runs)" if "sharpe_std" in f else ""
        lines.append(
            f"{label:<16} {100 * f['total_return']:>8.1f}% {f['sharpe']:>7.2f} "
            f"{100 * f['max_drawdown']:>6.1f}% {f['turnover']:>9.1f}{spread}"
        )
    return "\n".join(lines)


def plot_equity(report: Mapping[str, Any], png_path: str | Path, *, title: str | None = None) -> Path:
    """Draw the equity curves of a report (agent, buy-and-hold, mean of the random runs) to a PNG.

    Raises:
        ModuleNotFoundError: matplotlib is not installed (the ``train`` extra).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label in _ROWS:
        f = report.get(key)
        if f is not None:
            ax.plot(f["equity"], label=f"{label} (Sharpe {f['sharpe']:.2f})")
    period = report["period"]
    ax.set_xlabel(f"decisions from {period['start']}")
    ax.set_ylabel("equity")
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title or f"{period['name']}: test period")
    fig.tight_layout()
    try:
        return save_figure(fig, png_path, dpi=100)
    finally:
        plt.close(fig)
