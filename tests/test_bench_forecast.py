"""benchmarks/forecast.py: the training-step rows (LSTM baseline, Mamba2 beside it, one thread)."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmark files live in the checkout, not in the wheel
forecast = importlib.import_module("forecast")


def test_step_rows_time_each_model_against_the_lstm() -> None:
    threads = torch.get_num_threads()
    rows = forecast._step_rows(quick=True)
    assert torch.get_num_threads() == threads
    assert [r.impl for r in rows] == list(forecast.STEP_MODELS)
    assert all(r.case == "train step W=16" and r.unit == "ms/step" for r in rows)
    assert all(math.isfinite(r.value) and r.value > 0 for r in rows)
    lstm, mamba = rows
    assert lstm.ratio == 1.0 and math.isclose(mamba.ratio, lstm.value / mamba.value)
    assert "goal ratio >= 0.25" in mamba.note and "goal" not in lstm.note
