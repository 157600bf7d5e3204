"""The continuous off-policy family: SAC and TD3 for ``Box`` actions of any shape.

[`SACAgent`][tritonrl.agents.sac.SACAgent] and [`TD3Agent`][tritonrl.agents.sac.TD3Agent] share spaces,
replay, acting and checkpoint parts (`tritonrl.agents.sac.base`); `PRESETS` carry CleanRL's
defaults. Imports the toolkit (not ``tritonrl.cli``) and ``agents/nets``. See docs/pages/sac.md.
"""

from tritonrl.agents.sac.config import SAC_KIND, TD3_KIND, SACConfig, TD3Config
from tritonrl.agents.sac.network import DeterministicActor, SquashedGaussianActor, TwinQ
from tritonrl.agents.sac.presets import PRESETS, preset
from tritonrl.agents.sac.sac import SACAgent
from tritonrl.agents.sac.td3 import TD3Agent

__all__ = [
    "PRESETS",
    "SAC_KIND",
    "TD3_KIND",
    "DeterministicActor",
    "SACAgent",
    "SACConfig",
    "SquashedGaussianActor",
    "TD3Agent",
    "TD3Config",
    "TwinQ",
    "preset",
]
