"""One step of a vector env: `Transition`, what every env of `tritonrl.toolkit.envs`
returns from ``step`` (also importable from `tritonrl.toolkit.envs.vector`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = ["Transition", "host_actions", "host_tensor", "host_transition"]


@dataclass
class Transition:
    """One vector step of ``E`` environments (f32 observations, uint8 for a uint8 ``Box``; device envs:
    training dtype).

    Attributes:
        obs: ``[E, *obs_shape]``: the observation to act on next (reset where an episode ended).
        reward: ``[E]`` f32.
        next_obs: ``[E, *obs_shape]``: the true next observation (the final one where an episode ended).
        terminated: ``[E]`` bool: a terminal state (do not bootstrap).
        truncated: ``[E]`` bool: cut by a time limit (bootstrap from ``next_obs``).
        episode_returns: returns of the episodes that ended here (floats; Atari: whole games, unclipped).
        episode_lengths: their lengths, in the same order.
    """

    obs: torch.Tensor
    reward: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)


def host_actions(actions: torch.Tensor | np.ndarray, num_envs: int) -> np.ndarray:
    """``actions`` as a numpy array ``[num_envs, ...]``; ``ValueError`` without that leading axis."""
    a: np.ndarray
    if isinstance(actions, torch.Tensor):
        t = actions.detach()
        a = (t if t.is_cpu else t.cpu()).numpy()
    else:
        a = np.asarray(actions)
    if a.ndim == 0 or a.shape[0] != num_envs:
        lead = a.shape[0] if a.ndim else "none"
        raise ValueError(f"actions has leading size {lead}, expected num_envs={num_envs}")
    return a


def host_tensor(device: torch.device, x: np.ndarray) -> torch.Tensor:
    """A fresh numpy array of a host env as a tensor on ``device`` (zero-copy on CPU)."""
    t = torch.from_numpy(x)
    return t if device.type == "cpu" else t.to(device)


def host_transition(
    device: torch.device,
    obs: np.ndarray,
    reward: np.ndarray,
    next_obs: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    episode_returns: list[float],
    episode_lengths: list[int],
) -> Transition:
    """A host env's step (fresh numpy arrays) as a `Transition` on ``device`` (zero-copy on CPU)."""
    obs_t = host_tensor(device, obs)
    return Transition(
        obs=obs_t,
        reward=host_tensor(device, reward),
        next_obs=obs_t if next_obs is obs else host_tensor(device, next_obs),
        terminated=host_tensor(device, terminated),
        truncated=host_tensor(device, truncated),
        episode_returns=episode_returns,
        episode_lengths=episode_lengths,
    )
