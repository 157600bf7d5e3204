"""The PPO policy: a core and an action head chosen by ``config.policy`` and the action space.

The networks live in `tritonrl.agents.nets`.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
from tritonrl.agents.nets.actor_critic import ActorCritic, ConvCore, FeedForwardCore
from tritonrl.agents.nets.policy_heads import CategoricalHead, FlowHead, GaussianHead
from tritonrl.agents.nets.recurrent import GRUCore, LSTMCore, Mamba2Core
from tritonrl.agents.ppo.config import PPOConfig

__all__ = ["build_policy"]


def build_policy(
    cfg: PPOConfig,
    obs_shape: tuple[int, ...],
    action_space: gym.Space,
    device: torch.device,
    dtype: torch.dtype,
) -> ActorCritic:
    """The actor-critic of ``cfg.policy`` for ``obs_shape`` and ``action_space``.

    Raises:
        ValueError: an action space the policy kind cannot drive, or a squashing policy with
            infinite action bounds.
    """
    space = action_space
    discrete = isinstance(space, gym.spaces.Discrete)
    box = isinstance(space, gym.spaces.Box) and len(space.shape) == 1
    if cfg.policy == "discrete" and not discrete:
        raise ValueError(f"policy 'discrete' needs a Discrete action space, got {space}")
    if cfg.policy in ("continuous", "flow") and not box:
        raise ValueError(f"policy {cfg.policy!r} needs a flat Box action space, got {space}")
    if not (discrete or box):
        raise ValueError(f"PPO supports Discrete and flat Box action spaces, got {space}")
    # Every module is created on the device in the training dtype (CONTRIBUTING.md, "Precision"): no cast.
    fk: dict[str, Any] = {"device": device, "dtype": dtype}
    core: FeedForwardCore | ConvCore | LSTMCore | GRUCore | Mamba2Core
    obs_dim = int(obs_shape[0])
    if cfg.torso != "mlp":  # the config allows conv torsos with feed-forward policies only
        core = ConvCore(obs_shape, cfg.torso, hidden=cfg.torso_hidden, **fk)
    elif cfg.policy in ("discrete", "continuous", "flow"):
        core = FeedForwardCore(obs_dim, cfg.hidden, **fk)
    elif cfg.policy == "lstm":
        core = LSTMCore(obs_dim, cfg.hidden, cfg.memory_size, **fk)
    elif cfg.policy == "gru":
        core = GRUCore(obs_dim, cfg.hidden, cfg.memory_size, **fk)
    else:
        core = Mamba2Core(
            obs_dim,
            cfg.memory_size,
            d_state=cfg.mamba_d_state,
            headdim=cfg.mamba_headdim,
            expand=cfg.mamba_expand,
            **fk,
        )
    feat = core.feature_dim
    head: CategoricalHead | GaussianHead | FlowHead
    if isinstance(space, gym.spaces.Discrete):
        head = CategoricalHead(feat, int(space.n), **fk)
    else:
        assert isinstance(space, gym.spaces.Box)  # refused above unless Discrete or flat Box
        low = torch.as_tensor(space.low, dtype=torch.float32)
        high = torch.as_tensor(space.high, dtype=torch.float32)
        bounded = bool(torch.isfinite(low).all() and torch.isfinite(high).all())
        if (cfg.policy == "flow" or cfg.squash) and not bounded:
            raise ValueError(
                f"policy {cfg.policy!r} with tanh squashing needs finite action bounds, got {space}"
            )
        if cfg.policy == "flow":
            head = FlowHead(
                feat,
                int(space.shape[0]),
                low,
                high,
                layers=cfg.flow_layers,
                hidden=cfg.flow_hidden,
                log_std_init=cfg.log_std_init,
                **fk,
            )
        else:
            head = GaussianHead(
                feat,
                int(space.shape[0]),
                low,
                high,
                squash=cfg.squash,
                log_std_init=cfg.log_std_init,
                **fk,
            )
    return ActorCritic(core, head, **fk)
