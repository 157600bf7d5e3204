"""Level targets: the target's own history among the inputs (``target_channels``, a level channel
for ``close``), the change mode (a level fitted as a change, reported in levels), what the
checkpoint records, old checkpoints refused, and ``fit --target close`` beating the training
mean and staying near the naive forecast."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import pytest
import torch
from tritonrl.agents.forecast import FORECASTERS
from tritonrl.cli import main
from tritonrl.toolkit.bars import FEATURES
from tritonrl.toolkit.checkpoint import load_checkpoint, save_checkpoint
from tritonrl.toolkit.forecast import (
    FitConfig,
    Normalizer,
    evaluate,
    fit,
    load_windows,
    market_inputs,
    resolve_target_mode,
)

SOURCE = "synthetic,bars=1500,seed=5"
QUICK = FitConfig(epochs=2, batch_size=64, warmup_steps=5, log_every=10, patience=5)


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["fit", *argv])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_close_gets_its_level_as_one_more_input_channel(dtype: torch.dtype) -> None:
    splits = load_windows(SOURCE, 8, 2, target="close", dtype=dtype)
    assert market_inputs("close") == (len(FEATURES) + 1, (len(FEATURES),))
    for w in splits:
        assert w.num_features == len(FEATURES) + 1 and w.target_channels == (len(FEATURES),)
        assert w.data.feature_names == (*FEATURES, "close") and w.data.features.dtype == dtype
        idx = torch.arange(len(w))
        x, _ = w.batch(idx)
        rows = w.ends[:, None] + torch.arange(-7, 1)[None, :]
        # exact: the channel is the normalised level (the same f32 expression as the targets), cast once
        torch.testing.assert_close(x[..., -1], w.y[rows].to(dtype), rtol=0, atol=0)
        assert w.normalizer == splits[0].normalizer  # the train split's, level channel and targets alike


@pytest.mark.parametrize("target", ["log_return", "return", "price_z", "volume_z"])
def test_a_feature_target_reads_its_own_column(target: str) -> None:
    train, _, _ = load_windows(SOURCE, 8, 1, target=target)
    assert train.num_features == len(FEATURES)
    assert train.target_channels == (FEATURES.index(target),) == market_inputs(target)[1]


def test_the_change_scale_is_the_train_windows_rms_change() -> None:
    train, validation, test = load_windows(SOURCE, 8, 3, target="close")
    y = train.y.double()
    for h in (1, 2, 3):
        moves = y[train.ends + h] - y[train.ends]
        want = float(moves.square().mean().sqrt())
        assert train.normalizer.change_scale[h - 1] == pytest.approx(want, rel=1e-6)  # f64 vs f32 z
    assert validation.normalizer == test.normalizer == train.normalizer  # train rows only
    assert load_windows(SOURCE, 8, 3)[0].normalizer.change_scale == ()  # log_return: a change already


def test_decode_reads_a_change_from_the_last_value() -> None:
    train, _, test = load_windows(SOURCE, 8, 3, target="close")
    idx = torch.arange(len(test))
    zero = torch.zeros(len(test), 3, 1)
    # exact: naive + scale * 0 is naive's own value
    torch.testing.assert_close(test.decode(idx, zero, "change"), test.naive(idx), rtol=0, atol=0)
    out = torch.randn(len(test), 3, 1)
    scale = torch.tensor(train.normalizer.change_scale)[None, :, None]
    torch.testing.assert_close(test.decode(idx, out, "change"), test.naive(idx) + scale * out)
    assert test.decode(idx, out, "level") is out
    with pytest.raises(ValueError, match="mode must be 'level' or 'change'"):
        test.decode(idx, out, "auto")
    returns, _, _ = load_windows(SOURCE, 8, 1)
    with pytest.raises(ValueError, match="target 'log_return' has no change scale"):
        returns.decode(torch.arange(2), torch.zeros(2, 1, 1), "change")


def test_auto_mode_is_change_for_a_level_and_a_model_that_does_not_normalise() -> None:
    levels, _, _ = load_windows(SOURCE, 8, 1, target="close")
    returns, _, _ = load_windows(SOURCE, 8, 1)
    assert resolve_target_mode("auto", levels) == "change"
    assert resolve_target_mode("auto", levels, normalizes_input=True) == "level"  # RevIN: a level
    assert resolve_target_mode("auto", returns) == "level"
    assert resolve_target_mode("level", levels) == "level"
    with pytest.raises(ValueError, match="target_mode .change. reads the forecast as a change"):
        resolve_target_mode("change", returns)
    with pytest.raises(ValueError, match="target_mode must be one of auto, level, change"):
        FitConfig(target_mode="levels")


def test_a_change_model_with_zero_output_scores_as_the_naive_forecast() -> None:
    """The metrics read a change model through ``decode``: an output of 0 is the naive forecast, so
    its scores are the naive baseline's (the same sums over the same forecasts)."""
    from tritonrl.toolkit.forecast import baselines

    _, _, test = load_windows(SOURCE, 8, 2, target="close")
    model = FORECASTERS["dlinear"](8, test.num_features, 2, 1, target_channels=test.target_channels)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    got = evaluate(model, test, target_mode="change")
    assert got == baselines(test)["naive"]  # exact: the same forecasts, summed in the same order


def test_the_model_must_read_the_targets_channel() -> None:
    train, validation, test = load_windows(SOURCE, 8, 1, target="close")
    model = FORECASTERS["dlinear"](8, train.num_features, 1, 1)  # reads channel 0, not 6
    with pytest.raises(ValueError, match=r"from input channels \(0,\), the windows hold it in \(6,\)"):
        fit(model, train, validation, test, QUICK)


@pytest.mark.learning
@pytest.mark.parametrize("name", ["dlinear", "gru"])
def test_fit_close_beats_the_mean_and_stays_near_naive(name: str) -> None:
    """The issue's goal at its own command (3000 bars, window 32, 5 epochs; GRU with 16 hidden
    units to keep it ~3 s at one thread): test MSE far below the training mean's and within 1.2x
    the naive forecast's (measured about 1.04-1.08x for DLinear, 1.00x for GRU)."""
    train, validation, test = load_windows("synthetic,bars=3000,seed=5", 32, 1, target="close")
    torch.manual_seed(0)
    kw = {"hidden": 16} if name == "gru" else {}
    model = FORECASTERS[name](32, train.num_features, 1, 1, target_channels=train.target_channels, **kw)
    report = fit(model, train, validation, test, FitConfig(epochs=5), tensorboard=False)
    assert report["target_mode"] == "change" and report["target_channels"] == "6"
    m = report["test"]
    assert m["model"]["mse"] < 0.1 * m["train_mean"]["mse"]
    assert m["model"]["mse"] <= 1.2 * m["naive"]["mse"], (m["model"]["mse"], m["naive"]["mse"])


def test_cli_close_records_channels_and_mode_and_resumes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    data = ["--model", "dlinear", "--data", f"market:{SOURCE}", "--window", "8"]
    rest = ["--run-dir", str(run), "--no-progress", "--no-tensorboard"]
    argv = [*data, "--target", "close", "--epochs", "1", *rest]
    code, out, err = _cli(argv)
    assert code == 0, err
    report = json.loads((run / "fit_report.json").read_text())
    assert report["target_mode"] == "change" and report["target_channels"] == "6"
    assert report["meta"]["num_features"] == "7" and report["meta"]["target_mode"] == "change"
    code, _, err = _cli([*argv, "--resume"])  # the same channels and mode: the checkpoint fits
    assert code == 0, err
    code, _, err = _cli([*argv, "--resume", "--target-mode", "level"])
    assert code == 2 and "target_mode" in err and len(err.strip().splitlines()) == 1
    code, _, err = _cli([*data, "--target-mode", "change", "--run-dir", str(tmp_path / "r")])
    assert code == 2 and "target_mode 'change' reads the forecast as a change" in err


def test_an_old_checkpoint_without_target_channels_is_refused(tmp_path: Path) -> None:
    """A checkpoint written before target channels and modes (its meta lacks them) is one clear
    error on resume, never loaded with a meaning it may not have had."""
    train, validation, test = load_windows(SOURCE, 8, 1, target="price_z")
    config = FitConfig(epochs=1, batch_size=64, warmup_steps=2, log_every=10)
    torch.manual_seed(0)
    model = FORECASTERS["dlinear"](8, train.num_features, 1, 1, target_channels=train.target_channels)
    fit(model, train, validation, test, config, run_dir=tmp_path, tensorboard=False)
    path = tmp_path / "checkpoint.safetensors"
    state = load_checkpoint(path)
    for key in ("target_channels", "target_mode"):
        del state["meta"][key]
    del state["config"]["target_mode"]
    save_checkpoint(path, state)
    again = FORECASTERS["dlinear"](8, train.num_features, 1, 1, target_channels=train.target_channels)
    more = FitConfig(epochs=2, batch_size=64, warmup_steps=2, log_every=10)
    with pytest.raises(ValueError, match="predates target channels and target modes.*start a new run"):
        fit(again, train, validation, test, more, run_dir=tmp_path, resume=True, tensorboard=False)


def test_normalizer_without_change_scale_keeps_its_old_dict() -> None:
    assert Normalizer(0.5, 2.0).to_dict() == {"mean": 0.5, "std": 2.0}
    assert Normalizer(0.5, 2.0, (0.1,)).to_dict() == {"mean": 0.5, "std": 2.0, "change_scale": [0.1]}
    assert math.isfinite(load_windows(SOURCE, 8, 1, target="close")[0].normalizer.change_scale[0])
