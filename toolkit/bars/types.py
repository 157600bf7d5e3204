"""The bar pipeline's two records: `Bars` (host numpy, from a source) and `MarketData`
(features and returns on one device, uploaded once). See docs/pages/market.md."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["Bars", "MarketData"]


@dataclass(frozen=True)
class Bars:
    """OHLCV bars of one instrument, oldest first (``T`` bars).

    Attributes:
        name: a short label (``"synthetic"``, ``"googl"``, a file stem).
        time: ``[T]`` ``datetime64[s]``, strictly increasing.
        open, high, low, close: ``[T]`` f64 prices, finite and positive.
        volume: ``[T]`` f64, finite and non-negative.
        periods_per_year: bars per year (252 for daily stock bars); annualises the Sharpe ratio.
    """

    name: str
    time: np.ndarray
    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    volume: np.ndarray
    periods_per_year: float = 252.0

    def __len__(self) -> int:
        return int(self.close.shape[0])


@dataclass(frozen=True)
class MarketData:
    """Features and returns of one instrument on one device (``T`` rows, ``F`` features).

    Row ``t`` of every tensor depends only on bars ``0..t`` (no look-ahead).

    Attributes:
        features: ``[T, F]`` in the training dtype of ``device``.
        log_return: ``[T]`` f32, ``log(close[t] / close[t-1])`` (0 at ``t = 0``): what a position
            held from bar ``t-1`` to bar ``t`` earns.
        close: ``[T]`` f32 close prices.
        time: ``[T]`` ``datetime64[s]`` on the host.
        offset: the row of the full series this data's row 0 is (0 for the whole series).
        warmup: rows ``0 .. warmup - 1`` of the full series hold zero features.
    """

    name: str
    features: torch.Tensor
    log_return: torch.Tensor
    close: torch.Tensor
    time: np.ndarray
    feature_names: tuple[str, ...]
    periods_per_year: float = 252.0
    offset: int = 0
    warmup: int = 0

    def __len__(self) -> int:
        return int(self.features.shape[0])

    @property
    def device(self) -> torch.device:
        """Where the tensors live."""
        return self.features.device

    @property
    def num_features(self) -> int:
        """``F``."""
        return int(self.features.shape[1])

    @property
    def first_defined(self) -> int:
        """This data's first row whose features are defined."""
        return max(0, self.warmup - self.offset)

    def rows(self, start: int, stop: int) -> MarketData:
        """Rows ``start .. stop - 1`` as views (no copy, no cast); ``offset`` moves with them.

        Raises:
            ValueError: an empty or out-of-range slice.
        """
        n = len(self)
        if not (0 <= start < stop <= n):
            raise ValueError(f"rows({start}, {stop}) is not a non-empty slice of {n} rows")
        return MarketData(
            name=self.name,
            features=self.features[start:stop],
            log_return=self.log_return[start:stop],
            close=self.close[start:stop],
            time=self.time[start:stop],
            feature_names=self.feature_names,
            periods_per_year=self.periods_per_year,
            offset=self.offset + start,
            warmup=self.warmup,
        )
