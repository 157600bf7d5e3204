"""The synthetic test series (:mod:`tritonrl.toolkit.forecast.synthetic`): deterministic, each kind
holds its property (level shifts, a trend, a noise regime change, a weekly cycle beside the daily
one; ``all`` every one), the table goes through ``series_windows``, bad arguments are one-line
errors, and ``--data series:synthetic,...`` on the command line.

The kinds draw the same random numbers in the same order, so the difference of two kinds is the
difference of their extra components, exactly: that is how each property is isolated here.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tritonrl.cli import main
from tritonrl.toolkit.forecast import (
    SYNTHETIC_KINDS,
    baselines,
    parse_synthetic_spec,
    series_windows,
    synthetic_series,
    synthetic_values,
)

N = 3000


def _base(n: int = N, seed: int = 0) -> np.ndarray:
    """The daily cycle + AR(1) + noise std 0.2 every kind is built on (the trend kind less its trend)."""
    return synthetic_values("trend", n, seed) - 3.0 * np.arange(n) / n


def test_deterministic_and_seeded() -> None:
    for kind in SYNTHETIC_KINDS:
        a, b = synthetic_values(kind, 500, 3), synthetic_values(kind, 500, 3)
        assert a.dtype == np.float64 and a.shape == (500,) and np.isfinite(a).all()
        assert np.array_equal(a, b)
        assert not np.allclose(a, synthetic_values(kind, 500, 4))


def test_level_shifts() -> None:
    level = np.round(synthetic_values("shift", N) - _base(), 9)  # the piecewise-constant level
    assert set(level) <= {-1.5, 0.0, 1.5}
    jumps = np.flatnonzero(np.diff(level) != 0) + 1
    assert len(jumps) >= 4
    assert np.diff(np.concatenate([[0], jumps])).min() >= 150  # segments of 150 .. 449 rows (or merged)
    assert len(set(level[: int(0.7 * N)])) == 3  # the train split sees every level


def test_single_step() -> None:
    """One +2 shift half-way: inside the train rows (70 %), validation and test at the new level."""
    step = np.round(synthetic_values("step", N) - _base(), 9)
    assert set(step[: N // 2]) == {0.0} and set(step[N // 2 :]) == {2.0}
    assert N // 2 < int(0.7 * N)


def test_trend() -> None:
    y = synthetic_values("trend", N)
    trend = y - (synthetic_values("seasons", N) - 0.8 * np.sin(2 * np.pi * np.arange(N) / 168 + 0.3))
    assert np.allclose(trend, 3.0 * np.arange(N) / N)  # the trend kind less the base series
    # the test split lies above the training split on average (by about 3 * 0.5)
    assert y[int(0.85 * N) :].mean() - y[: int(0.7 * N)].mean() > 1.0


def test_noise_regime_change() -> None:
    noise = synthetic_values("regime", N) - _base()  # (std_t - 0.2) * w_t
    base_noise = _base() - synthetic_values("seasons", N) + 0.8 * np.sin(2 * np.pi * np.arange(N) / 168 + 0.3)
    assert np.allclose(base_noise, 0.0)  # trend less its trend == seasons less its weekly cycle
    blocks = noise[: N // 100 * 100].reshape(-1, 100).std(1)
    assert blocks.max() > 0.3 and blocks.min() < 0.2  # (0.6 - 0.2) w and (0.05 - 0.2) w segments
    y = synthetic_values("regime", N)
    diffs = np.diff(y)[: N // 100 * 100 - 100].reshape(-1, 100).std(1)
    assert diffs.max() > 2 * diffs.min()  # visible in the series itself


def test_two_seasonalities() -> None:
    weekly = synthetic_values("seasons", N) - _base()
    t = np.arange(N)
    assert np.allclose(weekly, 0.8 * np.sin(2 * np.pi * t / 168 + 0.3))
    y = synthetic_values("seasons", N)
    spectrum = np.abs(np.fft.rfft(y - y.mean()))
    freqs = np.fft.rfftfreq(N)
    top = set(np.round(1 / freqs[np.argsort(spectrum)[-2:]]).astype(int))
    assert top == {24, 167}  # the daily and the weekly peaks (168 on the FFT's grid of 3000 rows)


def test_all_has_every_component() -> None:
    t = np.arange(N)
    parts = (synthetic_values(k, N) - _base() for k in ("shift", "regime", "seasons"))
    rebuilt = _base() + sum(parts) + 3.0 * t / N
    assert np.allclose(synthetic_values("all", N), rebuilt)


def test_table_windows_and_learnable_signal() -> None:
    table = synthetic_series("seasons", 2000, seed=1)
    assert table.targets == ("y",) and table.ids == ("",) and len(table) == 2000
    train, _, test = series_windows(table, 48, 8, dtype=torch.float32)
    assert train.num_features == 1 and test.num_targets == 1
    b = baselines(test, season=24)
    # the series is far from the mean and from a no-change forecast 8 steps on
    assert b["naive"]["mse"] > 0.5 and b["train_mean"]["mse"] > 0.5


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown synthetic series kind 'wave'; choose one of shift"):
        synthetic_values("wave")
    with pytest.raises(ValueError, match="n must be an int >= 2, got 1"):
        synthetic_values("all", 1)
    with pytest.raises(ValueError, match="n must be at most 1,000,000 rows"):
        synthetic_values("all", 2_000_000)
    with pytest.raises(ValueError, match="seed must be a non-negative int, got -1"):
        synthetic_values("all", 100, -1)
    with pytest.raises(ValueError, match="unknown option 'rows=5'"):
        parse_synthetic_spec("series:synthetic,rows=5")
    with pytest.raises(ValueError, match="n='x' is not a valid int"):
        parse_synthetic_spec("series:synthetic,n=x")
    with pytest.raises(ValueError, match="unknown series source 'series:sine'"):
        parse_synthetic_spec("series:sine")
    assert parse_synthetic_spec("series:synthetic,kind=trend,n=300,seed=2").name == "synthetic-trend"


def _cli(argv: str, tmp: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    extra = ["--epochs", "1", "--run-dir", str(tmp / "run"), "--no-progress", "--no-tensorboard"]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*argv.split(), *extra])
    return code, out.getvalue(), err.getvalue()


def test_cli_series_synthetic(tmp_path: Path) -> None:
    argv = "fit --model dlinear --data series:synthetic,kind=shift,n=600 --window 24"
    code, out, err = _cli(argv, tmp_path)
    assert code == 0, err
    report = json.loads((tmp_path / "run" / "fit_report.json").read_text())
    assert report["target"] == "y" and report["meta"]["data_spec"] == "series:synthetic,kind=shift,n=600"
    for argv, message in (
        ("--data series:synthetic,kind=wave", "error: unknown synthetic series kind 'wave'"),
        ("--data series:synthetic --target load", "error: --target: --data series:synthetic is one series"),
        ("--data series:synthetic --features x", "error: --features: --data series:synthetic is one series"),
    ):
        code, _, err = _cli(f"fit --model dlinear {argv} --window 24", tmp_path / "bad")
        assert code == 2 and err.strip().splitlines() == [err.strip()] and err.startswith(message), err
        assert not (tmp_path / "bad").exists()
