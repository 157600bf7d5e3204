"""Exact resume through the shared loop, once for every agent family.

A run stopped part-way (``stop_at``) and resumed from its last checkpoint must end where the run
that never stopped ends: same final step, agent state (weights, optimiser-driven counters, replay
priorities), evaluations and metric rows (``charts/SPS`` aside). The global RNGs are disturbed
between the stop and the resume, so a resume that did not restore them would diverge.

One table, :data:`CASES`: each row builds its agent, environment, schedule and loop settings and
names the agent state to compare. Rows: the loop's toy agent, DQN, Rainbow, Rainbow on MinAtar
(pixels), PPO, PPO-LSTM, SAC and TD3 (formerly four copies in test_loop.py, test_dqn_cli.py and
test_ppo.py).
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

from toy_agent import ToyAgent
from tritonrl.agents.dqn import DQNAgent
from tritonrl.agents.dqn import preset as dqn_preset
from tritonrl.agents.ppo import PPOAgent
from tritonrl.agents.ppo import preset as ppo_preset
from tritonrl.agents.sac import SACAgent, TD3Agent
from tritonrl.agents.sac import preset as sac_preset
from tritonrl.toolkit.envs.vector import make_vec_env
from tritonrl.toolkit.replay.frames import PrioritizedFrameReplayBuffer
from tritonrl.toolkit.replay.prioritized import PrioritizedReplayBuffer
from tritonrl.toolkit.training.loop import LoopConfig, run_training
from tritonrl.toolkit.training.offpolicy import schedule_for
from tritonrl.toolkit.training.onpolicy import OnPolicySchedule

DQN_TINY = {
    "torso_width": 32,
    "batch_size": 32,
    "buffer_size": 2_000,
    "learning_starts": 200,
    "train_freq": 64,
    "gradient_steps": 8,
    "target_update_every": 16,
}
PPO_TINY = {
    "num_steps": 8,
    "seq_len": 4,
    "num_minibatches": 2,
    "update_epochs": 2,
    "hidden": (16,),
    "memory_size": 16,
    "flow_hidden": 8,
    "mamba_headdim": 8,
    "total_steps": 1000,
    "normalize_obs": True,
}

try:
    import mujoco  # noqa: F401

    _NO_MUJOCO = False
except ImportError:
    _NO_MUJOCO = True
SAC_TINY = {"hidden": (16,), "batch_size": 16, "buffer_size": 1_000, "learning_starts": 100}


def _toy(run_dir: Path, **kw: Any) -> tuple[Any, dict]:
    env = make_vec_env("CartPole-v1", 4, seed=7)
    agent = ToyAgent(2)
    cfg = LoopConfig(
        total_steps=400,
        seed=7,
        run_dir=str(run_dir),
        log_every=64,
        eval_every=160,
        eval_episodes=2,
        checkpoint_every=96,
        tensorboard=False,
        **kw,
    )
    return agent, run_training(agent, env, OnPolicySchedule(8), cfg)


# the pixel presets' replay is the frame replay; their torsos keep their published layers
PIXEL_TINY = {k: v for k, v in DQN_TINY.items() if k != "torso_width"}


def _dqn(name: str, env_id: str = "CartPole-v1", **overrides: Any) -> Callable[..., tuple[Any, dict]]:
    def run(run_dir: Path, **kw: Any) -> tuple[Any, dict]:
        if env_id.startswith("MinAtar/"):
            pytest.importorskip("minatar", reason='MinAtar is missing: pip install "tritonrl[minatar]"')
        env = make_vec_env(env_id, 2, seed=3)
        tiny = PIXEL_TINY if env_id != "CartPole-v1" else DQN_TINY
        agent = DQNAgent(
            env.single_observation_space,
            env.single_action_space,
            dqn_preset(name, **tiny, **overrides),
            num_envs=2,
            seed=3,
        )
        cfg = LoopConfig(
            total_steps=1_600,
            seed=3,
            run_dir=str(run_dir),
            log_every=400,
            eval_every=800,
            eval_episodes=2,
            checkpoint_every=400,
            plot=False,
            tensorboard=False,
            meta=(("agent", name),),
            **kw,
        )
        try:
            return agent, run_training(agent, env, schedule_for(agent), cfg)
        finally:
            env.close()

    return run


def _ppo(name: str, env_id: str, **overrides: Any) -> Callable[..., tuple[Any, dict]]:
    def run(run_dir: Path, **kw: Any) -> tuple[Any, dict]:
        if env_id.startswith("MinAtar/"):
            pytest.importorskip("minatar", reason='MinAtar is missing: pip install "tritonrl[minatar]"')
        cfg = dataclasses.replace(ppo_preset(name), **{**PPO_TINY, **overrides})
        env = make_vec_env(env_id, 2, seed=3)
        agent = PPOAgent(env.single_observation_space, env.single_action_space, cfg, num_envs=2, seed=3)
        loop = LoopConfig(
            total_steps=96,
            seed=3,
            run_dir=str(run_dir),
            log_every=16,
            checkpoint_every=20,
            eval_every=48,
            eval_episodes=2,
            tensorboard=False,
            **kw,
        )
        return agent, run_training(agent, env, OnPolicySchedule(cfg.num_steps), loop)

    return run


def _sac(name: str, env_id: str = "Pendulum-v1") -> Callable[..., tuple[Any, dict]]:
    def run(run_dir: Path, **kw: Any) -> tuple[Any, dict]:
        env = make_vec_env(env_id, 2, seed=3)
        cls = SACAgent if name == "sac" else TD3Agent
        agent = cls(
            env.single_observation_space,
            env.single_action_space,
            sac_preset(name, **SAC_TINY),
            num_envs=2,
            seed=3,
        )
        cfg = LoopConfig(
            total_steps=400,
            seed=3,
            run_dir=str(run_dir),
            log_every=50,
            eval_every=200,
            eval_episodes=1,
            checkpoint_every=100,
            plot=False,
            tensorboard=False,
            **kw,
        )
        try:
            return agent, run_training(agent, env, schedule_for(agent), cfg)
        finally:
            env.close()

    return run


def _sac_state(agent: Any) -> dict[str, Any]:
    state: dict[str, Any] = {"env_steps": agent.env_steps, "updates": agent.updates}
    for key, module in agent._nets().items():
        state.update({f"{key}.{k}": v for k, v in module.state_dict().items()})
    return state


def _toy_state(agent: ToyAgent) -> dict[str, Any]:
    return {"reward_sum": agent.reward_sum, "updates": agent.updates}


def _dqn_state(agent: DQNAgent) -> dict[str, Any]:
    state: dict[str, Any] = {"env_steps": agent.env_steps, "updates": agent.updates}
    state.update({f"online.{i}": p for i, p in enumerate(agent.online.parameters())})
    state.update({f"target.{i}": p for i, p in enumerate(agent.target.parameters())})
    if isinstance(agent.buffer, (PrioritizedReplayBuffer, PrioritizedFrameReplayBuffer)):  # Rainbow
        state["priorities"] = agent.buffer.priorities()
    return state


def _ppo_state(agent: PPOAgent) -> dict[str, Any]:
    return {f"policy.{k}": v for k, v in agent.net.state_dict().items()}


@dataclass(frozen=True)
class Case:
    id: str
    run: Callable[..., tuple[Any, dict]]
    """``run(run_dir, **LoopConfig fields) -> (agent, summary)``."""
    state: Callable[[Any], dict[str, Any]]
    """The agent state that must match (tensors compared exactly, the rest with ``==``)."""
    stop_at: int
    total_steps: int
    loss: str
    """A ``losses/...`` column the metrics must hold (the agent really updated)."""
    updates: int | None = None
    """The number of updates both runs must have made, where the row fixes it."""
    curve: bool = False
    """The uninterrupted run draws ``curve.png``."""
    compares: tuple[str, ...] = ()
    """Keys :attr:`state` must hold for this row (so a comparison cannot silently drop out)."""


CASES = [
    # checkpoints every 96 steps, stopped at 200: resumed from 192
    Case(
        "toy",
        _toy,
        _toy_state,
        stop_at=200,
        total_steps=400,
        loss="losses/toy",
        updates=400 // 32,
        curve=True,
    ),
    # stopped after 1,000 env steps (checkpoint at 800): weights, replay priorities, counters
    Case("dqn", _dqn("dqn"), _dqn_state, stop_at=1_000, total_steps=1_600, loss="losses/td_loss"),
    Case(
        "rainbow",
        _dqn("rainbow"),
        _dqn_state,
        stop_at=1_000,
        total_steps=1_600,
        loss="losses/td_loss",
        compares=("priorities",),
    ),
    # pixels: MinAtar's game state, the frame replay (its slots, sum tree and priorities), the conv torso
    Case(
        "rainbow-minatar",
        _dqn("rainbow-minatar", "MinAtar/Breakout-v1"),
        _dqn_state,
        stop_at=1_000,
        total_steps=1_600,
        loss="losses/td_loss",
        compares=("priorities",),
    ),
    # compiled (tritonrl.toolkit.compile): the same exactness (the acting forward is compiled on CUDA)
    Case(
        "dqn-compiled",
        _dqn("dqn", compile="default"),
        _dqn_state,
        stop_at=1_000,
        total_steps=1_600,
        loss="losses/td_loss",
    ),
    # stopped mid-rollout (rollouts are 16 steps), checkpoint at 20
    Case(
        "ppo", _ppo("ppo", "CartPole-v1"), _ppo_state, stop_at=40, total_steps=96, loss="losses/policy_loss"
    ),
    # pixels: MinAtar's game state, the rollout of scaled frames, the shared conv torso
    Case(
        "ppo-atari-minatar",
        _ppo("ppo-atari", "MinAtar/Breakout-v1", torso="minatar", normalize_obs=False),
        _ppo_state,
        stop_at=40,
        total_steps=96,
        loss="losses/policy_loss",
    ),
    Case(
        "ppo-lstm",
        _ppo("ppo-lstm", "CartPoleNoVel-v1"),
        _ppo_state,
        stop_at=40,
        total_steps=96,
        loss="losses/policy_loss",
    ),
    Case(
        "ppo-gru",
        _ppo("ppo-gru", "CartPoleNoVel-v1"),
        _ppo_state,
        stop_at=40,
        total_steps=96,
        loss="losses/policy_loss",
    ),
    # stopped at 250 env steps (checkpoint at 200; 2 envs, updates from 100 on): weights, targets,
    # log_alpha, counters; an odd number of updates before the stop (the delayed actor steps)
    Case(
        "sac",
        _sac("sac"),
        _sac_state,
        stop_at=250,
        total_steps=400,
        loss="losses/actor_loss",
        compares=("log_alpha.value",),
    ),
    Case("td3", _sac("td3"), _sac_state, stop_at=250, total_steps=400, loss="losses/actor_loss"),
    # MuJoCo (the mujoco extra): Hopper's episodes end by termination mid-run, HalfCheetah's
    # by truncation only; the simulator's state must come back with the checkpoint
    *(
        pytest.param(
            Case(
                f"{name}-{env_id}",
                _sac(name, env_id),
                _sac_state,
                stop_at=250,
                total_steps=400,
                loss="losses/actor_loss",
            ),
            marks=pytest.mark.skipif(_NO_MUJOCO, reason='needs mujoco: pip install "tritonrl[mujoco]"'),
            id=f"{name}-{env_id}",
        )
        for name, env_id in (("sac", "Hopper-v5"), ("td3", "HalfCheetah-v5"))
    ),  # fmt: skip
]


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return [{k: v for k, v in r.items() if k != "charts/SPS"} for r in csv.DictReader(f)]


@pytest.mark.parametrize("case", CASES, ids=[c.id if isinstance(c, Case) else None for c in CASES])
def test_stopped_and_resumed_run_matches_the_uninterrupted_run(case: Case, tmp_path: Path) -> None:
    full_agent, full = case.run(tmp_path / "full")
    _, stopped = case.run(tmp_path / "split", stop_at=case.stop_at)
    assert stopped["interrupted"] and stopped["global_step"] == case.stop_at
    torch.manual_seed(12345)  # disturb every global RNG in between
    torch.rand(100)
    resumed_agent, resumed = case.run(tmp_path / "split", resume=True)
    assert resumed["global_step"] == full["global_step"] == case.total_steps

    want, got = case.state(full_agent), case.state(resumed_agent)
    assert want.keys() == got.keys() and set(case.compares) <= want.keys()
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, got[key]), key
        else:
            assert value == got[key], key
    if "updates" in want:
        assert want["updates"] > 0
    if case.updates is not None:
        assert want["updates"] == case.updates

    rows = _rows(tmp_path / "full" / "metrics.csv")
    assert rows == _rows(tmp_path / "split" / "metrics.csv")
    assert any(r.get(case.loss) for r in rows)
    assert resumed["evaluations"] == full["evaluations"]
    if case.curve:
        assert (tmp_path / "full" / "curve.png").stat().st_size > 1000
