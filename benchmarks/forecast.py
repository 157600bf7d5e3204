"""Forecasters on bar series, side by side with the baselines: training windows/s and test MSE.

For each series (synthetic bars with planted AR(1) returns, ``market:synthetic,ar=0.3``; the daily
GOOGL and hourly EUR/USD bars gym-anytrading ships, when it is installed) and each model
registered in ``tritonrl.agents.forecast.FORECASTERS`` (built with its default hyperparameters,
seed 0), :func:`tritonrl.toolkit.forecast.fit` trains on the first 70 % of the bars (next-bar log
return, window 32, batch 64, AdamW lr 1e-3 with a 100-step warm-up and a cosine decay, at most 20
epochs, early stopping after 4 epochs without a better validation MSE) and the table gives the
test-period MSE in units of the train split's target variance (``value``; 1 = that variance), with
the directional accuracy and the training throughput (training windows per second over the
optimizer steps alone, evaluation excluded) in the note. The three baselines of every report
(naive: a zero return; seasonal naive, 5 bars back; the training mean) are listed under each
series. Every MSE row of a series is measured on the same windows.

On real returns the baselines are hard to beat: next-bar returns of GOOGL and EUR/USD are close
to unpredictable, and a model whose MSE stays near the training mean's has learned nothing
usable. The synthetic series is where a model can show it learns (lag-1 autocorrelation 0.3:
the best forecast reaches about 0.91 of the variance).

Seen (one CPU thread, the eight models of main at their defaults): on the synthetic series the
recurrent, convolutional, Mamba2 and DLinear models reach 0.655-0.670 against 0.713 for the
training mean (about the 0.91 ratio the planted AR(1) allows), MLP 0.70, PatchTST 0.76; on GOOGL
only MLP and LSTM land at or just under the training mean (0.727 / 0.733 vs 0.734, within
noise) and the rest above it; on EUR/USD no model beats the training mean (0.637). Throughput:
DLinear and MLP about 90-100k windows/s, LSTM about 22k, GRU and TCN about 10k, Transformer
about 6.5k, PatchTST about 4.7k, Mamba2 (its torch scan on a CPU) about 3k (before the factored CPU scan).

Then the training step side by side (``train step W=96``): one optimizer step (batch 64, horizon
1, forward, MSE, backward, gradient clip, AdamW) of the LSTM (the baseline) and of the Mamba2
forecaster at their defaults on the same synthetic batch, in ms; ``ratio`` is the LSTM's step time
over the row's (the goal for Mamba2: >= 0.25, a step within 4x the LSTM's). Seen: see
docs/pages/forecasting.md, "Training speed".

torch runs one CPU thread (tritonrl.cli.bench). ``run(quick=True)``: the synthetic series
alone, 1,500 bars, window 16, 2 epochs; the step rows at window 16, shorter timing rounds.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
from typing import Any

import torch
from tritonrl.cli.bench import Row, format_table, one_cpu_thread, time_fn

NAME = "forecast"
SYNTHETIC = "synthetic,ar=0.3,seed=0"


def _series(quick: bool) -> list[tuple[str, str]]:
    if quick:
        return [("synthetic", SYNTHETIC + ",bars=1500")]
    out = [("synthetic", SYNTHETIC + ",bars=5000")]
    if importlib.util.find_spec("gym_anytrading") is not None:
        out += [("googl", "googl"), ("eurusd", "eurusd")]
    return out


def _run(quick: bool) -> list[Row]:
    from tritonrl.cli.registry import forecasters
    from tritonrl.toolkit.forecast import FitConfig, fit, load_windows

    window = 16 if quick else 32
    config = FitConfig(
        epochs=2 if quick else 20, batch_size=64, lr=1e-3, warmup_steps=100, patience=4, log_every=10**6
    )
    models = dict(sorted(forecasters().items()))
    rows: list[Row] = []
    skipped = [] if quick or importlib.util.find_spec("gym_anytrading") is not None else ["googl", "eurusd"]
    for label, spec in _series(quick):
        train, validation, test = load_windows(spec, window, 1)
        case = f"{label} W={window}"
        report: dict[str, Any] | None = None
        if not models:
            rows.append(Row(NAME, case, "(no forecaster registered)", float("nan"), "", None, ""))
        for name, cls in models.items():
            torch.manual_seed(0)
            model = cls(window, train.num_features, 1, 1)
            try:
                report = fit(model, train, validation, test, config, tensorboard=False)
            except Exception as exc:  # one model failing must not hide the others
                rows.append(Row(NAME, case, name, float("nan"), "", None, f"FAILED: {exc}"[:80]))
                continue
            m = report["test"]["model"]
            note = (
                f"{report['windows_per_s']:,.0f} windows/s, direction {m['direction']:.3f}, "
                f"{report['epochs']} epochs ({report['stopped']}, best {report['best_epoch']})"
            )
            rows.append(Row(NAME, case, name, m["mse"], "test MSE", None, note))
        base = report["test"] if report is not None else None
        if base is None:
            from tritonrl.toolkit.forecast import baselines

            base = baselines(test, season=config.season)
        for name in ("naive", "seasonal_naive", "train_mean"):
            m = base[name]
            rows.append(
                Row(
                    NAME,
                    case,
                    f"baseline: {name}",
                    m["mse"],
                    "test MSE",
                    None,
                    f"direction {m['direction']:.3f}",
                )
            )
    for label in skipped:
        rows.append(Row(NAME, label, "skipped", float("nan"), "", None, "gym-anytrading is not installed"))
    return rows


STEP_MODELS = ("lstm", "mamba2")  # the first is the baseline of the step rows
STEP_GOAL = 0.25  # the Mamba2 step within 4x the LSTM's


def _step_rows(quick: bool) -> list[Row]:
    """One training step (batch 64, horizon 1, forward + MSE + backward + clip + AdamW) of each of
    :data:`STEP_MODELS` on the same synthetic batch, timed in alternating rounds (the medians of
    three rounds' medians); ``ratio``: the LSTM's step time over this model's (``< 1``: slower)."""
    from tritonrl.agents.forecast import FORECASTERS
    from tritonrl.toolkit.forecast import load_windows
    from tritonrl.toolkit.optim import MasterWeightOptimizer

    window = 16 if quick else 96
    train, _, _ = load_windows(SYNTHETIC + ",bars=1500", window, 1)
    x, y = train.batch(torch.arange(64))
    steps = {}
    for name in STEP_MODELS:
        torch.manual_seed(0)
        model = FORECASTERS[name](window, train.num_features, 1, 1)
        opt = MasterWeightOptimizer(model.parameters(), torch.optim.AdamW, lr=1e-3, weight_decay=1e-2)

        def step(model=model, opt=opt) -> None:
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
            opt.zero_grad()
            loss.backward()
            opt.clip_grad_norm_(1.0)
            opt.step()

        steps[name] = step
    rounds: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(3):
        for name, step in steps.items():
            rounds[name].append(time_fn(step, min_time=0.05 if quick else 0.5)["median"])
    ms = {name: 1e3 * statistics.median(v) for name, v in rounds.items()}
    base = ms[STEP_MODELS[0]]
    case = f"train step W={window}"
    rows = []
    for name, t in ms.items():
        spread = f"rounds {1e3 * min(rounds[name]):.1f}-{1e3 * max(rounds[name]):.1f} ms"
        goal = f"; goal ratio >= {STEP_GOAL}" if name == "mamba2" else ""
        note = f"batch 64, F={train.num_features}, AdamW + clip; {spread}{goal}"
        rows.append(Row(NAME, case, name, t, "ms/step", base / t, note))
    return rows


def run(quick: bool = False) -> list[Row]:
    """One row per (series, model) and per (series, baseline), then the training-step rows; see
    the module docstring."""
    with one_cpu_thread():
        return _run(quick) + _step_rows(quick)


if __name__ == "__main__":
    print(format_table(run(quick="--quick" in sys.argv)))
