"""Environments: the vector-env wrapper over gymnasium, and the market environments on the device.

`vector` (gymnasium behind a torch interface), `pixels` (MinAtar and Atari preprocessing), `market`
(the batched trading env, evaluation, over the bars of `tritonrl.toolkit.bars`). May import the
toolkit's core modules, ``bars`` and ``kernels``; never ``replay``, ``training``, ``forecast``,
``cli`` or ``agents``. `vector`'s names are re-exported on first use, so this imports without
gymnasium.
"""

import importlib
from typing import TYPE_CHECKING, Any

_VECTOR = (
    "EXTRA_ENV_IDS",
    "Transition",
    "VecEnv",
    "evaluate",
    "make_vec_env",
    "space_from_json",
    "space_to_json",
)

if TYPE_CHECKING:
    from tritonrl.toolkit.envs.vector import (
        EXTRA_ENV_IDS as EXTRA_ENV_IDS,
    )
    from tritonrl.toolkit.envs.vector import (
        Transition as Transition,
    )
    from tritonrl.toolkit.envs.vector import (
        VecEnv as VecEnv,
    )
    from tritonrl.toolkit.envs.vector import (
        evaluate as evaluate,
    )
    from tritonrl.toolkit.envs.vector import (
        make_vec_env as make_vec_env,
    )

__all__ = list(_VECTOR)


def __getattr__(name: str) -> Any:
    if name in _VECTOR:
        return getattr(importlib.import_module(f"{__name__}.vector"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
