"""benchmarks/forecast_peers.py: its same-input windows, and its peer rows without NeuralForecast."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmark files live in the checkout, not in the wheel
peers = importlib.import_module("forecast_peers")


def test_y_only_windows_hold_the_normalised_target_and_keep_the_targets() -> None:
    from tritonrl.toolkit.forecast import load_windows

    splits = load_windows("synthetic,ar=0.3,seed=1,bars=600", 8, 1)
    for w in splits:
        y = peers._y_only(w)
        assert y.num_features == 1 and len(y) == len(w) and y.normalizer == splits[0].normalizer
        idx = torch.arange(len(w))
        x_y, t_y = y.batch(idx)
        _, t_w = w.batch(idx)
        assert torch.equal(t_y, t_w)  # the same targets, bit for bit
        # the input's last row is the target's row just before the forecast one: no look-ahead
        assert torch.equal(x_y[:, -1, 0].float(), w.y[w.ends[idx]])
        assert torch.equal(x_y[1:, -1, 0], t_y[:-1, 0, 0].to(x_y.dtype))


def test_peer_rows_skip_with_a_reason_without_neuralforecast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "neuralforecast", None)  # `import neuralforecast` raises
    rows = peers.run(quick=True)
    cases = [r.case for r in rows if r.impl == "baseline: naive"]
    assert cases == ["synthetic W=16", "load csv W=16"]  # a market series and the CSV series
    assert set(peers.MODELS) >= {"dlinear", "mlp", "lstm", "gru", "tcn", "patchtst"}
    for case in cases:
        mine = [r for r in rows if r.case == case]
        peer_rows = [r for r in mine if peers.PEER in r.impl]
        assert [r.impl for r in peer_rows] == [f"{m}: {peers.PEER}" for m in peers.MODELS]
        assert all(math.isnan(r.value) and r.note.startswith("skipped: neuralforecast") for r in peer_rows)
        ours = [r for r in mine if ": ours" in r.impl]
        # the market series: F features and y only per model; the CSV series holds y alone
        per_model = 2 if case.startswith("synthetic") else 1
        assert len(ours) == per_model * len(peers.MODELS) and all(math.isfinite(r.value) for r in ours)
        assert [r.impl for r in mine if r.impl.startswith("baseline")] == [
            "baseline: naive",
            "baseline: seasonal_naive",
            "baseline: train_mean",
        ]


def test_load_csv_reads_back_as_the_generated_series(tmp_path: Path) -> None:
    from tritonrl.toolkit.forecast import load_series, synthetic_values

    path = peers.write_load_csv(tmp_path / "load.csv", 300, seed=2)
    table = load_series(path, "y")
    assert table.targets == ("y",) and table.values.shape == (300, 1)
    # repr() round-trips every f64 exactly, and the times are hourly
    assert np.array_equal(
        table.values[:, 0], synthetic_values(peers.CSV_KIND, 300, 2, period=peers.CSV_PERIOD)
    )
    assert np.all(np.diff(table.time) == np.diff(table.time)[0]) and np.diff(table.time)[0] > 0


def test_whole_series_tiles_the_splits_of_both_kinds(tmp_path: Path) -> None:
    from tritonrl.toolkit.forecast import load_series, load_windows, series_windows

    market = load_windows("synthetic,ar=0.3,seed=1,bars=600", 8, 1)
    csv = series_windows(load_series(peers.write_load_csv(tmp_path / "s.csv", 400), "y"), 8, 1)
    for splits in (market, csv):
        y, b1 = peers._whole_series(splits)
        train, _, test = splits
        assert b1 == len(train.y) and y.shape[0] == b1 + (len(splits[1].y) - 7) + (len(test.y) - 7)
        # the last test targets are the series' last rows, bit for bit
        assert np.array_equal(y[-len(test) :], test.y.reshape(-1)[8:].double().numpy())
