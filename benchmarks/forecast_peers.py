"""Our forecasters beside NeuralForecast's, on the same series, window, target and test period.

Every model both libraries have: DLinear, MLP, LSTM, GRU, TCN and PatchTST (:data:`MODELS`).
Series: synthetic bars with planted AR(1) returns, and GOOGL and EUR/USD when gym-anytrading is
installed (the splits of ``benchmarks/forecast.py``: 70 / 15 / 15 % by time, window 32, horizon
1, target the next-bar log return normalised with the TRAIN split's mean and std); and a plain
CSV series, ``load csv``: 5,000 hourly rows of the load-like
:func:`~tritonrl.toolkit.forecast.synthetic_values` series (kind ``seasons``: a daily and a
weekly cycle, AR(1), noise), written to a CSV file at run time (:func:`write_load_csv`: columns
``ds``, ``y``, no download) and read back by :func:`~tritonrl.toolkit.forecast.load_series` and
:func:`~tritonrl.toolkit.forecast.series_windows` as ``--data csv=PATH`` reads it (window 48,
target ``y`` normalised with the train rows' mean and std, the same 70 / 15 / 15 % splits). Per
series and model:

- ``ours (F features)`` (market series only): :func:`tritonrl.toolkit.forecast.fit` on the model's
  usual input, the window of every feature column of
  :func:`~tritonrl.toolkit.bars.compute_features` (as in ``benchmarks/forecast.py``);
- ``ours (y only)``: the same trainer and model on the window of the normalised target alone (one
  feature), which is exactly what NeuralForecast's model sees (on the CSV series, the only input);
- ``neuralforecast``: ``neuralforecast.models.<Model>`` fit on the same normalised series
  (``scaler_type="identity"``: no second scaling) and scored by a rolling one-step
  ``cross_validation`` (``use_fitted=True``: no refit) over the same test targets; the benchmark
  checks that its ``y`` column equals our test targets.

``value`` is the test MSE in units of the train split's target variance (1 = that variance; the
three baselines of ``benchmarks/forecast.py`` follow each series); the note gives training
throughput (windows per second over the optimizer steps alone: ours counts its steps, the peer's
is the sum of Lightning's ``on_train_batch_start .. on_train_batch_end``, which holds its window
sampling, forward, backward and optimizer step), steps, wall time of the whole fit (validation and
early stopping included) and directional accuracy. ``ratio`` is the peer's throughput over ours on
the same input (y only): ``> 1`` means the peer trains faster, ``<= 0.5`` is ours at twice theirs.

Matched on purpose: the series, window, horizon, target and its normalisation, train / validation /
test periods (NeuralForecast's validation holds one more target, the row at each boundary our
splits leave out), MSE loss, learning rate 1e-3 with our warm-up + cosine schedule
(``lr_scheduler=LambdaLR`` over :func:`~tritonrl.toolkit.forecast.lr_at`), AdamW with weight
decay 1e-2, gradient-norm clip 1.0, 64 windows per step, the same step budget (20 epochs of ours)
with a validation check each of our epochs and patience 4 checks, seed 0, one torch thread, and
the model sizes (:data:`OURS`; the peer's set in :func:`_peer_model`):

- DLinear: moving average 25;
- MLP: 2 hidden layers of 128;
- LSTM, GRU: one ``torch.nn`` recurrent layer of 64 (``encoder_n_layers=1``,
  ``encoder_hidden_size=64``), a linear head (``decoder_layers=1``), no dropout;
- TCN: 32 channels, kernel 3, receptive field 61 steps: ours 4 residual blocks of two causal
  convolutions (dilations 1, 2, 4, 8), the peer's 8 causal convolutions (``dilations=[1, 1, 2, 2,
  4, 4, 8, 8]``, ``encoder_hidden_size=32``), a linear head (``decoder_layers=1``);
- PatchTST: patches of 8 every 4 steps, width 32, 2 encoder layers of 4 heads, feed-forward 64
  with ReLU, learned positions, a flatten head, RevIN by each window's mean and std (not affine,
  ``revin_subtract_last=False``), no dropout (``dropout``, ``fc_dropout``, ``head_dropout``,
  ``attn_dropout`` 0), plain attention (``res_attention=False``).

Different, and left so (each is how the library works):

- windows per step: ours shuffles the training windows each epoch (each seen once per epoch);
  NeuralForecast samples 64 windows at random at every step;
- early stopping: ours restores the best validation weights for the test; NeuralForecast
  (Lightning's ``EarlyStopping``) stops and keeps the last weights;
- the MLP's activation: GELU (ours), ReLU (NeuralForecast);
- TCN: ours adds a residual connection around each pair of convolutions and reads the last
  step's encoding; the peer's has no residuals and maps the whole encoded window to the forecast
  with a learned ``Linear(window, h)`` over time (its ``context_adapter``) before the head;
- PatchTST: ours is pre-norm with RMSNorm; the peer's is post-norm with BatchNorm (fixed in the
  library) and pads the series' end by one stride for one more patch (8 patches of window 32
  against our 7);
- LSTM, GRU: the same ``torch.nn`` layers and head; what differs is the trainer's (the window
  sampling and the early-stopping weights above);
- inputs: NeuralForecast's models here take the target history only (DLinear takes no exogenous
  columns at all); compare them with ``ours (y only)``, and ``ours (F features)`` says what the
  features add.

Seen (neuralforecast 3.3.0, pytorch-lightning 2.6.6, torch 2.13.0, one torch thread on an
"Intel(R) Xeon(R) Processor" of a two-core machine shared with other workers; three runs, the
second and third side by side: every MSE repeated exactly, throughputs in ranges, pairwise per
run). Test MSE ours (y only) / NeuralForecast, and our windows/s over theirs:

============  ===============  ===============  ===============  ===============
model         synthetic        GOOGL            EUR/USD          load csv
============  ===============  ===============  ===============  ===============
dlinear       0.642 / 0.642    0.737 / 0.753    0.639 / 0.641    0.132 / 0.128
              2.3-3.5x         2.2-3.9x         3.3-4.2x         1.8-4.8x
mlp           0.677 / 0.693    0.736 / 0.795    0.640 / 0.687    0.127 / 0.131
              2.8-3.6x         2.6-4.9x         2.8-6.2x         2.0-3.0x
lstm          0.634 / 0.635    0.734 / 0.734    0.641 / 0.641    0.122 / 0.124
              1.2-1.7x         0.8-1.7x         0.9-1.7x         1.2-1.5x
gru           0.632 / 0.635    0.733 / 0.735    0.644 / 0.642    0.149 / 0.147
              1.2-1.4x         1.3x             1.0-2.2x         1.0-1.4x
tcn           0.641 / 0.727    0.751 / 0.821    0.647 / 0.648    0.126 / 0.133
              0.8-1.1x         1.0-1.6x         0.6-1.3x         0.8-1.8x
patchtst      0.662 / 0.716    0.787 / 0.816    0.667 / 0.682    0.131 / 0.134
              1.3-2.0x         1.6-1.9x         1.4-3.2x         1.0-1.6x
============  ===============  ===============  ===============  ===============

- MSE: every shared model is within 5 % of the peer's or better on every series; the worst are
  DLinear on the load CSV (2.7 % above) and GRU on it and on EUR/USD (1.2 %, 0.4 % above). The
  LSTM and GRU (the same ``torch.nn`` layers and head on both sides) land within 1.5 % of each
  other everywhere; ours is clearly better for the MLP (which keeps its best weights where the
  peer keeps its last), the TCN on synthetic and GOOGL and PatchTST on synthetic. On the market
  series nothing beats the training mean by more than a few per cent (on GOOGL by 0.2 % at
  most); on the load CSV every model beats the naive forecast (0.177) by 16-31 %.
- Throughput: ours is at least 2x the peer's for DLinear and MLP (but the low ends on the load
  CSV, 1.8x and 2.0x, ran in the loaded runs); 0.6-3.2x for the LSTM, GRU, TCN and PatchTST,
  mostly 1-1.7x (PatchTST on EUR/USD the one run above 2x).
  Throughputs varied up to 2-3x between runs with the machine's load (ours on DLinear: 14-61k
  windows/s), so the ratios, measured in the same run, are what to compare.
- Why the four miss 2x (torch.profiler over a 2-epoch fit on the synthetic series, y only, one
  thread): the LSTM spends 76 % of its time in oneDNN's LSTM layer forward and backward
  (``mkldnn_rnn_layer``), the kernel the peer's ``nn.LSTM`` calls too; the GRU has no oneDNN path
  on CPU, so torch unrolls it into small matrix products, ``cat`` and pointwise ops at each step
  of the window, again the same for both; the TCN spends 60 % in
  oneDNN convolution forward and backward and 10 % in the causal left padding
  (``constant_pad_nd``); PatchTST 30 % in ``scaled_dot_product_attention`` forward and backward and
  23 % in AdamW's step (the for-loop implementation over 26 small tensors: ``fused=True`` steps
  the same parameters in a fifth of the time, about 1.3 ms of a 15 ms step, not changed here). In
  all four the arithmetic kernels are torch's and shared with the peer, so what is left to win is
  the peer's per-step overhead (Lightning's loop, its window sampling), a few ms a step, which is
  most of a DLinear or MLP step but a fraction of these.
- Our F-feature input helps only the MLP (on all three market series, by 1.3 % at most) and the
  LSTM on GOOGL; elsewhere it is worse, by up to 8.6 % (DLinear on GOOGL).

The peer rows are skipped with one line each when ``neuralforecast`` (or its
``pytorch_lightning``) does not import, so a checkout without it (CI, a bare machine) still runs
our rows. It is in the ``bench`` extra; install it in its own environment (it pulls Lightning, ray
and torchmetrics): ``python3 -m venv /tmp/nf && /tmp/nf/bin/pip install torch==2.13.0 &&
/tmp/nf/bin/pip install torch==2.13.0 neuralforecast numpy safetensors gymnasium gym-anytrading``
(the torch pin keeps pip from replacing torch with a multi-GB CUDA build) and run
``OMP_NUM_THREADS=1 PYTHONPATH=. /tmp/nf/bin/python -m tritonrl bench forecast_peers``
(about 8 minutes on one thread). ``run(quick=True)``: the synthetic series of 1,500 bars and the
load CSV of 800 rows, window 16, 2 epochs.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.util
import logging
import math
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import torch
from tritonrl.cli.bench import Row, format_table, one_cpu_thread

NAME = "forecast_peers"
SYNTHETIC = "synthetic,ar=0.3,seed=0"
MODELS = ("dlinear", "mlp", "lstm", "gru", "tcn", "patchtst")
OURS: dict[str, dict[str, Any]] = {
    "dlinear": {"kernel_size": 25},
    "mlp": {"hidden": 128, "layers": 2},
    "lstm": {"hidden": 64, "layers": 1},
    "gru": {"hidden": 64, "layers": 1},
    "tcn": {"width": 32, "depth": 4, "kernel_size": 3},
    "patchtst": {"patch_len": 8, "stride": 4, "width": 32, "depth": 2, "heads": 4},
}
"""Our model sizes (each model's defaults, spelled out); the peer's are set to match in
:func:`_peer_model`."""
PATIENCE = 4
PEER = "neuralforecast"
CSV_KIND, CSV_PERIOD = "seasons", 24
"""The CSV series: :func:`~tritonrl.toolkit.forecast.synthetic_values` of this kind (an hourly
load-like series: a daily and a weekly cycle, AR(1) and noise), written to a CSV file and read back
with :func:`~tritonrl.toolkit.forecast.load_series`."""


class Case(NamedTuple):
    """One series of the benchmark: ``kind`` ``"market"`` (a ``market:`` spec, the next-bar log
    return as target) or ``"csv"`` (``rows`` rows of the load-like series, target ``y``)."""

    label: str
    kind: str
    spec: str
    window: int
    rows: int = 0


def _cases(quick: bool) -> list[Case]:
    if quick:
        return [
            Case("synthetic", "market", SYNTHETIC + ",bars=1500", 16),
            Case("load csv", "csv", "", 16, 800),
        ]
    out = [Case("synthetic", "market", SYNTHETIC + ",bars=5000", 32)]
    if importlib.util.find_spec("gym_anytrading") is not None:
        out += [Case("googl", "market", "googl", 32), Case("eurusd", "market", "eurusd", 32)]
    return out + [Case("load csv", "csv", "", 48, 5000)]


def write_load_csv(path: Path, rows: int, seed: int = 0) -> Path:
    """Write ``rows`` hourly rows of the load-like series (columns ``ds``, ISO times, and ``y``) to
    ``path``; the file is what ``--data csv=PATH`` reads. Returns ``path``."""
    from tritonrl.toolkit.forecast import synthetic_values

    y = synthetic_values(CSV_KIND, rows, seed, period=CSV_PERIOD)
    t0 = datetime.datetime(2020, 1, 1)
    with path.open("w", encoding="utf-8") as f:
        f.write("ds,y\n")
        for i, v in enumerate(y.tolist()):
            f.write(f"{(t0 + datetime.timedelta(hours=i)).isoformat()},{v!r}\n")
    return path


def _windows(case: Case, tmp: Path) -> tuple[Any, Any, Any]:
    from tritonrl.toolkit.forecast import load_series, load_windows, series_windows

    if case.kind == "market":
        return load_windows(case.spec, case.window, 1)
    path = write_load_csv(tmp / "load.csv", case.rows)
    return series_windows(load_series(path, "y"), case.window, 1)


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
    model = cls(train.window, train.num_features, 1, 1, target_channels=train.target_channels, **OURS[name])
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


def _rows(w: Any) -> torch.Tensor:
    """The rows of the whole series that split ``w`` holds, ``[N]`` int64."""
    if hasattr(w, "rows"):  # SeriesWindows
        return w.rows.cpu()
    return torch.arange(w.data.offset, w.data.offset + len(w.data))


def _whole_series(splits: tuple[Any, Any, Any]) -> tuple[Any, int]:
    """The normalised target of the whole (single) series, ``[T]`` f64 NumPy, from the three
    splits' rows (validation and test repeat the ``window - 1`` rows before their boundary), and
    ``b1``, the train split's rows.

    Raises:
        RuntimeError: the splits do not tile one series.
    """
    train, validation, test = splits
    w = train.window
    y = torch.cat([train.y, validation.y[w - 1 :], test.y[w - 1 :]]).reshape(-1)
    rows = torch.cat([_rows(train), _rows(validation)[w - 1 :], _rows(test)[w - 1 :]])
    if rows.shape != y.shape or not torch.equal(rows, torch.arange(y.shape[0])):
        raise RuntimeError(f"the splits do not tile one series ({y.shape[0]} rows)")
    return y.double().cpu().numpy(), len(train.y)


def _peer(name: str, splits: tuple[Any, Any, Any], config: Any) -> dict[str, Any]:
    """Fit NeuralForecast's ``name`` on the normalised series of ``splits``; score the test targets."""
    import numpy as np
    import pandas as pd
    from neuralforecast import NeuralForecast

    for logger_name in ("pytorch_lightning", "lightning_fabric", "lightning", "neuralforecast"):
        logging.getLogger(logger_name).setLevel(logging.ERROR)
    train, validation, test = splits
    y, b1 = _whole_series(splits)
    total = y.shape[0]
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
    from neuralforecast.models import GRU, LSTM, MLP, TCN, DLinear, PatchTST
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
    if name in ("lstm", "gru"):  # one recurrent layer of 64, a linear head (decoder_layers=1)
        cls = LSTM if name == "lstm" else GRU
        return cls(encoder_n_layers=1, encoder_hidden_size=64, decoder_layers=1, **common), BatchTimer
    if name == "tcn":  # ours: 4 residual blocks of two convolutions, dilations 1, 2, 4, 8
        tcn = dict(kernel_size=3, dilations=[1, 1, 2, 2, 4, 4, 8, 8], encoder_hidden_size=32)
        return TCN(decoder_layers=1, **tcn, **common), BatchTimer
    if name == "patchtst":
        sizes = dict(
            encoder_layers=2, n_heads=4, hidden_size=32, linear_hidden_size=64, patch_len=8, stride=4
        )
        no_dropout = dict(dropout=0.0, fc_dropout=0.0, head_dropout=0.0, attn_dropout=0.0)
        revin = dict(revin=True, revin_affine=False, revin_subtract_last=False)
        plain = dict(activation="relu", res_attention=False, learn_pos_embed=True)
        return PatchTST(**sizes, **no_dropout, **revin, **plain, **common), BatchTimer
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
    ours = test.y.reshape(-1)[train.window :].double().cpu().numpy()  # test targets, rows W .. of the split
    if pred.shape != ours.shape or not np.allclose(truth, ours, atol=1e-6):
        raise RuntimeError("NeuralForecast's test targets are not ours: the comparison would be void")
    # the direction is scored against our naive forecast (a zero return, or the last value)
    ref = test.naive(torch.arange(len(test), device=test.device))[:, 0, 0].double().cpu().numpy()
    hit = 0.5 * (1.0 + np.sign(pred - ref) * np.sign(truth - ref))
    return float(np.mean((pred - truth) ** 2)), float(hit.mean())


def _note(r: dict[str, Any]) -> str:
    return (
        f"{r['windows_per_s']:,.0f} windows/s, {r['steps']} steps ({r['stopped']}), "
        f"fit {r['wall_s']:.1f} s, direction {r['direction']:.3f}"
    )


def _run(quick: bool) -> list[Row]:
    from tritonrl.cli.registry import forecasters
    from tritonrl.toolkit.forecast import FitConfig

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
    with tempfile.TemporaryDirectory() as tmp:
        for case in _cases(quick):
            rows += _case_rows(case, Path(tmp), registry, config, why_not)
    if not quick and importlib.util.find_spec("gym_anytrading") is None:
        rows.append(
            Row(NAME, "googl, eurusd", "skipped", float("nan"), "", None, "gym-anytrading is not installed")
        )
    return rows


def _case_rows(
    case: Case, tmp: Path, registry: dict[str, type], config: Any, why_not: str | None
) -> list[Row]:
    """The rows of one series: per model ours (F features, market series only), ours (y only) and
    the peer's, then the baselines."""
    full = _windows(case, tmp)
    # a CSV series holds the target alone: its windows already are the peer's input
    y_only = tuple(_y_only(w) for w in full) if case.kind == "market" else full
    label = f"{case.label} W={case.window}"
    rows: list[Row] = []
    report = None
    for name in MODELS:
        ours_y = _ours(name, registry[name], y_only, config)
        report = ours_y["report"]
        if case.kind == "market":
            ours_full = _ours(name, registry[name], full, config)
            impl = f"{name}: ours (F={full[0].num_features} features)"
            rows.append(Row(NAME, label, impl, ours_full["mse"], "test MSE", None, _note(ours_full)))
        rows.append(
            Row(NAME, label, f"{name}: ours (y only)", ours_y["mse"], "test MSE", None, _note(ours_y))
        )
        if why_not is not None:
            rows.append(Row(NAME, label, f"{name}: {PEER}", float("nan"), "", None, f"skipped: {why_not}"))
            continue
        try:
            peer = _peer(name, y_only, config)
        except Exception as exc:  # a broken peer must not hide our rows
            rows.append(Row(NAME, label, f"{name}: {PEER}", float("nan"), "", None, f"FAILED: {exc}"[:90]))
            continue
        ratio = peer["windows_per_s"] / ours_y["windows_per_s"]
        rows.append(Row(NAME, label, f"{name}: {PEER} (y only)", peer["mse"], "test MSE", ratio, _note(peer)))
    assert report is not None
    for base in ("naive", "seasonal_naive", "train_mean"):
        m = report["test"][base]
        rows.append(
            Row(
                NAME,
                label,
                f"baseline: {base}",
                m["mse"],
                "test MSE",
                None,
                f"direction {m['direction']:.3f}",
            )
        )
    return rows


def run(quick: bool = False) -> list[Row]:
    """Per series and model ours (F features; market series only), ours (y only) and the peer's
    rows, and the baselines per series; see the module docstring."""
    with one_cpu_thread():
        return _run(quick)


if __name__ == "__main__":
    print(format_table(run(quick="--quick" in sys.argv)))
