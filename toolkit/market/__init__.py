"""Market data, a batched trading environment on the device, and the device experience collector.

See :mod:`tritonrl.toolkit.market.data` (bars, features, the one upload cast, splits by time).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tritonrl.toolkit.market.env import MarketEnv as MarketEnv
    from tritonrl.toolkit.market.env import MarketEnvConfig as MarketEnvConfig

_ENV_NAMES = ("MarketEnv", "MarketEnvConfig")


def __getattr__(name: str) -> Any:
    """``MarketEnv`` and ``MarketEnvConfig``, imported on first use: the env needs gymnasium, the
    data module does not (a bare GPU machine holds no gymnasium)."""
    if name in _ENV_NAMES:
        from tritonrl.toolkit.market import env

        return getattr(env, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
