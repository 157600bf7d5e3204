"""The DQN family's settings tuned per environment: ``TUNED[(preset, env id)]``, each with its source.

`tritonrl.agents.dqn.presets` gives each preset its entries (`tritonrl.toolkit.preset.Tuned`);
``tritonrl train --agent P --env E`` applies them under ``--set``. Only measured entries belong
here. See docs/pages/training.md ("Per-environment settings").
"""

from __future__ import annotations

from tritonrl.toolkit.preset import Tuned

__all__ = ["TUNED"]

_ACROBOT = Tuned(
    overrides={
        "lr": 6.3e-4,
        "batch_size": 128,
        "train_freq": 4,
        "gradient_steps": 4,
        "target_update_every": 250,
        "eps_end": 0.1,
        "eps_decay_steps": 12_000,
        "torso_width": 256,
    },
    source="rl-baselines3-zoo (hyperparams/dqn.yml, Acrobot-v1); measured here: double, 3 seeds x 50k "
    "steps, last three greedy evaluations above -100 on every seed",
    steps=100_000,
    note="the zoo trains for 100k steps; measured here with the preset's 50_000",
)

TUNED: dict[tuple[str, str], Tuned] = {
    ("dqn", "Acrobot-v1"): _ACROBOT,
    ("double", "Acrobot-v1"): _ACROBOT,
}
"""Tuned settings by (preset name, gymnasium env id)."""
