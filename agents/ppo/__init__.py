"""PPO (clipped surrogate) with discrete, continuous, LSTM, GRU, normalizing-flow and Mamba2 policies.

[`PPOAgent`][tritonrl.agents.ppo.PPOAgent] collects a rollout, computes GAE in f32 and runs epochs of clipped
minibatch updates; one [`PPOConfig`][tritonrl.agents.ppo.PPOConfig] chooses the policy, and
[`PRESETS`][tritonrl.agents.ppo.PRESETS] / [`PIXEL_PRESETS`][tritonrl.agents.ppo.PIXEL_PRESETS] are named
configs. The agent is a plain object (``act``, ``observe``, ``update``). See docs/pages/ppo.md.
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
