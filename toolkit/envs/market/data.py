"""Market data: bar sources, causal features, the one upload cast, and splits by time.

Sources yield host :class:`~tritonrl.toolkit.envs.market.types.Bars`: :func:`load_csv` (any OHLCV
file; :mod:`tritonrl.toolkit.envs.market.csvbars`), :func:`synthetic_bars` (seeded
regime-switching GBM, optionally with planted AR(1) returns), :func:`anytrading_bars` (the two
series gym-anytrading ships) and :func:`source_bars` (the ``market:...`` spec of ``--env``).
:func:`compute_features` turns bars into the :data:`FEATURES` on the host; :func:`upload` moves
them to a device with one cast to the training dtype; :func:`split` cuts train / validation /
test periods by time. A synthetic source or an upload that would not fit in the free memory is
refused before it is allocated.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from tritonrl.toolkit.checks import check_memory
from tritonrl.toolkit.envs.market.csvbars import load_csv
from tritonrl.toolkit.envs.market.types import Bars, MarketData
from tritonrl.toolkit.precision import dtype_or_default

__all__ = [
    "FEATURES",
    "FEATURE_WARMUP",
    "anytrading_bars",
    "compute_features",
    "load_csv",
    "source_bars",
    "split",
    "synthetic_bars",
    "upload",
    "upload_memory",
]


_MAX_LOG_PRICE = math.log(np.finfo(np.float64).max) - 1.0
"""The largest ``|log price|`` :func:`synthetic_bars` accepts (one below float64's limit: room for
the spread of the high and the low)."""


def synthetic_bars(
    n: int = 5000,
    *,
    seed: int = 0,
    ar: float = 0.0,
    regimes: int = 2,
    drift: float = 2e-4,
    vol: float = 0.01,
    switch_prob: float = 0.01,
    start_price: float = 100.0,
    name: str = "synthetic",
) -> Bars:
    """Seeded daily bars from regime-switching geometric Brownian motion, with volume.

    A Markov chain over ``regimes`` states leaves its state with probability ``switch_prob`` per
    bar (to a uniformly drawn other state). State ``k`` has log-return drift ``drift * m_k`` and
    volatility ``vol * s_k``, with ``m`` evenly from 3 down to -1 and ``s`` geometric from 0.6 up
    to 1.6 (a calm rising regime first, a volatile falling one last; one regime: ``drift``,
    ``vol``). Log returns are ``r_t = mu_k + x_t`` with ``x_t = ar * x_{t-1} + sqrt(1 - ar**2) *
    sigma_k * z_t``: AR(1) deviations whose variance stays ``sigma_k**2``, so ``ar`` is the lag-1
    autocorrelation, the predictable component; ``ar=0`` with ``regimes=1`` is a pure random walk.
    Opens are the previous close; highs and lows spread beyond them by half-normal moves of
    ``sigma_k / 2``; volume grows with the regime's volatility and with ``|x_t| / sigma_k``. Times
    are business days from 2000-01-03; ``periods_per_year`` is 252. Deterministic for a seed.

    Raises:
        ValueError: ``n < 2``, ``regimes < 1``, ``|ar| >= 1``, ``vol <= 0``, ``start_price <= 0`` or
            ``switch_prob`` outside [0, 1]; a price path that leaves the float64 range (millions
            of bars compound the drift past it).
    """
    if n < 2 or regimes < 1 or not -1.0 < ar < 1.0 or vol <= 0 or start_price <= 0:
        raise ValueError(
            f"synthetic_bars(n={n}, regimes={regimes}, ar={ar}, vol={vol}, start_price={start_price}): "
            "need n >= 2, regimes >= 1, -1 < ar < 1, vol > 0, start_price > 0"
        )
    if not 0.0 <= switch_prob <= 1.0:
        raise ValueError(f"switch_prob={switch_prob} is not a probability")
    rng = np.random.default_rng(seed)
    if regimes == 1:
        state = np.zeros(n, dtype=np.int64)
        drifts, vols = np.array([drift]), np.array([vol])
    else:
        moves = (rng.random(n) < switch_prob) * rng.integers(1, regimes, n)
        state = (int(rng.integers(regimes)) + np.cumsum(moves)) % regimes
        drifts = drift * np.linspace(3.0, -1.0, regimes)
        vols = vol * np.geomspace(0.6, 1.6, regimes)
    sigma = vols[state]
    noise = math.sqrt(1.0 - ar * ar) * sigma * rng.standard_normal(n)
    x = noise
    if ar != 0.0:
        x = np.empty(n)
        x[0] = noise[0] / math.sqrt(1.0 - ar * ar)  # the stationary variance sigma**2 from the start
        for t in range(1, n):
            x[t] = ar * x[t - 1] + noise[t]
    growth = np.cumsum(drifts[state] + x)  # the log price over log(start_price)
    beyond = np.flatnonzero(np.abs(growth + math.log(start_price)) > _MAX_LOG_PRICE)
    if beyond.size:
        raise ValueError(
            f"synthetic_bars(n={n}): the price leaves the float64 range at bar {int(beyond[0])} (the "
            "drift compounds over the bars): ask for fewer bars, or a smaller drift"
        )
    close = start_price * np.exp(growth)
    open_ = np.concatenate(([start_price], close[:-1]))
    spread = np.abs(rng.standard_normal((2, n))) * (0.5 * sigma)
    volume = 1e6 * (sigma / vol) * np.exp(0.5 * np.abs(x) / sigma + 0.25 * rng.standard_normal(n))
    days = np.busday_offset("2000-01-03", np.arange(n), roll="forward")
    return Bars(
        name=name,
        time=days.astype("datetime64[s]"),
        open=open_,
        high=np.maximum(open_, close) * np.exp(spread[0]),
        low=np.minimum(open_, close) * np.exp(-spread[1]),
        close=close,
        volume=volume,
        periods_per_year=252.0,
    )


ANYTRADING_FILES = {"googl": "STOCKS_GOOGL.csv", "eurusd": "FOREX_EURUSD_1H_ASK.csv"}


def anytrading_bars(which: str) -> Bars:
    """The daily GOOGL (``"googl"``) or hourly EUR/USD ask (``"eurusd"``) bars gym-anytrading ships.

    Reads ``gym_anytrading/datasets/data/*.csv`` of the installed package with :func:`load_csv`,
    found without importing the package (its import pulls in pandas and gymnasium).

    Raises:
        ValueError: an unknown ``which``, or gym-anytrading is not installed (or lacks the file).
    """
    if which not in ANYTRADING_FILES:
        raise ValueError(f"unknown gym-anytrading series {which!r}; known: {', '.join(ANYTRADING_FILES)}")
    spec = importlib.util.find_spec("gym_anytrading")
    hint = "pip install 'tritonrl[market]' (gym-anytrading 2.0.0)"
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            f"market:{which} reads the data gym-anytrading ships, which is not installed: {hint}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / ANYTRADING_FILES[which]
    if not path.is_file():
        raise ValueError(f"{path} is missing from the installed gym-anytrading: {hint}")
    return load_csv(path, name=which)


_SYNTHETIC_OPTIONS = {"ar": float, "seed": int, "bars": int, "regimes": int}


def source_bars(spec: str) -> Bars:
    """Bars for the part of ``--env market:SPEC`` after ``market:`` (the prefix is also accepted).

    ``synthetic`` with optional ``,key=value`` options (``ar`` float, ``seed`` int, ``bars`` int
    (the length), ``regimes`` int), e.g. ``synthetic,ar=0.3,seed=2,bars=4000``; ``googl`` and
    ``eurusd`` (:func:`anytrading_bars`); ``csv=PATH`` (:func:`load_csv`; the rest of the spec is
    the path, commas included).

    Raises:
        ValueError: an unknown source or option (listing the known ones), a malformed value, or
            whatever the source raises.
    """
    spec = spec.strip().removeprefix("market:")
    known = "synthetic[,ar=F][,seed=N][,bars=N][,regimes=N], googl, eurusd, csv=PATH"
    if spec.startswith("csv="):
        if not spec[4:]:
            raise ValueError("market:csv= needs a path: market:csv=PATH")
        return load_csv(spec[4:])
    head, *options = [part.strip() for part in spec.split(",")]
    if head in ANYTRADING_FILES:
        if options:
            raise ValueError(f"market:{head} takes no options (got {', '.join(options)}); known: {known}")
        return anytrading_bars(head)
    if head != "synthetic":
        raise ValueError(f"unknown market source {spec!r}; known: {known}")
    kwargs: dict[str, float | int] = {}
    for option in options:
        key, sep, text = option.partition("=")
        key = key.strip()
        if not sep or key not in _SYNTHETIC_OPTIONS:
            raise ValueError(
                f"unknown option {option!r} in market:{spec}; synthetic takes {', '.join(_SYNTHETIC_OPTIONS)}"
            )
        try:
            kwargs["n" if key == "bars" else key] = _SYNTHETIC_OPTIONS[key](text.strip())
        except ValueError:
            raise ValueError(
                f"market:{spec}: {key}={text!r} is not a valid {_SYNTHETIC_OPTIONS[key].__name__}"
            ) from None
    _check_synthetic(spec, kwargs)
    return synthetic_bars(**kwargs)  # type: ignore[arg-type]


SYNTHETIC_BYTES_PER_BAR = 16 * 8
"""Host bytes :func:`synthetic_bars` holds per bar at its peak (some 16 float64 arrays of ``n``: the
regime path, the noise and AR(1) path, prices, spreads, volumes, times)."""


def _check_synthetic(spec: str, kwargs: dict[str, float | int]) -> None:
    """Refuse ``market:synthetic`` options out of range (naming the option) or whose bars would not fit
    in this machine's free memory, before anything is generated.

    Raises:
        ValueError: ``bars < 2``, ``seed < 0``, ``regimes`` outside ``1 .. bars``, ``ar`` outside
            ``(-1, 1)``, or ``"market:... needs X ...; this machine has Y available"``.
    """
    n = int(kwargs.get("n", 5000))
    checks = (
        ("bars", n >= 2, "bars >= 2"),
        ("seed", int(kwargs.get("seed", 0)) >= 0, "seed >= 0"),
        ("regimes", 1 <= int(kwargs.get("regimes", 2)) <= n, f"1 <= regimes <= bars ({n})"),
        ("ar", -1.0 < float(kwargs.get("ar", 0.0)) < 1.0, "-1 < ar < 1"),
    )
    for key, ok, bound in checks:
        if not ok:
            raise ValueError(f"market:{spec}: {key}={kwargs['n' if key == 'bars' else key]}: need {bound}")
    check_memory(f"market:{spec}", {f"generating {n} bars": n * SYNTHETIC_BYTES_PER_BAR}, "cpu")


FEATURES: tuple[str, ...] = ("log_return", "return", "volatility", "price_z", "range", "volume_z")
"""Columns of :func:`compute_features`, in order (``s_t`` is the return scale described there):

- ``log_return``: ``log(close[t] / close[t-1]) / s_t``;
- ``return``: ``(close[t] / close[t-1] - 1) / s_t``;
- ``volatility``: the std of the last ``window`` log returns over ``s_t`` (1 = usual; > 1 turbulent);
- ``price_z``: ``log(close[t])`` z-scored over the last ``window`` bars (the normalised price);
- ``range``: ``(high[t] - low[t]) / close[t] / s_t``;
- ``volume_z``: ``log1p(volume[t])`` z-scored over the last ``window`` bars.
"""

_CLIP = 10.0


def _rolling_std(x: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and population std of ``x[t - count[t] + 1 .. t]`` per ``t`` (f64; causal, exact per row).

    Sums come from ``np.cumsum`` (a sequential scan, so row ``t`` reads ``x[0..t]`` only) of ``x``
    shifted by ``x[0]`` against cancellation.
    """
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
"""Rows at the start of a series whose :func:`compute_features` are zeros (its default ``window``)."""


def compute_features(bars: Bars, *, window: int = FEATURE_WARMUP, scale_window: int = 100) -> np.ndarray:
    """The :data:`FEATURES` of ``bars``, on the host, causal: row ``t`` reads bars ``0..t`` only.

    The return scale ``s_t`` is the population std of the last ``min(t, scale_window)`` log
    returns (row ``t`` holds the return from bar ``t-1`` to ``t``), so returns and ranges come
    out in units of recent volatility, O(1) on any instrument or bar length. Rows ``0 ..
    window - 1`` (the warm-up: fewer than ``window`` returns) are 0 in every column; a zero
    spread (constant prices or volume) gives 0; every value is clipped to [-10, 10].

    Args:
        bars: ``T`` bars.
        window: the rolling window of ``volatility``, ``price_z`` and ``volume_z`` (>= 2).
        scale_window: the longest window of the return scale (>= ``window``).

    Returns:
        ``[T, len(FEATURES)]`` f32, columns in :data:`FEATURES` order.

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
"""Host bytes :func:`compute_features` holds per bar at its peak (some 30 float64 values: the rolling
sums and means, the six columns stacked, the f32 result), beside the bars themselves."""


def upload_memory(bars: int, dtype: torch.dtype) -> tuple[dict[str, int], dict[str, int]]:
    """Bytes :func:`upload` of ``bars`` bars allocates, as ``(host parts, device parts)``: the
    features' computation on the host; the ``[T, F]`` features in ``dtype`` and the f32 log returns
    and closes on the device."""
    host = {"computing the features": bars * FEATURE_HOST_BYTES_PER_BAR}
    on_device = {"features": bars * (len(FEATURES) * dtype.itemsize + 2 * 4)}
    return host, on_device


def upload(bars: Bars, device: torch.device | str = "cpu", *, dtype: torch.dtype | None = None) -> MarketData:
    """Compute the features on the host (f32) and move them to ``device`` with ONE cast.

    The features go to ``dtype`` (default ``training_dtype(device)``) in a single ``.to``; the
    log returns (unscaled, 0 at row 0) and closes travel in f32, cast on the host beforehand.

    Returns:
        :class:`MarketData`: ``features`` ``[T, F]`` in ``dtype``, ``log_return`` and ``close``
        ``[T]`` f32, all on ``device``; ``offset`` 0; ``warmup`` :data:`FEATURE_WARMUP`.

    Raises:
        ValueError: ``"uploading ... needs X ...; this machine has Y available"``: the features
            would not fit in the free memory of the host or ``device`` (checked before computing).
        ValueError / PrecisionError: from :func:`training_dtype` when the dtype policy is invalid.
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

    With ``T`` rows, ``b1 = round(T * f0)`` and ``b2 = round(T * (f0 + f1))``: train is rows
    ``0 .. b1 - 1``; validation rows ``b1 - (window - 1) .. b2 - 1`` and test rows ``b2 - (window -
    1) .. T - 1``, each keeping the ``window - 1`` rows before its boundary as warm-up (past
    data), so the first decision of every split is at its row ``window - 1`` (for validation,
    the row ``b1``) and sees only bars before its next return.

    Raises:
        ValueError: ``window < 1``; fractions not three positive numbers summing to 1; a split
            shorter than ``window + 1`` rows (then it holds no decision with a next return).
    """
    if window < 1:
        raise ValueError(f"window={window} must be >= 1")
    f = tuple(float(x) for x in fractions)
    if len(f) != 3 or min(f) <= 0 or abs(sum(f) - 1.0) > 1e-9:
        raise ValueError(f"fractions={tuple(fractions)} must be three positive numbers summing to 1")
    n = len(data)
    b1, b2 = round(n * f[0]), round(n * (f[0] + f[1]))
    bounds = {"train": (0, b1), "validation": (b1 - window + 1, b2), "test": (b2 - window + 1, n)}
    for label, (start, stop) in bounds.items():
        if start < 0 or stop - start < window + 1:
            raise ValueError(
                f"the {label} split of {data.name!r} ({n} rows, fractions {f}) has {stop - max(start, 0)} "
                f"rows with its warm-up, fewer than window + 1 = {window + 1}"
            )
    train, validation, test = (data.rows(start, stop) for start, stop in bounds.values())
    return train, validation, test
