"""The DQN family in one agent: DQN, double, dueling, noisy, n-step, PER, C51, QR-DQN, Rainbow.

One [`DQNConfig`][tritonrl.agents.dqn.DQNConfig] switches the pieces on; `PRESETS` and `PIXEL_PRESETS` are
named configs. ``icm=True`` adds curiosity, a MultiDiscrete space the factored head, image
observations a conv torso and the frame replay. [`DQNAgent`][tritonrl.agents.dqn.DQNAgent] is a plain object.
See docs/pages/dqn.md and docs/pages/rainbow-tutorial.md.
"""

from tritonrl.agents.dqn.agent import DQNAgent
from tritonrl.agents.dqn.config import AGENT_KIND, DQNConfig
from tritonrl.agents.dqn.network import QNetwork
from tritonrl.agents.dqn.presets import PIXEL_PRESETS, PRESETS, preset

__all__ = ["AGENT_KIND", "PIXEL_PRESETS", "DQNAgent", "DQNConfig", "PRESETS", "QNetwork", "preset"]
