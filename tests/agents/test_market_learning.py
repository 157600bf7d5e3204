"""Agents learn to trade a planted signal, and nothing is "learned" from a random walk.

Fixed seeds, CPU, one torch thread, the market presets (:func:`market_preset`) with a window of 8
bars (the planted signal needs one), stepped by the device collector as the CLI steps a market
run (:func:`market_collector`). Data: ``synthetic_bars`` with 5,000 daily bars split 70 / 15
/ 15 % by time; every figure is over the held-out test period (749 decisions), from
:func:`evaluate_market` (greedy, beside buy-and-hold and 16 random runs). Noise is the standard
error of an annualised Sharpe estimate from ``n`` returns, ``SE = sqrt(252 / n) = 0.58``.

- planted signal (``ar=0.3``; the rule that knows it scores Sharpe 3.4): ``dqn`` 20k env steps,
  ``ppo`` 80k (16 envs) reach Sharpe > 1.0, above buy-and-hold (1.05) and above random
  (mean + 2 std of its runs); ~13 s and ~8 s on a 2-core machine; ``sac`` (continuous
  positions) 10k steps the same bounds, ~20 s of CPU (52 s wall on the shared machine at load 6);
- random walk (``ar=0``, one regime): the same agents and budgets stay within noise of
  buy-and-hold (Sharpe difference < 3 SE); ~13 s and ~8 s;
- overlapped (``LoopConfig(overlap=True)``, the learner in a second process): the planted-signal
  test on the same budgets and bounds; ~15 s and ~10 s;
- the look-ahead check: a policy that reads the next return breaks that bound (the test can
  fail); < 1 s;
- real series (gym-anytrading's GOOGL): ``ppo`` 8k steps completes with finite figures; ~2 s.

Measured while tuning (3 seeds each): ``dqn`` test Sharpe 1.45 to 2.11, ``ppo`` 3.05 to 3.26,
``sac`` (10k steps) 2.89 to 3.25: its seed-1 margin over the 1.0 bound is 3.8 SE.
``dqn`` over seeds 1-6 (the tuning seeds and three more), sequential 2.00, 1.45, 2.11, 1.31, 0.74,
1.25 (mean 1.48), overlapped 1.33, 1.04, 1.37, 2.09, 0.64, 0.77 (mean 1.29): the two modes differ
by less than one SE of the mean of six (0.24), and either test would fail on some seeds (seed 5
sequential): the bounds are for the fixed seed 1. ``ppo`` overlapped, seed 1: 3.31.
"""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

from tritonrl.cli.registry import get_agent
from tritonrl.toolkit.envs.market.evaluate import evaluate_market
from tritonrl.toolkit.training.loop import LoopConfig, run_training
from tritonrl.toolkit.training.market import (
    build_market_run,
    env_config_for,
    market_collector,
    market_preset,
    market_report,
)

pytestmark = pytest.mark.learning

PLANTED = "market:synthetic,ar=0.3"
RANDOM_WALK = "market:synthetic,ar=0.0,regimes=1"
BUDGETS = {"dqn": 20_000, "ppo": 80_000, "sac": 10_000}
WINDOW = 8


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def train_and_report(
    agent_name: str, env_id: str, steps: int, *, seed: int = 1, overlap: bool = False
) -> dict:
    """Train ``agent_name`` (its market preset) on the train period; the test-period report.
    ``overlap``: the overlapped loop steps the env (a learner process, acting one sync interval
    behind), as ``train --overlap`` does, in place of the collector."""
    spec = get_agent(agent_name)
    overrides = dict(market_preset(spec).overrides)
    config = spec.configure(overrides, total_steps=steps)
    run = build_market_run(env_id, 16, env_config_for(config, {"window": WINDOW}), seed=seed)
    agent = spec.build(
        run.env.single_observation_space,
        run.env.single_action_space,
        num_envs=16,
        seed=seed,
        total_steps=steps,
        overrides=overrides,
    )
    cfg = LoopConfig(total_steps=steps, seed=seed, log_every=steps, final_eval=False, overlap=overlap)
    collector = None if overlap else market_collector(agent, run.env)  # as the CLI steps a market run
    run_training(agent, run.env, spec.schedule(agent), cfg, evaluator=run.evaluator, collector=collector)
    report = market_report(agent, run, seed=seed)
    a, b, r = report["agent"], report["buy_and_hold"], report["random"]
    print(
        f"{agent_name} on {env_id}: test Sharpe {a['sharpe']:.2f} (buy-and-hold {b['sharpe']:.2f}, "
        f"random {r['sharpe']:.2f} +- {r['sharpe_std']:.2f}, SE {report['sharpe_stderr']:.2f})"
    )
    return report


@pytest.mark.parametrize("agent_name", ["dqn", "ppo", "sac"])
def test_agents_trade_a_planted_signal(agent_name: str) -> None:
    report = train_and_report(agent_name, PLANTED, BUDGETS[agent_name])
    sharpe = report["agent"]["sharpe"]
    assert sharpe > 1.0
    assert sharpe > report["buy_and_hold"]["sharpe"]
    assert sharpe > report["random"]["sharpe"] + 2 * report["random"]["sharpe_std"]


@pytest.mark.parametrize("agent_name", ["dqn", "ppo"])
def test_overlapped_agents_trade_a_planted_signal(agent_name: str) -> None:
    # the same budgets and bounds as the sequential test above, acting one sync interval behind
    report = train_and_report(agent_name, PLANTED, BUDGETS[agent_name], overlap=True)
    sharpe = report["agent"]["sharpe"]
    assert sharpe > 1.0
    assert sharpe > report["buy_and_hold"]["sharpe"]
    assert sharpe > report["random"]["sharpe"] + 2 * report["random"]["sharpe_std"]


@pytest.mark.parametrize("agent_name", ["dqn", "ppo"])
def test_no_agent_beats_buy_and_hold_on_a_random_walk(agent_name: str) -> None:
    report = train_and_report(agent_name, RANDOM_WALK, BUDGETS[agent_name])
    excess = report["agent"]["sharpe"] - report["buy_and_hold"]["sharpe"]
    assert excess < 3 * report["sharpe_stderr"], f"excess Sharpe {excess:.2f} on a random walk"


def test_a_look_ahead_policy_breaks_the_random_walk_bound() -> None:
    """The bound above can fail: a policy that peeks at the next return (what a leaking
    evaluation would let an agent learn) beats buy-and-hold by far more than 3 SE."""
    spec = get_agent("dqn")
    run = build_market_run(RANDOM_WALK, 1, env_config_for(spec.config, {"window": WINDOW}), seed=1)
    future = run.test.log_return
    step = [WINDOW - 1]  # the decision row; the reward comes from the return of the next one

    def peek(obs: torch.Tensor) -> torch.Tensor:
        up = future[step[0] + 1] > 0
        step[0] += 1
        return torch.full((obs.shape[0],), 2 if bool(up) else 0, dtype=torch.long)

    report = evaluate_market(peek, run.test, run.env_config, seed=1)
    excess = report["agent"]["sharpe"] - report["buy_and_hold"]["sharpe"]
    assert excess > 3 * report["sharpe_stderr"]


def test_a_real_series_run_completes_and_reports(tmp_path) -> None:
    pytest.importorskip(
        "gym_anytrading", reason="gym-anytrading is not installed (pip install 'tritonrl[market]')"
    )
    report = train_and_report("ppo", "market:googl", 8_000)
    for key in ("agent", "buy_and_hold", "random"):
        figures = report[key]
        assert all(math.isfinite(figures[k]) for k in ("total_return", "sharpe", "max_drawdown", "turnover"))
    assert report["period"]["decisions"] > 100 and report["period"]["periods_per_year"] == 252.0
