"""Our DLinear and MLP beside NeuralForecast's, on the same series, window, target and test period.

For each series (synthetic bars with planted AR(1) returns; GOOGL and EUR/USD when gym-anytrading
is installed; the splits of ``benchmarks/forecast.py``: 70 / 15 / 15 % by time, window 32,
horizon 1, target the next-bar log return normalised with the TRAIN split's mean and std) and each
of ``dlinear`` and ``mlp``, three rows:

- ``ours (F features)``: :func:`tritonrl.toolkit.forecast.fit` on the model's usual input, the
  window of every feature column of :func:`~tritonrl.toolkit.envs.market.compute_features` (as in
  ``benchmarks/forecast.py``);
- ``ours (y only)``: the same trainer and model on the window of the normalised target alone (one
  feature), which is exactly what NeuralForecast's model sees;
- ``neuralforecast``: ``neuralforecast.models.DLinear`` / ``MLP`` fit on the same normalised
  series (``scaler_type="identity"``: no second scaling) and scored by a rolling one-step
  ``cross_validation`` (``use_fitted=True``: no refit) over the same test targets; the benchmark
  checks that its ``y`` column equals our test targets.

``value`` is the test MSE in units of the train split's target variance (1 = that variance; the
three baselines of ``benchmarks/forecast.py`` follow each series); the note gives training
throughput (windows per second over the optimizer steps alone: ours counts its steps, the peer's
is the sum of Lightning's ``on_train_batch_start .. on_train_batch_end``, which holds its window
sampling, forward, backward and optimizer step), steps, wall time of the whole fit (validation and
early stopping included) and directional accuracy. ``ratio`` is the peer's throughput over ours on
the same input (y only): ``> 1`` means the peer trains faster.

Matched on purpose: the series, window, horizon, target and its normalisation, train / validation /
test periods (NeuralForecast's validation holds one more target, the row at each boundary our
splits leave out), MSE loss, learning rate 1e-3 with our warm-up + cosine schedule
(``lr_scheduler=LambdaLR`` over :func:`~tritonrl.toolkit.forecast.lr_at`), AdamW with weight
decay 1e-2, gradient-norm clip 1.0, 64 windows per step, the same step budget (20 epochs of ours)
with a validation check each of our epochs and patience 4 checks, seed 0, one torch thread, the
model sizes (DLinear moving average 25; MLP 2 hidden layers of 128).

Different, and left so (each is how the library works):

- windows per step: ours shuffles the training windows each epoch (each seen once per epoch);
  NeuralForecast samples 64 windows at random at every step;
- early stopping: ours restores the best validation weights for the test; NeuralForecast
  (Lightning's ``EarlyStopping``) stops and keeps the last weights;
- the MLP's activation: GELU (ours), ReLU (NeuralForecast);
- inputs: NeuralForecast's DLinear takes no exogenous columns, so the peer rows see the target
  history only; compare them with ``ours (y only)``, and ``ours (F features)`` says what the
  features add.

Seen (neuralforecast 3.3.0, pytorch-lightning 2.6.6, torch 2.13.0, one CPU thread of a shared
two-core machine, three runs: every MSE repeated exactly, throughputs in ranges). Test MSE, ours
(y only) / NeuralForecast / ours (F features), beside the training mean:

- DLinear: synthetic 0.645 / 0.644 / 0.663 (train mean 0.713); GOOGL 0.736 / 0.754 / 0.791
  (0.734); EUR/USD 0.636 / 0.637 / 0.644 (0.637). The same model on the same input lands within
  0.002 of ours on the synthetic and EUR/USD series; on GOOGL neither beats the training mean.
- MLP: synthetic 0.654 / 0.685 / 0.702; GOOGL 0.737 / 0.799 / 0.727; EUR/USD 0.636 / 0.681 /
  0.638. The peer's MLP stopped early on all three, and the likely cause of the gap is that it
  keeps the weights of its last check where ours restores the best (on GOOGL both stop after 5
  checks, ours with check 1's weights); not isolated further (its window sampling differs too).
- Throughput: ours 79-104k windows/s (DLinear, y only) and 48-110k (MLP), NeuralForecast 27-33k
  and 16-27k: the ``ratio`` column ran 0.23-0.48x. At these sizes (a few thousand parameters) a
  step is per-step overhead on both sides (about 0.6-1.3 ms ours, 2-4 ms in the peer's Lightning
  loop), not arithmetic; whole fits took 0.1-1 s (ours) and 0.4-2.4 s (the peer's, its validation
  checks included).
- Our F-feature input does not help DLinear (worse on all three series) and helps the MLP only on
  GOOGL, within noise of the training mean.

The peer rows are skipped with one line each when ``neuralforecast`` (or its
``pytorch_lightning``) does not import, so a checkout without it (CI, a bare machine) still runs
our rows. It is in the ``bench`` extra; install it in its own environment (it pulls Lightning, ray
and torchmetrics): ``python3 -m venv /tmp/nf && /tmp/nf/bin/pip install torch==2.13.0 &&
/tmp/nf/bin/pip install neuralforecast numpy safetensors gymnasium gym-anytrading`` and run
``PYTHONPATH=. /tmp/nf/bin/python -m tritonrl.toolkit bench forecast_peers``.
``run(quick=True)``: the synthetic series alone, 1,500 bars, window 16, 2 epochs.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import math
import sys
import time
import warnings
from typing import Any

import torch
from tritonrl.toolkit.cli.bench import Row, format_table, one_cpu_thread

NAME = "forecast_peers"
SYNTHETIC = "synthetic,ar=0.3,seed=0"
MODELS = ("dlinear", "mlp")
PATIENCE = 4
PEER = "neuralforecast"


def _series(quick: bool) -> list[tuple[str, str]]:
    if quick:
        return [("synthetic", SYNTHETIC + ",bars=1500")]
    out = [("synthetic", SYNTHETIC + ",bars=5000")]
    if importlib.util.find_spec("gym_anytrading") is not None:
        out += [("googl", "googl"), ("eurusd", "eurusd")]
    return out


def _peer_missing() -> str | None:
    """Why the peer rows cannot run here, or ``None``."""
    for name in ("neuralforecast", "pytorch_lightning", "pandas"):
        try:
            importlib.import_module(name)
        except Exception as exc:  # a broken install counts as missing, with its reason
            return f"{name} does not import ({type(exc).__name__}: {exc})"[:90]
    return None


def _y_only(w: Any) -> Any:
    """``w``'s windows with the normalised target as the one input feature (``[T, 1]``, f32 cast to
    the features' dtype), the same targets and the train split's normalizer."""
    from tritonrl.toolkit.forecast import WindowData

    part = dataclasses.replace(w.data, features=w.y[:, None].to(w.dtype), feature_names=("y",))
    return WindowData(
        part,
        w.window,
        w.horizon,
        target=w.target,
        values=w.values,
        normalizer=w.normalizer,
        split=w.split,
        target_channels=(0,),
    )


def _ours(name: str, cls: type, splits: tuple[Any, Any, Any], config: Any) -> dict[str, Any]:
    from tritonrl.toolkit.forecast import fit

    train, validation, test = splits
    torch.manual_seed(config.seed)
    model = cls(train.window, train.num_features, 1, 1)
    t0 = time.perf_counter()
    report = fit(model, train, validation, test, config, tensorboard=False)
    m = report["test"]["model"]
    return {
        "mse": m["mse"],
        "direction": m["direction"],
        "windows_per_s": report["windows_per_s"],
        "wall_s": time.perf_counter() - t0,
        "steps": report["global_step"],
        "stopped": f"{report['stopped']}, best epoch {report['best_epoch']}",
        "report": report,
    }


def _peer(name: str, splits: tuple[Any, Any, Any], config: Any) -> dict[str, Any]:
    """Fit NeuralForecast's ``name`` on the normalised series of ``splits``; score the test targets."""
    import numpy as np
    import pandas as pd
    from neuralforecast import NeuralForecast

    for logger_name in ("pytorch_lightning", "lightning_fabric", "lightning", "neuralforecast"):
        logging.getLogger(logger_name).setLevel(logging.ERROR)
    train, validation, test = splits
    window = train.window
    # the whole normalised series, global rows 0 .. T-1, from the three splits' rows
    y = torch.cat([train.y, validation.y[window - 1 :], test.y[window - 1 :]]).double().cpu().numpy()
    b1 = len(train.data)
    total = test.data.offset + len(test.data)
    if y.shape[0] != total or validation.data.offset + window - 1 != b1:
        raise RuntimeError(f"the splits do not tile the series ({y.shape[0]} rows, expected {total})")
    test_size = len(test)  # test targets: rows T - test_size .. T - 1, ours and theirs
    val_size = total - test_size - b1  # training targets: rows < b1, as ours
    model, timer_cls = _peer_model(name, train, config)
    df = pd.DataFrame({"unique_id": "s", "ds": np.arange(total, dtype=np.int64), "y": y})
    nf = NeuralForecast(models=[model], freq=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        nf.fit(df.iloc[: total - test_size], val_size=val_size)
        wall = time.perf_counter() - t0
        # NeuralForecast fits deep copies of the models it is given: read the copy's timer
        fitted = nf.models[0]
        timer = next(cb for cb in fitted.trainer_kwargs["callbacks"] if isinstance(cb, timer_cls))
        cv = nf.cross_validation(
            df=df, n_windows=None, test_size=test_size, step_size=1, use_fitted=True, refit=False
        )
    if torch.get_num_threads() != 1:
        raise RuntimeError(f"NeuralForecast changed torch's thread count to {torch.get_num_threads()}")
    mse, direction = _peer_scores(cv, type(model).__name__, train, test)
    return {
        "mse": mse,
        "direction": direction,
        "windows_per_s": timer.batches * config.batch_size / timer.seconds,
        "wall_s": wall,
        "steps": timer.steps,
        "stopped": "early" if timer.early else "max_steps",
    }


def _peer_model(name: str, train: Any, config: Any) -> tuple[Any, type]:
    """NeuralForecast's model ``name`` set up as ``config`` trains ours (steps, learning-rate
    schedule, optimizer, clipping, early stopping on the validation split), with a callback that
    times its training batches; the model and the callback's class."""
    import pytorch_lightning as pl
    from neuralforecast.losses.pytorch import MSE
    from neuralforecast.models import MLP, DLinear
    from tritonrl.toolkit.forecast import lr_at

    class BatchTimer(pl.Callback):
        def __init__(self) -> None:
            self.seconds, self.batches, self._t0 = 0.0, 0, 0.0
            self.steps, self.early = 0, False

        def on_train_batch_start(self, *args: Any) -> None:
            self._t0 = time.perf_counter()

        def on_train_batch_end(self, *args: Any) -> None:
            self.seconds += time.perf_counter() - self._t0
            self.batches += 1

        def on_train_end(self, trainer: Any, module: Any) -> None:
            self.steps = int(trainer.global_step)
            stop = trainer.early_stopping_callback
            self.early = stop is not None and stop.stopped_epoch > 0

    steps_per_epoch = math.ceil(len(train) / config.batch_size)
    max_steps = config.epochs * steps_per_epoch
    common = dict(
        h=1,
        input_size=train.window,
        loss=MSE(),
        valid_loss=MSE(),
        max_steps=max_steps,
        learning_rate=config.lr,
        val_check_steps=steps_per_epoch,
        early_stop_patience_steps=PATIENCE,
        batch_size=1,
        windows_batch_size=config.batch_size,
        inference_windows_batch_size=1024,
        scaler_type="identity",
        random_seed=config.seed,
        optimizer=torch.optim.AdamW,
        optimizer_kwargs={"weight_decay": config.weight_decay},
        lr_scheduler=torch.optim.lr_scheduler.LambdaLR,
        lr_scheduler_kwargs={"lr_lambda": lambda s: lr_at(config, s, max_steps) / config.lr},
        gradient_clip_val=config.grad_clip,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        callbacks=[BatchTimer()],
    )
    if name == "dlinear":
        return DLinear(moving_avg_window=25, **common), BatchTimer
    if name == "mlp":
        return MLP(num_layers=2, hidden_size=128, **common), BatchTimer
    raise ValueError(f"no NeuralForecast peer for {name!r}")


def _peer_scores(cv: Any, column: str, train: Any, test: Any) -> tuple[float, float]:
    """The peer's test MSE and direction accuracy from its cross-validation frame ``cv`` (predictions
    in ``column``), after checking that its targets are ours.

    Raises:
        RuntimeError: the peer scored other targets than ours.
    """
    import numpy as np

    cv = cv.sort_values("ds")
    pred = cv[column].to_numpy(np.float64)
    truth = cv["y"].to_numpy(np.float64)
    ours = test.y[train.window :].double().cpu().numpy()  # test targets, rows window .. of the test split
    if pred.shape != ours.shape or not np.allclose(truth, ours, atol=1e-6):
        raise RuntimeError("NeuralForecast's test targets are not ours: the comparison would be void")
    ref = -train.normalizer.mean / train.normalizer.std  # a zero return, normalised
    hit = 0.5 * (1.0 + np.sign(pred - ref) * np.sign(truth - ref))
    return float(np.mean((pred - truth) ** 2)), float(hit.mean())


def _note(r: dict[str, Any]) -> str:
    return (
        f"{r['windows_per_s']:,.0f} windows/s, {r['steps']} steps ({r['stopped']}), "
        f"fit {r['wall_s']:.1f} s, direction {r['direction']:.3f}"
    )


def _run(quick: bool) -> list[Row]:
    from tritonrl.toolkit.cli.registry import forecasters
    from tritonrl.toolkit.forecast import FitConfig, load_windows

    window = 16 if quick else 32
    config = FitConfig(
        epochs=2 if quick else 20,
        batch_size=64,
        lr=1e-3,
        warmup_steps=100,
        patience=PATIENCE,
        log_every=10**6,
    )
    registry = forecasters()
    why_not = _peer_missing()
    rows: list[Row] = []
    for label, spec in _series(quick):
        full = load_windows(spec, window, 1)
        y_only = tuple(_y_only(w) for w in full)
        case = f"{label} W={window}"
        report = None
        for name in MODELS:
            ours_full = _ours(name, registry[name], full, config)
            ours_y = _ours(name, registry[name], y_only, config)
            report = ours_full["report"]
            rows.append(
                Row(
                    NAME,
                    case,
                    f"{name}: ours (F={full[0].num_features} features)",
                    ours_full["mse"],
                    "test MSE",
                    None,
                    _note(ours_full),
                )
            )
            rows.append(
                Row(NAME, case, f"{name}: ours (y only)", ours_y["mse"], "test MSE", None, _note(ours_y))
            )
            if why_not is not None:
                rows.append(Row(NAME, case, f"{name}: {PEER}", float("nan"), "", None, f"skipped: {why_not}"))
                continue
            try:
                peer = _peer(name, y_only, config)
            except Exception as exc:  # a broken peer must not hide our rows
                rows.append(Row(NAME, case, f"{name}: {PEER}", float("nan"), "", None, f"FAILED: {exc}"[:90]))
                continue
            ratio = peer["windows_per_s"] / ours_y["windows_per_s"]
            rows.append(
                Row(NAME, case, f"{name}: {PEER} (y only)", peer["mse"], "test MSE", ratio, _note(peer))
            )
        assert report is not None
        for base in ("naive", "seasonal_naive", "train_mean"):
            m = report["test"][base]
            rows.append(
                Row(
                    NAME,
                    case,
                    f"baseline: {base}",
                    m["mse"],
                    "test MSE",
                    None,
                    f"direction {m['direction']:.3f}",
                )
            )
    if not quick and importlib.util.find_spec("gym_anytrading") is None:
        rows.append(
            Row(NAME, "googl, eurusd", "skipped", float("nan"), "", None, "gym-anytrading is not installed")
        )
    return rows


def run(quick: bool = False) -> list[Row]:
    """Three rows per (series, model) and the baselines per series; see the module docstring."""
    with one_cpu_thread():
        return _run(quick)


if __name__ == "__main__":
    print(format_table(run(quick="--quick" in sys.argv)))
