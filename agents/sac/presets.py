"""The continuous off-policy family's presets: ``sac`` and ``td3`` at CleanRL's settings (TD3's
``learning_starts`` 5,000), on Pendulum-v1 by default, each with its own market overrides
(`_MARKET_SAC`, `_MARKET_TD3`); ``sac-portfolio`` over several assets. See docs/pages/sac.md.
"""

from __future__ import annotations

from typing import Any

from tritonrl.agents.sac.config import SACConfig, TD3Config
from tritonrl.agents.sac.sac import SACAgent
from tritonrl.agents.sac.td3 import TD3Agent
from tritonrl.agents.sac.tuned import TUNED
from tritonrl.toolkit.preset import MarketPreset, Preset, find_preset
from tritonrl.toolkit.schedule import offpolicy_schedule

__all__ = ["PRESETS", "preset"]

_CLI: dict[str, Any] = {
    "default_num_envs": 1,
    "default_steps": 20_000,
    "default_eval_every": 5_000,
    "default_env": "Pendulum-v1",
}

# Both on market data (--env market:...): a myopic discount (a position pays over the next bar or
# two), 64-64 networks, a 100k replay, a short random phase and 16 updates every 64 env steps (a
# quarter per step: rewards are log returns, mostly noise, and a CPU run stays short). SAC's
# entropy coefficient is fixed and small: rewards are about 1e-2 a bar, and the autotuned one
# (from 1) swamped them (it barely traded). Tuned on synthetic,ar=0.3: figures in docs/pages/sac.md.
_MARKET_COMMON: dict[str, Any] = {
    "gamma": 0.5,
    "hidden": (64, 64),
    "buffer_size": 100_000,
    "learning_starts": 2_000,
    "train_freq": 64,
    "gradient_steps": 16,
}
_MARKET_DEFAULTS: dict[str, Any] = {
    "default_num_envs": 16,
    "default_steps": 20_000,
    "default_eval_every": 5_000,
}
_MARKET_SAC = MarketPreset(overrides={**_MARKET_COMMON, "autotune": False, "alpha": 1e-4}, **_MARKET_DEFAULTS)
_MARKET_TD3 = MarketPreset(overrides=dict(_MARKET_COMMON), **_MARKET_DEFAULTS)

# Allocation over several assets (--env portfolio:...): the squashed Gaussian's N + 1 outputs
# are the simplex logits the env maps through softmax(5 a); the market settings otherwise.
_PORTFOLIO = MarketPreset(overrides={}, default_num_envs=16, default_steps=30_000, default_eval_every=5_000)

PRESETS: tuple[Preset, ...] = (
    Preset(
        "sac",
        "SAC v2: twin soft Q, squashed Gaussian actor, entropy autotuning (CleanRL defaults; Box actions)",
        SACConfig(tags=("sac",)),
        agent=SACAgent,
        kind="offpolicy",
        schedule=offpolicy_schedule,
        market=_MARKET_SAC,
        tuned={env: t for (p, env), t in TUNED.items() if p == "sac"},
        **_CLI,
    ),
    Preset(
        "td3",
        "TD3: twin critics, target smoothing, delayed actor (CleanRL defaults, but learning_starts 5000 "
        "instead of 25000: a 20k-step Pendulum run would never learn; Box actions)",
        TD3Config(learning_starts=5_000, tags=("td3",)),
        agent=TD3Agent,
        kind="offpolicy",
        schedule=offpolicy_schedule,
        market=_MARKET_TD3,
        tuned={env: t for (p, env), t in TUNED.items() if p == "td3"},
        **_CLI,
    ),
    Preset(
        "sac-portfolio",
        "SAC allocating over several assets and cash (squashed Gaussian over simplex logits; portfolio:...)",
        SACConfig(**{**_MARKET_COMMON, "autotune": False, "alpha": 1e-4}, tags=("sac", "portfolio")),
        agent=SACAgent,
        kind="offpolicy",
        schedule=offpolicy_schedule,
        default_num_envs=16,
        default_steps=30_000,
        default_eval_every=5_000,
        default_env="portfolio:synthetic,signal=0.5,bars=20000",
        market=_PORTFOLIO,
    ),
)
"""The named presets; the command line's registry (`tritonrl.cli.registry`) collects them."""


def preset(name: str, *, env: str | None = None, **overrides: Any) -> Any:
    """The config of preset ``"sac"`` or ``"td3"``, with its tuned settings for gymnasium id ``env`` if
    any and field ``overrides`` on top; ``ValueError`` if bad."""
    return find_preset(PRESETS, name, "SAC/TD3").configure(overrides, env=env)
