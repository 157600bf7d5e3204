"""Market data, a batched trading environment on the device, and the device experience collector.

See :mod:`tritonrl.toolkit.market.data` (bars, features, the one upload cast, splits by time).
"""

from .data import (
    FEATURES,
    anytrading_bars,
    compute_features,
    load_csv,
    source_bars,
    split,
    synthetic_bars,
    upload,
)
from .types import Bars, MarketData

__all__ = [
    "FEATURES",
    "Bars",
    "MarketData",
    "anytrading_bars",
    "compute_features",
    "load_csv",
    "source_bars",
    "split",
    "synthetic_bars",
    "upload",
]
