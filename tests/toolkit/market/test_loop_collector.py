"""The shared loop driven by the device collector (``run_training(..., collector=...)``) on ``MarketEnv``.

- exact resume: a run stopped part-way and resumed from its checkpoint writes the same metric rows
  (``charts/SPS`` aside) and ends with the same agent and collector state as the run that never
  stopped (Rainbow with device staging and a snapshot synced every 3 updates, so that the
  snapshot at the checkpoint lags the learner; continuous PPO). The checkpoint's ``collector``
  section is what makes it exact: the same resume with that section removed diverges;
- on a CPU the collector changes nothing but who steps: with host staging (DQN) and for PPO, a
  run with the collector writes the same rows and weights as one through ``agent.act`` /
  ``agent.observe``, and a checkpoint of such a run resumes with a collector exactly;
- a collector built for another agent or env is refused.

Tensors are compared exactly (``torch.equal``): both runs do the same f32 operations in the same
order on one thread, so any difference is a real one.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

from tritonrl.cli.registry import get_agent
from tritonrl.toolkit.checkpoint import load_checkpoint, save_checkpoint
from tritonrl.toolkit.training.collector import Collector
from tritonrl.toolkit.training.loop import CHECKPOINT_NAME, LoopConfig, run_training
from tritonrl.toolkit.training.market import build_market_run, env_config_for, market_preset

SOURCE = "market:synthetic,bars=1500"
E = 4
TOTAL = 1024
TINY = {
    "rainbow": {
        "torso_width": 16,
        "atoms": 11,
        "batch_size": 16,
        "buffer_size": 512,
        "learning_starts": 128,
        "train_freq": 16,
        "gradient_steps": 1,
        "target_update_every": 8,
    },
    "dqn": {
        "torso_width": 16,
        "batch_size": 16,
        "buffer_size": 512,
        "learning_starts": 128,
        "train_freq": 16,
        "gradient_steps": 1,
        "target_update_every": 8,
        "replay_staging": "host",
    },
    # the learning rate anneals over total_steps: off, so that stopped and whole runs agree
    "ppo": {"num_steps": 16, "num_minibatches": 2, "update_epochs": 1, "hidden": (8,), "anneal_lr": False},
    "ppo-continuous": {
        "num_steps": 16,
        "num_minibatches": 2,
        "update_epochs": 1,
        "hidden": (8,),
        "anneal_lr": False,
    },
}


def _train(
    name: str, run_dir: Path, *, collector: bool = True, sync_every: int = 1, **loop: Any
) -> tuple[Any, Collector | None, dict]:
    """A market run of preset ``name`` (its market overrides, then :data:`TINY`) with or without
    the collector; checkpoints every 256 steps, evaluation on the validation period every 512."""
    spec = get_agent(name)
    overrides = {**market_preset(spec).overrides, **TINY[name]}
    config = spec.configure(overrides, total_steps=TOTAL)
    run = build_market_run(SOURCE, E, env_config_for(config, {"window": 8, "episode_length": 64}), seed=3)
    agent = spec.build(
        run.env.single_observation_space,
        run.env.single_action_space,
        num_envs=E,
        seed=3,
        total_steps=TOTAL,
        overrides=overrides,
    )
    col = Collector(agent, run.env, sync_every=sync_every) if collector else None
    cfg = LoopConfig(
        total_steps=TOTAL,
        seed=3,
        run_dir=str(run_dir),
        log_every=128,
        eval_every=512,
        eval_episodes=1,
        checkpoint_every=256,
        plot=False,
        tensorboard=False,
        **loop,
    )
    summary = run_training(agent, run.env, spec.schedule(agent), cfg, evaluator=run.evaluator, collector=col)
    return agent, col, summary


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return [{k: v for k, v in r.items() if k != "charts/SPS"} for r in csv.DictReader(f)]


def _weights(agent: Any) -> dict[str, torch.Tensor]:
    nets = {"online": agent.online, "target": agent.target} if agent.kind == "dqn" else {"policy": agent.net}
    return {f"{n}.{k}": v for n, net in nets.items() for k, v in net.state_dict().items()}


def _assert_same(a: Any, b: Any) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for key in wa:
        assert torch.equal(wa[key], wb[key]), key


@pytest.mark.parametrize(("name", "sync_every"), [("rainbow", 3), ("ppo-continuous", 1)])
def test_collector_run_resumes_exactly(name: str, sync_every: int, tmp_path: Path) -> None:
    full_agent, full_col, full = _train(name, tmp_path / "full", sync_every=sync_every)
    _, _, stopped = _train(name, tmp_path / "split", sync_every=sync_every, stop_at=600)  # checkpoint: 512
    assert stopped["interrupted"] and stopped["checkpoint_step"] == 512
    assert "collector" in load_checkpoint(tmp_path / "split" / CHECKPOINT_NAME)
    torch.manual_seed(12345)  # disturb the global RNGs in between
    torch.rand(100)
    agent, col, resumed = _train(name, tmp_path / "split", sync_every=sync_every, resume=True)
    assert resumed["global_step"] == full["global_step"] == TOTAL
    rows = _rows(tmp_path / "full")
    assert any(r.get("losses/policy_loss") or r.get("losses/td_loss") for r in rows)  # it learned
    assert any(r.get("market/sharpe") for r in rows)  # the env's episode stats were flushed
    assert _rows(tmp_path / "split") == rows
    assert resumed["evaluations"] == full["evaluations"]
    _assert_same(full_agent, agent)
    if name == "rainbow":
        assert full_agent.env_steps == agent.env_steps == TOTAL  # counted by the collector
    assert col is not None and full_col is not None
    want, got = full_col.state_dict(), col.state_dict()
    assert want.keys() == got.keys()
    for key, value in want.items():
        if key == "snapshot":
            assert all(torch.equal(value[k], got[key][k]) for k in value), key
        else:
            assert value == got[key], key
    if name == "rainbow":
        assert full_agent.updates >= 3 * sync_every and want["syncs"] > 1  # the snapshot moved


def test_the_collector_section_makes_the_resume_exact(tmp_path: Path) -> None:
    """Without the saved snapshot (which lags the learner by up to ``sync_every - 1`` updates)
    the resumed run acts from the learner's weights and diverges: the test above can fail."""
    # a lag of up to 7 updates: exploration noise is drawn anew every step from the agent's generator
    # (the same draws either way), and in this short run a lag of 2 changed no action
    _train("rainbow", tmp_path / "full", sync_every=8)
    _train("rainbow", tmp_path / "split", sync_every=8, stop_at=600)
    path = tmp_path / "split" / CHECKPOINT_NAME
    state = load_checkpoint(path)
    saved = state.pop("collector")
    # the learner moved on since the last sync
    assert saved["synced_at"] < state["agent"]["counters"]["updates"]
    save_checkpoint(path, state)
    _train("rainbow", tmp_path / "split", sync_every=8, resume=True)
    assert _rows(tmp_path / "split") != _rows(tmp_path / "full")


@pytest.mark.parametrize("name", ["dqn", "ppo"])
def test_the_collector_changes_nothing_but_who_steps_on_a_cpu(name: str, tmp_path: Path) -> None:
    """Host staging (DQN), the learner f32 on a CPU: the collector's actions, draws and stores are
    the plain path's. A plain run's checkpoint (no ``collector`` section) resumes with a collector
    (its snapshot synced from the loaded learner) and still ends like the plain run."""
    plain_agent, _, plain = _train(name, tmp_path / "plain", collector=False)
    agent, _, driven = _train(name, tmp_path / "collector")
    rows = _rows(tmp_path / "plain")
    assert any(r.get("losses/policy_loss") or r.get("losses/td_loss") for r in rows)
    assert _rows(tmp_path / "collector") == rows
    assert driven["evaluations"] == plain["evaluations"]
    _assert_same(plain_agent, agent)
    # a plain run stopped at 600 (checkpoint at 512), resumed with the collector
    _train(name, tmp_path / "mixed", collector=False, stop_at=600)
    assert "collector" not in load_checkpoint(tmp_path / "mixed" / CHECKPOINT_NAME)
    mixed_agent, _, _ = _train(name, tmp_path / "mixed", resume=True)
    assert _rows(tmp_path / "mixed") == rows
    _assert_same(plain_agent, mixed_agent)


def test_a_collector_of_another_agent_is_refused(tmp_path: Path) -> None:
    spec = get_agent("ppo")
    config = spec.configure(TINY["ppo"])
    run = build_market_run(SOURCE, E, env_config_for(config, {"window": 8, "episode_length": 64}), seed=3)

    def build() -> Any:
        return spec.build(
            run.env.single_observation_space, run.env.single_action_space, num_envs=E, overrides=TINY["ppo"]
        )

    agent, other = build(), build()
    cfg = LoopConfig(total_steps=64, final_eval=False)
    with pytest.raises(ValueError, match="another agent or env"):
        run_training(agent, run.env, spec.schedule(agent), cfg, collector=Collector(other, run.env))
