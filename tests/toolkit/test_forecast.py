"""The forecasting trainer and ``tritonrl fit``: windows, normaliser, baselines, early stopping,
exact resume, bf16 parameters with an f32 loss, and the command line's errors.

The models here are :class:`TinyLinear` (a linear map over the flattened window, with dropout so
that resuming must restore the RNG too), registered in ``FORECASTERS`` only for the tests that
need the registry (``monkeypatch.setitem``).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from tritonrl.agents.forecast import FORECASTERS, Forecaster
from tritonrl.cli import main
from tritonrl.toolkit.bars import FEATURE_WARMUP, Bars, MarketData, source_bars, synthetic_bars, upload
from tritonrl.toolkit.forecast import (
    FitConfig,
    Normalizer,
    WindowData,
    baselines,
    fit,
    format_report,
    load_windows,
    lr_at,
)


class TinyLinear(Forecaster):
    """A linear map over the flattened window (test model)."""

    name = "tiny-linear"

    def __init__(
        self,
        window: int,
        num_features: int,
        horizon: int = 1,
        num_targets: int = 1,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        dropout: float = 0.1,
    ) -> None:
        super().__init__(window, num_features, horizon, num_targets, device=device, dtype=dtype)
        self.drop = nn.Dropout(dropout)
        self.lin = nn.Linear(window * num_features, horizon * num_targets, **self.factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.check_input(x)
        return self.lin(self.drop(x.flatten(1))).view(x.shape[0], self.horizon, self.num_targets)


SOURCE = "synthetic,ar=0.4,bars=1200,seed=3"
SMALL = FitConfig(epochs=3, batch_size=32, log_every=7, warmup_steps=5, patience=10)


def _windows(window: int = 8, horizon: int = 1, **kw: object) -> tuple[WindowData, WindowData, WindowData]:
    return load_windows(SOURCE, window, horizon, **kw)  # type: ignore[arg-type]


def _hand_data(values: list[float]) -> MarketData:
    """A hand-made split: ``values`` as both the log returns and the closes, one zero feature."""
    t = torch.tensor(values, dtype=torch.float32)
    return MarketData(
        name="hand",
        features=torch.zeros(len(values), 1),
        log_return=t,
        close=t,
        time=np.arange(len(values)).astype("datetime64[D]").astype("datetime64[s]"),
        feature_names=("zero",),
    )


# ----------------------------------------------------------------------------- windows


def test_normaliser_comes_from_the_train_split_only() -> None:
    bars = synthetic_bars(1200, seed=3, ar=0.4)
    train, validation, test = load_windows(bars, 8, 2)
    b1 = train.data.offset + len(train.data)  # the first row that is not a train row
    assert validation.normalizer == train.normalizer == test.normalizer
    # validation and test bars changed beyond recognition: the normaliser does not move
    close = bars.close.copy()
    close[b1:] *= np.exp(np.cumsum(np.random.default_rng(0).normal(0.0, 0.05, close.size - b1)))
    changed = Bars(bars.name, bars.time, bars.open, close, close, close, bars.volume)
    t2, v2, _ = load_windows(changed, 8, 2)
    assert t2.normalizer == train.normalizer
    assert not torch.equal(v2.y, validation.y)  # the change reached the validation targets
    # and the test can fail: a change inside the train split moves it
    close = bars.close.copy()
    close[b1 // 2 :] *= 1.5
    moved = Bars(bars.name, bars.time, bars.open, close, close, close, bars.volume)
    assert load_windows(moved, 8, 2)[0].normalizer != train.normalizer
    # the normaliser is the mean/std of exactly the train windows' target rows
    rows = train.values[train.first + train.window :].double()
    assert train.normalizer.mean == pytest.approx(float(rows.mean()), rel=1e-12)
    assert train.normalizer.std == pytest.approx(float(rows.std(correction=0)), rel=1e-12)


@pytest.mark.parametrize(("window", "horizon"), [(1, 1), (5, 3), (16, 1)])
def test_windows_never_read_a_bar_after_the_window_end(window: int, horizon: int) -> None:
    train, _, _ = _windows(window, horizon)
    n = len(train.data)
    assert train.first == train.data.first_defined == FEATURE_WARMUP  # the train split starts at row 0
    assert len(train) == n - FEATURE_WARMUP - window - horizon + 1
    idx = torch.arange(len(train))
    x, y = train.batch(idx)
    assert x.shape == (len(train), window, train.num_features) and x.dtype == train.dtype
    assert y.shape == (len(train), horizon, 1) and y.dtype == torch.float32
    for i in (0, 1, len(train) // 2, len(train) - 1):
        t = int(train.ends[i])
        assert torch.equal(x[i], train.data.features[t - window + 1 : t + 1])
        assert torch.equal(y[i, :, 0], train.y[t + 1 : t + 1 + horizon])
    # perturb every feature row after a window's end: that window's input does not change
    t = int(train.ends[len(train) // 2])
    feats = train.data.features.clone()
    feats[t + 1 :] = torch.randn_like(feats[t + 1 :])
    other = WindowData(
        dataclasses.replace(train.data, features=feats),
        window,
        horizon,
        normalizer=train.normalizer,
    )
    upto = torch.arange(len(train) // 2 + 1)
    assert torch.equal(other.batch(upto)[0], train.batch(upto)[0])
    assert not torch.equal(other.batch(idx)[0], x)  # later windows do see the change


@pytest.mark.parametrize(("window", "horizon"), [(1, 1), (8, 2), (32, 4)])
def test_no_window_reads_the_feature_warm_up(window: int, horizon: int) -> None:
    """The features are zeros for the first FEATURE_WARMUP rows of a series (nothing to compute
    them from yet): no train, validation or test window reads one, and every later window is kept."""
    splits = _windows(window, horizon)
    for w in splits:
        first_row = w.data.offset + int(w.ends[0]) - (window - 1)  # in the full series
        assert first_row == max(FEATURE_WARMUP, w.data.offset)
        x, _ = w.batch(torch.arange(len(w)))
        assert bool(x.abs().sum(dim=2).gt(0).all())  # every row of every window has real features
        assert int(w.ends[-1]) == len(w.data) - 1 - horizon  # the end of the split is still used
    # the check has teeth: the rows it skips are the all-zero ones
    assert bool(splits[0].data.features[:FEATURE_WARMUP].eq(0).all())
    assert not bool(splits[0].data.features[FEATURE_WARMUP].eq(0).all())


def test_a_split_too_short_after_the_warm_up_says_so() -> None:
    bars = source_bars("synthetic,bars=100,seed=0")
    data = upload(bars, "cpu", dtype=torch.float32)
    with pytest.raises(ValueError, match=r"has 10 rows after the features' 20-row warm-up, fewer than"):
        WindowData(data.rows(0, 30), 8, 3)
    assert len(WindowData(data.rows(10, 50), 8, 3)) == 40 - 10 - 8 - 3 + 1  # starts 10 rows into it


def test_bad_windows_are_clear_errors() -> None:
    data = _hand_data([0.1 * i for i in range(10)])
    with pytest.raises(ValueError, match=r"has 10 rows, fewer than window \+ horizon = 8 \+ 3"):
        WindowData(data, 8, 3)
    data.log_return[4] = float("nan")
    with pytest.raises(ValueError, match="NaN or infinite target"):
        WindowData(data, 3, 1)
    with pytest.raises(ValueError, match="unknown target 'nope'"):
        _windows(target="nope")
    with pytest.raises(ValueError, match="fewer than window"):
        load_windows("synthetic,bars=300", 250, 1)


# ----------------------------------------------------------------------------- baselines


V = [0.0, 1.0, -2.0, 3.0, 0.5, -1.0, 2.0, 4.0]


def _by_hand(forecasts: list[list[float]], truths: list[list[float]], refs: list[float]) -> dict[str, float]:
    se = ae = hit = 0.0
    n = 0
    for fc, tr, ref in zip(forecasts, truths, refs, strict=True):
        for f, y in zip(fc, tr, strict=True):
            se += (f - y) ** 2
            ae += abs(f - y)
            hit += 0.5 * (1 + np.sign(f - ref) * np.sign(y - ref))
            n += 1
    return {"mse": se / n, "mae": ae / n, "direction": hit / n}


@pytest.mark.parametrize("target", ["log_return", "close"])
def test_baselines_match_a_hand_computation(target: str) -> None:
    mean, std = 0.5, 2.0
    data = WindowData(_hand_data(V), 3, 2, target=target, normalizer=Normalizer(mean, std))
    z = [(v - mean) / std for v in V]
    ends = [2, 3, 4, 5]  # W - 1 .. T - 1 - H
    assert data.ends.tolist() == ends
    truths = [[z[t + 1], z[t + 2]] for t in ends]
    # naive: zero return for log_return, the last value for a level (close)
    if target == "log_return":
        refs = [(0.0 - mean) / std] * 4
    else:
        refs = [z[t] for t in ends]
    naive = [[r, r] for r in refs]
    seasonal = [[z[t - 1], z[t]] for t in ends]  # season 2: h=1 -> 2 rows back, h=2 -> 2 back = t
    train_mean = [[0.0, 0.0] for _ in ends]
    got = baselines(data, season=2)
    for name, fc in (("naive", naive), ("seasonal_naive", seasonal), ("train_mean", train_mean)):
        want = _by_hand(fc, truths, refs)
        for k in want:  # f32 tensors against f64 Python: a few ulps of f32
            assert got[name][k] == pytest.approx(want[k], rel=1e-6, abs=1e-7), (name, k)
    assert got["naive"]["direction"] == 0.5
    # season 1 on a longer horizon repeats the last value; season 3 reaches 3 rows back
    assert torch.equal(data.seasonal_naive(torch.arange(4), 1), data.naive(torch.arange(4))) == (
        target == "close"
    )
    s3 = data.seasonal_naive(torch.arange(4), 3)[:, :, 0]
    assert s3.tolist() == [[z[t - 2], z[t - 1]] for t in ends]
    with pytest.raises(ValueError, match="season=4 must lie between 1 and the window 3"):
        data.seasonal_naive(torch.arange(4), 4)


def test_lr_schedule() -> None:
    cfg = FitConfig(lr=1.0, warmup_steps=4, min_lr_fraction=0.1)
    assert [lr_at(cfg, s, 100) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_at(cfg, 4, 100) == 1.0 and lr_at(cfg, 99, 100) == pytest.approx(0.1)
    lin = FitConfig(lr=1.0, warmup_steps=0, schedule="linear", min_lr_fraction=0.0)
    assert lr_at(lin, 0, 11) == 1.0 and lr_at(lin, 5, 11) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="schedule must be one of"):
        FitConfig(schedule="step")


# ----------------------------------------------------------------------------- fit


def _model(train: WindowData, seed: int = 0, **kw: object) -> TinyLinear:
    torch.manual_seed(seed)
    return TinyLinear(train.window, train.num_features, train.horizon, **kw)  # type: ignore[arg-type]


def _rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


LEARNABLE = "synthetic,ar=0.5,bars=2000,seed=3,regimes=1"
"""Returns with lag-1 autocorrelation 0.5: the best forecast has MSE 0.75 of the variance."""
LEARN = FitConfig(epochs=8, batch_size=32, lr=3e-3, log_every=7, warmup_steps=5, patience=10)


def test_fit_learns_and_reports_the_baselines(tmp_path: Path) -> None:
    train, validation, test = load_windows(LEARNABLE, 4, 1)
    report = fit(
        _model(train, dropout=0.0), train, validation, test, LEARN, run_dir=tmp_path, tensorboard=False
    )
    assert report["stopped"] == "epochs" and report["epochs"] == 8
    assert report["global_step"] == 8 * math.ceil(len(train) / 32)
    for split in ("validation", "test"):
        assert set(report[split]) == {"model", "naive", "seasonal_naive", "train_mean"}
    # measured: model 0.85, naive 1.05, train mean 1.09 (seed 0); a 10% margin on the naive forecast
    assert report["test"]["model"]["mse"] < 0.9 * report["test"]["naive"]["mse"]
    assert report["test"]["model"]["direction"] > 0.55
    table = format_report(report)
    assert "seasonal_naive (s=4)" in table and "train_mean" in table  # season 5 cut to the window
    header = _rows(tmp_path / "metrics.csv")[0]
    for name in ("losses/train_mse", "losses/grad_norm", "charts/lr", "val/mse", "val/mae", "val/direction"):
        assert name in header
    assert (tmp_path / "fit_report.json").exists() and (tmp_path / "checkpoint.safetensors").exists()
    with pytest.raises(ValueError, match="already holds a checkpoint"):
        fit(_model(train), train, validation, test, SMALL, run_dir=tmp_path)


def test_early_stopping_stops() -> None:
    train, validation, test = _windows(8, 1)
    # no later epoch can improve by 1e9: the run stops `patience` epochs after the first
    cfg = FitConfig(epochs=50, batch_size=64, patience=2, min_delta=1e9, log_every=1000)
    report = fit(_model(train), train, validation, test, cfg)
    assert report["stopped"] == "early"
    assert (report["best_epoch"], report["epochs"]) == (1, 3)
    # the control: without the bar the same run goes on
    cfg = FitConfig(epochs=4, batch_size=64, patience=2, log_every=1000)
    assert fit(_model(train), train, validation, test, cfg)["epochs"] == 4


def test_early_stopping_restores_the_best_weights() -> None:
    train, validation, test = _windows(8, 1)
    cfg = FitConfig(epochs=3, batch_size=64, patience=1, min_delta=1e9, log_every=1000)
    model = _model(train)
    report = fit(model, train, validation, test, cfg)
    assert report["validation"]["model"]["mse"] == pytest.approx(report["best_val_mse"], rel=1e-12)


def test_resume_is_exact(tmp_path: Path) -> None:
    train, validation, test = _windows(8, 2)
    full, part = tmp_path / "full", tmp_path / "part"
    uninterrupted = fit(_model(train), train, validation, test, SMALL, run_dir=full, tensorboard=False)
    polls = iter(range(100))
    stopped = fit(
        _model(train),
        train,
        validation,
        test,
        SMALL,
        run_dir=part,
        tensorboard=False,
        should_stop=lambda: next(polls) == 4,  # mid-epoch 2, after a metric flush
    )
    assert stopped["stopped"] == "should_stop" and 0 < stopped["global_step"] < uninterrupted["global_step"]
    # a different initialisation and disturbed global RNGs: the checkpoint must set both
    torch.manual_seed(123)
    torch.rand(7)
    resumed = fit(
        _model(train, seed=9), train, validation, test, SMALL, run_dir=part, resume=True, tensorboard=False
    )
    assert _rows(part / "metrics.csv") == _rows(full / "metrics.csv")
    assert resumed["test"] == uninterrupted["test"]
    with pytest.raises(ValueError, match=r"resume cannot change lr \(checkpoint 0.001, now 0.5\): start"):
        fit(
            _model(train),
            train,
            validation,
            test,
            dataclasses.replace(SMALL, lr=0.5),
            run_dir=part,
            resume=True,
        )
    t3, v3, te3 = _windows(8, 3)
    with pytest.raises(ValueError, match="horizon"):
        fit(_model(t3), t3, v3, te3, SMALL, run_dir=part, resume=True)


def test_a_non_finite_loss_stops_the_run_before_saving(tmp_path: Path) -> None:
    from tritonrl.toolkit.forecast import FitError

    train, validation, test = _windows(8, 1)
    model = _model(train)
    with torch.no_grad():
        model.lin.weight.fill_(float("nan"))
    with pytest.raises(FitError, match=r"non-finite losses/train_mse at step 7: stopped"):
        fit(model, train, validation, test, SMALL, run_dir=tmp_path, tensorboard=False)
    assert not (tmp_path / "checkpoint.safetensors").exists()  # nothing saved after it


def test_bf16_parameters_train_with_an_f32_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONRL_DTYPE", "bf16")
    train, validation, test = load_windows(LEARNABLE, 4, 1)
    assert train.dtype == torch.bfloat16  # uploaded once in the training dtype
    model = _model(train, dropout=0.0)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    seen: list[tuple[torch.dtype, torch.dtype, torch.dtype]] = []
    real = torch.nn.functional.mse_loss

    def spy(pred: torch.Tensor, y: torch.Tensor, *a: object, **kw: object) -> torch.Tensor:
        out = real(pred, y, *a, **kw)  # type: ignore[arg-type]
        seen.append((pred.dtype, y.dtype, out.dtype))
        return out

    outputs: list[torch.dtype] = []
    model.register_forward_hook(lambda m, i, o: outputs.append(o.dtype))
    monkeypatch.setattr(torch.nn.functional, "mse_loss", spy)
    report = fit(model, train, validation, test, LEARN)
    assert seen and set(seen) == {(torch.float32, torch.float32, torch.float32)}
    assert set(outputs) == {torch.bfloat16}  # the forecast leaves the model in bf16, upcast once after
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    # f32 masters keep the small updates: bf16 learns, as f32 does, to beat the naive forecast
    assert report["test"]["model"]["mse"] < 0.9 * report["test"]["naive"]["mse"]
    with pytest.raises(TypeError, match="windows are torch.bfloat16, the model's parameters torch.float32"):
        fit(_model(train, dtype=torch.float32), train, validation, test, SMALL)


# ----------------------------------------------------------------------------- the command line


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["fit", *argv])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(FORECASTERS, TinyLinear.name, TinyLinear)


def _nan_csv(tmp: Path) -> Path:
    path = tmp / "bars.csv"
    lines = ["date,open,high,low,close,volume"]
    for i in range(100):
        close = "nan" if i == 50 else f"{100 + i}"
        lines.append(f"2020-01-{1 + i % 28:02d}T{i // 28:02d}:00:00,100,101,99,{close},1000")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.usefixtures("registered")
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "nope"], r"unknown model 'nope'; known models: .*tiny-linear"),
        (
            ["--model", "tiny-linear", "--data", "market:synthetic,bars=300", "--window", "250"],
            "fewer than window",
        ),
        (["--model", "tiny-linear", "--data", "market:csv={tmp}/bars.csv"], r"bars\.csv.*(NaN|nan)"),
        (["--model", "tiny-linear", "--data", "market:nowhere"], "unknown market source"),
        (["--model", "tiny-linear", "--epochs", "0"], r"--epochs must be an int >= 1"),
        (["--model", "tiny-linear", "--set", "widht=3"], "model 'tiny-linear'.*widht"),
        (
            ["--model", "tiny-linear", "--season", "99", "--window", "8"],
            "--season 99 is longer than the window 8",
        ),
        (["--window", "8"], "--model is required"),
    ],
)
def test_cli_errors_are_one_line_and_exit_2(
    argv: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _nan_csv(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    code, out, err = _cli([a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert re.search(message, lines[0]), lines[0]
    assert out == "" and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no run folder made


@pytest.mark.usefixtures("registered")
def test_cli_list_and_a_run(tmp_path: Path) -> None:
    code, out, _ = _cli(["--list"])
    assert code == 0 and "tiny-linear" in out and "A linear map over the flattened window" in out
    assert sorted(line.split()[0] for line in out.strip().splitlines()) == sorted(FORECASTERS)
    run = tmp_path / "run"
    argv = ["--model", "tiny-linear", "--window", "8", "--epochs", "2", "--data", f"market:{SOURCE}"]
    argv += ["--run-dir", str(run), "--no-progress", "--no-tensorboard", "--set", "dropout=0.0"]
    code, out, err = _cli(argv)
    assert code == 0, err
    assert "naive" in out and "seasonal_naive" in out and "train_mean" in out and "2 epochs" in out
    code, _, err = _cli(argv)
    assert code == 2 and "already holds a checkpoint: pass --resume" in err
    code, _, err = _cli([*argv[:-1], "dropout=0.2", "--resume"])
    assert code == 2 and "model_kwargs" in err
    code, out, err = _cli([*argv, "--resume"])
    assert code == 0, err
