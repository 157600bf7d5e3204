"""Bars: the one place the market environment, the live trader and forecasting read their data from.

:mod:`.types` (:class:`Bars` on the host, :class:`MarketData` on a device), :mod:`.csvbars` (bars
from a CSV file, checked), :mod:`.sources` (the synthetic generator, the series gym-anytrading
ships, the ``market:...`` spec), :mod:`.features` (the causal :data:`FEATURES`) and
:mod:`.marketdata` (the one upload cast, splits by time). May import the toolkit's core modules
and ``kernels``; never ``envs``, ``replay``, ``training``, ``forecast``, ``cli`` or ``agents``.
See docs/pages/market.md.
"""

from tritonrl.toolkit.bars.csvbars import load_csv
from tritonrl.toolkit.bars.features import FEATURE_WARMUP, FEATURES, compute_features
from tritonrl.toolkit.bars.marketdata import split, upload, upload_memory
from tritonrl.toolkit.bars.sources import anytrading_bars, source_bars, synthetic_bars
from tritonrl.toolkit.bars.types import Bars, MarketData

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
]
