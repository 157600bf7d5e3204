"""A batched trading environment on the device, its evaluation, the live bar stream and the
gym-anytrading compatibility env.

The bars, their CSV loading, features, upload and splits live in `tritonrl.toolkit.bars`;
their names are re-exported here for ``from tritonrl.toolkit.envs.market import load_csv``.
"""

import importlib
from typing import TYPE_CHECKING, Any

from tritonrl.toolkit.bars import (
    FEATURE_WARMUP,
    FEATURES,
    Bars,
    MarketData,
    anytrading_bars,
    compute_features,
    load_csv,
    source_bars,
    split,
    synthetic_bars,
    upload,
    upload_memory,
)

# Names that need gymnasium import on first use (PEP 562), so that `import tritonrl.toolkit.envs.market`
# and the bar names work on a bare machine without gymnasium.
_LAZY: dict[str, str] = {}
_LAZY.update(dict.fromkeys(("ANYTRADING_WINDOW", "AnyTradingEnv", "process_data"), "anytrading"))
_LAZY.update(dict.fromkeys(("MarketEnv", "MarketEnvConfig"), "env"))

if TYPE_CHECKING:  # the lazy names, for type checkers
    from tritonrl.toolkit.envs.market.anytrading import AnyTradingEnv as AnyTradingEnv
    from tritonrl.toolkit.envs.market.env import MarketEnv as MarketEnv
    from tritonrl.toolkit.envs.market.env import MarketEnvConfig as MarketEnvConfig

__all__ = [
    "FEATURES",
    "FEATURE_WARMUP",
    "Bars",
    "MarketData",
    "anytrading_bars",
    "compute_features",
    "load_csv",
    "source_bars",
    "split",
    "synthetic_bars",
    "upload",
    "upload_memory",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
