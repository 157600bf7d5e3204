"""Stable-Baselines3's DQN at rl-baselines3-zoo's own settings, re-run here beside the zoo table.

    V/bin/python docs/_gen/zoo_peer.py CartPole-v1 [--seeds 1 2 3 4 5]

The zoo publishes one agent per (algorithm, env); this trains SB3 itself (a venv of its own: torch
2.13.0 first, then ``stable-baselines3 gymnasium``) on the zoo table's seeds and budgets, one torch
thread, a greedy evaluation (10 episodes) every ``eval_every`` steps and a final one of 30 episodes
from seed 1,000,000, as ``tritonrl evaluate``. Writes ``docs/data/zoo/sb3-<env>.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

# rl-baselines3-zoo hyperparams/dqn.yml (commit eec15dc): settings, budget, evaluation interval
ZOO = {
    "CartPole-v1": (
        dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1_000, gamma=0.99,
             target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
             exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256])),
        50_000, 2_500,
    ),
    "MountainCar-v0": (
        dict(learning_rate=4e-3, batch_size=128, buffer_size=10_000, learning_starts=1_000, gamma=0.98,
             target_update_interval=600, train_freq=16, gradient_steps=8, exploration_fraction=0.2,
             exploration_final_eps=0.07, policy_kwargs=dict(net_arch=[256, 256])),
        120_000, 5_000,
    ),
}  # fmt: skip
EVAL_SEED = 1_000_000


def _evaluate(model, env_id: str, episodes: int, seed: int) -> float:
    import gymnasium as gym

    env, total = gym.make(env_id), 0.0
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        done = False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(int(action))
            total += float(reward)
            done = terminated or truncated
    return total / episodes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("env", choices=sorted(ZOO))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--out", type=Path, default=None, help="default: docs/data/zoo/sb3-<env>.json")
    args = parser.parse_args(argv)
    import stable_baselines3
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback

    class Every(BaseCallback):
        """A greedy evaluation of 10 episodes every ``every`` env steps, on seeds from ``seed``."""

        def __init__(self, every: int, seed: int) -> None:
            super().__init__()
            self.every, self.eval_seed, self.evals = every, seed, []

        def _on_step(self) -> bool:
            if self.num_timesteps % self.every == 0:
                self.evals.append((self.num_timesteps, _evaluate(self.model, args.env, 10, self.eval_seed)))
            return True

    torch.set_num_threads(1)
    settings, steps, eval_every = ZOO[args.env]
    version = stable_baselines3.__version__
    print(f"stable-baselines3 {version} DQN on {args.env}, {steps:,} steps, one torch thread")
    out = args.out or Path(__file__).resolve().parents[1] / "data" / "zoo" / f"sb3-{args.env}.json"
    record = {"env": args.env, "sb3": version, "steps": steps, "settings": repr(settings), "runs": []}
    for seed in args.seeds:
        start = time.perf_counter()
        model = DQN("MlpPolicy", args.env, seed=seed, verbose=0, **settings)
        every = Every(eval_every, 10_000 * seed)
        model.learn(total_timesteps=steps, callback=every)
        wall = time.perf_counter() - start
        final = _evaluate(model, args.env, 30, EVAL_SEED)
        record["runs"].append({"seed": seed, "final": final, "evals": every.evals, "wall_s": wall})
        out.write_text(
            json.dumps(record, indent=1) + "\n"
        )  # after every seed: a stop keeps the finished ones
        curve = " ".join(f"{r:.0f}" for _, r in every.evals)
        print(f"seed {seed}: final {final:.1f} (30 episodes), {wall:.0f} s; evaluations {curve}", flush=True)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
