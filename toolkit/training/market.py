"""Training on market data from the command line: ``--env market:...``, presets, the test report.

``python -m tritonrl.toolkit train --agent rainbow --env market:synthetic`` builds, in order:

1. the bars of the source after ``market:`` (:func:`tritonrl.toolkit.envs.market.data.source_bars`:
   ``synthetic[,ar=F][,seed=N][,bars=N][,regimes=N]``, ``googl``, ``eurusd``, ``csv=PATH``),
   uploaded once to the device and split by time into train / validation / test periods
   (70 / 15 / 15 %);
2. a :class:`~tritonrl.toolkit.envs.market.env.MarketEnv` of ``--num-envs`` environments on the
   train period, with random starts, driven by a
   :class:`~tritonrl.toolkit.training.collector.Collector` (:func:`market_collector`): the loop's
   every vector step is ``collector.step()``, so env, acting policy, replay and learner stay on
   one device with no host read per step;
3. a :class:`~tritonrl.toolkit.envs.market.evaluate.MarketEvaluator` on the validation period, the
   loop's evaluation (``eval/mean_return`` is the greedy policy's log return over that period);
4. after training, :func:`~tritonrl.toolkit.envs.market.evaluate.evaluate_market` on the test period:
   the report is printed (against buy-and-hold and random) and saved as ``test_report.json``
   with ``equity.png`` beside ``curve.png`` in the run folder.

**Presets for market data.** Each preset keeps its name; a market run starts from the preset's
config with the preset's market overrides on top (:attr:`tritonrl.toolkit.preset.Preset.market`, a
:class:`~tritonrl.toolkit.preset.MarketPreset`, read by :func:`market_preset`; then the user's
``--set``), and takes its default steps, environments and evaluation interval from there too. The
built-in presets declare one set per family (every DQN-family preset, discrete, continuous and
recurrent PPO): per-step rewards are log returns (about 1e-2), so C51's support shrinks to
``[-v, v]``; the discount falls to 0.5 (a position pays over the next bar or two); exploration
decays within the first fifth of the run; DQN learns from batches of 256 and stages n-step windows
on the device (``replay_staging="device"``: no host read in a step). The tests
(``tests/agents/test_market_learning.py``) train with these overrides at smaller budgets. A
resumed run never re-applies them: its config comes from the checkpoint.

**Environment settings** come as ``--set env.FIELD=VALUE`` (fields of
:class:`~tritonrl.toolkit.envs.market.env.MarketEnvConfig`: ``window``, ``episode_length``, ``cost``,
``borrow_cost``, ``max_drawdown``); ``actions`` follows the agent config's ``action_kind``
(``"continuous"`` for PPO's ``continuous`` and ``flow`` policies; discrete for a config without
one) unless set. The env config is part of the run's identity: a resume with other settings is
refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tritonrl.toolkit.envs.market.types import MarketData
from tritonrl.toolkit.preset import MarketPreset, Preset

__all__ = [
    "ENV_PREFIX",
    "MarketPreset",
    "MarketRun",
    "build_market_run",
    "env_config_for",
    "is_market",
    "market_collector",
    "market_preset",
    "split_overrides",
    "market_report",
]

ENV_PREFIX = "market:"
ENV_SET_PREFIX = "env."
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


def split_overrides(overrides: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``--set`` items as (agent config fields, ``env.``-prefixed env config fields without the prefix)."""
    agent = {k: v for k, v in overrides.items() if not k.startswith(ENV_SET_PREFIX)}
    env = {k.removeprefix(ENV_SET_PREFIX): v for k, v in overrides.items() if k.startswith(ENV_SET_PREFIX)}
    return agent, env


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
    from tritonrl.toolkit.envs.market.data import source_bars, split, upload
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
        (folder / REPORT_NAME).write_text(json.dumps(report, indent=1) + "\n")
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
