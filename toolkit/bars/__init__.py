"""Bars: where the market environment, the live trader and forecasting read their data from.

Host bars (`types`, `csvbars`, `sources`), causal features (`features`), the one upload cast to a
device (`marketdata`) and several assets on one calendar (`panel`). May import the toolkit's core
modules and ``kernels``; never ``envs``, ``replay``, ``training``, ``forecast``, ``cli`` or
``agents``. See docs/pages/market.md.
"""

from tritonrl.toolkit.bars.csvbars import load_csv
from tritonrl.toolkit.bars.features import FEATURE_WARMUP, FEATURES, compute_features
from tritonrl.toolkit.bars.marketdata import split, upload, upload_memory
from tritonrl.toolkit.bars.panel import Panel, load_panel
from tritonrl.toolkit.bars.sources import anytrading_bars, source_bars, synthetic_bars
from tritonrl.toolkit.bars.types import Bars, MarketData

__all__ = [
    "FEATURES",
    "FEATURE_WARMUP",
    "Bars",
    "MarketData",
    "Panel",
    "anytrading_bars",
    "compute_features",
    "load_csv",
    "load_panel",
    "source_bars",
    "split",
    "synthetic_bars",
    "upload",
    "upload_memory",
]
