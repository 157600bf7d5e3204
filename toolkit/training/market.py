"""Training on market data: a market run's parts, its collector and its test report.

[`build_market_run`][tritonrl.toolkit.training.market.build_market_run] uploads a source's bars once and
splits them by time into train, validation and test periods;
[`market_collector`][tritonrl.toolkit.training.market.market_collector] steps the train env on the device and
[`market_report`][tritonrl.toolkit.training.market.market_report] reports the test period. ``tritonrl train
--env market:...`` calls these. See docs/pages/market.md ("From the command line").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tritonrl.toolkit.preset import MarketPreset, Preset
from tritonrl.toolkit.runfolder import atomic_write_text

__all__ = [
    "ENV_PREFIX",
    "MarketPreset",
    "MarketRun",
    "build_market_run",
    "env_config_for",
    "is_market",
    "market_collector",
    "market_preset",
    "market_report",
]

ENV_PREFIX = "market:"
REPORT_NAME = "test_report.json"
EQUITY_NAME = "equity.png"


def is_market(env_id: str) -> bool:
    """``env_id`` names a market source (``market:...``)."""
    return env_id.startswith(ENV_PREFIX)


def market_preset(preset: Preset) -> MarketPreset:
    """The market overrides and defaults a preset declares (``Preset.market``), or the generic ones."""
    return preset.market if preset.market is not None else MarketPreset()


def env_config_for(agent_config: Any, env_overrides: Mapping[str, Any]) -> Any:
    """The run's `MarketEnvConfig`: ``actions`` following the
    agent config's ``action_kind`` (discrete without one), ``env_overrides`` on top.

    Raises:
        ValueError: an unknown field or a bad value (named).
    """
    from tritonrl.toolkit.config import apply_overrides
    from tritonrl.toolkit.envs.market.env import MarketEnvConfig

    base = MarketEnvConfig(actions=getattr(agent_config, "action_kind", "discrete"))
    try:
        return apply_overrides(base, env_overrides)
    except ValueError as exc:
        raise ValueError(f"--set env.*: {exc}") from None


@dataclass
class MarketRun:
    """The parts of a market (or portfolio) run: the training env, the validation evaluator, the
    test period and, once the agent is built, its collector (`market_collector`); the periods are
    `MarketData` (`PanelData` for a portfolio)."""

    env: Any
    evaluator: Any
    train: Any
    validation: Any
    test: Any
    env_config: Any
    collector: Any = None
    """The `Collector` stepping `env` (``None``
    until the agent is built: the loop then steps through ``agent.act`` / ``agent.observe``)."""


def build_market_run(
    env_id: str, num_envs: int, env_config: Any, *, device: torch.device | str = "cpu", seed: int = 0
) -> MarketRun:
    """Bars of ``env_id`` (``market:SOURCE``) uploaded once to ``device`` and split by time; a seeded,
    reset [`MarketEnv`][tritonrl.toolkit.envs.market.env.MarketEnv] on the train period and a validation
    evaluator.

    Raises:
        ValueError: an unknown source or option, a missing extra, or data too short (named).
    """
    from tritonrl.toolkit.bars import source_bars, split, upload
    from tritonrl.toolkit.envs.market.env import MarketEnv
    from tritonrl.toolkit.envs.market.evaluate import MarketEvaluator

    if not is_market(env_id):
        raise ValueError(f"{env_id!r} is not a market environment (market:SOURCE)")
    bars = source_bars(env_id.removeprefix(ENV_PREFIX))
    data = upload(bars, device)
    train, validation, test = split(data, env_config.window)
    env = MarketEnv(train, num_envs, env_config, seed=seed)
    env.reset(seed=seed)
    return MarketRun(env, MarketEvaluator(validation, env_config), train, validation, test, env_config)


def market_collector(agent: Any, env: Any, *, sync_every: int = 1) -> Any:
    """The `Collector` of a market run; ``sync_every=1``
    keeps the f32 acting snapshot equal to the learner after every update.

    Raises:
        TypeError: the agent has no ``acting_policy`` or ``observe``.
        ValueError: ``sync_every`` below 1, or an agent built for another ``num_envs`` or device.
    """
    from tritonrl.toolkit.training.collector import Collector

    return Collector(agent, env, sync_every=sync_every)


def greedy_policy(agent: Any) -> Any:
    """The agent's greedy acting function (``eval_policy()`` if it has one, as the loop uses)."""
    make = getattr(agent, "eval_policy", None)
    return make() if make is not None else (lambda obs: agent.act(obs, explore=False))


def market_report(
    agent: Any, run: MarketRun, *, seed: int, run_dir: str | Path | None = None
) -> dict[str, Any]:
    """The greedy test-period report of ``agent`` against buy-and-hold and random runs; with ``run_dir``,
    saved as ``test_report.json`` and ``equity.png`` (without matplotlib: one notice, no figure).

    Raises:
        OSError: the run folder cannot be written.
    """
    from tritonrl.toolkit.envs.market.evaluate import evaluate_market, plot_equity

    report = evaluate_market(greedy_policy(agent), run.test, run.env_config, seed=seed)
    if run_dir is not None:
        folder = Path(run_dir)
        atomic_write_text(folder / REPORT_NAME, json.dumps(report, indent=1) + "\n")
        try:
            plot_equity(report, folder / EQUITY_NAME)
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.split(".")[0] != "matplotlib":
                raise
            import sys

            print(
                f"notice: matplotlib is not installed: {EQUITY_NAME} skipped (pip install 'tritonrl[train]')",
                file=sys.stderr,
            )
    return report
