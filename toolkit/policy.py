"""Policy modules: a trained policy as a plain ``torch.nn.Module``, and greedy acting from one.

Every agent family gives one [`PolicyModule`][tritonrl.toolkit.policy.PolicyModule] (``agent.policy()``): f32
weights and a ``forward`` that is the greedy action, preprocessing included. The same class acts for the
collector and the overlapped actor, for evaluation ([`GreedyActor`][tritonrl.toolkit.policy.GreedyActor]) and
for export. A core module: it imports no toolkit subpackage. Guide: docs/pages/using-policies.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from tritonrl.toolkit.spaces import space_to_json

__all__ = ["GreedyActor", "PolicyModule", "StateSpec"]

StateSpec = tuple[str, tuple[int, ...], torch.dtype]
"""One tensor of a recurrent policy's state: ``(name, shape of one row, dtype)``."""


class PolicyModule(nn.Module):
    """The base of every family's policy module.

    A subclass sets [`family`][tritonrl.toolkit.policy.PolicyModule.family] and
    [`extra_outputs`][tritonrl.toolkit.policy.PolicyModule.extra_outputs] and implements
    [`act`][tritonrl.toolkit.policy.PolicyModule.act],
    [`outputs`][tritonrl.toolkit.policy.PolicyModule.outputs] and
    [`mirrors`][tritonrl.toolkit.policy.PolicyModule.mirrors]; recurrent ones set
    [`recurrent`][tritonrl.toolkit.policy.PolicyModule.recurrent] and implement
    [`state_spec`][tritonrl.toolkit.policy.PolicyModule.state_spec].
    """

    family: ClassVar[str] = ""
    """The agent family (``"dqn"``, ``"ppo"``, ``"sac"``, ``"td3"``): recorded in export sidecars."""
    recurrent: bool = False
    """Whether ``forward`` takes and returns a memory (a class or an instance may set it)."""
    extra_outputs: tuple[str, ...] = ()
    """What `outputs` returns beside ``"action"`` (``q_values``, ``logits``, ``value``, ...)."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        super().__init__()
        if not isinstance(observation_space, gym.spaces.Box):
            raise ValueError(f"observation_space={observation_space}: a policy module needs a Box")
        self.observation_space = observation_space
        self.action_space = action_space
        self.obs_shape: tuple[int, ...] = tuple(int(s) for s in observation_space.shape)
        self.obs_dtype: torch.dtype = torch.from_numpy(np.zeros((), observation_space.dtype)).dtype

    # ---- what a subclass implements

    def act(self, obs: torch.Tensor, *state: torch.Tensor) -> Any:
        """The greedy action of a batch ``obs [B, *obs_shape]`` (recurrent: ``(action, *state)``)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement act")

    def outputs(self, obs: torch.Tensor, *state: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{"action": ..., **extras}`` for a batch (recurrent: also the next state as ``state_0``, ...)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement outputs")

    def mirrors(self) -> list[torch.Tensor]:
        """The tensors a snapshot refreshes from the learner, in ``learner_tensors()`` order."""
        raise NotImplementedError(f"{type(self).__name__} does not implement mirrors")

    def state_spec(self) -> list[StateSpec]:
        """The tensors of the memory, one row's shape each (empty for feed-forward policies)."""
        return []

    # ---- shared

    def forward(self, obs: torch.Tensor, *state: torch.Tensor) -> Any:
        """The greedy action for ``obs [B, *obs_shape]``, or one unbatched observation (action without batch
        dim).

        Recurrent policies: ``forward(obs, *state) -> (action, *state)``, each state ``[B, ...]``.
        """
        if obs.dim() == len(self.obs_shape):
            out = self.act(obs.unsqueeze(0), *state)
            if self.recurrent:
                return (out[0][0], *out[1:])
            return out[0]
        return self.act(obs, *state)

    def initial_state(self, batch: int) -> tuple[torch.Tensor, ...]:
        """The zero memory of ``batch`` rows on the module's device (``()`` for feed-forward policies)."""
        dev = self.device
        return tuple(
            torch.zeros((batch, *shape), dtype=dtype, device=dev) for _, shape, dtype in self.state_spec()
        )

    @property
    def device(self) -> torch.device:
        """Where the weights live (the first parameter's device: no walk over every tensor)."""
        for t in self.parameters():
            return t.device
        return torch.device("cpu")

    def example_obs(self, batch: int = 2, *, seed: int = 0) -> torch.Tensor:
        """``batch`` seeded observations from the space, on the module's device."""
        space = self.observation_space
        space.seed(seed)
        rows = np.stack([space.sample() for _ in range(batch)])
        return torch.as_tensor(rows).to(self.device)

    def spec(self) -> dict[str, Any]:
        """What an export sidecar records: family, spaces, dtypes, memory, extra outputs."""
        action = self.action_space
        if isinstance(action, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
            action_dtype = "int64"
        else:
            action_dtype = "float32"
        return {
            "family": self.family,
            "policy": type(self).__name__,
            "observation": {
                "space": space_to_json(self.observation_space),
                "shape": list(self.obs_shape),
                "dtype": str(self.obs_dtype).removeprefix("torch."),
            },
            "action": {
                "space": space_to_json(action),
                "shape": list(action.shape or ()),
                "dtype": action_dtype,
            },
            "recurrent": self.recurrent,
            "state": [
                {"name": name, "shape": list(shape), "dtype": str(dtype).removeprefix("torch.")}
                for name, shape, dtype in self.state_spec()
            ],
            "extra_outputs": list(self.extra_outputs),
        }


class GreedyActor:
    """Greedy acting from a `PolicyModule` for evaluation (``agent.eval_policy()``), in eval mode.

    A recurrent policy keeps its own memory ([`reset`][tritonrl.toolkit.policy.GreedyActor.reset]; a batch of
    another size starts from zero).

    Args:
        check: ``check(obs)`` raises on observations the agent refuses; ``None``: no check.
    """

    def __init__(self, policy: PolicyModule, check: Callable[[Any], None] | None = None) -> None:
        self.policy = policy
        self._check = check
        self.state: tuple[torch.Tensor, ...] | None = None

    def reset(self, mask: torch.Tensor) -> None:
        """Zero the memory of the rows in ``mask`` (``[N]`` bool) before their next step."""
        if not self.policy.recurrent:
            return
        mask = torch.as_tensor(mask).to(self.policy.device, torch.bool)
        if self.state is None or self.state[0].shape[0] != mask.shape[0]:
            self.state = self.policy.initial_state(mask.shape[0])
            return
        self.state = tuple(
            torch.where(mask.view(-1, *([1] * (s.dim() - 1))), torch.zeros_like(s), s) for s in self.state
        )

    @torch.no_grad()
    def __call__(self, obs: Any) -> torch.Tensor:
        """Greedy actions for ``obs`` (``[N, *obs_shape]`` or one unbatched observation).

        Raises:
            ValueError, TypeError: from the agent's checks (wrong shape, dtype, NaN/inf).
        """
        x = obs if isinstance(obs, torch.Tensor) else torch.as_tensor(np.asarray(obs))
        policy = self.policy
        unbatched = x.dim() == len(policy.obs_shape)
        if unbatched:
            x = x.unsqueeze(0)
        if self._check is not None:
            self._check(x)
        x = x.to(policy.device)
        training = policy.training
        if training:
            policy.eval()
        try:
            if not policy.recurrent:
                action = policy.act(x)
            else:
                if self.state is None or self.state[0].shape[0] != x.shape[0]:
                    self.state = policy.initial_state(x.shape[0])
                action, *state = policy.act(x, *self.state)
                self.state = tuple(state)
        finally:
            if training:
                policy.train()
        return action[0] if unbatched else action
