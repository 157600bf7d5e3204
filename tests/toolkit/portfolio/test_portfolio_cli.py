"""``tritonrl train --env portfolio:...`` and ``tritonrl export`` of a portfolio run.

- every portfolio preset (``dqn-portfolio``, ``ppo-portfolio``, ``sac-portfolio``, tiny networks and
  budgets) trains, prints and saves ``test_report.json`` (the strategy and the four baselines, each
  with its metrics) and the six files of ``tearsheet/``;
- ``--set env.*`` reaches the env and the checkpoint's identity; a bad one is one ``error:`` line,
  exit 2, nothing written; ``--resume`` with another env field is refused;
- exact resume: a run stopped at ``k`` steps and resumed to ``n`` ends with the same checkpoint
  tensors and writes the same metric rows as the run that never stopped (off-policy
  ``dqn-portfolio``, on-policy ``ppo-portfolio``);
- ``export`` of a portfolio run: the sidecar's ``portfolio.env_config`` is the run's, and the pt2
  program's actions on the env's observations are the agent's greedy ones.

Tensors are compared exactly (``torch.equal``): the same f32 operations in the same order on one
thread (the CLI's default), so any difference is a real one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

from tritonrl.cli import main
from tritonrl.toolkit.backtest.tearsheet import FIGURES, HTML_NAME
from tritonrl.toolkit.bars.paneldata import PANEL_FEATURES
from tritonrl.toolkit.checkpoint import load_checkpoint
from tritonrl.toolkit.envs.portfolio import PortfolioEnv, PortfolioEnvConfig
from tritonrl.toolkit.logger import read_csv
from tritonrl.toolkit.training.loop import CHECKPOINT_NAME
from tritonrl.toolkit.training.portfolio import build_portfolio_run

ENV = "portfolio:synthetic,bars=600,assets=3"
BASELINES = ("equal_weight", "buy_and_hold", "minimum_variance", "momentum")
METRICS = {"sharpe", "annual_return", "max_drawdown", "turnover", "costs", "deflated_sharpe"}
COMMON = ["--env", ENV, "--num-envs", "4", "--no-progress", "--no-tensorboard", "--log-every", "128"]
# tiny networks and budgets; PPO's learning rate anneals over --steps: off, so that k + (n - k) = n
TINY = {
    "dqn-portfolio": ["torso_width=16", "learning_starts=128", "batch_size=32", "buffer_size=1024"],
    "ppo-portfolio": ["hidden=16", "num_steps=16", "num_minibatches=2", "update_epochs=1", "anneal_lr=false"],
    "sac-portfolio": ["hidden=16,16", "learning_starts=128", "batch_size=32", "buffer_size=1024"],
}


def _args(agent: str, run_dir: Path, steps: int, *sets: str) -> list[str]:
    items = [*TINY[agent], "env.episode_length=64", *sets]
    return [
        "train",
        "--agent",
        agent,
        *COMMON,
        "--steps",
        str(steps),
        "--run-dir",
        str(run_dir),
        *(a for s in items for a in ("--set", s)),
    ]


def _rows(run_dir: Path) -> list[dict[str, float]]:
    """The training rows of ``metrics.csv`` (speed and evaluations aside: a stopped run evaluates
    where it stops)."""
    rows = [
        {k: v for k, v in r.items() if k not in ("charts/SPS", "eval/mean_return")}
        for r in read_csv(run_dir / "metrics.csv")
    ]
    return [r for r in rows if len(r) > 1]


def _tensors(tree: Any, path: str = "") -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint's tree by its path."""
    if isinstance(tree, torch.Tensor):
        return {path: tree}
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in _tensors(sub, f"{path}/{key}").items()}
    if isinstance(tree, (list, tuple)):
        return {k: v for i, sub in enumerate(tree) for k, v in _tensors(sub, f"{path}/{i}").items()}
    return {}


@pytest.mark.parametrize("agent", sorted(TINY))
def test_every_portfolio_preset_trains_and_reports(
    agent: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """256 steps on 600 bars of 3 assets (one torch thread, the CLI's default)."""
    run_dir = tmp_path / agent
    assert main(_args(agent, run_dir, 256, "env.cost=0.004")) == 0
    out = capsys.readouterr().out
    assert (
        "equal_weight" in out and "deflated Sharpe ratio of agent" in out and "validation log return" in out
    )
    report = json.loads((run_dir / "test_report.json").read_text())
    assert report["strategy"] == "agent"
    assert list(report["metrics"]) == ["agent", *BASELINES]
    for name, figures in report["metrics"].items():
        assert set(figures) >= METRICS, name
    assert len(report["equity"]["agent"]) == len(report["dates"])
    # --set env.cost reached the env that trained and the one the test period ran through
    assert report["env_config"]["cost"] == 0.004
    saved = load_checkpoint(run_dir / CHECKPOINT_NAME, tensors=False)
    assert saved["env"]["config"]["cost"] == 0.004
    assert json.loads(saved["meta"]["market_env"])["cost"] == 0.004
    want = "discrete" if agent == "dqn-portfolio" else "simplex"
    assert saved["env"]["config"]["actions"] == want
    files = sorted(p.name for p in (run_dir / "tearsheet").iterdir())
    assert files == sorted([*(f"{n}.png" for n in FIGURES), HTML_NAME])
    assert all((run_dir / "tearsheet" / n).stat().st_size > 0 for n in files)
    assert any("portfolio/equity" in r for r in _rows(run_dir))  # the env's episode statistics


def test_a_bad_env_field_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "bad"
    for bad, words in (("env.fill=x", "fill"), ("env.bogus=1", "bogus"), ("env.window=0", "window")):
        assert main(_args("dqn-portfolio", run_dir, 256, bad)) == 2, bad
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], captured.err
        assert "Traceback" not in captured.err and not run_dir.exists()


def test_the_env_config_is_part_of_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "run"
    assert main(_args("dqn-portfolio", run_dir, 256, "env.window=5")) == 0
    saved = load_checkpoint(run_dir / CHECKPOINT_NAME, tensors=False)
    assert json.loads(saved["meta"]["market_env"])["window"] == 5
    # the observation is [W * N * F + N + 1]: W = 5 bars of 3 assets
    assert saved["agent"]["observation_space"]["shape"] == [5 * 3 * len(PANEL_FEATURES) + 3 + 1]
    before = (run_dir / CHECKPOINT_NAME).read_bytes()
    capsys.readouterr()
    for other in ("env.window=6", "env.cost=0.01"):
        assert main([*_args("dqn-portfolio", run_dir, 512, "env.window=5", other), "--resume"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "env config" in err[0] and "--set env.* must match" in err[0], err
    assert (run_dir / CHECKPOINT_NAME).read_bytes() == before  # refused before anything was written
    # the same fields resume
    assert main([*_args("dqn-portfolio", run_dir, 512, "env.window=5"), "--resume"]) == 0
    assert load_checkpoint(run_dir / CHECKPOINT_NAME, tensors=False)["loop"]["step"] == 512


@pytest.mark.parametrize(("agent", "k", "n"), [("dqn-portfolio", 384, 768), ("ppo-portfolio", 384, 768)])
def test_a_stopped_portfolio_run_resumes_exactly(
    agent: str, k: int, n: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Stopped at ``k`` (its final checkpoint and test report there), resumed to ``n``: the same
    checkpoint tensors (weights, optimizer, replay or rollout, env and RNG states) and metric rows
    as the run of ``n`` steps. ``k`` is a whole number of metric intervals (128) and of PPO
    rollouts (4 envs x 16 steps)."""
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert main(_args(agent, whole, n)) == 0
    assert main(_args(agent, part, k)) == 0
    assert load_checkpoint(part / CHECKPOINT_NAME, tensors=False)["loop"]["step"] == k
    torch.manual_seed(12345)  # disturb the global RNGs in between
    torch.rand(100)
    assert main([*_args(agent, part, n), "--resume"]) == 0
    capsys.readouterr()
    rows = _rows(whole)
    assert any("losses/td_loss" in r or "losses/policy_loss" in r for r in rows)  # it learned
    assert any("portfolio/equity" in r for r in rows)  # episodes finished and were flushed
    assert _rows(part) == rows
    want, got = (load_checkpoint(d / CHECKPOINT_NAME) for d in (whole, part))
    assert want["loop"]["step"] == got["loop"]["step"] == n
    wt, gt = _tensors(want), _tensors(got)
    assert wt.keys() == gt.keys() and any(k.startswith("/agent/") for k in wt)
    for key, value in wt.items():
        assert torch.equal(value, gt[key]), key  # exact: the same computation, stopped once
    for section in ("agent", "env", "collector", "schedule"):  # their plain entries too
        assert _plain(want[section]) == _plain(got[section]), section


def _plain(tree: Any) -> Any:
    """``tree`` without its tensors."""
    if isinstance(tree, dict):
        return {k: _plain(v) for k, v in tree.items() if not isinstance(v, torch.Tensor)}
    if isinstance(tree, (list, tuple)):
        return [_plain(v) for v in tree if not isinstance(v, torch.Tensor)]
    return tree


def test_export_of_a_portfolio_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The sidecar carries the run's env config; the exported program acts as the agent's greedy
    policy on observations of that env (the test period, the held weights drifting)."""
    from tritonrl.agents.dqn import DQNAgent
    from tritonrl.toolkit.export import load_exported

    run_dir = tmp_path / "run"
    assert main(_args("dqn-portfolio", run_dir, 512, "env.cost=0.002")) == 0
    assert main(["export", str(run_dir)]) == 0
    assert "dqn-portfolio (step 512) exported to" in capsys.readouterr().out
    program = load_exported(run_dir / "policy.pt2")
    side = program.sidecar
    saved = load_checkpoint(run_dir / CHECKPOINT_NAME, tensors=False)
    assert side["portfolio"]["env"] == ENV and "market" not in side
    assert (
        side["portfolio"]["env_config"] == saved["env"]["config"] == json.loads(saved["meta"]["market_env"])
    )
    assert side["portfolio"]["env_config"]["cost"] == 0.002
    # the env's observations: a test-period env stepped by the agent's own greedy actions
    agent = DQNAgent.load(run_dir / CHECKPOINT_NAME)
    greedy = agent.eval_policy()
    config = PortfolioEnvConfig.from_dict(side["portfolio"]["env_config"])
    run = build_portfolio_run(ENV, 1, config, seed=0)
    env = PortfolioEnv(run.test, 4, config, seed=1)
    obs, _ = env.reset(seed=1)
    for _ in range(40):
        action = greedy(obs)
        assert torch.equal(program(obs), action)  # exact: one f32 program, eager and exported
        obs, *_ = env.step(action)
    assert obs.shape == (4, env.obs_dim)
