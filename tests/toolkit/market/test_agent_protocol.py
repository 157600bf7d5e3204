"""Infrastructure that knows no algorithm: an agent defined here (``tests/toy_agent.py``) is driven
by the collector and trained on ``market:synthetic`` through ``train``, its acting policy, market
defaults and action kind coming from the agent protocol and its preset alone."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch

gym = pytest.importorskip("gymnasium")

from toy_agent import ToyMarketAgent, ToyMarketConfig, toy_market_preset  # noqa: E402
from tritonrl.cli import main, registry  # noqa: E402
from tritonrl.toolkit.acting import ActingPolicy, LearnerPolicy, SnapshotPolicy  # noqa: E402
from tritonrl.toolkit.agent import Agent  # noqa: E402
from tritonrl.toolkit.bars import synthetic_bars, upload  # noqa: E402
from tritonrl.toolkit.checkpoint import load_checkpoint  # noqa: E402
from tritonrl.toolkit.envs.market.env import MarketEnv, MarketEnvConfig  # noqa: E402
from tritonrl.toolkit.preset import MarketPreset  # noqa: E402
from tritonrl.toolkit.training.collector import Collector  # noqa: E402
from tritonrl.toolkit.training.loop import CHECKPOINT_NAME  # noqa: E402
from tritonrl.toolkit.training.market import env_config_for, market_preset  # noqa: E402

E = 4


def _env() -> MarketEnv:
    data = upload(synthetic_bars(300, seed=1))
    return MarketEnv(data, E, MarketEnvConfig(window=8, episode_length=6), seed=0)


def _agent(env: MarketEnv, **config: Any) -> ToyMarketAgent:
    cfg = ToyMarketConfig(**config)
    return ToyMarketAgent(env.single_observation_space, env.single_action_space, cfg, num_envs=E, seed=2)


def test_the_collector_drives_an_agent_of_the_protocol_from_its_snapshot() -> None:
    env = _env()
    agent = _agent(env)
    assert isinstance(agent, Agent)
    collector = Collector(agent, env, sync_every=2)
    assert isinstance(collector.policy, SnapshotPolicy) and isinstance(collector.policy, ActingPolicy)
    assert collector.syncs == 1 and collector.snapshot is not None
    for _ in range(3):
        t = collector.step()
    assert agent.env_steps == 3 * E and t.reward.shape == (E,)
    agent.update()
    collector.step()  # one update since the sync: the snapshot stays
    assert collector.syncs == 1
    assert not torch.equal(collector.snapshot.net.weight, agent.net.weight.float())
    agent.update()
    collector.step()  # two: synced before acting
    assert collector.syncs == 2 and torch.equal(collector.snapshot.net.weight, agent.net.weight.float())
    state = collector.state_dict()
    assert set(state) == {"sync_every", "synced_at", "syncs", "snapshot"} and state["synced_at"] == 2
    # greedy snapshot actions are the learner's (f32 on a CPU: the same network)
    obs = env.obs
    assert obs is not None
    greedy = agent.choose(collector.snapshot.net, obs.float(), False)
    assert torch.equal(greedy, agent.act(obs, explore=False))


def test_agent_base_defaults_to_the_learner_acting() -> None:
    env = _env()
    agent = _agent(env, snapshot=False)
    collector = Collector(agent, env, sync_every=3)
    assert isinstance(collector.policy, LearnerPolicy) and collector.snapshot is None
    for _ in range(2):
        collector.step()
    agent.update()
    collector.step()
    collector.sync()  # nothing to refresh
    assert collector.syncs == 0 and agent.env_steps == 3 * E
    assert collector.state_dict() == {"sync_every": 3, "synced_at": 0, "syncs": 0}
    with pytest.raises(ValueError, match="syncs"):
        collector.load_state_dict({"synced_at": 0, "syncs": -1})


def test_the_preset_declares_market_defaults_and_the_config_its_actions() -> None:
    spec = toy_market_preset()
    assert market_preset(spec).overrides == {"lr": 0.02} and market_preset(spec).default_steps == 512
    assert env_config_for(spec.config, {}).actions == "discrete"
    bare = dataclasses.replace(spec, market=None)
    assert market_preset(bare).overrides == {} and market_preset(bare).default_num_envs == 16
    with pytest.raises(ValueError, match="market overrides"):
        dataclasses.replace(spec, market=MarketPreset(overrides={"gamma": 0.5}))  # not a toy field
    with pytest.raises(ValueError, match="default_steps"):
        MarketPreset(default_steps=0)


def test_train_market_synthetic_with_an_agent_of_the_protocol(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``train --agent toy-market --env market:synthetic``: the preset's market defaults (steps,
    environments, lr), the collector acting from the toy's snapshot, the report, and a resume."""
    monkeypatch.setitem(registry._registry(), "toy-market", toy_market_preset(train_freq=16))
    run_dir = tmp_path / "toy"
    base = [
        "train",
        "--agent",
        "toy-market",
        "--env",
        "market:synthetic,bars=1500",
        "--set",
        "env.window=8",
        "--set",
        "env.episode_length=64",
        "--no-progress",
        "--no-tensorboard",
        "--log-every",
        "128",
        "--run-dir",
        str(run_dir),
    ]
    assert main(base) == 0
    out = capsys.readouterr().out
    assert "toy-market on market:synthetic,bars=1500: 512 steps" in out and "buy-and-hold" in out
    report = json.loads((run_dir / "test_report.json").read_text())
    assert set(report) >= {"agent", "buy_and_hold", "random"}
    saved = load_checkpoint(run_dir / CHECKPOINT_NAME)
    assert saved["agent"]["config"]["lr"] == 0.02 and saved["agent"]["num_envs"] == 4
    assert saved["agent"]["counters"] == {"env_steps": 512, "updates": 32}
    collector = saved["collector"]  # synced before the last step, which followed update 31
    assert collector["sync_every"] == 1 and collector["synced_at"] == 31 and collector["syncs"] == 32
    assert set(collector["snapshot"]) == {"net.weight", "net.bias"}  # the policy module's names
    assert main([*base, "--steps", "768", "--resume"]) == 0
    assert "768 steps" in capsys.readouterr().out


def test_a_collector_snapshot_saved_with_its_network_names_still_loads() -> None:
    """Checkpoints written before the snapshot was a policy module name its tensors as the network
    did (``weight``, not ``net.weight``); they load into the policy module, anything else is refused."""
    env = _env()
    agent = _agent(env)
    collector = Collector(agent, env, sync_every=1)
    state = collector.state_dict()
    legacy = {**state, "snapshot": {k.removeprefix("net."): v + 1.0 for k, v in state["snapshot"].items()}}
    collector.load_state_dict(legacy)
    assert torch.equal(collector.snapshot.net.weight, legacy["snapshot"]["weight"])  # exact: a copy
    wrong = {**state, "snapshot": {"other." + k: v for k, v in legacy["snapshot"].items()}}
    with pytest.raises(ValueError, match="collector state holds no snapshot of this agent's network"):
        collector.load_state_dict(wrong)
