"""benchmarks/forecast_peers.py: its same-input windows, and its peer rows without NeuralForecast."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

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
    peer_rows = [r for r in rows if peers.PEER in r.impl]
    assert [r.impl for r in peer_rows] == [f"{m}: {peers.PEER}" for m in peers.MODELS]
    assert all(math.isnan(r.value) and r.note.startswith("skipped: neuralforecast") for r in peer_rows)
    ours = [r for r in rows if ": ours" in r.impl]
    assert len(ours) == 2 * len(peers.MODELS) and all(math.isfinite(r.value) for r in ours)
    assert [r.impl for r in rows if r.impl.startswith("baseline")] == [
        "baseline: naive",
        "baseline: seasonal_naive",
        "baseline: train_mean",
    ]
