"""The actor-critic network of the PPO family: a core, an action head and a linear critic.

Feed-forward and conv cores here, recurrent ones in
[`tritonrl.agents.nets.recurrent`][tritonrl.agents.nets.recurrent]; values leave the critic in f32. See
docs/pages/ppo.md.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from tritonrl.agents.nets._layers import factory_kwargs, orthogonal_linear, tanh_mlp
from tritonrl.agents.nets.conv import ConvTorso
from tritonrl.agents.nets.policy_heads import CategoricalHead, FlowHead, GaussianHead
from tritonrl.agents.nets.recurrent import GRUCore, LSTMCore, Mamba2Core

__all__ = ["ActorCritic", "ConvCore", "FeedForwardCore"]

State = Any  # a tuple of tensors with the batch as their first dimension, or None


class FeedForwardCore(nn.Module):
    """Separate actor and critic tanh MLPs over the observation (identity for ``hidden=()``);
    raises ``ValueError`` for a layer size below 1."""

    recurrent = False

    def __init__(
        self,
        obs_dim: int,
        hidden: tuple[int, ...],
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        fk = factory_kwargs(device, dtype)
        self.actor = tanh_mlp(obs_dim, hidden, fk)
        self.critic = tanh_mlp(obs_dim, hidden, fk)
        self.feature_dim = hidden[-1] if hidden else obs_dim

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [..., obs_dim]`` -> ``(actor features, critic features)``."""
        return self.actor(x), self.critic(x)


class ConvCore(nn.Module):
    """One conv torso of ``kind`` shared by actor and critic, for images ``[B, C, H, W]`` scaled to
    ``[0, 1]`` in the parameter dtype; orthogonal init with gain sqrt 2 (CleanRL's ``ppo_atari.py``).
    ``hidden``: the linear layers after the convolutions (``None``: the kind's default).

    Raises:
        ValueError: ``obs_shape`` not ``[C, H, W]``, an unknown ``kind``, a layer size below 1, or
            an image too small for its convolutions.
    """

    recurrent = False

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        kind: str,
        *,
        hidden: tuple[int, ...] | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        fk = factory_kwargs(device, dtype)
        self.torso = ConvTorso(obs_shape, kind, hidden=hidden, orthogonal_gain=math.sqrt(2), **fk)
        self.feature_dim = self.torso.out_features

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [B, C, H, W]`` -> ``(features, features)`` ``[B, feature_dim]`` (the same tensor)."""
        f = self.torso(x)
        return f, f


# ----------------------------------------------------------------------------- actor-critic


class ActorCritic(nn.Module):
    """A core, an action head and a linear critic; ``device`` and ``dtype`` are the critic's."""

    def __init__(
        self,
        core: FeedForwardCore | ConvCore | LSTMCore | GRUCore | Mamba2Core,
        head: CategoricalHead | GaussianHead | FlowHead,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        # Any: only recurrent cores (LSTMCore, GRUCore, Mamba2Core) have step/sequence/initial_state, and the
        # ``recurrent`` flag, not the class, picks those calls; no one static type fits every core.
        self.core: Any = core
        self.head: CategoricalHead | GaussianHead | FlowHead = head  # sample/evaluate/to_raw on all three
        self.critic = orthogonal_linear(core.feature_dim, 1, 1.0, factory_kwargs(device, dtype))

    @property
    def recurrent(self) -> bool:
        """Whether the core carries a memory."""
        return bool(getattr(self.core, "recurrent", False))

    def initial_state(self, batch: int) -> State:
        """Zero memory for ``batch`` rows (``None`` for feed-forward cores)."""
        return self.core.initial_state(batch) if self.recurrent else None

    def actor_step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """One step's ``(actor features, next state)``, without critic features or memory reset: what
        acting greedily needs."""
        if self.recurrent:
            fa, _, state = self.core.step(x, state, None)
            return fa, state
        if isinstance(self.core, FeedForwardCore):
            return self.core.actor(x), None
        return self.core(x)[0], None

    def step_features(
        self, x: torch.Tensor, state: State, starts: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, State]:
        """One step's ``(actor features, critic features, next state)`` for ``x [B, obs_dim]``;
        ``starts [B]`` bool resets memory first where set."""
        if self.recurrent:
            return self.core.step(x, state, starts)
        a, c = self.core(x)
        return a, c, None

    def act(
        self,
        x: torch.Tensor,
        state: State,
        starts: torch.Tensor | None,
        deterministic: bool,
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
    ):
        """``x [B, obs_dim]`` -> ``(env_action, raw_action, logprob f32, value f32 [B], new_state)``
        (``noise``: the head's draw for ``B`` rows, else drawn from ``generator``)."""
        fa, fc, state = self.step_features(x, state, starts)
        env_a, raw, logp = self.head.sample(fa, deterministic, generator, noise)
        return env_a, raw, logp, self.critic(fc).float().squeeze(-1), state

    def value(self, x: torch.Tensor, state: State, starts: torch.Tensor | None) -> torch.Tensor:
        """``V(x)`` ``[B]`` f32 after one step from ``state`` (the state itself is not advanced)."""
        _, fc, _ = self.step_features(x, state, starts)
        return self.critic(fc).float().squeeze(-1)

    def evaluate(
        self,
        x: torch.Tensor,
        raw: torch.Tensor,
        starts: torch.Tensor | None = None,
        state: State = None,
        generator: torch.Generator | None = None,
        entropy_grad: bool = True,
        noise: torch.Tensor | None = None,
        layout: tuple[int, int] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(logprob, entropy, value)`` (f32) of stored raw actions.

        Feed-forward: ``x [N, obs_dim]``, ``raw [N, ...]`` -> ``[N]`` each. Recurrent:
        ``x [B, L, obs_dim]``, ``raw [B, L, ...]``, ``starts [B, L]``, ``state`` at step 0 ->
        ``[B, L]`` each. ``entropy_grad=False`` allows a cheap detached entropy estimate;
        ``noise``: that estimate's draw; ``layout``: see
        [`features`][tritonrl.agents.nets.actor_critic.ActorCritic.features].
        """
        fa, fc = self.features(x, starts, state, layout)
        return self.evaluate_features(fa, fc, raw, generator, entropy_grad, noise)

    def features(
        self,
        x: torch.Tensor,
        starts: torch.Tensor | None = None,
        state: State = None,
        layout: tuple[int, int] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(actor features, critic features)`` of ``x`` (shapes as in `evaluate`); ``layout``:
        the padded layout of LSTM/GRU cores (``None``: one host read measures it)."""
        if not self.recurrent:
            return self.core(x)
        if layout is not None:
            return self.core.sequence(x, starts, state, layout=layout)
        return self.core.sequence(x, starts, state)

    def evaluate_features(
        self,
        fa: torch.Tensor,
        fc: torch.Tensor,
        raw: torch.Tensor,
        generator: torch.Generator | None = None,
        entropy_grad: bool = True,
        noise: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`evaluate` from the features of `features`: ``(logprob, entropy, value)`` f32."""
        logp, entropy = self.head.evaluate(fa, raw, generator, entropy_grad, noise)
        return logp, entropy, self.critic(fc).float().squeeze(-1)
