"""SAC's and TD3's settings tuned per environment: ``TUNED[(preset, env id)]``, each with its source.

rl-baselines3-zoo's ``hyperparams/sac.yml`` / ``td3.yml`` (commit eec15dc), translated: one
learning rate is ``policy_lr`` and ``q_lr`` (SAC) or ``lr`` (TD3), ``net_arch`` is ``hidden``, and
SAC keeps Stable-Baselines3's ``learning_starts`` of 100, which the zoo's entry does not change.
On InvertedPendulum-v5 SAC's CleanRL defaults need no entry; TD3's, which did not learn in 20k
steps, give way to the TD3 paper's. Results: docs/pages/results.md ("The zoo table").
"""

from __future__ import annotations

from tritonrl.toolkit.preset import Tuned

__all__ = ["TUNED"]

TUNED: dict[tuple[str, str], Tuned] = {
    ("sac", "Pendulum-v1"): Tuned(
        overrides={"policy_lr": 1e-3, "q_lr": 1e-3, "learning_starts": 100},
        source="rl-baselines3-zoo hyperparams/sac.yml (Pendulum-v1)",
        steps=20_000,
        budget=20_000,
    ),
    ("td3", "Pendulum-v1"): Tuned(
        overrides={
            "gamma": 0.98,
            "buffer_size": 200_000,
            "learning_starts": 10_000,
            "exploration_noise": 0.1,
            "lr": 1e-3,
            "hidden": (400, 300),
        },
        source="rl-baselines3-zoo hyperparams/td3.yml (Pendulum-v1)",
        steps=20_000,
        budget=20_000,
    ),
    ("td3", "InvertedPendulum-v5"): Tuned(
        overrides={"lr": 1e-3, "batch_size": 100, "hidden": (400, 300), "learning_starts": 1_000},
        source="Fujimoto et al. (2018), TD3: the paper's settings, and 1,000 random steps on "
        "InvertedPendulum (sfujim/TD3 run_experiments.sh)",
        steps=1_000_000,
        budget=50_000,
        note="the paper trains 1M steps; 50k here",
    ),
}
"""Tuned settings by (preset name, gymnasium env id)."""
