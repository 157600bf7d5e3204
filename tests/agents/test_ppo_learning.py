"""PPO learns: fixed seeds, CPU, one torch thread; each run stops as soon as its greedy evaluation
(mean of 10 episodes) reaches the threshold, so the budget is an upper bound, not the cost.

| test | threshold | budget (env steps) |
| --- | --- | --- |
| ``ppo`` on CartPole-v1, seeds 1 and 2 (f32), seed 3 with bf16 forced | >= 475 | 100,000 |
| ``ppo-continuous`` and ``ppo-flow`` on Pendulum-v1 (and ``ppo-continuous`` in bf16) | >= -250 | 200,000 |
| ``ppo-lstm``, ``ppo-gru``, ``ppo-mamba`` on CartPoleNoVel-v1 (lstm and gru also bf16) | >= 400 | 100,000 |
| feed-forward ``ppo`` on CartPoleNoVel-v1, same budget | stays < 200 | 100,000 |
| ``ppo`` on CartPole-v1 overlapped (``overlap=True``: a learner process), seeds 1, 2 | >= 475 | 100,000 |

bf16 is forced with ``TRITONRL_DTYPE=bf16`` (emulated on the CPU): parameters, stored observations
and the conv/LSTM/GRU memories are bf16, the optimizer keeps f32 master weights; the same thresholds
hold. Each test prints ``steps to threshold`` (run ``pytest -m learning -s`` to see them).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

from tritonrl.agents.ppo import PPOAgent, preset
from tritonrl.toolkit.envs.vector import make_vec_env
from tritonrl.toolkit.precision import training_dtype
from tritonrl.toolkit.training.loop import LoopConfig, run_training
from tritonrl.toolkit.training.onpolicy import OnPolicySchedule

pytestmark = pytest.mark.learning


def learn(
    name: str,
    env_id: str,
    *,
    steps: int,
    seed: int,
    target: float | None,
    eval_every: int,
    num_envs: int = 8,
    overlap: bool = False,
) -> dict:
    cfg = dataclasses.replace(preset(name), total_steps=steps)
    env = make_vec_env(env_id, num_envs, seed=seed)
    agent = PPOAgent(env.single_observation_space, env.single_action_space, cfg, num_envs=num_envs, seed=seed)
    summary = run_training(
        agent,
        env,
        OnPolicySchedule(cfg.num_steps),
        LoopConfig(
            total_steps=steps,
            seed=seed,
            eval_every=eval_every,
            eval_episodes=10,
            target_return=target,
            final_eval=False,
            overlap=overlap,
        ),
    )
    env.close()
    evals = [round(r, 1) for _, r in summary["evaluations"]]
    print(
        f"\n{name}{' overlapped' if overlap else ''} {env_id} seed {seed} dtype {agent.dtype}: "
        f"steps to threshold "
        f"{summary['reached_target_at']} (budget {steps}), evaluations {evals}, {summary['wall_s']:.1f} s"
    )
    return summary


@pytest.mark.parametrize("seed", [1, 2])
def test_ppo_solves_cartpole_f32(seed):
    summary = learn("ppo", "CartPole-v1", steps=100_000, seed=seed, target=475, eval_every=5_000)
    assert summary["reached_target_at"] is not None, summary["evaluations"]


@pytest.mark.parametrize("seed", [1, 2])
def test_overlapped_ppo_solves_cartpole(seed):
    # acting one rollout behind the learner (the clipped ratio against the snapshot that acted)
    summary = learn(
        "ppo", "CartPole-v1", steps=100_000, seed=seed, target=475, eval_every=5_000, overlap=True
    )
    assert summary["reached_target_at"] is not None, summary["evaluations"]


@pytest.mark.parametrize(
    ("name", "env_id", "steps", "seed", "target", "eval_every"),
    [
        ("ppo", "CartPole-v1", 100_000, 3, 475, 5_000),
        ("ppo-continuous", "Pendulum-v1", 200_000, 1, -250, 10_000),
        ("ppo-lstm", "CartPoleNoVel-v1", 100_000, 1, 400, 10_000),
        ("ppo-gru", "CartPoleNoVel-v1", 100_000, 1, 400, 10_000),
    ],
    ids=["ppo-cartpole", "ppo-continuous-pendulum", "ppo-lstm-novel", "ppo-gru-novel"],
)
def test_bf16_learns(name, env_id, steps, seed, target, eval_every, monkeypatch):
    monkeypatch.setenv("TRITONRL_DTYPE", "bf16")
    training_dtype.cache_clear()
    assert training_dtype("cpu") == torch.bfloat16
    summary = learn(name, env_id, steps=steps, seed=seed, target=target, eval_every=eval_every)
    assert summary["reached_target_at"] is not None, summary["evaluations"]


@pytest.mark.parametrize("name", ["ppo-continuous", "ppo-flow"])
def test_continuous_policies_solve_pendulum(name):
    summary = learn(name, "Pendulum-v1", steps=200_000, seed=1, target=-250, eval_every=10_000)
    assert summary["reached_target_at"] is not None, summary["evaluations"]


@pytest.mark.parametrize("name", ["ppo-lstm", "ppo-gru", "ppo-mamba"])
def test_memory_policies_solve_cartpole_without_velocities(name):
    summary = learn(name, "CartPoleNoVel-v1", steps=100_000, seed=1, target=400, eval_every=10_000)
    assert summary["reached_target_at"] is not None, summary["evaluations"]


def test_feed_forward_policy_cannot_solve_cartpole_without_velocities():
    summary = learn("ppo", "CartPoleNoVel-v1", steps=100_000, seed=1, target=None, eval_every=20_000)
    best = max(r for _, r in summary["evaluations"])
    assert best < 200, summary["evaluations"]
