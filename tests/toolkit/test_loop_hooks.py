"""The loop's hooks for device environments: ``step_transition``, ``episode_stats`` and
``evaluate_policy`` (a tiny fake env that keeps its counters as tensors, like ``MarketEnv``)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

from gymnasium import spaces
from toy_agent import ToyAgent
from tritonrl.toolkit.envs.vector import Transition
from tritonrl.toolkit.logger import read_csv
from tritonrl.toolkit.training.loop import LoopConfig, episode_metrics, run_training
from tritonrl.toolkit.training.onpolicy import OnPolicySchedule


class FakeDeviceEnv:
    """E counters; every env's episode lasts ``length`` steps with reward 1 per step (return =
    length). ``step`` raises: the loop must use ``step_transition``. Its episode statistics are
    logged under ``market/`` (``metric_prefix``), as a market env's are."""

    metric_prefix = "market"

    def __init__(self, num_envs: int = 2, length: int = 5) -> None:
        self.num_envs, self.length = num_envs, length
        self.device = torch.device("cpu")
        self.env_id = "fake:device"
        self.single_observation_space = spaces.Box(-1.0, 1.0, (3,))
        self.single_action_space = spaces.Discrete(2)
        self.obs: torch.Tensor | None = None
        self.t = torch.zeros(num_envs, dtype=torch.long)
        self.finished = torch.zeros(())  # device accumulators drained by episode_stats
        self.return_sum = torch.zeros(())
        self.stats_calls = 0
        self.transition_calls = 0

    def reset(self) -> torch.Tensor:
        self.t.zero_()
        self.obs = torch.zeros(self.num_envs, 3)
        return self.obs

    def step(self, actions: torch.Tensor) -> Any:
        raise AssertionError("the loop called step() on an env that has step_transition()")

    def step_transition(self, actions: torch.Tensor) -> Transition:
        self.transition_calls += 1
        self.t += 1
        done = self.t >= self.length
        self.finished += done.sum()
        self.return_sum += (self.t * done).sum().float()
        self.t = torch.where(done, torch.zeros_like(self.t), self.t)
        obs = self.t.float()[:, None].expand(-1, 3) / self.length
        self.obs = obs
        return Transition(obs, torch.ones(self.num_envs), obs, torch.zeros_like(done), done)

    def episode_stats(self) -> dict[str, float]:
        self.stats_calls += 1
        n = float(self.finished)
        out = {
            "count": n,
            "mean_return": float(self.return_sum) / max(n, 1.0),
            "mean_length": float(self.length),
            "mean_sharpe": 1.5,
        }
        self.finished.zero_()
        self.return_sum.zero_()
        return out

    def get_state(self) -> dict[str, Any]:
        return {"t": self.t.clone(), "finished": self.finished.clone(), "return_sum": self.return_sum.clone()}

    def check_state(self, state: dict[str, Any]) -> None:
        if set(state) != {"t", "finished", "return_sum"}:
            raise ValueError("not a FakeDeviceEnv state")

    def set_state(self, state: dict[str, Any]) -> None:
        self.t = state["t"].clone()
        self.finished = state["finished"].clone()
        self.return_sum = state["return_sum"].clone()
        self.obs = self.t.float()[:, None].expand(-1, 3) / self.length

    def close(self) -> None:
        pass


class CountingEvaluator:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def evaluate_policy(self, policy, episodes: int, seed: int) -> dict[str, Any]:
        actions = policy(torch.zeros(episodes, 3))
        assert actions.shape == (episodes,)
        self.calls.append((episodes, seed))
        return {"mean_return": 7.0 + len(self.calls), "std_return": 0.0}


def test_episode_metrics_names() -> None:
    stats = {"count": 3.0, "mean_return": 2.0, "mean_length": 10.0, "mean_sharpe": 0.5, "turnover": 4.0}
    assert episode_metrics(stats, "market") == {
        "charts/episodic_return": 2.0,
        "charts/episodic_length": 10.0,
        "market/sharpe": 0.5,
        "market/turnover": 4.0,
    }
    assert episode_metrics({"count": 0.0, "mean_return": float("nan")}, "market") == {}


def test_device_env_hooks_drive_the_loop(tmp_path) -> None:
    env = FakeDeviceEnv(num_envs=2, length=5)
    evaluator = CountingEvaluator()
    cfg = LoopConfig(
        total_steps=40, log_every=10, eval_every=20, eval_episodes=3, seed=4, run_dir=str(tmp_path)
    )
    summary = run_training(ToyAgent(2), env, OnPolicySchedule(4), cfg, evaluator=evaluator)
    assert env.transition_calls == 20  # 40 steps / 2 envs, all through step_transition
    # one episode_stats call per flush: steps 10, 20, 30, 40 and the final flush at 40 (drains nothing)
    assert env.stats_calls == 5
    rows = read_csv(tmp_path / "metrics.csv")
    with_returns = [r for r in rows if "charts/episodic_return" in r]
    assert [r["global_step"] for r in with_returns] == [10, 20, 30, 40]
    assert all(r["charts/episodic_return"] == 5.0 and r["market/sharpe"] == 1.5 for r in with_returns)
    assert all(r["charts/episodic_length"] == 5.0 for r in with_returns)
    # evaluation went through the hook: at 20 and 40 (the final one is the one at 40)
    assert evaluator.calls == [(3, 4 + 100_000), (3, 4 + 100_000)]
    assert summary["evaluations"] == [(20, 8.0), (40, 9.0)]
    assert summary["recent_return"] == 5.0


def test_env_evaluate_policy_is_used_without_an_evaluator() -> None:
    env = FakeDeviceEnv()
    evaluator = CountingEvaluator()
    env.evaluate_policy = evaluator.evaluate_policy  # type: ignore[attr-defined]
    summary = run_training(ToyAgent(2), env, OnPolicySchedule(4), LoopConfig(total_steps=8, eval_episodes=2))
    assert evaluator.calls == [(2, 1 + 100_000)] and summary["final_eval"]["mean_return"] == 8.0


def test_device_env_resume_writes_the_same_metrics(tmp_path) -> None:
    """Stopped at step 20 and resumed: the same rows (the accumulators travel in the env state)."""

    def run(run_dir, **kw) -> list[dict[str, float]]:
        cfg = LoopConfig(
            total_steps=40, log_every=6, checkpoint_every=14, seed=2, run_dir=str(run_dir), plot=False, **kw
        )
        env = FakeDeviceEnv(2, 3)
        run_training(ToyAgent(2), env, OnPolicySchedule(4), cfg, evaluator=CountingEvaluator())
        return [{k: v for k, v in r.items() if k != "charts/SPS"} for r in read_csv(run_dir / "metrics.csv")]

    whole = run(tmp_path / "a")
    run(tmp_path / "b", stop_at=20)
    resumed = run(tmp_path / "b", resume=True)
    assert resumed == whole
    assert any("market/sharpe" in r for r in whole)
