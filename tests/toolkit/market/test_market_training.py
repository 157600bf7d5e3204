"""Market evaluation figures, the market presets and ``train --env market:...`` (report, resume)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

from tritonrl.cli import main
from tritonrl.cli.registry import get_agent
from tritonrl.cli.train import split_overrides
from tritonrl.toolkit.bars import synthetic_bars, upload
from tritonrl.toolkit.checkpoint import load_checkpoint, save_checkpoint
from tritonrl.toolkit.envs.market.env import MarketEnvConfig
from tritonrl.toolkit.envs.market.evaluate import evaluate_market, format_report, strategy_figures
from tritonrl.toolkit.logger import read_csv
from tritonrl.toolkit.training.loop import CHECKPOINT_NAME
from tritonrl.toolkit.training.market import env_config_for, market_preset


def test_strategy_figures_by_hand() -> None:
    r = np.log([1.1, 0.5, 1.2])  # equity 1 -> 1.1 -> 0.55 -> 0.66
    f = strategy_figures(r, np.array([1.0, -1.0, -1.0]), periods_per_year=4.0)
    assert f["equity"] == pytest.approx([1.0, 1.1, 0.55, 0.66], rel=1e-12)
    assert f["total_return"] == pytest.approx(-0.34, rel=1e-12)
    assert f["max_drawdown"] == pytest.approx(0.5, rel=1e-12)  # 1.1 -> 0.55
    assert f["turnover"] == 3.0  # 0 -> 1 -> -1
    assert f["sharpe"] == pytest.approx(r.mean() / r.std(ddof=1) * 2.0, rel=1e-12)
    flat = strategy_figures(np.zeros(5), np.zeros(5), 252.0)
    assert flat["sharpe"] == 0.0 and flat["turnover"] == 0.0 and flat["max_drawdown"] == 0.0
    with pytest.raises(ValueError, match="equal, non-empty"):
        strategy_figures(np.zeros(3), np.zeros(2), 252.0)


def test_evaluate_market_books_buy_and_hold_and_the_whole_period() -> None:
    data = upload(synthetic_bars(300, seed=3))
    cost = 1e-3
    cfg = MarketEnvConfig(window=10, cost=cost)  # random_start and max_drawdown are overridden
    report = evaluate_market(lambda obs: torch.ones(obs.shape[0], dtype=torch.long), data, cfg, seed=0)
    n = len(data) - 10
    assert report["period"]["decisions"] == n
    bh, flat = report["buy_and_hold"], report["agent"]
    # long from the first decision (row 9) to the last bar: the returns of rows 10 .. T-1, one entry cost
    held = float(data.log_return[10:].double().sum())
    assert bh["log_return"] == pytest.approx(held - cost, abs=1e-5)  # f32 rewards summed: ~1e-7 each
    assert bh["turnover"] == 1.0 and len(bh["equity"]) == n + 1
    assert flat["total_return"] == 0.0 and flat["turnover"] == 0.0
    rnd = report["random"]
    assert rnd["runs"] == 16 and rnd["sharpe_std"] > 0 and rnd["turnover"] > n / 2
    assert report["sharpe_stderr"] == pytest.approx(math.sqrt(252.0 / n))
    again = evaluate_market(lambda obs: torch.ones(obs.shape[0], dtype=torch.long), data, cfg, seed=0)
    assert again == report  # seeded
    assert "buy-and-hold" in format_report(report)


def test_market_presets_per_family() -> None:
    rainbow, ppo, cont = (market_preset(get_agent(n)) for n in ("rainbow", "ppo", "ppo-continuous"))
    assert rainbow.overrides["v_max"] < 1.0 and rainbow.overrides["gamma"] < 0.99
    assert "v_max" not in ppo.overrides and ppo.overrides["gamma"] < 0.99
    assert "log_std_init" in cont.overrides and "log_std_init" not in ppo.overrides
    sac, td3 = (market_preset(get_agent(n)) for n in ("sac", "td3"))
    assert sac.overrides["gamma"] < 0.99 and td3.overrides["gamma"] < 0.99
    assert sac.overrides["autotune"] is False and sac.overrides["alpha"] < 0.01  # rewards ~1e-2 a bar
    assert "alpha" not in td3.overrides and sac.default_steps < 100_000  # not the generic defaults
    # the overrides are valid for every built-in preset
    families = ("dqn", "double", "dueling", "noisy", "c51", "qrdqn", "rainbow", "ppo", "ppo-continuous")
    for name in (*families, "sac", "td3"):
        spec = get_agent(name)
        spec.configure(market_preset(spec).overrides)
    assert split_overrides({"lr": "1", "env.cost": "2"}) == ({"lr": "1"}, {"cost": "2"})


ARGS = [
    "train",
    "--env",
    "market:synthetic,bars=1500",
    "--set",
    "env.window=8",
    "--set",
    "env.episode_length=64",
    "--num-envs",
    "4",
    "--no-progress",
    "--no-tensorboard",
    "--log-every",
    "256",
]


def _rows(path: Path) -> list[dict[str, float]]:
    drop = ("charts/SPS", "eval/mean_return")
    rows = [{k: v for k, v in r.items() if k not in drop} for r in read_csv(path / "metrics.csv")]
    return [r for r in rows if len(r) > 1]  # rows that held only an evaluation


@pytest.mark.parametrize("agent", ["dqn", "ppo-continuous"])
def test_train_cli_reports_and_resumes(
    agent: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """(The CLI runs on one torch thread, its --threads default.)"""
    # PPO's learning rate anneals over --steps: off, so that 768 + 768 steps equal 1536
    extra = ["learning_starts=256"] if agent == "dqn" else ["num_steps=32", "anneal_lr=false"]
    base = [*ARGS, "--agent", agent, *(a for x in extra for a in ("--set", x))]
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert main([*base, "--steps", "1536", "--run-dir", str(whole)]) == 0
    out = capsys.readouterr().out
    assert "buy-and-hold" in out and "test_report.json" in out
    report = json.loads((whole / "test_report.json").read_text())
    assert set(report) >= {"agent", "buy_and_hold", "random", "period", "sharpe_stderr"}
    assert (whole / "equity.png").exists() and (whole / "curve.png").exists()
    rows = _rows(whole)
    assert any("market/sharpe" in r and "charts/episodic_return" in r for r in rows)
    # the device collector stepped the run (its state is a checkpoint section); DQN stages on the device
    saved = load_checkpoint(whole / CHECKPOINT_NAME)
    assert saved["collector"]["sync_every"] == 1
    if agent == "dqn":
        assert saved["agent"]["config"]["replay_staging"] == "device"
        assert saved["collector"]["synced_at"] > 0  # the snapshot followed the learner
    # stop at 768, resume to 1536: the same training metrics (evaluations aside: the first run's
    # final one falls at 768)
    assert main([*base, "--steps", "768", "--run-dir", str(part)]) == 0
    assert main([*base, "--steps", "1536", "--run-dir", str(part), "--resume"]) == 0
    assert _rows(part) == rows
    capsys.readouterr()
    # the trading rules are part of the run's identity
    other = [*base, "--steps", "2048", "--run-dir", str(part), "--resume", "--set", "env.cost=0.01"]
    assert main(other) == 2
    assert "env config" in capsys.readouterr().err


@pytest.mark.parametrize("agent", ["sac", "td3"])
def test_train_cli_sac_td3_hold_continuous_positions(
    agent: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``train --agent sac|td3 --env market:synthetic,ar=0.3``: the config's ``action_kind`` gives
    the continuous env (a ``Box(-1, 1, (1,))`` target position), the run trains and prints and
    saves the test report. A smoke test with tiny networks and budget: ~2-3 s each here (shared
    2-core machine; the CLI runs on one torch thread)."""
    assert env_config_for(get_agent(agent).config, {}).actions == "continuous"
    run_dir = tmp_path / agent
    sets = (
        "hidden=16,16",
        "learning_starts=128",
        "batch_size=32",
        "buffer_size=1024",
        "env.episode_length=64",
    )
    args = ["train", "--agent", agent, "--env", "market:synthetic,ar=0.3", "--steps", "256"]
    args += ["--num-envs", "2", "--eval-every", "0", "--no-progress", "--no-tensorboard"]
    args += ["--run-dir", str(run_dir), *(a for x in sets for a in ("--set", x))]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "test period synthetic" in out and "buy-and-hold" in out and "agent (greedy)" in out
    report = json.loads((run_dir / "test_report.json").read_text())
    assert set(report) >= {"agent", "buy_and_hold", "random", "period", "sharpe_stderr"}
    for name in ("metrics.csv", "curve.png", "equity.png", CHECKPOINT_NAME):
        assert (run_dir / name).exists(), name
    saved = load_checkpoint(run_dir / CHECKPOINT_NAME)
    assert saved["env"]["config"]["actions"] == "continuous"
    space = saved["agent"]["action_space"]
    assert (space["type"], space["shape"], space["low"], space["high"]) == ("Box", [1], [-1.0], [1.0])
    rows = _rows(run_dir)
    assert any("losses/qf_loss" in r for r in rows) and any("market/sharpe" in r for r in rows)


def test_icm_runs_through_the_collector(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The collector hands every step to ``agent.observe`` (ICM's intrinsic reward and replay
    included): an ICM run is stepped by it like any other, trains, reports and resumes; a
    checkpoint without a ``collector`` section (an ICM run stepped through agent.act /
    agent.observe) resumes too, its snapshot synced from the loaded learner."""
    run_dir = tmp_path / "icm"
    base = [
        *ARGS,
        "--agent",
        "dqn",
        "--set",
        "icm=true",
        "--set",
        "learning_starts=256",
        "--run-dir",
        str(run_dir),
    ]
    assert main([*base, "--steps", "512"]) == 0
    captured = capsys.readouterr()
    assert "notice" not in captured.err and "buy-and-hold" in captured.out
    saved = load_checkpoint(run_dir / CHECKPOINT_NAME)
    assert saved["collector"]["syncs"] > 1 and saved["agent"]["config"]["icm"] is True
    assert any("losses/td_loss" in r for r in _rows(run_dir))
    del saved["collector"]
    save_checkpoint(run_dir / CHECKPOINT_NAME, saved)
    assert main([*base, "--steps", "768", "--resume"]) == 0
    assert "collector" in load_checkpoint(run_dir / CHECKPOINT_NAME)


def test_env_settings_need_a_market_env(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--env", "CartPole-v1", "--set", "env.cost=0", "--run-dir", str(tmp_path / "r")])
    assert code == 2 and "market" in capsys.readouterr().err
    code = main([*ARGS, "--set", "env.bogus=1", "--run-dir", str(tmp_path / "r")])
    assert code == 2 and "bogus" in capsys.readouterr().err
