"""The DQN family in one agent: DQN, double, dueling, noisy, n-step, PER, C51, QR-DQN, Rainbow.

One :class:`DQNConfig` switches the pieces on; the named presets (:data:`PRESETS`, one
:class:`tritonrl.toolkit.preset.Preset` each) are configs. ``icm=True`` attaches curiosity
(:mod:`tritonrl.agents.icm`) to any preset, a MultiDiscrete action space selects the factored
head (:mod:`tritonrl.agents.nets.factored`), and image observations (uint8 ``[C, H, W]``) a conv
torso and the frame replay (:data:`PIXEL_PRESETS`: Atari and MinAtar). :class:`DQNAgent` is a
plain object, driven by :mod:`tritonrl.toolkit.training.offpolicy` or by your own loop.

Guide: docs/pages/dqn.md (targets and losses, every field, precision, data-parallel runs); your
own loop: docs/pages/rainbow-tutorial.md.
"""

from tritonrl.agents.dqn.agent import DQNAgent
from tritonrl.agents.dqn.config import AGENT_KIND, DQNConfig
from tritonrl.agents.dqn.network import QNetwork
from tritonrl.agents.dqn.presets import PIXEL_PRESETS, PRESETS, preset

__all__ = ["AGENT_KIND", "PIXEL_PRESETS", "DQNAgent", "DQNConfig", "PRESETS", "QNetwork", "preset"]
