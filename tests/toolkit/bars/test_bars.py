"""Bars (toolkit/bars/): CSV errors, the packaged series, the synthetic generator,
causal features, the one upload cast, and splits by time."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode
from tritonrl.toolkit.bars import (
    FEATURES,
    Bars,
    anytrading_bars,
    compute_features,
    load_csv,
    source_bars,
    split,
    synthetic_bars,
    upload,
)
from tritonrl.toolkit.bars import sources as sources_module
from tritonrl.toolkit.precision import training_dtype

HEADER = "Date,Open,High,Low,Close,Adj Close,Volume"


def _rows(n: int, start: int = 1) -> list[str]:
    return [
        f"2020-01-{d:02d},10.0,11.0,9.0,{10 + d / 10},{10 + d / 10},{1000 + d}"
        for d in range(start, start + n)
    ]


def _write(tmp_path: Path, lines: list[str], name: str = "bars.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


# ---------------------------------------------------------------- CSV


def test_csv_reads_columns_in_any_case_and_ignores_others(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        [
            "volume,CLOSE,low,High,open,Adj Close,DATE",
            "5,2.5,1,3,2,99,2021-03-01",
            "6,2.6,1,3,2,99,2021-03-02",
        ],
    )
    bars = load_csv(path)
    assert bars.name == "bars"
    assert bars.time.dtype == np.dtype("datetime64[s]")
    np.testing.assert_array_equal(bars.close, [2.5, 2.6])
    np.testing.assert_array_equal(bars.open, [2.0, 2.0])
    np.testing.assert_array_equal(bars.high, [3.0, 3.0])
    np.testing.assert_array_equal(bars.volume, [5.0, 6.0])
    assert bars.periods_per_year == 252.0
    assert load_csv(path, name="x", periods_per_year=12).periods_per_year == 12.0


def test_csv_forex_format_and_iso_datetimes(tmp_path: Path) -> None:
    forex = _write(
        tmp_path,
        [
            "Time,Open,High,Low,Close,Volume",
            "31.01.2017 22:00:00.000,1.05,1.06,1.04,1.05,10",
            "31.01.2017 23:00:00.000,1.05,1.06,1.04,1.05,10",
        ],
    )
    bars = load_csv(forex)
    assert bars.time[0] == np.datetime64("2017-01-31T22:00:00")
    assert bars.periods_per_year == pytest.approx(6240.0)
    iso = _write(
        tmp_path,
        [
            "timestamp,open,high,low,close,volume",
            "2017-01-31T22:00:00+01:00,1,1,1,1,0",
            "2017-01-31T22:01:00+01:00,1,1,1,1,0",
        ],
        "iso.csv",
    )
    bars = load_csv(iso)
    assert bars.time[0] == np.datetime64("2017-01-31T21:00:00")  # converted to UTC
    assert bars.periods_per_year == pytest.approx(6240.0 * 60)  # minute bars


@pytest.mark.parametrize(("days", "expected"), [(1, 252.0), (7, 52.0), (30, 12.0), (365, 365.25 / 365)])
def test_csv_periods_per_year_from_spacing(tmp_path: Path, days: int, expected: float) -> None:
    dates = np.datetime64("2000-01-01") + np.arange(5) * days
    lines = ["date,open,high,low,close,volume", *(f"{d},1,1,1,1,1" for d in dates)]
    assert load_csv(_write(tmp_path, lines)).periods_per_year == pytest.approx(expected)


@pytest.mark.parametrize(
    ("lines", "match"),
    [
        (["Date,Open,High,Low,Close", "2020-01-01,1,1,1,1"], r"bars\.csv: missing column\(s\) volume"),
        (["Open,High,Low,Close,Volume", "1,1,1,1,1"], r"missing column\(s\) a time column"),
        (
            [HEADER, *_rows(2, 5), *_rows(2, 1)],
            r"bars\.csv, line 4, column 'Date': timestamps not sorted.*2020-01-01",
        ),
        (
            [HEADER, *_rows(3), _rows(1, 3)[0]],
            r"bars\.csv, line 5, column 'Date': duplicate timestamp.*\(line 4\)",
        ),
        (
            [HEADER, *_rows(2), "2020-01-09,10,11,9,nan,10,5"],
            r"line 4, column 'Close': 'nan' is not a finite number",
        ),
        ([HEADER, *_rows(2), "2020-01-09,10,11,9,,10,5"], r"line 4, column 'Close': empty value"),
        ([HEADER, *_rows(2), "", *_rows(2, 5)], r"bars\.csv, line 4: empty row"),
        ([HEADER, *_rows(2), "2020-01-09,10,11,0,10,10,5"], r"line 4, column 'Low': price 0 is not positive"),
        (
            [HEADER, *_rows(2), "2020-01-09,10,11,-1,10,10,5"],
            r"line 4, column 'Low': price -1 is not positive",
        ),
        ([HEADER, *_rows(2), "2020-01-09,10,11,9,10,10,-5"], r"line 4, column 'Volume': negative volume"),
        (
            [HEADER, *_rows(2), "2020-01-09,10,11,9,ten,10,5"],
            r"line 4, column 'Close': 'ten' is not a number",
        ),
        (
            [HEADER, *_rows(2), "Jan 9 2020,10,11,9,10,10,5"],
            r"line 4, column 'Date': cannot parse 'Jan 9 2020'",
        ),
        ([HEADER, *_rows(2), "2020-01-09,10,11"], r"line 4: 3 fields, the header has 7"),
        ([HEADER, *_rows(1)], r"bars\.csv: 1 rows of bars, fewer than the 2 needed"),
    ],
)
def test_csv_errors_name_file_line_and_column(tmp_path: Path, lines: list[str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        load_csv(_write(tmp_path, lines))


def test_csv_min_rows_and_trailing_blank_lines(tmp_path: Path) -> None:
    path = _write(tmp_path, [HEADER, *_rows(5), "", ""])
    assert len(load_csv(path, min_rows=5)) == 5
    with pytest.raises(ValueError, match="5 rows of bars, fewer than the 34 needed"):
        load_csv(path, min_rows=34)
    with pytest.raises(ValueError, match="nothing.csv: no such file"):
        load_csv(tmp_path / "nothing.csv")


# ---------------------------------------------------------------- packaged series


@pytest.mark.parametrize(
    ("which", "rows", "periods", "first_time"),
    [("googl", 2335, 252.0, "2009-05-22"), ("eurusd", 6225, 6240.0, "2017-01-01T22:00:00")],
)
def test_anytrading_series_match_pandas(which: str, rows: int, periods: float, first_time: str) -> None:
    pytest.importorskip("gym_anytrading")
    pd = pytest.importorskip("pandas")
    bars = anytrading_bars(which)
    assert (bars.name, len(bars), bars.periods_per_year) == (which, rows, periods)
    assert bars.time[0] == np.datetime64(first_time)
    path = Path(importlib.util.find_spec("gym_anytrading").origin).parent / "datasets" / "data"  # type: ignore[union-attr, arg-type]
    frame = pd.read_csv(path / sources_module.ANYTRADING_FILES[which])
    for column in ("Open", "High", "Low", "Close", "Volume"):
        np.testing.assert_array_equal(getattr(bars, column.lower()), frame[column].to_numpy(np.float64))
    assert len(source_bars(f"market:{which}")) == rows


def test_anytrading_missing_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources_module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ValueError, match=r"pip install 'tritonrl\[market\]'"):
        anytrading_bars("googl")
    with pytest.raises(ValueError, match="unknown gym-anytrading series 'aapl'; known: googl, eurusd"):
        anytrading_bars("aapl")


# ---------------------------------------------------------------- synthetic and source specs


def _lag1(bars: Bars) -> float:
    r = np.diff(np.log(bars.close))
    r = r - r.mean()
    return float((r[1:] * r[:-1]).mean() / (r * r).mean())


def test_synthetic_is_deterministic_per_seed() -> None:
    a, b, c = (
        synthetic_bars(500, seed=3, ar=0.2),
        synthetic_bars(500, seed=3, ar=0.2),
        synthetic_bars(500, seed=4, ar=0.2),
    )
    for field in ("time", "open", "high", "low", "close", "volume"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.close, c.close)
    assert np.all(a.low <= np.minimum(a.open, a.close)) and np.all(a.high >= np.maximum(a.open, a.close))
    assert np.all(a.low > 0) and np.all(a.volume > 0) and np.all(np.diff(a.time).astype(np.int64) > 0)


# Lag-1 sample autocorrelation of n = 20,000 returns has standard error sqrt((1 - ar^2) / n): 0.0071
# at ar = 0, 0.0067 at ar = 0.3 (measured over 40 seeds: 0.0070 and 0.0068 with one regime, 0.009
# with regimes switching volatility). 0.04 is 4.5 of the worst of these, yet 7x smaller than the
# planted 0.3, so a generator that planted nothing (or twice as much) fails.
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("regimes", [1, 2])
def test_synthetic_ar_plants_lag1_autocorrelation(seed: int, regimes: int) -> None:
    assert _lag1(synthetic_bars(20_000, seed=seed, ar=0.3, regimes=regimes)) == pytest.approx(0.3, abs=0.04)
    if regimes == 1:  # the pure random walk
        assert abs(_lag1(synthetic_bars(20_000, seed=seed, ar=0.0, regimes=1))) < 0.04


def test_source_bars_specs(tmp_path: Path) -> None:
    bars = source_bars("synthetic,ar=0.3,seed=2,bars=400,regimes=1")
    np.testing.assert_array_equal(bars.close, synthetic_bars(400, seed=2, ar=0.3, regimes=1).close)
    assert len(source_bars("market:synthetic")) == 5000
    path = _write(tmp_path, [HEADER, *_rows(3)], "a,b.csv")
    assert len(source_bars(f"csv={path}")) == 3  # the path keeps its comma
    for spec, match in [
        ("nasdaq", "unknown market source 'nasdaq'; known: synthetic.*googl, eurusd, csv=PATH"),
        ("synthetic,drift=1", "unknown option 'drift=1'.*synthetic takes ar, seed, bars, regimes"),
        ("synthetic,seed=x", "seed='x' is not a valid int"),
        ("googl,seed=1", "market:googl takes no options"),
        ("csv=", "needs a path"),
        ("synthetic,ar=1.5", "-1 < ar < 1"),
    ]:
        with pytest.raises(ValueError, match=match):
            source_bars(spec)


# ---------------------------------------------------------------- features


def test_features_shape_warmup_and_scale() -> None:
    bars = synthetic_bars(2000, seed=0)
    f = compute_features(bars)
    assert f.shape == (2000, len(FEATURES)) and f.dtype == np.float32
    assert np.all(f[:20] == 0) and np.all(f[20] != 0)
    assert np.all(np.abs(f) <= 10)
    body = np.abs(f[200:]).mean(axis=0)  # O(1): every mean |feature| between 0.3 and 3
    assert np.all((body > 0.3) & (body < 3)), dict(zip(FEATURES, body, strict=True))
    r = np.diff(np.log(bars.close))
    np.testing.assert_allclose(f[500, 0], r[499] / r[400:500].std(), rtol=1e-5)  # log_return / scale
    np.testing.assert_allclose(f[500, 2], r[480:500].std() / r[400:500].std(), rtol=1e-5)  # volatility
    with pytest.raises(ValueError, match="need 2 <= window <= scale_window"):
        compute_features(bars, window=50, scale_window=20)


def _perturbed(bars: Bars, k: int, seed: int) -> Bars:
    rng = np.random.default_rng(seed)
    n = len(bars) - k - 1
    factor = np.concatenate((np.ones(k + 1), np.exp(rng.normal(0, 0.05, n))))
    wider = np.concatenate((np.ones(k + 1), rng.uniform(1.0, 1.05, n)))
    return Bars(
        name=bars.name,
        time=bars.time,
        open=bars.open * factor,
        high=bars.high * factor * wider,
        low=bars.low * factor / wider,
        close=bars.close * factor,
        volume=bars.volume * np.concatenate((np.ones(k + 1), rng.uniform(0.1, 10, n))),
        periods_per_year=bars.periods_per_year,
    )


_BARS = synthetic_bars(160, seed=5, ar=0.2)
_BASE = upload(_BARS)


@settings(max_examples=60)
@given(k=st.integers(0, len(_BARS) - 2), seed=st.integers(0, 2**32 - 1))
def test_changing_future_bars_never_changes_a_past_observation(k: int, seed: int) -> None:
    changed = upload(_perturbed(_BARS, k, seed))
    for name in ("features", "log_return", "close"):
        before, after = getattr(_BASE, name), getattr(changed, name)
        assert before[: k + 1].numpy().tobytes() == after[: k + 1].numpy().tobytes(), (name, k)
    assert not torch.equal(_BASE.log_return[k + 1 :], changed.log_return[k + 1 :])  # the change is real


# ---------------------------------------------------------------- upload


class _Casts(TorchDispatchMode):
    """Records every op whose floating output dtype differs from a floating input's dtype."""

    def __init__(self) -> None:
        super().__init__()
        self.casts: list[tuple[str, torch.dtype, torch.dtype, tuple[int, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
        if isinstance(out, torch.Tensor) and out.is_floating_point():
            for a in inputs[:1]:
                if a.dtype != out.dtype:
                    self.casts.append((str(func), a.dtype, out.dtype, tuple(out.shape)))
        return out


def test_upload_casts_the_features_exactly_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONRL_DTYPE", "bf16")
    training_dtype.cache_clear()  # type: ignore[attr-defined]
    try:
        bars = synthetic_bars(300, seed=1)
        with _Casts() as mode:
            data = upload(bars)
        assert mode.casts == [("aten._to_copy.default", torch.float32, torch.bfloat16, (300, len(FEATURES)))]
        assert data.features.dtype == torch.bfloat16
        assert data.log_return.dtype == data.close.dtype == torch.float32
        expected = torch.from_numpy(compute_features(bars)).to(torch.bfloat16)
        assert torch.equal(data.features, expected)
        np.testing.assert_allclose(data.log_return[1:].numpy(), np.diff(np.log(bars.close)), rtol=1e-6)
        assert data.log_return[0] == 0 and data.feature_names == FEATURES and data.offset == 0
        assert data.periods_per_year == 252.0 and np.array_equal(data.time, bars.time)
    finally:
        monkeypatch.delenv("TRITONRL_DTYPE")
        training_dtype.cache_clear()  # type: ignore[attr-defined]
    with _Casts() as mode:
        data = upload(bars)  # f32 on a CPU: nothing to cast
    assert mode.casts == [] and data.features.dtype == torch.float32
    assert upload(bars, dtype=torch.float64).features.dtype == torch.float64


# ---------------------------------------------------------------- split


def test_split_by_time_with_warmup_and_offsets() -> None:
    data = upload(synthetic_bars(100, seed=0))
    train, validation, test = split(data, window=10)
    assert [(len(s), s.offset) for s in (train, validation, test)] == [(70, 0), (24, 61), (24, 76)]
    # the first decision of validation / test is at their row window - 1: the boundary rows 70 / 85
    assert torch.equal(validation.features[9], data.features[70])
    assert torch.equal(test.features[9], data.features[85])
    assert np.array_equal(test.time, data.time[76:])
    assert validation.features.data_ptr() == data.features[61].data_ptr()  # views, no copy
    # a split of a split keeps offsets relative to the full series
    _, _, inner_test = split(data.rows(20, 100), window=5, fractions=(0.5, 0.25, 0.25))
    assert inner_test.offset == 20 + 60 - 4 and len(inner_test) == 24


def test_split_errors() -> None:
    data = upload(synthetic_bars(100, seed=0))
    match = r"the validation split .* has 5 rows with its warm-up, fewer than window \+ 1 = 6"
    with pytest.raises(ValueError, match=match):
        split(data, window=5, fractions=(0.98, 0.01, 0.01))
    with pytest.raises(ValueError, match="the train split"):
        split(data, window=80)
    for fractions in [(0.5, 0.5), (0.7, 0.3, 0.0), (0.5, 0.3, 0.3)]:
        with pytest.raises(ValueError, match="three positive numbers summing to 1"):
            split(data, window=5, fractions=fractions)
