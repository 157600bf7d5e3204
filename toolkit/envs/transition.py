"""One step of a vector env: :class:`Transition`, what every env of :mod:`tritonrl.toolkit.envs`
returns from ``step`` (also importable from :mod:`tritonrl.toolkit.envs.vector`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["Transition"]


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
