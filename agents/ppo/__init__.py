"""PPO (clipped surrogate) with discrete, continuous, LSTM, GRU, normalizing-flow and Mamba2 policies.

:class:`PPOAgent` collects a rollout into a
:class:`~tritonrl.toolkit.replay.rollout.RolloutBuffer`, computes GAE in f32
(:func:`tritonrl.toolkit.replay.rollout.compute_gae`) and runs epochs of clipped minibatch updates;
one :class:`PPOConfig` chooses the policy (and, for image observations, a conv torso) and the named
presets (:data:`PRESETS`; on images :data:`PIXEL_PRESETS`) are configs. The
agent is a plain object: :func:`tritonrl.toolkit.training.loop.run_training` drives it with the
on-policy schedule, or your own loop calls ``act``, ``observe`` and ``update``.

Guide: docs/pages/ppo.md (the objective, recurrent training, precision, data-parallel runs).
"""

from tritonrl.agents.ppo.agent import LRAnnealedWarning, PPOAgent
from tritonrl.agents.ppo.config import AGENT_KIND, POLICIES, PPOConfig
from tritonrl.agents.ppo.presets import PIXEL_PRESETS, PRESETS, preset

__all__ = [
    "AGENT_KIND",
    "PIXEL_PRESETS",
    "POLICIES",
    "PRESETS",
    "LRAnnealedWarning",
    "PPOAgent",
    "PPOConfig",
    "preset",
]
