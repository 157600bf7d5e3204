"""The DQN family's policy module: greedy on the expected Q, and the family's one exploration.

[`QPolicy`][tritonrl.agents.dqn.policy.QPolicy] is ``agent.policy()``: an f32 copy of the online network
acting greedily (noisy layers at their mean in eval mode), image bytes scaled inside.
[`epsilon_greedy`][tritonrl.agents.dqn.policy.epsilon_greedy] is the one exploring step of acting, the
collector's snapshot and the overlapped actor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tritonrl.agents.dqn.network import QNetwork
from tritonrl.agents.nets.factored import branching_q
from tritonrl.toolkit.policy import PolicyModule

__all__ = ["QPolicy", "epsilon_greedy", "expected_q"]


def expected_q(
    net: QNetwork, x: torch.Tensor, distribution: str, support: torch.Tensor | None, factored: bool
) -> torch.Tensor:
    """Expected Q of ``net`` for ingested observations ``x`` in f32: ``[B, A]``, or
    ``[B, D, n_max]`` for the factored head (``-inf`` at the padding)."""
    if distribution == "c51" and not factored:
        out: torch.Tensor = net(x, support)[1]
        return out
    out = net(x)
    if factored:
        return branching_q(out[0], out[1], net.head.mask)
    if distribution == "qr":
        return out.mean(-1)
    return out


def epsilon_greedy(
    q: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    eps: float,
    generator: torch.Generator,
    *,
    num_actions: int | None,
    nvec: torch.Tensor | None = None,
    host: bool = False,
) -> torch.Tensor:
    """Greedy actions of ``q(x)``, each replaced with probability ``eps`` by a uniform random action
    from ``generator``: ``[B]`` int64 (``[B, D]`` for MultiDiscrete, ``nvec`` ``[D]`` on the device).
    ``host=True`` (CPU, Discrete) reads the draws on the host: the same actions as the device path."""
    if eps <= 0.0:
        return q(x).argmax(-1)
    dev = x.device
    n = x.shape[0]
    if nvec is not None:
        greedy = q(x).argmax(-1)
        rand = (torch.rand(greedy.shape, device=dev, generator=generator) * nvec).long()
        pick = torch.rand((n, 1), device=dev, generator=generator) < eps
        return torch.where(pick, rand, greedy)
    assert num_actions is not None  # Discrete actions
    if host:
        rand = torch.randint(num_actions, (n,), device=dev, generator=generator)
        u = torch.rand((n,), device=dev, generator=generator).tolist()
        eps32 = float(np.float32(eps))  # f32 draws against eps rounded to f32: torch's comparison
        chosen = [v < eps32 for v in u]
        if all(chosen):
            return rand
        best = q(x).argmax(-1)
        if not any(chosen):
            return best
        return torch.from_numpy(np.where(chosen, rand.numpy(), best.numpy()))
    best = q(x).argmax(-1)
    rand = torch.randint(num_actions, (n,), device=dev, generator=generator)
    pick = torch.rand((n,), device=dev, generator=generator) < eps
    return torch.where(pick, rand, best)


class QPolicy(PolicyModule):
    """The DQN family's policy module: greedy on the expected Q, image bytes scaled inside.

    Args:
        net: the Q network it acts with (``agent.policy()`` passes an f32 copy of the online one).
        observation_space: a ``Box`` (uint8 ``[C, H, W]`` for images).
        distribution: ``"none"``, ``"c51"`` or ``"qr"``.
        support: C51's ``[Z]`` atoms (``None`` otherwise).
        pixel_scale: the factor image bytes are scaled by (``None``: float observations).
        frame_stack: frames per observation (recorded in export sidecars).

    Forward: ``obs [B, *obs_shape]`` -> ``[B]`` int64 actions (``[B, D]`` for MultiDiscrete).
    """

    family = "dqn"
    extra_outputs = ("q_values",)
    support: torch.Tensor | None

    def __init__(
        self,
        net: QNetwork,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        distribution: str,
        support: torch.Tensor | None = None,
        pixel_scale: float | None = None,
        frame_stack: int = 1,
    ) -> None:
        super().__init__(observation_space, action_space)
        self.net = net
        self.distribution = distribution
        self.factored = isinstance(action_space, gym.spaces.MultiDiscrete)
        self.register_buffer(
            "support", None if support is None else support.float().clone(), persistent=False
        )
        self.pixel_scale = pixel_scale
        self.frame_stack = int(frame_stack)

    def mirrors(self) -> list[torch.Tensor]:
        """The Q network's parameters then buffers (the agent's ``learner_tensors()``)."""
        return [*self.net.parameters(), *self.net.buffers()]

    def ingest(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations as the network takes them: in its dtype, image bytes scaled to ``[0, 1]``."""
        x = obs.to(next(self.net.parameters()).dtype)
        return x if self.pixel_scale is None else x * self.pixel_scale

    def q(self, x: torch.Tensor) -> torch.Tensor:
        """Expected Q (f32) of ingested observations (`expected_q`)."""
        return expected_q(self.net, x, self.distribution, self.support, self.factored)

    def q_values(self, obs: torch.Tensor) -> torch.Tensor:
        """Expected Q values, f32 ``[B, A]`` (``[B, D, n_max]`` factored, ``-inf`` padding)."""
        return self.q(self.ingest(obs))

    def act(self, obs: torch.Tensor, *state: torch.Tensor) -> torch.Tensor:
        """The greedy actions of a batch."""
        return self.q_values(obs).argmax(-1)

    def outputs(self, obs: torch.Tensor, *state: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{"action", "q_values"}`` of a batch."""
        q = self.q_values(obs)
        return {"action": q.argmax(-1), "q_values": q}

    def spec(self) -> dict[str, Any]:
        """`PolicyModule.spec` with the frame stack of image observations."""
        out = super().spec()
        if self.pixel_scale is not None:
            out["observation"]["frame_stack"] = self.frame_stack
            out["observation"]["scale"] = self.pixel_scale
        return out
