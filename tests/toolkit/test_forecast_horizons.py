"""Multi-horizon evaluation: the per-step metrics of :func:`evaluate_by_step` and
:func:`baselines_by_step` (their average is the overall metric; the naive forecast's per-step
errors match a hand computation), the steps a report shows, and ``tritonrl fit --horizon 96`` end
to end with its per-horizon table in ``fit_report.json`` and the printed report."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tritonrl.agents.forecast import MLP
from tritonrl.cli import main
from tritonrl.toolkit.forecast import (
    SeriesTable,
    baselines,
    baselines_by_step,
    evaluate,
    evaluate_by_step,
    horizon_steps,
    load_windows,
    series_windows,
    synthetic_series,
)


def test_horizon_steps() -> None:
    assert horizon_steps(96) == (1, 24, 48, 96)
    assert horizon_steps(10) == (1, 2, 5, 10)
    assert horizon_steps(4) == (1, 2, 4)
    assert horizon_steps(3) == (1, 3)
    assert horizon_steps(2) == (1, 2)
    assert horizon_steps(1) == (1,)
    with pytest.raises(ValueError, match="horizon must be >= 1, got 0"):
        horizon_steps(0)


@pytest.mark.parametrize("source", ["series", "market"])
def test_per_step_metrics_average_to_the_overall_ones(source: str) -> None:
    """Every step scores the same windows, so the overall mean is the mean of the per-step means
    (f64 sums of f32 terms, divided once: equal to ~1e-12 relative); and evaluate / baselines
    return exactly the overall part."""
    horizon = 12
    if source == "series":
        test = series_windows(synthetic_series("all", 600, seed=1), 16, horizon, dtype=torch.float32)[2]
        features = 1
    else:
        test = load_windows("synthetic,ar=0.4,bars=1200,seed=3", 16, horizon)[2]
        features = test.num_features
    torch.manual_seed(0)
    model = MLP(16, features, horizon, hidden=8, dtype=torch.float32)
    scored = {"model": evaluate_by_step(model, test, batch=37), **baselines_by_step(test, season=8)}
    for name, (overall, by_step) in scored.items():
        assert set(by_step) == set(overall)
        for key, steps in by_step.items():
            assert len(steps) == horizon
            assert float(np.mean(steps)) == pytest.approx(overall[key], rel=1e-12), (name, key)
    # the steps differ (so the average is a real check): the untrained model's errors, and on the
    # level series the naive one's, which grows with the step
    assert np.ptp(scored["model"][1]["mse"]) > 1e-3
    if source == "series":
        assert scored["naive"][1]["mse"][-1] > 2 * scored["naive"][1]["mse"][0]
    assert evaluate(model, test, batch=37) == scored["model"][0]
    assert baselines(test, season=8) == {k: v[0] for k, v in scored.items() if k != "model"}


def _tiny_table() -> SeriesTable:
    values = np.array([(i * i) % 11 + 0.5 * i for i in range(60)], dtype=np.float64)
    return SeriesTable(
        name="tiny",
        path=Path("tiny"),
        time_column="t",
        targets=("y",),
        features=(),
        ids=("",),
        starts=(0, 60),
        time=np.arange(60, dtype=np.int64),
        lines=np.arange(2, 62, dtype=np.int64),
        values=values[:, None],
    )


def test_naive_per_step_errors_match_a_hand_computation() -> None:
    """On a 60-row series (W = 3, H = 4): the naive forecast of step h misses ``y[t + h] - y[t]``
    for each test window ending at row t; MSE and MAE per step, normalised by the train std and
    in the file's units (f32 normalised values against f64 by hand: rel 1e-5)."""
    table = _tiny_table()
    test = series_windows(table, 3, 4, dtype=torch.float32)[2]
    y = table.values[:, 0]
    train_rows = y[: round(60 * 0.7)]
    std = train_rows.std()
    ends = test.rows.numpy()[test.ends.numpy()]  # the table row of each window's last value
    assert ends.tolist() == list(range(51, 56))  # test rows 49 .. 59: rows 49, 50 are warm-up
    err = np.stack([y[ends + h] - y[ends] for h in range(1, 5)], axis=1)  # [windows, H] file units
    overall, by_step = baselines_by_step(test, season=2)["naive"]
    for key, want in (
        ("mse", (err / std) ** 2),
        ("mae", np.abs(err / std)),
        ("mse_original", err**2),
        ("mae_original", np.abs(err)),
    ):
        assert by_step[key] == pytest.approx(want.mean(0).tolist(), rel=1e-5), key
        assert overall[key] == pytest.approx(want.mean(), rel=1e-5), key
    assert by_step["direction"] == [0.5] * 4


QUIET = ("--no-progress", "--no-tensorboard")


def test_cli_horizon_96_end_to_end(tmp_path: Path) -> None:
    run = tmp_path / "run"
    argv = "fit --model mlp --data series:synthetic,kind=all,n=800 --window 16 --horizon 96 --season 16"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*argv.split(), "--epochs", "1", "--run-dir", str(run), *QUIET])
    assert code == 0, err.getvalue()
    report = json.loads((run / "fit_report.json").read_text())
    assert report["meta"]["horizon"] == "96"
    horizons = report["horizons"]
    assert horizons["steps"] == [1, 24, 48, 96]
    keys = {"mse", "mae", "mse_original", "mae_original"}
    for split in ("validation", "test"):
        assert set(horizons[split]) == {"model", "naive", "seasonal_naive", "train_mean"}
        for name, by_step in horizons[split].items():
            assert set(by_step) == keys
            assert all(len(v) == 4 and np.isfinite(v).all() for v in by_step.values())
            # the overall keys are those of before (no per-step list mixed into them)
            assert set(report[split][name]) == keys | {"direction"}
    naive = horizons["test"]["naive"]["mse"]
    assert naive[-1] > naive[0]  # a 96-step-ahead no-change forecast is worse than a 1-step one
    text = out.getvalue()
    assert "test errors by horizon step" in text and "h=96" in text and "MSE units" in text
