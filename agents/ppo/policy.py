"""The PPO family's policy module: the deterministic action of the actor-critic.

An f32 copy of the actor-critic with observation normalisation and image scaling inside;
recurrent policies take and return their memory: ``forward(obs, *state) -> (action, *state)``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
from tritonrl.agents.nets.actor_critic import ActorCritic
from tritonrl.agents.nets.mamba2 import Mamba2State
from tritonrl.agents.nets.policy_heads import CategoricalHead
from tritonrl.toolkit.policy import PolicyModule, StateSpec

__all__ = ["ActorCriticPolicy"]

_STATE_NAMES = {1: ("h",), 2: ("h", "c")}


class ActorCriticPolicy(PolicyModule):
    """The PPO family's policy module: the deterministic action of the actor-critic.

    Args:
        net: the actor-critic it acts with (``agent.policy()`` passes an f32 copy).
        observation_space: a flat ``Box``, or a uint8 ``[C, H, W]`` one for images.
        pixel_scale: the factor image bytes are scaled by (``None``: float observations).
        obs_stats: ``(mean, var)`` of ``normalize_obs`` (``None``: no normalisation).
        obs_clip: the clip of normalised observations.

    Forward: ``obs [B, *obs_shape]`` -> ``[B]`` int64 (Discrete) or ``[B, D]`` f32 (Box) actions.
    """

    family = "ppo"
    obs_mean: torch.Tensor | None
    obs_var: torch.Tensor | None

    def __init__(
        self,
        net: ActorCritic,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        pixel_scale: float | None = None,
        obs_stats: tuple[torch.Tensor, torch.Tensor] | None = None,
        obs_clip: float = 10.0,
    ) -> None:
        super().__init__(observation_space, action_space)
        self.net = net
        self.recurrent = net.recurrent
        self.pixel_scale = pixel_scale
        self.obs_clip = float(obs_clip)
        mean, var = (None, None) if obs_stats is None else (t.float().clone() for t in obs_stats)
        self.register_buffer("obs_mean", mean, persistent=False)
        self.register_buffer("obs_var", var, persistent=False)
        discrete = isinstance(net.head, CategoricalHead)
        self.extra_outputs = ("logits" if discrete else "mean", "value")
        self._mamba = isinstance(net.initial_state(1), Mamba2State)

    def mirrors(self) -> list[torch.Tensor]:
        """The actor-critic's parameters, buffers, then the observation statistics (``learner_tensors()``)."""
        stats = [] if self.obs_mean is None or self.obs_var is None else [self.obs_mean, self.obs_var]
        return [*self.net.parameters(), *self.net.buffers(), *stats]

    def state_spec(self) -> list[StateSpec]:
        """``h`` (GRU), ``h, c`` (LSTM) or ``conv, ssm`` (Mamba2), one row's shape each."""
        if not self.recurrent:
            return []
        flat = self.flatten(self.net.initial_state(1))
        names = ("conv", "ssm") if self._mamba else _STATE_NAMES[len(flat)]
        return [(name, tuple(t.shape[1:]), t.dtype) for name, t in zip(names, flat, strict=True)]

    def flatten(self, state: Any) -> tuple[torch.Tensor, ...]:
        """A core's memory as flat tensors (``()`` for feed-forward policies)."""
        if state is None:
            return ()
        if isinstance(state, Mamba2State):
            return (state.conv, state.ssm)
        return tuple(state)

    def unflatten(self, state: tuple[torch.Tensor, ...]) -> Any:
        """Flat tensors as the core's memory (inverse of `flatten`)."""
        if not self.recurrent:
            return None
        return Mamba2State(conv=state[0], ssm=state[1]) if self._mamba else tuple(state)

    def ingest(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations in the network's dtype: image bytes scaled to ``[0, 1]``, or floats normalised
        (``normalize_obs``)."""
        dtype = self.net.critic.weight.dtype
        if self.pixel_scale is not None:
            return obs.to(dtype) * self.pixel_scale
        x = obs.to(torch.float32)
        if self.obs_mean is not None and self.obs_var is not None:
            x = ((x - self.obs_mean) / torch.sqrt(self.obs_var + 1e-8)).clamp(-self.obs_clip, self.obs_clip)
        return x.to(dtype)

    def act(self, obs: torch.Tensor, *state: torch.Tensor) -> Any:
        """The deterministic actions of a batch (recurrent: ``(action, *next state)``)."""
        fa, new = self.net.actor_step(self.ingest(obs), self.unflatten(state))
        action = self.net.head.greedy(fa)
        return (action, *self.flatten(new)) if self.recurrent else action

    def outputs(self, obs: torch.Tensor, *state: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{"action", "logits" (Discrete) or "mean" (Box), "value"}``, then a recurrent policy's
        next state (``state_0``, ...)."""
        fa, fc, new = self.net.step_features(self.ingest(obs), self.unflatten(state), None)
        head = self.net.head
        out = {
            "action": head.greedy(fa),
            self.extra_outputs[0]: head.distribution_params(fa),
            "value": self.net.critic(fc).float().squeeze(-1),
        }
        out.update({f"state_{i}": t for i, t in enumerate(self.flatten(new))})
        return out

    def sample(self, x: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A feed-forward policy's exploring step on ingested ``x``: ``(env action, raw action,
        log-prob f32 [B])`` from the head's draw ``noise``."""
        env_a, raw, logp, _, _ = self.net.act(x, None, None, False, None, noise)
        return env_a, raw, logp
