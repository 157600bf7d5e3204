"""The DQN family's named presets (one `tritonrl.toolkit.preset.Preset` each).

``dqn``, then ``double``, ``dueling``, ``noisy``, ``c51``, ``qrdqn`` and ``rainbow`` (each adds its
component); on frames ``dqn-atari`` (CleanRL), ``rainbow-atari`` (Hessel et al., 2018),
``dqn-minatar`` (Young & Tian, 2019) and ``rainbow-minatar``, which store each frame once in a
uint8 frame replay; ``dqn-portfolio`` over several assets (target portfolios). See docs/pages/dqn.md
and docs/pages/pixels.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tritonrl.agents.dqn.agent import DQNAgent
from tritonrl.agents.dqn.config import DQNConfig
from tritonrl.agents.dqn.tuned import TUNED
from tritonrl.toolkit.preset import MarketPreset, Preset, find_preset
from tritonrl.toolkit.schedule import offpolicy_schedule

__all__ = ["PIXEL_PRESETS", "PRESETS", "preset"]

# Shared defaults: tuned so every preset solves CartPole-v1 (greedy mean >= 475) within 50k env
# steps on two seeds, and kept generic (no CartPole-only tricks such as reward scaling).
_BASE = DQNConfig()

# Every DQN-family preset on market data (--env market:...): a myopic discount (a position pays
# over the next bar or two), a short exploration phase, frequent updates on large batches
# (per-step rewards are log returns, mostly noise), C51's support fitted to log-return rewards
# (the other presets ignore v_min/v_max) and n-step windows staged on the device. Tuned on
# synthetic,ar=0.3; results in docs/pages/results.md.
_MARKET = MarketPreset(
    overrides={
        "gamma": 0.5,
        "lr": 5e-4,
        "batch_size": 256,
        "learning_starts": 2_000,
        "train_freq": 64,
        "gradient_steps": 16,
        "target_update_every": 250,
        "eps_decay_steps": 10_000,
        "eps_end": 0.02,
        "v_min": -0.25,
        "v_max": 0.25,
        "replay_staging": "device",
    },
    default_num_envs=16,
    default_steps=60_000,
    default_eval_every=10_000,
)


def _preset(name: str, description: str, **switches: Any) -> Preset:
    """A DQN preset: ``_BASE`` with ``switches``; CLI defaults of 4 environments, 50k steps and a greedy
    evaluation every 2,500 steps, and `_MARKET` on market data."""
    return Preset(
        name,
        description,
        dataclasses.replace(_BASE, tags=(name,), **switches),
        agent=DQNAgent,
        kind="offpolicy",
        schedule=offpolicy_schedule,
        default_num_envs=4,
        default_steps=50_000,
        default_eval_every=2_500,
        market=_MARKET,
        tuned={env: tuned for (p, env), tuned in TUNED.items() if p == name},
    )


PRESETS: tuple[Preset, ...] = (
    _preset("dqn", "DQN: target network, epsilon-greedy, Huber loss"),
    _preset("double", "Double DQN", double=True),
    _preset("dueling", "Dueling double DQN", double=True, dueling=True),
    _preset("noisy", "Noisy-net double DQN (no epsilon)", double=True, noisy=True),
    _preset("c51", "C51 distributional DQN", distribution="c51"),
    _preset("qrdqn", "QR-DQN quantile regression", distribution="qr"),
    _preset(
        "rainbow",
        "Rainbow: double + dueling + noisy + n-step + PER + C51",
        double=True,
        dueling=True,
        noisy=True,
        n_step=3,
        prioritized=True,
        distribution="c51",
    ),
    Preset(
        "dqn-portfolio",
        "Double DQN choosing a target portfolio (cash, equal weight, one asset) or to hold (portfolio:...)",
        dataclasses.replace(_BASE, tags=("dqn-portfolio",), double=True, **_MARKET.overrides),
        agent=DQNAgent,
        kind="offpolicy",
        schedule=offpolicy_schedule,
        default_num_envs=16,
        default_steps=60_000,
        default_eval_every=10_000,
        default_env="portfolio:synthetic,signal=0.5,bars=20000",
        market=dataclasses.replace(_MARKET, overrides={}),
    ),
)
"""The named presets; the command line's registry (`tritonrl.cli.registry`) collects them."""


def _pixel_preset(
    name: str, description: str, env: str, steps: int, eval_every: int, **fields: Any
) -> Preset:
    """A DQN preset on image observations: one environment, no market variant."""
    return Preset(
        name,
        description,
        dataclasses.replace(_BASE, tags=(name,), **fields),
        agent=DQNAgent,
        kind="offpolicy",
        schedule=offpolicy_schedule,
        default_num_envs=1,
        default_steps=steps,
        default_eval_every=eval_every,
        default_env=env,
    )


# CleanRL's dqn_atari.py: Adam 1e-4, 1M replay, batch 32, a target copy every 1,000 env steps
# (250 updates at one update per 4 steps), epsilon 1 -> 0.01 over 10% of 10M steps, learning
# from step 80,000, MSE loss, no gradient clipping (none computed).
_DQN_ATARI = dict(
    torso="nature",
    frame_stack=4,
    lr=1e-4,
    buffer_size=1_000_000,
    batch_size=32,
    target_update_every=250,
    eps_start=1.0,
    eps_end=0.01,
    eps_decay_steps=1_000_000,
    learning_starts=80_000,
    train_freq=4,
    gradient_steps=1,
    loss="mse",
    max_grad_norm=None,
)
# Hessel et al. (2018), table 1: Adam 6.25e-5 (eps 1.5e-4), n = 3, PER alpha 0.5, beta 0.4 -> 1
# over the run, 51 atoms on [-10, 10], noisy sigma0 0.5, learning from 80k frames (20k steps),
# a target copy every 32k frames (2,000 updates at one per 4 steps), 50M frames (12.5M steps).
# The dueling streams have 512 hidden units each on the convolution features.
_RAINBOW_ATARI = dict(
    torso="nature",
    torso_hidden=(),
    head_hidden=512,
    frame_stack=4,
    double=True,
    dueling=True,
    noisy=True,
    noisy_sigma0=0.5,
    distribution="c51",
    atoms=51,
    v_min=-10.0,
    v_max=10.0,
    n_step=3,
    prioritized=True,
    per_alpha=0.5,
    per_beta=0.4,
    per_beta_steps=3_125_000,
    lr=6.25e-5,
    adam_eps=1.5e-4,
    buffer_size=1_000_000,
    batch_size=32,
    learning_starts=20_000,
    train_freq=4,
    gradient_steps=1,
    target_update_every=2_000,
    max_grad_norm=10.0,
)
# Young & Tian (2019), the MinAtar DQN: conv 16x3x3 -> 128 -> Q, 100k replay, batch 32, one update
# per step from step 5,000, a target copy every 1,000 updates, epsilon 1 -> 0.1 over 100k steps,
# Huber loss, 5M frames. The paper's optimizer is centred RMSProp (lr 2.5e-4); tritonrl's DQN
# family uses Adam, at the same learning rate.
_DQN_MINATAR = dict(
    torso="minatar",
    frame_stack=1,
    lr=2.5e-4,
    buffer_size=100_000,
    batch_size=32,
    learning_starts=5_000,
    train_freq=1,
    gradient_steps=1,
    target_update_every=1_000,
    eps_start=1.0,
    eps_end=0.1,
    eps_decay_steps=100_000,
    loss="huber",
    max_grad_norm=None,
)
# dqn-minatar plus the Rainbow components at Hessel et al.'s values (n = 3, PER alpha 0.5,
# beta 0.4 -> 1, noisy sigma0 0.5, 51 atoms), the support fitted to MinAtar's returns (rewards
# 0..1 per step: at most 100 discounted), and Adam at 1e-4 (eps 3.125e-4) as in Obando-Ceron &
# Castro (2021), who ran Rainbow on MinAtar.
_RAINBOW_MINATAR = dict(
    _DQN_MINATAR,
    double=True,
    dueling=True,
    noisy=True,
    distribution="c51",
    v_min=-10.0,
    v_max=100.0,
    n_step=3,
    prioritized=True,
    per_alpha=0.5,
    per_beta=0.4,
    per_beta_steps=5_000_000,
    lr=1e-4,
    adam_eps=3.125e-4,
)

PIXEL_PRESETS: tuple[Preset, ...] = (
    _pixel_preset(
        "dqn-atari",
        "DQN on Atari (CleanRL dqn_atari.py settings)",
        "ALE/Breakout-v5",
        10_000_000,
        250_000,
        **_DQN_ATARI,
    ),
    _pixel_preset(
        "rainbow-atari",
        "Rainbow on Atari (Hessel et al. 2018 settings)",
        "ALE/Breakout-v5",
        12_500_000,
        250_000,
        **_RAINBOW_ATARI,
    ),
    _pixel_preset(
        "dqn-minatar",
        "DQN on MinAtar (Young & Tian 2019 settings)",
        "MinAtar/Breakout-v1",
        5_000_000,
        100_000,
        **_DQN_MINATAR,
    ),
    _pixel_preset(
        "rainbow-minatar", "Rainbow on MinAtar", "MinAtar/Breakout-v1", 5_000_000, 100_000, **_RAINBOW_MINATAR
    ),
)
PRESETS = PRESETS + PIXEL_PRESETS


def preset(name: str, *, env: str | None = None, **overrides: Any) -> DQNConfig:
    """The config of a named preset, with its tuned settings for gymnasium id ``env`` if any and field
    ``overrides`` on top; ``ValueError`` if unknown or bad."""
    return find_preset(PRESETS, name, "DQN").configure(overrides, env=env)
