"""Training on market data: a market run's parts, its collector and its test report.

:func:`build_market_run` uploads the bars of a source (``market:SOURCE``) once and splits them by
time into train / validation / test periods: a :class:`~tritonrl.toolkit.envs.market.env.MarketEnv`
on the train period, stepped by the device collector (:func:`market_collector`), a validation
evaluator for the loop, and the test-period report after training (:func:`market_report`). The
preset's market overrides and defaults come from :func:`market_preset`; the env config from
:func:`env_config_for`. The command line (``tritonrl train --env market:...``) calls these.

Guide: docs/pages/market.md ("From the command line", "Presets on market data").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tritonrl.toolkit.bars import MarketData
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
    """The market overrides and defaults a preset (a :class:`tritonrl.toolkit.preset.Preset`)
    declares in its ``market`` field; a preset without one: no overrides and the generic defaults
    of :class:`~tritonrl.toolkit.preset.MarketPreset`."""
    return preset.market if preset.market is not None else MarketPreset()


def env_config_for(agent_config: Any, env_overrides: Mapping[str, Any]) -> Any:
    """The :class:`~tritonrl.toolkit.envs.market.env.MarketEnvConfig` of a run: the default one with
    ``actions`` following the agent config's ``action_kind`` (``"continuous"`` or ``"discrete"``;
    discrete when the config has none) and ``env_overrides`` on top.

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
    """The parts of a market run: the training env, the validation evaluator, the test period
    and, once the agent is built, its collector (:func:`market_collector`)."""

    env: Any
    evaluator: Any
    train: MarketData
    validation: MarketData
    test: MarketData
    env_config: Any
    collector: Any = None
    """The :class:`~tritonrl.toolkit.training.collector.Collector` stepping :attr:`env` (``None``
    until the agent is built: the loop then steps through ``agent.act`` / ``agent.observe``)."""


def build_market_run(
    env_id: str, num_envs: int, env_config: Any, *, device: torch.device | str = "cpu", seed: int = 0
) -> MarketRun:
    """Bars of ``env_id`` (``market:SOURCE``), uploaded once to ``device`` and split by time; a
    :class:`~tritonrl.toolkit.envs.market.env.MarketEnv` of ``num_envs`` on the train period (seeded
    with ``seed``, reset) and a validation evaluator.

    Raises:
        ValueError: an unknown source or option, a missing extra, data too short for the window
            and episode length (each named by the source, the split or the env).
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
    """The :class:`~tritonrl.toolkit.training.collector.Collector` of a market run (every agent of
    the agent protocol, ICM included: the collector hands each step to ``agent.observe``).

    ``sync_every=1``: an f32 acting snapshot follows the learner after every update, as
    ``agent.act`` would (on a CPU, where the learner is f32 too, the actions are the same).

    Raises:
        TypeError: the agent has no ``acting_policy`` or ``observe``.
        ValueError: ``sync_every`` below 1, or the agent built for another number of
            environments or device than ``env``.
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
    """The test-period report of ``agent`` (:func:`~tritonrl.toolkit.envs.market.evaluate.evaluate_market`,
    greedy, against buy-and-hold and 16 random runs); with ``run_dir``, saved there as
    ``test_report.json`` and drawn as ``equity.png`` (skipped with one notice line without
    matplotlib).

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
