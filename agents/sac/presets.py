"""The continuous off-policy family's named presets (one :class:`tritonrl.toolkit.preset.Preset` each).

| preset | agent | defaults |
| --- | --- | --- |
| ``sac`` | ``SACAgent`` | CleanRL ``sac_continuous_action.py`` |
| ``td3`` | ``TD3Agent`` | CleanRL ``td3_continuous_action.py``, but ``learning_starts`` 5,000 |

The command line runs them on Pendulum-v1 unless ``--env`` says otherwise: one environment,
20,000 steps, a greedy evaluation every 5,000.
"""

from __future__ import annotations

from typing import Any

from tritonrl.agents.sac.config import SACConfig, TD3Config
from tritonrl.agents.sac.sac import SACAgent
from tritonrl.agents.sac.td3 import TD3Agent
from tritonrl.toolkit.preset import Preset, find_preset
from tritonrl.toolkit.training.offpolicy import schedule_for

__all__ = ["PRESETS", "preset"]

_CLI: dict[str, Any] = {
    "default_num_envs": 1,
    "default_steps": 20_000,
    "default_eval_every": 5_000,
    "default_env": "Pendulum-v1",
}

PRESETS: tuple[Preset, ...] = (
    Preset(
        "sac",
        "SAC v2: twin soft Q, squashed Gaussian actor, entropy autotuning (CleanRL defaults; Box actions)",
        SACConfig(tags=("sac",)),
        agent=SACAgent,
        kind="offpolicy",
        schedule=schedule_for,
        **_CLI,
    ),
    Preset(
        "td3",
        "TD3: twin critics, target smoothing, delayed actor (CleanRL defaults, but learning_starts 5000 "
        "instead of 25000: a 20k-step Pendulum run would never learn; Box actions)",
        TD3Config(learning_starts=5_000, tags=("td3",)),
        agent=TD3Agent,
        kind="offpolicy",
        schedule=schedule_for,
        **_CLI,
    ),
)
"""The named presets; the command line's registry (:mod:`tritonrl.toolkit.cli.registry`) collects them."""


def preset(name: str, **overrides: Any) -> Any:
    """The config of a named preset (``"sac"`` or ``"td3"``), with field overrides
    (:func:`tritonrl.toolkit.config.apply_overrides`).

    Raises:
        ValueError: unknown preset or field name, or an invalid value.
    """
    return find_preset(PRESETS, name, "SAC/TD3").configure(overrides)
