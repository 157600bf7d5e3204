"""The DQN family's network: a torso and a Q head (dueling, noisy, distributional or factored),
and the curiosity module it may carry (`tritonrl.agents.icm`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from tritonrl.agents.dqn.config import DQNConfig
from tritonrl.agents.icm import ICM
from tritonrl.agents.nets.conv import CONV_KINDS, ConvTorso
from tritonrl.agents.nets.factored import BranchingHead
from tritonrl.agents.nets.heads import DuelingHead
from tritonrl.agents.nets.torsos import build_torso

__all__ = ["QNetwork", "build_icm", "build_q_network"]


class QNetwork(nn.Module):
    """Torso + head; ``forward(obs)`` returns the head's output."""

    def __init__(self, torso: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.torso = torso
        # Duck-typed: a DuelingHead (``expected_q``) or a BranchingHead (``mask``), as the agent's
        # action space says; no one static type has both (mypy sees Any here).
        self.head: Any = head

    def forward(self, obs: torch.Tensor, support: torch.Tensor | None = None) -> Any:
        """The head's output; with ``support`` (C51 heads) ``(log_probs, expected_q)`` from the
        head's fused epilogue."""
        h = self.torso(obs)
        return self.head(h) if support is None else self.head(h, support)

    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """Fresh noise in the head's noisy layers (no-op without them)."""
        if hasattr(self.head, "reset_noise"):
            self.head.reset_noise(generator)


def build_q_network(
    obs_shape: tuple[int, ...],
    action: dict[str, Any],
    cfg: DQNConfig,
    device: torch.device,
    dtype: torch.dtype,
) -> QNetwork:
    """The online network of ``cfg`` for observations ``obs_shape`` and the action spec ``action``
    (`tritonrl.agents.dqn.spaces.action_spec`), created on ``device`` in ``dtype``."""
    torso: nn.Module
    if cfg.torso in CONV_KINDS:
        conv = ConvTorso(obs_shape, cfg.torso, hidden=cfg.torso_hidden, device=device, dtype=dtype)
        torso, features = conv, conv.out_features
    else:
        flat = build_torso(
            obs_shape,
            cfg.torso,
            width=cfg.torso_width,
            depth=cfg.torso_depth,
            hidden=cfg.torso_hidden,
            norm=cfg.torso_norm,
            spectral_norm=cfg.spectral_norm,
            heads=cfg.attention_heads,
            device=device,
            dtype=dtype,
        )
        torso, features = flat, flat.out_features
    if action["type"] == "multidiscrete":
        head: nn.Module = BranchingHead(
            features,
            action["nvec"],
            noisy=cfg.noisy,
            sigma0=cfg.noisy_sigma0,
            device=device,
            dtype=dtype,
        )
    else:
        atoms = {"none": 1, "c51": cfg.atoms, "qr": cfg.quantiles}[cfg.distribution]
        head = DuelingHead(
            features,
            action["n"],
            atoms=atoms,
            hidden=cfg.head_hidden,
            noisy=cfg.noisy,
            dueling=cfg.dueling,
            log_softmax=cfg.distribution == "c51",
            sigma0=cfg.noisy_sigma0,
            device=device,
            dtype=dtype,
        )
    return QNetwork(torso, head)


def build_icm(
    obs_shape: tuple[int, ...],
    action: dict[str, Any],
    cfg: DQNConfig,
    device: torch.device,
    dtype: torch.dtype,
) -> ICM:
    """The curiosity module of ``cfg`` (one action branch per MultiDiscrete dimension)."""
    dims = action["nvec"] if action["type"] == "multidiscrete" else [action["n"]]
    return ICM(
        obs_shape,
        dims,
        embed_dim=cfg.icm_embed,
        hidden=cfg.icm_hidden,
        eta=cfg.icm_eta,
        beta=cfg.icm_beta,
        device=device,
        dtype=dtype,
    )
