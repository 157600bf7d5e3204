"""The continuous off-policy family: SAC and TD3 for ``Box`` actions of any shape.

:class:`SACAgent` (twin soft Q critics, tanh-squashed Gaussian actor, automatic entropy tuning)
and :class:`TD3Agent` (twin critics, target policy smoothing, delayed actor and targets) share
their spaces, replay, acting and checkpoint parts (:mod:`tritonrl.agents.sac.base`); the actors act
in ``[-1, 1]`` and actions are rescaled onto the space's bounds. The presets ``sac`` and ``td3``
(:data:`PRESETS`) carry CleanRL's defaults; both agents are plain objects, driven by
:mod:`tritonrl.toolkit.training.offpolicy` or by your own loop.

Guide: docs/pages/sac.md. Imports the toolkit (not ``tritonrl.cli``) and ``agents/nets``.
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
