"""Training on several assets: a portfolio run's parts (`build_portfolio_run`: the panel uploaded
once, split by time, a `PortfolioEnv` on the train period and a validation evaluator) and its
test report against the baselines (`portfolio_report`). ``tritonrl train --env portfolio:...``
calls these. See docs/pages/portfolio.md."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from tritonrl.toolkit.runfolder import atomic_write_text
from tritonrl.toolkit.training.market import MarketRun, greedy_policy

__all__ = [
    "PORTFOLIO_PREFIX",
    "build_portfolio_run",
    "is_portfolio",
    "portfolio_env_config",
    "portfolio_report",
]

PORTFOLIO_PREFIX = "portfolio:"
REPORT_NAME = "test_report.json"


def is_portfolio(env_id: str) -> bool:
    """``env_id`` names a portfolio source (``portfolio:...``)."""
    return env_id.startswith(PORTFOLIO_PREFIX)


def portfolio_env_config(agent_config: Any, env_overrides: Mapping[str, Any]) -> Any:
    """The run's `PortfolioEnvConfig`: ``actions`` ``"discrete"`` for a discrete agent (the target
    portfolios), ``"simplex"`` for a continuous one; ``env_overrides`` on top.

    Raises:
        ValueError: an unknown field or a bad value (named).
    """
    from tritonrl.toolkit.config import apply_overrides
    from tritonrl.toolkit.envs.portfolio import PortfolioEnvConfig

    kind = getattr(agent_config, "action_kind", "discrete")
    base = PortfolioEnvConfig(actions="discrete" if kind == "discrete" else "simplex")
    try:
        return apply_overrides(base, env_overrides)
    except ValueError as exc:
        raise ValueError(f"--set env.*: {exc}") from None


def build_portfolio_run(
    env_id: str, num_envs: int, env_config: Any, *, device: torch.device | str = "cpu", seed: int = 0
) -> MarketRun:
    """The panel of ``env_id`` (``portfolio:SOURCE``) uploaded once to ``device`` and split by time
    (70/15/15); a seeded, reset `PortfolioEnv` on the train period and a validation evaluator.

    Raises:
        ValueError: an unknown source or option, a missing extra, or data too short (named).
    """
    from tritonrl.toolkit.bars.panel_sources import source_panel
    from tritonrl.toolkit.bars.paneldata import split_panel, upload_panel
    from tritonrl.toolkit.envs.portfolio import PortfolioEnv, PortfolioEvaluator

    if not is_portfolio(env_id):
        raise ValueError(f"{env_id!r} is not a portfolio environment (portfolio:SOURCE)")
    data = upload_panel(source_panel(env_id.removeprefix(PORTFOLIO_PREFIX)), device)
    train, validation, test = split_panel(data, env_config.window)
    env = PortfolioEnv(train, num_envs, env_config, seed=seed)
    env.reset(seed=seed)
    return MarketRun(env, PortfolioEvaluator(validation, env_config), train, validation, test, env_config)


def portfolio_report(
    agent: Any, run: MarketRun, *, seed: int, run_dir: str | Path | None = None, trials: int = 1
) -> dict[str, Any]:
    """The greedy test-period record of ``agent`` beside the four baselines (fitted on the train
    period's closes), with each one's metrics; with ``run_dir``, saved as ``test_report.json`` and
    a tear sheet in ``run_dir/tearsheet`` (without matplotlib: one notice, no figures).

    Raises:
        OSError: the run folder cannot be written.
    """
    from tritonrl.toolkit.backtest.walkforward import evaluate_period

    report = evaluate_period(
        greedy_policy(agent), run.train, run.test, run.env_config, seed=seed, trials=trials
    )
    if run_dir is not None:
        save_report(report, Path(run_dir))
    return report


def save_report(report: Mapping[str, Any], folder: Path) -> None:
    """``test_report.json`` and the tear sheet of ``report`` in ``folder`` (atomic writes)."""
    atomic_write_text(folder / REPORT_NAME, json.dumps(report, indent=1) + "\n")
    try:
        from tritonrl.toolkit.backtest.tearsheet import write_tearsheet

        write_tearsheet(folder / "tearsheet", report)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != "matplotlib":
            raise
        import sys

        print(
            "notice: matplotlib is not installed: the tear sheet is skipped (pip install 'tritonrl[train]')",
            file=sys.stderr,
        )
