"""A `Panel` on a device (`PanelData`): `upload_panel` computes each asset's causal features on
the host and casts them once to the training dtype; `split_panel` cuts train / validation / test
periods by time. What `tritonrl.toolkit.envs.portfolio` reads. See docs/pages/portfolio.md."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tritonrl.toolkit.bars.features import (
    FEATURE_HOST_BYTES_PER_BAR,
    FEATURE_WARMUP,
    FEATURES,
    compute_features,
)
from tritonrl.toolkit.bars.marketdata import period_bounds
from tritonrl.toolkit.bars.panel import Panel
from tritonrl.toolkit.bars.types import Bars
from tritonrl.toolkit.checks import check_memory
from tritonrl.toolkit.precision import dtype_or_default

__all__ = ["PANEL_FEATURES", "PanelData", "split_panel", "upload_panel"]

PANEL_FEATURES: tuple[str, ...] = (*FEATURES, "filled")
"""Per-asset feature columns: `FEATURES` of the asset's own bars, then 1.0 where its bar was
carried forward (``load_panel(fill=True)``), else 0.0."""


@dataclass(frozen=True)
class PanelData:
    """``N`` assets over ``T`` rows on one device. Row ``t`` depends only on bars ``0..t``.

    Attributes:
        features: ``[T, N, F]`` in the training dtype (`PANEL_FEATURES`).
        open, close: ``[T, N]`` prices in f64 (f32 on MPS): the env's accounting precision.
        time: ``[T]`` ``datetime64[s]`` on the host; symbols: the ``N`` names.
        offset: the row of the full panel this data's row 0 is.
    """

    name: str
    features: torch.Tensor
    open: torch.Tensor
    close: torch.Tensor
    time: np.ndarray
    symbols: tuple[str, ...]
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
    def num_assets(self) -> int:
        """``N``."""
        return int(self.features.shape[1])

    @property
    def num_features(self) -> int:
        """``F``."""
        return int(self.features.shape[2])

    def rows(self, start: int, stop: int) -> PanelData:
        """Rows ``start .. stop - 1`` as views; ``offset`` moves with them.

        Raises:
            ValueError: an empty or out-of-range slice.
        """
        n = len(self)
        if not (0 <= start < stop <= n):
            raise ValueError(f"rows({start}, {stop}) is not a non-empty slice of {n} rows")
        return PanelData(
            name=self.name,
            features=self.features[start:stop],
            open=self.open[start:stop],
            close=self.close[start:stop],
            time=self.time[start:stop],
            symbols=self.symbols,
            periods_per_year=self.periods_per_year,
            offset=self.offset + start,
            warmup=self.warmup,
        )


def upload_panel(
    panel: Panel, device: torch.device | str = "cpu", *, dtype: torch.dtype | None = None
) -> PanelData:
    """`PanelData` of ``panel`` on ``device``: features on the host, then one cast to ``dtype``
    (default ``training_dtype(device)``); prices f64 (f32 on MPS, which has no f64).

    Raises:
        ValueError: the panel would not fit in the free memory of the host or ``device``.
        ValueError / PrecisionError: an invalid dtype policy.
    """
    device = torch.device(device)
    target = dtype_or_default(dtype, device)
    t_rows, n = panel.close.shape
    host = {"computing the features": t_rows * n * (FEATURE_HOST_BYTES_PER_BAR + 4 * len(PANEL_FEATURES))}
    on_device = {"features and prices": t_rows * n * (len(PANEL_FEATURES) * target.itemsize + 16)}
    what = f"uploading the {t_rows} x {n} bars of {panel.name!r}"
    check_memory(what, {**host, **on_device} if device.type == "cpu" else host, "cpu")
    if device.type != "cpu":
        check_memory(what, on_device, device)
    features = np.empty((t_rows, n, len(PANEL_FEATURES)), dtype=np.float32)
    for i, symbol in enumerate(panel.symbols):
        bars = Bars(
            name=symbol,
            time=panel.time,
            open=panel.open[:, i],
            high=panel.high[:, i],
            low=panel.low[:, i],
            close=panel.close[:, i],
            volume=panel.volume[:, i],
            periods_per_year=panel.periods_per_year,
        )
        features[:, i, :-1] = compute_features(bars)
    features[:, :, -1] = panel.filled
    price = torch.float32 if device.type == "mps" else torch.float64
    return PanelData(
        name=panel.name,
        features=torch.from_numpy(features).to(device=device, dtype=target),  # the one cast
        open=torch.from_numpy(np.ascontiguousarray(panel.open, dtype=np.float64)).to(device, price),
        close=torch.from_numpy(np.ascontiguousarray(panel.close, dtype=np.float64)).to(device, price),
        time=np.asarray(panel.time).copy(),
        symbols=tuple(panel.symbols),
        periods_per_year=panel.periods_per_year,
        warmup=FEATURE_WARMUP,
    )


def split_panel(
    data: PanelData, window: int, fractions: Sequence[float] = (0.7, 0.15, 0.15)
) -> tuple[PanelData, PanelData, PanelData]:
    """Train, validation and test periods in time order (row views); validation and test keep the
    ``window - 1`` rows before their boundary as warm-up, as `split` does for one asset.

    Raises:
        ValueError: ``window < 1``; fractions not three positive numbers summing to 1; a period
            shorter than ``window + 1`` rows.
    """
    bounds = period_bounds(len(data), window, fractions, f"period of {data.name!r}")
    train, validation, test = (data.rows(start, stop) for start, stop in bounds)
    return train, validation, test
