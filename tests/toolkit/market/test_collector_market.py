"""The collector on ``MarketEnv`` (synthetic bars uploaded once): DQN with n-step PER and PPO
(discrete and continuous positions) step with no host read, and the replay fills as specified;
every preset family (DQN, DQN with ICM, discrete, continuous and recurrent PPO) steps through it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

gym = pytest.importorskip("gymnasium")

from helpers import HostReads  # noqa: E402
from test_collector import _accelerator_defaults  # noqa: E402
from tritonrl.agents.dqn import DQNAgent  # noqa: E402
from tritonrl.agents.dqn import preset as dqn_preset  # noqa: E402
from tritonrl.agents.ppo import PPOAgent  # noqa: E402
from tritonrl.agents.ppo import preset as ppo_preset  # noqa: E402
from tritonrl.toolkit.bars import synthetic_bars, upload  # noqa: E402
from tritonrl.toolkit.envs.market.env import MarketEnv, MarketEnvConfig  # noqa: E402
from tritonrl.toolkit.training.collector import Collector  # noqa: E402

E = 8


def _env(actions: str = "discrete") -> MarketEnv:
    data = upload(synthetic_bars(400, seed=0))
    return MarketEnv(data, E, MarketEnvConfig(window=8, episode_length=6, actions=actions), seed=0)


def test_dqn_collector_on_market_env() -> None:
    env = _env()
    cfg = dqn_preset(
        "rainbow", torso_width=16, batch_size=4, buffer_size=256, atoms=11, replay_staging="device"
    )
    agent = DQNAgent(env.single_observation_space, env.single_action_space, cfg, num_envs=E, seed=0)
    _accelerator_defaults(agent)
    collector = Collector(agent, env)
    for _ in range(2):
        with HostReads():
            for _ in range(5):  # episodes of 6 decisions: truncations inside the window
                collector.step()
        agent.update()
        agent.check_inputs()
    assert agent.env_steps == 10 * E and len(agent.buffer) == (10 - 2) * E
    stats = env.episode_stats()  # the one sync, at a log interval
    assert stats["episodes"] >= E  # every env truncated after 6 decisions (some may have terminated earlier)


@pytest.mark.parametrize("actions", ["discrete", "continuous"])
def test_ppo_collector_on_market_env(actions: str) -> None:
    env = _env(actions)
    name = "ppo" if actions == "discrete" else "ppo-continuous"
    cfg = dataclasses.replace(ppo_preset(name), num_steps=8, num_minibatches=2, update_epochs=1, hidden=(8,))
    agent = PPOAgent(env.single_observation_space, env.single_action_space, cfg, num_envs=E, seed=0)
    _accelerator_defaults(agent)
    collector = Collector(agent, env)
    flags: list[torch.Tensor] = []
    step_transition = env.step_transition

    def recording(a: Any) -> Any:
        t = step_transition(a)
        flags.append(t.truncated)
        return t

    env.step_transition = recording  # type: ignore[method-assign]
    with HostReads() as guard, pytest.MonkeyPatch.context() as mp:
        guarded = torch.Tensor.numpy

        def numpy(t: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if flags and t is flags[-1]:  # PPO's documented read of CPU truncation flags
                with guard.lifted():
                    return guarded(t, *args, **kwargs)
            return guarded(t, *args, **kwargs)

        mp.setattr(torch.Tensor, "numpy", numpy)
        for _ in range(cfg.num_steps):
            collector.step()
    assert agent.buffer.full
    agent.update()
    agent.check_inputs()


FAMILIES = {
    # preset, tiny overrides, vector steps per update
    "dqn": (
        "double",
        {"torso_width": 16, "batch_size": 4, "buffer_size": 256, "replay_staging": "device"},
        4,
    ),
    "dqn-icm": (
        "dqn",
        {
            "torso_width": 16,
            "batch_size": 4,
            "buffer_size": 256,
            "replay_staging": "device",
            "icm": True,
            "icm_embed": 4,
            "icm_hidden": 8,
        },
        4,
    ),
    "ppo": ("ppo", {"num_steps": 4, "num_minibatches": 2, "update_epochs": 1, "hidden": (8,)}, 4),
    "ppo-continuous": (
        "ppo-continuous",
        {"num_steps": 4, "num_minibatches": 2, "update_epochs": 1, "hidden": (8,)},
        4,
    ),
    "ppo-lstm": (
        "ppo-lstm",
        {
            "num_steps": 4,
            "seq_len": 2,
            "num_minibatches": 2,
            "update_epochs": 1,
            "hidden": (8,),
            "memory_size": 8,
        },
        4,
    ),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_collector_steps_every_preset_family(family: str) -> None:
    """One collector for every family: acting policy -> env -> ``agent.observe``. The DQN family acts
    from its f32 snapshot (ICM's replay fed too, no host read with device staging), PPO (discrete,
    continuous, recurrent) with the learner; the env's actions follow the config's action kind."""
    from tritonrl.cli.registry import get_agent
    from tritonrl.toolkit.acting import LearnerPolicy, SnapshotPolicy
    from tritonrl.toolkit.training.market import env_config_for

    name, tiny, steps = FAMILIES[family]
    spec = get_agent(name)
    config = spec.configure(tiny)
    actions = env_config_for(config, {}).actions
    assert actions == ("continuous" if family == "ppo-continuous" else "discrete")
    env = _env(actions)
    agent = spec.build(env.single_observation_space, env.single_action_space, num_envs=E, overrides=tiny)
    dqn = family.startswith("dqn")
    if dqn:
        _accelerator_defaults(agent)
    collector = Collector(agent, env, sync_every=1)
    assert isinstance(collector.policy, SnapshotPolicy if dqn else LearnerPolicy)
    for _ in range(2):
        if dqn:
            with HostReads():
                for _ in range(steps):
                    collector.step()
        else:
            for _ in range(steps):
                collector.step()
        agent.update()
        agent.check_inputs()
    assert agent.env_steps == 2 * steps * E and agent.updates >= 2
    if family == "dqn-icm":
        assert len(agent.icm_buffer) == len(agent.buffer) == 2 * steps * E
    if dqn:
        assert collector.syncs == 2  # construction, then before the second round
