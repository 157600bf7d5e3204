"""PPO's settings tuned per environment: ``TUNED[(preset, env id)]``, each with its source.

From rl-baselines3-zoo's ``hyperparams/ppo.yml`` (commit eec15dc), translated: ``n_steps`` is
``num_steps``, ``n_epochs`` ``update_epochs``, ``num_minibatches = n_envs * n_steps / batch_size``,
SB3's constant rate ``anneal_lr=False``, its unclipped value loss ``clip_vloss=False``; ``normalize``
is ``normalize_obs`` with ``reward_scale`` 0.1, its linear rate schedule ``anneal_lr``. ``ppo``'s own
config (CleanRL's) is ``preset("ppo")`` and ``train --no-tuned``. Results: docs/pages/results.md.
"""

from __future__ import annotations

from tritonrl.toolkit.preset import Tuned

__all__ = ["TUNED"]

_SB3 = {"lr": 3e-4, "anneal_lr": False, "clip_vloss": False}

TUNED: dict[tuple[str, str], Tuned] = {
    ("ppo", "CartPole-v1"): Tuned(
        overrides={
            "lr": 1e-3,
            "clip_vloss": False,
            "num_steps": 32,
            "num_minibatches": 1,
            "update_epochs": 20,
            "gae_lambda": 0.8,
            "gamma": 0.98,
            "ent_coef": 0.0,
        },
        source="rl-baselines3-zoo hyperparams/ppo.yml (CartPole-v1)",
        steps=100_000,
        budget=100_000,
        num_envs=8,
        note="the zoo's rate schedule lin_1e-3 is anneal_lr; its clip range, also annealed there, stays 0.2",
    ),
    ("ppo", "Acrobot-v1"): Tuned(
        overrides={
            **_SB3,
            "num_steps": 256,
            "num_minibatches": 64,
            "gae_lambda": 0.94,
            "gamma": 0.99,
            "update_epochs": 4,
            "ent_coef": 0.0,
            "normalize_obs": True,
            "reward_scale": 0.1,
        },
        source="rl-baselines3-zoo hyperparams/ppo.yml (Acrobot-v1)",
        steps=1_000_000,
        budget=1_000_000,
        num_envs=16,
    ),
    ("ppo", "LunarLander-v3"): Tuned(
        overrides={
            **_SB3,
            "num_steps": 1024,
            "num_minibatches": 256,
            "gae_lambda": 0.98,
            "gamma": 0.999,
            "update_epochs": 4,
            "ent_coef": 0.01,
        },
        source="rl-baselines3-zoo hyperparams/ppo.yml (LunarLander-v3)",
        steps=1_000_000,
        budget=1_000_000,
        num_envs=16,
        note="needs the box2d extra",
    ),
}
"""Tuned settings by (preset name, gymnasium env id)."""
