"""Every forecaster against the naive and seasonal naive forecasts on test series that can fail a
model (:mod:`tritonrl.toolkit.forecast.synthetic`): a level shift, a trend, a regime change of the
noise and two seasonalities (daily + weekly on hourly rows).

Each case trains one model through :func:`~tritonrl.toolkit.forecast.fit` with a fixed budget
(:data:`BUDGET`: 5 epochs of 64 windows, about 160 steps, W = 32, H = 8, on 3000 rows), seed 0
and one torch thread, and asserts its test MSE is below both baselines' (season 24, a day).
The sizes in :data:`SIZES` keep each case to a few seconds on one CPU thread; the measured MSEs
are in docs/pages/forecasting.md ("Test series").

Known failures are ``xfail(strict=True)`` with their measured cause, so a fix flips them to a
failure that says to remove the mark.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from forecast_model_checks import one_thread
from tritonrl.agents.forecast import FORECASTERS
from tritonrl.toolkit.forecast import FitConfig, fit, series_windows, synthetic_series

ROWS, WINDOW, HORIZON, SEASON = 3000, 32, 8, 24
BUDGET = FitConfig(
    epochs=5, batch_size=64, lr=3e-3, warmup_steps=20, patience=5, season=SEASON, log_every=1000
)
SIZES: dict[str, dict[str, int]] = {
    "dlinear": {},
    "mlp": {},
    "lstm": {"revin": True},
    "gru": {},
    "tcn": {"width": 16, "depth": 4},
    "transformer": {"width": 16, "depth": 2, "heads": 2, "revin": True},
    "patchtst": {"width": 16, "depth": 2, "heads": 2},
    "mamba2": {"width": 16, "depth": 1, "d_state": 8, "headdim": 8, "revin": True},
}
"""Each model's hyperparameters here (the rest default); every registered model is listed. The
recurrent models keep their 64 hidden units: with 32 the LSTM beat seasonal naive on ``shift`` by
1.5 % only, and the GRU lost on ``trend``. The LSTM, the Transformer and Mamba2 normalise each
window (``revin=True``, off by default): without it they lose to seasonal naive on ``trend``,
whose test split lies above the training range (test MSE 0.68 / 0.61 / 1.35 against 0.44); with
it they beat both baselines on all four kinds (docs/pages/forecasting.md, "Test series")."""
EPOCHS = {"dlinear": 10, "mlp": 10}
"""Models trained longer than :data:`BUDGET`'s 5 epochs (each case stays near a second): the MLP's
budget is what it lacked on ``trend`` (test MSE 0.453 against seasonal naive's 0.443 after 5
epochs, 0.378 after 10)."""
KINDS = ("shift", "step", "trend", "regime", "seasons")

KNOWN_FAILURES: dict[tuple[str, str], str] = {}
"""``(model, kind) -> cause`` of the cases marked xfail (strict)."""


def _cases() -> list:
    cases = []
    for model in SIZES:
        for kind in KINDS:
            reason = KNOWN_FAILURES.get((model, kind))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            cases.append(pytest.param(model, kind, marks=marks, id=f"{model}-{kind}"))
    return cases


def test_every_model_is_covered() -> None:
    assert set(SIZES) == set(FORECASTERS)


def train_on(model: str, kind: str) -> dict:
    """The ``fit`` report of ``model`` (:data:`SIZES`) trained with :data:`BUDGET` on ``kind``."""
    with one_thread():
        train, validation, test = series_windows(
            synthetic_series(kind, ROWS, seed=0), WINDOW, HORIZON, dtype=torch.float32
        )
        torch.manual_seed(0)
        net = FORECASTERS[model](WINDOW, 1, HORIZON, 1, dtype=torch.float32, **SIZES[model])
        epochs = EPOCHS.get(model, BUDGET.epochs)
        config = dataclasses.replace(BUDGET, epochs=epochs, patience=epochs)
        return fit(net, train, validation, test, config, tensorboard=False)


@pytest.mark.parametrize(("model", "kind"), _cases())
def test_beats_naive_and_seasonal_naive(model: str, kind: str) -> None:
    report = train_on(model, kind)["test"]
    mse, naive, seasonal = (report[k]["mse"] for k in ("model", "naive", "seasonal_naive"))
    assert mse < naive and mse < seasonal, f"{model} on {kind}: {mse:.4f} vs {naive:.4f}, {seasonal:.4f}"
