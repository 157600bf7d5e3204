"""PPO's named presets (one `tritonrl.toolkit.preset.Preset` each): ``ppo`` (categorical
MLP), ``ppo-continuous`` (Gaussian MLP), ``ppo-lstm``, ``ppo-gru``, ``ppo-flow`` and ``ppo-mamba``;
on image observations (`PIXEL_PRESETS`) ``ppo-atari`` and ``ppo-minatar``; over several assets
(`PORTFOLIO_PRESETS`) ``ppo-portfolio``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tritonrl.agents.ppo.agent import PPOAgent
from tritonrl.agents.ppo.config import PPOConfig
from tritonrl.agents.ppo.tuned import TUNED
from tritonrl.toolkit.preset import MarketPreset, Preset, find_preset
from tritonrl.toolkit.schedule import onpolicy_schedule

__all__ = ["PIXEL_PRESETS", "PORTFOLIO_PRESETS", "PRESETS", "preset"]


def _preset(name: str, description: str, config: PPOConfig, steps: int, market: MarketPreset) -> Preset:
    """A PPO preset: 8 environments and an evaluation every 10k steps by default; ``total_steps`` (the
    learning-rate annealing horizon) follows ``--steps``."""
    return Preset(
        name,
        description,
        config,
        agent=PPOAgent,
        kind="onpolicy",
        schedule=onpolicy_schedule,
        default_num_envs=8,
        default_steps=steps,
        default_eval_every=10_000,
        steps_field="total_steps",
        market=market,
        tuned={env: t for (p, env), t in TUNED.items() if p == name},
    )


# PPO on market data (--env market:...): a myopic discount, returns scaled to O(1), no entropy
# bonus. Tuned on synthetic,ar=0.3; results in docs/pages/results.md.
_MARKET = MarketPreset(
    overrides={
        "gamma": 0.5,
        "gae_lambda": 0.9,
        "num_steps": 64,
        "lr": 3e-4,
        "update_epochs": 4,
        "num_minibatches": 4,
        "ent_coef": 0.0,
        "reward_scale": 10.0,
    },
    default_num_envs=16,
    default_steps=100_000,
    default_eval_every=10_000,
)
# continuous positions (the continuous and flow policies): a narrower initial Gaussian
_MARKET_CONTINUOUS = replace(_MARKET, overrides={**_MARKET.overrides, "log_std_init": -0.5})
# recurrent policies keep their rollout, which their seq_len divides
_MARKET_MEMORY = replace(_MARKET, overrides={k: v for k, v in _MARKET.overrides.items() if k != "num_steps"})


# Partially observed tasks: sequences of 32 steps; values on a small scale so the critic does not
# swamp the shared memory's features.
_MEMORY = PPOConfig(
    policy="lstm",
    hidden=(64,),
    memory_size=64,
    num_steps=128,
    seq_len=32,
    normalize_obs=True,
    lr=5e-4,
    update_epochs=8,
    num_minibatches=8,
    reward_scale=0.1,
    clip_vloss=False,
    total_steps=200_000,
)
"""ppo-lstm's config (ppo-gru's with ``policy="gru"``)."""

PRESETS: tuple[Preset, ...] = (
    # CartPole-style discrete control.
    _preset(
        "ppo",
        "PPO, categorical MLP policy (Discrete actions)",
        PPOConfig(policy="discrete", lr=1e-3),
        100_000,
        _MARKET,
    ),
    # Pendulum-style continuous control: short horizon, rewards scaled to O(1) returns.
    _preset(
        "ppo-continuous",
        "PPO, diagonal Gaussian MLP policy, optional tanh squash (Box actions)",
        PPOConfig(
            policy="continuous",
            num_steps=256,
            gamma=0.95,
            gae_lambda=0.95,
            lr=1e-3,
            update_epochs=10,
            num_minibatches=16,
            ent_coef=0.0,
            reward_scale=0.1,
            clip_vloss=False,
            total_steps=200_000,
        ),
        200_000,
        _MARKET_CONTINUOUS,
    ),
    _preset(
        "ppo-lstm", "PPO with an LSTM memory (partially observed tasks)", _MEMORY, 200_000, _MARKET_MEMORY
    ),
    # The GRU twin of ppo-lstm: the same sizes and schedule.
    _preset(
        "ppo-gru",
        "PPO with a GRU memory (partially observed tasks)",
        replace(_MEMORY, policy="gru"),
        200_000,
        _MARKET_MEMORY,
    ),
    _preset(
        "ppo-flow",
        "PPO, normalizing-flow policy (affine couplings, Box actions)",
        PPOConfig(
            policy="flow",
            flow_layers=2,
            num_steps=256,
            gamma=0.95,
            gae_lambda=0.9,
            lr=1e-3,
            update_epochs=10,
            num_minibatches=16,
            ent_coef=0.0,
            reward_scale=0.1,
            clip_vloss=False,
            total_steps=200_000,
        ),
        200_000,
        _MARKET_CONTINUOUS,
    ),
    _preset(
        "ppo-mamba",
        "PPO with a Mamba2 memory (partially observed tasks)",
        PPOConfig(
            policy="mamba",
            memory_size=32,
            num_steps=128,
            seq_len=32,
            normalize_obs=True,
            lr=5e-4,
            update_epochs=8,
            num_minibatches=8,
            reward_scale=0.1,
            clip_vloss=False,
            total_steps=200_000,
        ),
        200_000,
        _MARKET_MEMORY,
    ),
)

# Allocation over several assets (--env portfolio:...): a Gaussian over the N + 1 simplex
# logits (the env maps them through softmax(5 a)), a myopic discount (a weight pays over the next
# bar, costs over the next few), rewards (log growth) scaled to O(1), no entropy bonus, and a narrow
# initial Gaussian (its noise, through softmax(5 a), reshuffles the weights: costs on every step).
_PORTFOLIO = PPOConfig(
    policy="continuous",
    hidden=(128, 128),
    num_steps=64,
    gamma=0.5,
    gae_lambda=0.9,
    lr=3e-4,
    update_epochs=4,
    num_minibatches=4,
    ent_coef=0.0,
    reward_scale=10.0,
    log_std_init=-1.5,
    normalize_obs=True,
    clip_vloss=False,
    total_steps=100_000,
)
"""ppo-portfolio's config."""

PORTFOLIO_PRESETS: tuple[Preset, ...] = (
    Preset(
        "ppo-portfolio",
        "PPO allocating over several assets and cash (Gaussian over simplex logits; portfolio:...)",
        _PORTFOLIO,
        agent=PPOAgent,
        kind="onpolicy",
        schedule=onpolicy_schedule,
        default_num_envs=16,
        default_steps=100_000,
        default_eval_every=10_000,
        default_env="portfolio:synthetic,signal=0.5,bars=20000",
        steps_field="total_steps",
        market=MarketPreset(
            overrides={}, default_num_envs=16, default_steps=100_000, default_eval_every=10_000
        ),
    ),
)
"""The portfolio preset (its defaults are the portfolio ones: ``market`` repeats them)."""


# CleanRL's ppo_atari.py: 8 environments x 128 steps, Adam 2.5e-4 annealed to 0 over 10M steps,
# gamma 0.99, GAE lambda 0.95, 4 epochs of 4 minibatches, clip 0.1 (surrogate and value), entropy
# 0.01, value 0.5, gradient norm 0.5; one Nature CNN (512 features) shared by actor and critic.
_ATARI = PPOConfig(
    policy="discrete",
    torso="nature",
    num_steps=128,
    gamma=0.99,
    gae_lambda=0.95,
    lr=2.5e-4,
    anneal_lr=True,
    update_epochs=4,
    num_minibatches=4,
    clip_coef=0.1,
    clip_vloss=True,
    ent_coef=0.01,
    vf_coef=0.5,
    max_grad_norm=0.5,
    total_steps=10_000_000,
)
"""ppo-atari's config (ppo-minatar's with the MinAtar torso and lr 1e-3)."""


def _pixel_preset(
    name: str, description: str, config: PPOConfig, steps: int, eval_every: int, env: str
) -> Preset:
    """A PPO preset on image observations: 8 environments, no market variant."""
    return Preset(
        name,
        description,
        config,
        agent=PPOAgent,
        kind="onpolicy",
        schedule=onpolicy_schedule,
        default_num_envs=8,
        default_steps=steps,
        default_eval_every=eval_every,
        default_env=env,
        steps_field="total_steps",
    )


PIXEL_PRESETS: tuple[Preset, ...] = (
    _pixel_preset(
        "ppo-atari",
        "PPO on Atari, Nature CNN shared by actor and critic (CleanRL ppo_atari.py settings)",
        _ATARI,
        10_000_000,
        250_000,
        "ALE/Breakout-v5",
    ),
    # ppo-atari's settings with the MinAtar torso (one conv of 16, 128 features) and lr 1e-3: at
    # 2.5e-4 a 30k-step run of MinAtar Breakout stays at the random policy's return
    # (tests/agents/test_ppo_pixels.py, the learning test).
    _pixel_preset(
        "ppo-minatar",
        "PPO on MinAtar, the MinAtar CNN shared by actor and critic (ppo-atari's settings, lr 1e-3)",
        replace(_ATARI, torso="minatar", lr=1e-3, total_steps=5_000_000),
        5_000_000,
        100_000,
        "MinAtar/Breakout-v1",
    ),
)
"""The presets on image observations (uint8 ``[C, H, W]``; docs/pages/pixels.md); no market variant."""
PRESETS = PRESETS + PIXEL_PRESETS + PORTFOLIO_PRESETS
"""The named presets; the command line's registry (`tritonrl.cli.registry`) collects them."""


def preset(name: str, *, env: str | None = None, **overrides: Any) -> PPOConfig:
    """The config of a named preset, with its tuned settings for gymnasium id ``env`` if any and field
    ``overrides`` on top; ``ValueError`` if unknown or bad."""
    return find_preset(PRESETS, name, "PPO").configure(overrides, env=env)
