"""Causal features of bars (host numpy, f32): row ``t`` reads bars ``0..t`` only."""

from __future__ import annotations

import numpy as np
from tritonrl.toolkit.bars.types import Bars

__all__ = ["FEATURES", "FEATURE_HOST_BYTES_PER_BAR", "FEATURE_WARMUP", "compute_features"]


FEATURES: tuple[str, ...] = ("log_return", "return", "volatility", "price_z", "range", "volume_z")
"""Columns of `compute_features`, in order (``s_t`` is the return scale described there):

- ``log_return``: ``log(close[t] / close[t-1]) / s_t``;
- ``return``: ``(close[t] / close[t-1] - 1) / s_t``;
- ``volatility``: the std of the last ``window`` log returns over ``s_t`` (1 = usual; > 1 turbulent);
- ``price_z``: ``log(close[t])`` z-scored over the last ``window`` bars (the normalised price);
- ``range``: ``(high[t] - low[t]) / close[t] / s_t``;
- ``volume_z``: ``log1p(volume[t])`` z-scored over the last ``window`` bars.
"""

_CLIP = 10.0


def _rolling_std(x: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and population std of ``x[t - count[t] + 1 .. t]`` per ``t`` (f64, causal); ``x`` is
    shifted by ``x[0]`` against cancellation."""
    y = x - x[0]
    s1 = np.concatenate(([0.0], np.cumsum(y)))
    s2 = np.concatenate(([0.0], np.cumsum(y * y)))
    end = np.arange(1, x.shape[0] + 1)
    c = np.maximum(count, 1)
    mean = (s1[end] - s1[end - c]) / c
    var = np.maximum((s2[end] - s2[end - c]) / c - mean * mean, 0.0)
    return mean + x[0], np.sqrt(var)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    out = np.zeros_like(num)
    np.divide(num, den, out=out, where=den > 0)
    return np.clip(out, -_CLIP, _CLIP)


FEATURE_WARMUP = 20
"""Rows at the start of a series whose `compute_features` are zeros (its default ``window``)."""


def compute_features(bars: Bars, *, window: int = FEATURE_WARMUP, scale_window: int = 100) -> np.ndarray:
    """The `FEATURES` of ``bars``, on the host, causal: row ``t`` reads bars ``0..t`` only.

    The return scale ``s_t`` is the std of the last ``min(t, scale_window)`` log returns, so
    returns and ranges are O(1) on any instrument. Rows ``0 .. window - 1`` are 0; a zero spread
    gives 0; every value is clipped to [-10, 10].

    Returns:
        ``[T, len(FEATURES)]`` f32, columns in [`FEATURES`][tritonrl.toolkit.bars.features.FEATURES] order.

    Raises:
        ValueError: ``window < 2`` or ``scale_window < window``.
    """
    if window < 2 or scale_window < window:
        raise ValueError(f"window={window}, scale_window={scale_window}: need 2 <= window <= scale_window")
    close = np.asarray(bars.close, dtype=np.float64)
    t_count = close.shape[0]
    rows = np.arange(t_count)
    log_close = np.log(close)
    log_ret = np.concatenate(([0.0], np.diff(log_close)))
    simple = np.concatenate(([0.0], close[1:] / close[:-1] - 1.0))
    fixed = np.full(t_count, window)
    _, scale = _rolling_std(log_ret, np.minimum(rows, scale_window))
    _, vol = _rolling_std(log_ret, fixed)
    price_mean, price_std = _rolling_std(log_close, fixed)
    log_volume = np.log1p(np.asarray(bars.volume, dtype=np.float64))
    volume_mean, volume_std = _rolling_std(log_volume, fixed)
    spread = (np.asarray(bars.high, np.float64) - np.asarray(bars.low, np.float64)) / close
    out = np.stack(
        [
            _ratio(log_ret, scale),
            _ratio(simple, scale),
            _ratio(vol, scale),
            _ratio(log_close - price_mean, price_std),
            _ratio(spread, scale),
            _ratio(log_volume - volume_mean, volume_std),
        ],
        axis=1,
    )
    out[:window] = 0.0
    return out.astype(np.float32)


FEATURE_HOST_BYTES_PER_BAR = 30 * 8
"""Host bytes `compute_features` holds per bar at its peak (some 30 float64 values: the rolling
sums and means, the six columns stacked, the f32 result), beside the bars themselves."""
