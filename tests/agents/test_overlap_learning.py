"""Learning test of overlapped training: DQN and Rainbow with the learner in its own process solve
CartPole on the budget and threshold of the sequential tests (``test_dqn_learning.py``: 50k env
steps, 4 envs, greedy mean >= 475 over 10 episodes, evaluated every 2,500 steps). Fixed seeds,
CPU, one torch thread in each process, marked ``learning``; DQN seeds 1 and 2, 30-80 s together
here (2 shared cores, by load; seed 1 reached the threshold at 2,500 steps, seed 2 at 20,000);
Rainbow seed 1 at 5,000 steps, ~25 s.
"""

from __future__ import annotations

import time

import pytest
import torch

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

from tritonrl.agents.dqn import DQNAgent, preset
from tritonrl.toolkit.envs.vector import make_vec_env
from tritonrl.toolkit.training.loop import LoopConfig, run_training
from tritonrl.toolkit.training.offpolicy import schedule_for

pytestmark = pytest.mark.learning

SOLVED = 475.0  # CartPole-v1's reward threshold, as in test_dqn_learning.py
BUDGET = 50_000  # env steps, as in test_dqn_learning.py


@pytest.mark.parametrize(("name", "seed"), [("dqn", 1), ("dqn", 2), ("rainbow", 1)])
def test_overlapped_dqn_solves_cartpole_within_budget(name: str, seed: int) -> None:
    torch.set_num_threads(1)
    num_envs = 4
    env = make_vec_env("CartPole-v1", num_envs, seed=seed)
    agent = DQNAgent(
        env.single_observation_space, env.single_action_space, preset(name), num_envs=num_envs, seed=seed
    )
    t0 = time.perf_counter()
    try:
        summary = run_training(
            agent,
            env,
            schedule_for(agent),
            LoopConfig(
                total_steps=BUDGET,
                seed=seed,
                eval_every=2_500,
                eval_episodes=10,
                target_return=SOLVED,
                overlap=True,
                plot=False,
                tensorboard=False,
            ),
        )
    finally:
        env.close()
    wall = time.perf_counter() - t0
    print(
        f"\n[learning] overlapped {name} seed={seed}: threshold {SOLVED} reached at "
        f"{summary['reached_target_at']} env steps, {agent.updates} updates, {wall:.1f} s; "
        f"evaluations {[round(r, 1) for _, r in summary['evaluations']]}"
    )
    reached = summary["reached_target_at"]
    assert reached is not None and reached <= BUDGET, f"evaluations {summary['evaluations']}"
