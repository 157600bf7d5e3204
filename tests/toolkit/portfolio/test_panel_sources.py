"""The portfolio env's data: the panel sources (`source_panel`, `synthetic_panel`, `sp500_panel`),
the upload to a device (`upload_panel`, `PanelData.rows`) and the split by time (`split_panel`).

The planted signal is measured as the mean over bars of the cross-sectional (across assets)
correlation between bar ``t``'s log volume (or its ``volume_z`` feature) and bar ``t + 1``'s log
return: about ``0.47`` at ``signal=0.5`` and ``0`` (standard error ``~0.012`` over 1000 bars of 8
assets) at ``signal=0``; the tests ask for ``> 0.35`` and ``< 0.05`` in absolute value, at fixed
seeds.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonrl.toolkit.bars import Panel
from tritonrl.toolkit.bars.panel_sources import source_panel, sp500_panel, synthetic_panel
from tritonrl.toolkit.bars.paneldata import PANEL_FEATURES, PanelData, split_panel, upload_panel

LONG = """date,symbol,open,high,low,close,volume
2024-01-02,AAA,10,11,9,10.5,100
2024-01-02,BBB,20,21,19,20.5,200
2024-01-03,AAA,10.5,12,10,11,110
2024-01-04,AAA,11,11.5,10.5,11.2,120
2024-01-04,BBB,21,21.5,20.5,21.2,220
"""


def _same_panel(a: Panel, b: Panel) -> None:
    assert a.symbols == b.symbols and a.name == b.name and a.periods_per_year == b.periods_per_year
    for field in ("time", "open", "high", "low", "close", "volume", "filled"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)  # exact: same draw


def cross_sectional_ic(score: np.ndarray, close: np.ndarray) -> float:
    """Mean over bars ``t`` of the correlation across assets of ``score[t]`` and the log return
    from ``t`` to ``t + 1`` (``score`` and ``close`` ``[T, N]``)."""
    x = score[:-1] - score[:-1].mean(axis=1, keepdims=True)
    y = np.diff(np.log(close), axis=0)
    y = y - y.mean(axis=1, keepdims=True)
    return float(np.mean((x * y).sum(1) / np.sqrt((x * x).sum(1) * (y * y).sum(1))))


# ----------------------------------------------------------------------------- synthetic


@settings(max_examples=5)
@given(seed=st.integers(0, 2**31 - 1), assets=st.integers(2, 5), signal=st.sampled_from([0.0, 0.3]))
def test_synthetic_panel_is_a_function_of_its_seed(seed: int, assets: int, signal: float) -> None:
    a = synthetic_panel(60, assets=assets, seed=seed, signal=signal)
    _same_panel(a, synthetic_panel(60, assets=assets, seed=seed, signal=signal))
    assert not np.array_equal(a.close, synthetic_panel(60, assets=assets, seed=seed + 1, signal=signal).close)
    assert a.close.shape == (60, assets) and a.symbols == tuple(f"A{i:02d}" for i in range(assets))
    assert np.all(a.close > 0) and np.all(a.volume > 0) and not a.filled.any()
    assert np.all(a.low <= np.minimum(a.open, a.close)) and np.all(a.high >= np.maximum(a.open, a.close))
    assert np.all(np.diff(a.time.astype(np.int64)) > 0) and str(a.time[0])[:10] == "2000-01-03"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_planted_signal_predicts_the_next_return(seed: int) -> None:
    """In the bars (log volume) and in what the env observes (the ``volume_z`` feature, after
    its 20 warm-up rows): about 0.47 with the signal, 0 without (thresholds: the module's)."""
    column = PANEL_FEATURES.index("volume_z")
    for signal, check in ((0.5, lambda ic: ic > 0.35), (0.0, lambda ic: abs(ic) < 0.05)):
        panel = synthetic_panel(1000, seed=seed, signal=signal)
        assert check(cross_sectional_ic(np.log(panel.volume), panel.close)), signal
        observed = upload_panel(panel).features[20:, :, column].double().numpy()
        assert check(cross_sectional_ic(observed, panel.close[20:])), signal


def test_synthetic_panel_refuses_bad_arguments() -> None:
    for kwargs in ({"n": 1}, {"assets": 1}, {"correlation": 1.0}, {"vol": 0.0}, {"signal": -0.1}):
        with pytest.raises(ValueError, match="need n >= 2, assets >= 2"):
            synthetic_panel(**kwargs)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- source_panel


def test_source_panel_synthetic_options() -> None:
    got = source_panel("portfolio:synthetic,assets=3,bars=50,seed=2,signal=0.5,correlation=0.2")
    _same_panel(got, synthetic_panel(50, assets=3, seed=2, signal=0.5, correlation=0.2))
    _same_panel(source_panel(" synthetic , bars = 40 "), synthetic_panel(40))  # prefix optional, spaces
    assert source_panel("synthetic,bars=30").close.shape == (30, 8)  # 8 assets by default


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("synthetic,volume=3", "unknown option 'volume=3' in portfolio:synthetic,volume=3; synthetic takes"),
        ("synthetic,assets", "unknown option 'assets'"),
        ("synthetic,assets=x", "assets='x' is not a valid int"),
        ("synthetic,signal=strong", "signal='strong' is not a valid float"),
        ("synthetic,bars=1", "need bars >= 2, assets >= 2, seed >= 0"),
        ("synthetic,assets=1", "need bars >= 2"),
        ("synthetic,seed=-1", "seed >= 0"),
        ("synthetic,bars=20,signal=-1", "signal >= 0"),
        ("yahoo", "unknown portfolio source 'yahoo'; known: synthetic"),
        ("portfolio:", "unknown portfolio source ''"),
        ("sp500,seed=1", "portfolio:sp500 takes no options"),
        ("csv=", "portfolio:csv= needs a path"),
        ("csv-fill=", "portfolio:csv-fill= needs a path"),
    ],
)
def test_source_panel_refuses_in_one_line(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        source_panel(spec)
    assert "\n" not in str(err.value)


def test_source_panel_csv_and_csv_fill(tmp_path: Path) -> None:
    path = tmp_path / "two, assets.csv"  # a comma in the path: the rest of the spec is the path
    path.write_text(LONG)
    with pytest.raises(ValueError, match=r"'BBB' has no bar at 2024-01-03T00:00:00 \(fill=True"):
        source_panel(f"portfolio:csv={path}")
    p = source_panel(f"portfolio:csv-fill={path}")
    assert p.symbols == ("AAA", "BBB") and p.name == "two, assets" and len(p) == 3
    np.testing.assert_array_equal(p.close, [[10.5, 20.5], [11, 20.5], [11.2, 21.2]])  # exact: read
    np.testing.assert_array_equal(p.filled, [[False, False], [False, True], [False, False]])
    complete = tmp_path / "full.csv"
    complete.write_text(LONG + "2024-01-03,BBB,20.5,22,20,21,210\n")
    assert source_panel(f"csv={complete}").close[1].tolist() == [11.0, 21.0]
    with pytest.raises(ValueError, match="missing.csv"):
        source_panel(f"csv={tmp_path / 'missing.csv'}")


def test_sp500_panel() -> None:
    pytest.importorskip("skfolio")
    p = sp500_panel()
    assert p.name == "sp500" and len(p.symbols) == 20 and len(set(p.symbols)) == 20
    assert {"AAPL", "MSFT", "XOM"} <= set(p.symbols)
    assert str(p.time[0])[:10] == "1990-01-02" and str(p.time[-1])[:10] == "2022-12-28"
    assert np.all(np.diff(p.time.astype(np.int64)) > 0)
    assert np.all(np.isfinite(p.close)) and np.all(p.close > 0) and p.close.shape == (len(p), 20)
    np.testing.assert_array_equal(p.open, p.close)  # exact: closes only
    assert p.periods_per_year == 252.0
    _same_panel(source_panel("portfolio:sp500"), p)


# ----------------------------------------------------------------------------- upload, rows, split


def test_upload_panel_dtypes_shapes_and_the_filled_column() -> None:
    panel = synthetic_panel(80, assets=3, seed=1)
    panel = dataclasses.replace(panel, filled=np.zeros((80, 3), dtype=bool) | (np.arange(80)[:, None] == 50))
    data = upload_panel(panel)
    assert isinstance(data, PanelData) and len(data) == 80 and data.device == torch.device("cpu")
    assert data.features.dtype == torch.float32 and data.features.shape == (80, 3, len(PANEL_FEATURES))
    assert data.open.dtype == data.close.dtype == torch.float64
    np.testing.assert_array_equal(data.close.numpy(), panel.close)  # exact: f64 kept as it is
    np.testing.assert_array_equal(data.open.numpy(), panel.open)  # exact
    assert data.features[:, :, -1].sum().item() == 3 and data.features[50, :, -1].tolist() == [1.0] * 3
    assert data.num_assets == 3 and data.num_features == len(PANEL_FEATURES) and data.offset == 0
    assert data.symbols == panel.symbols and data.warmup == 20 and bool(torch.isfinite(data.features).all())
    assert upload_panel(panel, dtype=torch.float64).features.dtype == torch.float64


@settings(max_examples=4)
@given(t=st.integers(0, 58), seed=st.integers(0, 1000))
def test_uploaded_features_of_row_t_read_no_later_bar(t: int, seed: int) -> None:
    """Prices and volumes after row ``t`` multiplied by random factors: rows ``0..t`` of the
    features are the same numbers (exact: the same computation on the same bars)."""
    panel = synthetic_panel(60, assets=3, seed=seed)
    rng = np.random.default_rng(seed)
    price, volume = np.ones((60, 3)), np.ones((60, 3))
    price[t + 1 :] = rng.uniform(0.5, 1.5, (59 - t, 3))  # one factor per bar: its OHLC stay ordered
    volume[t + 1 :] = rng.uniform(0.5, 1.5, (59 - t, 3))
    scaled = {k: getattr(panel, k) * price for k in ("open", "high", "low", "close")}
    other = dataclasses.replace(panel, volume=panel.volume * volume, **scaled)
    a, b = upload_panel(panel), upload_panel(other)
    assert torch.equal(a.features[: t + 1], b.features[: t + 1])  # exact: see the docstring
    if t + 1 >= 20:  # past the warm-up rows (zeros) the later rows do move
        assert not torch.equal(a.features[t + 1 :], b.features[t + 1 :])


def test_rows_are_views_with_their_offset() -> None:
    data = upload_panel(synthetic_panel(50, assets=2))
    part = data.rows(10, 30)
    assert len(part) == 20 and part.offset == 10 and part.rows(5, 7).offset == 15
    assert part.features.data_ptr() == data.features[10].data_ptr()  # a view, not a copy
    assert torch.equal(part.close, data.close[10:30]) and part.time[0] == data.time[10]  # exact: a view
    for start, stop in [(5, 5), (-1, 3), (0, 51), (30, 10)]:
        with pytest.raises(ValueError, match=rf"rows\({start}, {stop}\) is not a non-empty slice of 50 rows"):
            data.rows(start, stop)


def test_split_panel_periods_in_time_order_with_their_warm_up() -> None:
    data = upload_panel(synthetic_panel(200, assets=2))
    window = 8
    train, validation, test = split_panel(data, window, (0.6, 0.2, 0.2))
    assert (train.offset, len(train)) == (0, 120)
    assert (validation.offset, len(validation)) == (120 - window + 1, 40 + window - 1)
    assert (test.offset, len(test)) == (160 - window + 1, 40 + window - 1)
    # the first decision row (W - 1) of each later period is the first row after the one before
    assert validation.offset + window - 1 == len(train)
    assert test.offset + window - 1 == validation.offset + len(validation)
    assert test.offset + len(test) == len(data)
    times = [p.time[window - 1 :] for p in (train, validation, test)]
    assert all(a[-1] < b[0] for a, b in zip(times, times[1:], strict=False))  # in time order, no overlap
    assert torch.equal(test.close, data.close[test.offset :])  # exact: views


def test_split_panel_errors() -> None:
    data = upload_panel(synthetic_panel(40, assets=2))
    with pytest.raises(ValueError, match="window=0 must be >= 1"):
        split_panel(data, 0)
    for fractions in [(0.5, 0.5), (0.7, 0.2, 0.2), (0.8, 0.3, -0.1), (1.0, 0.0, 0.0)]:
        with pytest.raises(ValueError, match="must be three positive numbers summing to 1"):
            split_panel(data, 4, fractions)
    # 38 train rows, 1 validation row (+ 3 of warm-up), 1 test row
    with pytest.raises(
        ValueError, match="the validation period of 'synthetic' \\(40 rows.* has 4 rows with its"
    ):
        split_panel(data, 4, (0.95, 0.025, 0.025))
    with pytest.raises(ValueError, match="the train period .* fewer than window \\+ 1 = 31"):
        split_panel(data, 30)
