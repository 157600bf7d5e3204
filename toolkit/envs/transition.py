"""One step of a vector env: :class:`Transition`, what every env of :mod:`tritonrl.toolkit.envs`
returns from ``step`` (also importable from :mod:`tritonrl.toolkit.envs.vector`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = ["Transition", "host_actions", "host_tensor", "host_transition"]


@dataclass
class Transition:
    """One vector step. ``E`` is the number of environments.

    :class:`VecEnv` fills it with f32 observations (uint8 for a uint8 ``Box`` space, e.g. pixels)
    on the host's or the given device; a device env (:class:`tritonrl.toolkit.envs.market.MarketEnv`)
    fills it with observations already in the training dtype on its device and leaves the episode
    lists empty (its finished episodes are read at log intervals through ``episode_stats()``, one
    sync).

    Attributes:
        obs: ``[E, *obs_shape]`` f32 (or the device env's dtype): the observation to act on next
            (a reset observation where an episode just ended).
        reward: ``[E]`` f32.
        next_obs: ``[E, *obs_shape]``, as ``obs``: the true next observation of this transition (the
            final observation where an episode ended; equal to ``obs`` elsewhere).
        terminated: ``[E]`` bool: the episode reached a terminal state (do not bootstrap).
        truncated: ``[E]`` bool: the episode was cut (time limit): bootstrap from ``next_obs``.
        episode_returns: returns of the episodes that ended at this step (python floats); with a
            :class:`~tritonrl.toolkit.envs.pixels.RawEpisodeStats` layer (Atari), the real
            games that ended, unclipped over all lives.
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
    """``actions`` (a tensor on any device, or array-like) as a numpy array ``[num_envs, ...]``
    for a host env (a view of a CPU tensor).

    Raises:
        ValueError: ``actions`` has no leading axis of ``num_envs``.
    """
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
    """A host env's step (fresh numpy arrays, in their final dtypes) as a :class:`Transition` on
    ``device``: zero-copy on CPU, and ``next_obs`` the same tensor as ``obs`` when it is the
    same array."""
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
