"""Bars on a device: `upload` (host features, one cast to the training dtype) and
`split` into train / validation / test periods by time. See docs/pages/market.md."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from tritonrl.toolkit.bars.features import (
    FEATURE_HOST_BYTES_PER_BAR,
    FEATURE_WARMUP,
    FEATURES,
    compute_features,
)
from tritonrl.toolkit.bars.types import Bars, MarketData
from tritonrl.toolkit.checks import check_memory
from tritonrl.toolkit.precision import dtype_or_default

__all__ = ["period_bounds", "split", "upload", "upload_memory"]


def upload_memory(bars: int, dtype: torch.dtype) -> tuple[dict[str, int], dict[str, int]]:
    """Bytes `upload` of ``bars`` bars allocates, as ``(host parts, device parts)``."""
    host = {"computing the features": bars * FEATURE_HOST_BYTES_PER_BAR}
    on_device = {"features": bars * (len(FEATURES) * dtype.itemsize + 2 * 4)}
    return host, on_device


def upload(bars: Bars, device: torch.device | str = "cpu", *, dtype: torch.dtype | None = None) -> MarketData:
    """`MarketData` of ``bars`` on ``device``: the features computed on the host, then one cast
    to ``dtype`` (default ``training_dtype(device)``); log returns and closes f32.

    Raises:
        ValueError: the features would not fit in the free memory of the host or ``device``.
        ValueError / PrecisionError: an invalid dtype policy.
    """
    device = torch.device(device)
    target = dtype_or_default(dtype, device)
    host_parts, device_parts = upload_memory(len(bars), target)
    what = f"uploading the {len(bars)} bars of {bars.name!r}"
    if device.type == "cpu":
        check_memory(what, {**host_parts, **device_parts}, device)
    else:
        check_memory(what, host_parts, "cpu")
        check_memory(what, device_parts, device)
    host = torch.from_numpy(compute_features(bars))
    close = np.asarray(bars.close, dtype=np.float64)
    log_return = np.concatenate(([0.0], np.diff(np.log(close)))).astype(np.float32)
    return MarketData(
        name=bars.name,
        features=host.to(device=device, dtype=target),  # the one cast
        log_return=torch.from_numpy(log_return).to(device),
        close=torch.from_numpy(close.astype(np.float32)).to(device),
        time=np.asarray(bars.time).copy(),
        feature_names=FEATURES,
        periods_per_year=bars.periods_per_year,
        warmup=FEATURE_WARMUP,
    )


def split(
    data: MarketData, window: int, fractions: Sequence[float] = (0.7, 0.15, 0.15)
) -> tuple[MarketData, MarketData, MarketData]:
    """Train, validation and test periods: contiguous time ranges, never shuffled (row views).

    Validation and test keep the ``window - 1`` rows before their boundary as warm-up.

    Raises:
        ValueError: ``window < 1``; fractions not three positive numbers summing to 1; a split
            shorter than ``window + 1`` rows (then it holds no decision with a next return).
    """
    bounds = period_bounds(len(data), window, fractions, f"split of {data.name!r}")
    train, validation, test = (data.rows(start, stop) for start, stop in bounds)
    return train, validation, test


def period_bounds(
    n: int, window: int, fractions: Sequence[float], what: str
) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """Rows ``[start, stop)`` of the train, validation and test periods of ``n`` rows (validation
    and test with ``window - 1`` rows of warm-up); ``ValueError`` naming ``what`` when one is short.

    Raises:
        ValueError: ``window < 1``; fractions not three positive numbers summing to 1; a period
            shorter than ``window + 1`` rows.
    """
    if window < 1:
        raise ValueError(f"window={window} must be >= 1")
    f = tuple(float(x) for x in fractions)
    if len(f) != 3 or min(f) <= 0 or abs(sum(f) - 1.0) > 1e-9:
        raise ValueError(f"fractions={tuple(fractions)} must be three positive numbers summing to 1")
    b1, b2 = round(n * f[0]), round(n * (f[0] + f[1]))
    bounds = {"train": (0, b1), "validation": (b1 - window + 1, b2), "test": (b2 - window + 1, n)}
    for label, (start, stop) in bounds.items():
        if start < 0 or stop - start < window + 1:
            raise ValueError(
                f"the {label} {what} ({n} rows, fractions {f}) has {stop - max(start, 0)} "
                f"rows with its warm-up, fewer than window + 1 = {window + 1}"
            )
    return bounds["train"], bounds["validation"], bounds["test"]
