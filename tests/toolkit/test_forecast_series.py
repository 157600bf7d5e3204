"""Any numeric time series for ``tritonrl fit``: :func:`load_series`, :func:`series_windows` and
``--data csv=PATH`` with ``--target`` / ``--features`` / ``--series-id`` (one series and long
format), windows that never cross series, per-series normalisers from train rows only, the
bad-input refusals (one line, exit 2, nothing written) and OHLCV files still read as market bars.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from tritonrl.cli import main
from tritonrl.toolkit.forecast import baselines, is_market_csv, load_series, read_header, series_windows

W, H = 8, 2


def _write_long(
    path: Path, lengths: dict[str, int], *, seed: int = 0, header: str = "unique_id,ds,y,temp"
) -> Path:
    """A long-format CSV: each series a random walk at its own level, hourly times, one exogenous column."""
    rng = np.random.default_rng(seed)
    lines = [header]
    for k, (sid, n) in enumerate(lengths.items()):
        level = np.cumsum(rng.normal(size=n)) + 100.0 * k
        for i in range(n):
            lines.append(
                f"{sid},2021-03-{1 + i // 24:02d}T{i % 24:02d}:00:00,{level[i]:.5f},{rng.normal():.4f}"
            )
    path.write_text("\n".join(lines) + "\n")
    return path


def _write_single(path: Path, n: int = 60) -> Path:
    t = np.arange(n)
    load = 50 + 10 * np.sin(2 * np.pi * t / 6) + np.random.default_rng(1).normal(size=n)
    rows = ["date,load,temperature"] + [
        f"2020-02-{1 + i // 24:02d} {i % 24:02d}:00,{load[i]:.4f},{i % 7}" for i in t
    ]
    path.write_text("\n".join(rows) + "\n")
    return path


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["fit", *argv])
    return code, out.getvalue(), err.getvalue()


_TINY = ["--model", "mlp", "--window", str(W), "--epochs", "1", "--no-progress", "--no-tensorboard"]


def test_one_series_end_to_end(tmp_path: Path) -> None:
    csv = _write_single(tmp_path / "load.csv")
    run = tmp_path / "run"
    code, out, err = _cli([*_TINY, "--data", f"csv={csv}", "--target", "load", "--run-dir", str(run)])
    assert code == 0, err
    report = json.loads((run / "fit_report.json").read_text())
    assert report["target"] == "load" and report["meta"]["num_features"] == "1"
    assert report["normalizer"]["series"] == [""] and report["normalizer"]["columns"] == ["load"]
    for name in ("model", "naive", "seasonal_naive", "train_mean"):
        m = report["test"][name]
        assert np.isfinite([m["mse"], m["mae"], m["mae_original"]]).all()
    # one series: an error in the file's units is the normalised one times the train std
    std = report["normalizer"]["std"][0][0]
    assert report["test"]["naive"]["mae_original"] == pytest.approx(
        report["test"]["naive"]["mae"] * std, rel=1e-5
    )
    assert "MAE units" in out and "1 series normalised by its own train split" in out


def test_long_format_many_series_with_features_and_two_targets(tmp_path: Path) -> None:
    csv = _write_long(tmp_path / "long.csv", {"a": 60, "b": 75, "c": 90})
    run = tmp_path / "run"
    argv = [*_TINY, "--data", f"csv={csv}", "--target", "y,temp", "--run-dir", str(run), "--horizon", str(H)]
    code, _, err = _cli(argv)
    assert code == 0, err
    report = json.loads((run / "fit_report.json").read_text())
    assert report["normalizer"]["series"] == ["a", "b", "c"]
    assert report["target"] == "y,temp" and report["meta"]["num_features"] == "2"
    code, _, err = _cli(
        [*_TINY, "--data", f"csv={csv}", "--features", "temp", "--run-dir", str(tmp_path / "r2")]
    )
    assert code == 0, err  # unique_id, ds and y found without flags; temp an input only
    report = json.loads((tmp_path / "r2" / "fit_report.json").read_text())
    assert report["target"] == "y" and report["normalizer"]["columns"] == ["y", "temp"]


def test_neuralforecast_names_and_integer_times(tmp_path: Path) -> None:
    csv = _write_long(tmp_path / "nf.csv", {"s1": 40, "s2": 50})
    table = load_series(csv)
    assert (table.time_column, table.targets, table.features, table.ids) == ("ds", ("y",), (), ("s1", "s2"))
    assert table.starts == (0, 40, 90) and table.time.dtype == np.dtype("datetime64[s]")
    ints = tmp_path / "ints.csv"
    ints.write_text("unique_id,ds,y\n" + "".join(f"{k},{i},{i * i % 7}\n" for i in range(30) for k in "pq"))
    table = load_series(ints)  # interleaved rows: grouped by series, file order kept within each
    assert table.ids == ("p", "q") and table.time.dtype == np.int64
    assert table.time[:30].tolist() == list(range(30)) and table.lines[:3].tolist() == [2, 4, 6]


def test_windows_never_cross_series_and_gather_the_right_rows(tmp_path: Path) -> None:
    table = load_series(_write_long(tmp_path / "long.csv", {"a": 50, "b": 64, "c": 41}), features="temp")
    owner = np.repeat(np.arange(3), np.diff(table.starts))
    for part in series_windows(table, W, H, dtype=torch.float32):
        idx = torch.arange(len(part))
        x, y = part.batch(idx)
        assert x.shape == (len(part), W, 2) and y.shape == (len(part), H, 1) and y.dtype == torch.float32
        ends = part.ends.numpy()
        span = np.stack([part.rows.numpy()[e - W + 1 : e + H + 1] for e in ends])  # window + targets
        assert (np.diff(span, axis=1) == 1).all()  # consecutive rows of the table ...
        assert (owner[span] == owner[span[:, :1]]).all()  # ... of one series
        assert (owner[span[:, 0]] == part.window_series.numpy()).all()
        norm = part.normalizer
        k = part.window_series.numpy()
        raw = table.values[span]  # [N, W + H, C]
        z = (raw - np.asarray(norm.mean)[k][:, None]) / np.asarray(norm.std)[k][:, None]
        np.testing.assert_allclose(x.numpy(), z[:, :W], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(y.numpy()[..., 0], z[:, W:, 0], rtol=1e-5, atol=1e-5)
        # the naive forecast is each window's own last target value
        np.testing.assert_allclose(part.naive(idx).numpy()[:, 0, 0], z[:, W - 1, 0], rtol=1e-5, atol=1e-5)
    train, validation, test = series_windows(table, W, H, dtype=torch.float32)
    # 70/15/15 of each series, W - 1 rows of warm-up before validation and test
    assert len(train) == sum(round(0.7 * n) - W - H + 1 for n in (50, 64, 41))
    assert len(test) == sum(n - round(0.85 * n) - H for n in (50, 64, 41))


def test_normaliser_from_train_rows_only(tmp_path: Path) -> None:
    path = _write_long(tmp_path / "long.csv", {"a": 60, "b": 60})
    table = load_series(path, features="temp")
    norm = series_windows(table, W, H, dtype=torch.float32)[0].normalizer
    rows = table.values[:42]  # series a's train rows: round(0.7 * 60)
    np.testing.assert_allclose(norm.mean[0], rows.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(norm.std[0], rows.std(axis=0), rtol=1e-12)
    lines = path.read_text().splitlines()
    changed = lines[:]
    changed[1 + 55] = changed[1 + 55].rsplit(",", 2)[0] + ",1e6,1e6"  # a's test part
    changed[1 + 60 + 58] = changed[1 + 60 + 58].rsplit(",", 2)[0] + ",-1e6,3"  # b's test part
    path.write_text("\n".join(changed) + "\n")
    assert series_windows(load_series(path, features="temp"), W, H)[0].normalizer == norm
    changed[1 + 10] = changed[1 + 10].rsplit(",", 2)[0] + ",1e6,1e6"  # a's train part moves it
    path.write_text("\n".join(changed) + "\n")
    assert series_windows(load_series(path, features="temp"), W, H)[0].normalizer != norm


def test_baselines_in_the_files_units(tmp_path: Path) -> None:
    table = load_series(_write_long(tmp_path / "long.csv", {"a": 60, "b": 80}))
    test = series_windows(table, W, 1, dtype=torch.float32)[2]
    raw = table.values[:, 0]
    rows = test.rows.numpy()[test.ends.numpy()]
    expect = np.abs(raw[rows + 1] - raw[rows]).mean()  # naive: the last value, in the file's units
    m = baselines(test, season=4)["naive"]
    assert m["mae_original"] == pytest.approx(expect, rel=1e-5)
    assert m["direction"] == pytest.approx(0.5)


def _bad_files(tmp: Path) -> dict[str, tuple[list[str], str]]:
    good = _write_long(tmp / "good.csv", {"a": 40, "b": 40}).read_text().splitlines()

    def variant(name: str, line: int, cell: int, text: str) -> str:
        rows = good[:]
        parts = rows[line - 1].split(",")
        parts[cell] = text
        rows[line - 1] = ",".join(parts)
        (tmp / name).write_text("\n".join(rows) + "\n")
        return str(tmp / name)

    dup = good[:]
    dup[5] = dup[4]  # line 6 repeats line 5's time in series a
    (tmp / "dup.csv").write_text("\n".join(dup) + "\n")
    swap = good[:]
    swap[44], swap[45] = swap[45], swap[44]  # lines 45 and 46 of series b swapped
    (tmp / "unsorted.csv").write_text("\n".join(swap) + "\n")
    short = _write_long(tmp / "short.csv", {"a": 40, "b": 11})
    return {
        "missing column": (
            [f"csv={tmp / 'good.csv'}", "--target", "sales"],
            r"good\.csv: missing column 'sales'",
        ),
        "missing feature": (
            [f"csv={tmp / 'good.csv'}", "--features", "wind"],
            r"good\.csv: missing column 'wind'",
        ),
        "non-numeric": (
            [f"csv={variant('text.csv', 7, 2, 'abc')}"],
            r"text\.csv, line 7, column 'y': 'abc' is not a",
        ),
        "nan": (
            [f"csv={variant('nan.csv', 9, 2, 'nan')}"],
            r"nan\.csv, line 9, column 'y': 'nan' is not a finite",
        ),
        "inf": (
            [f"csv={variant('inf.csv', 12, 3, '-inf')}", "--features", "temp"],
            r"inf\.csv, line 12, column 'temp'",
        ),
        "empty cell": (
            [f"csv={variant('empty.csv', 3, 2, ' ')}"],
            r"empty\.csv, line 3, column 'y': empty value",
        ),
        "bad time": (
            [f"csv={variant('time.csv', 4, 1, 'noon')}"],
            r"time\.csv, line 4, column 'ds': cannot parse",
        ),
        "duplicate time": (
            [f"csv={tmp / 'dup.csv'}"],
            r"dup\.csv, line 6, column 'ds' \(series 'a'\): duplicate",
        ),
        "unsorted": (
            [f"csv={tmp / 'unsorted.csv'}"],
            r"unsorted\.csv, line 46, column 'ds' \(series 'b'\): timestamps not",
        ),
        "short series": (
            [f"csv={short}"],
            r"short\.csv: series 'b' \(lines 42-52\) has 11 rows, too few for window 8",
        ),
        "no target": (
            [f"csv={_write_single(tmp / 'plain.csv')}"],
            r"plain\.csv: not market bars \(no open, high, low, close, volume\) and no column .y.: name",
        ),
        "no such file": ([f"csv={tmp / 'nowhere.csv'}", "--target", "y"], r"nowhere\.csv: no such file"),
        "flag without csv": (
            ["market:synthetic", "--features", "x"],
            r"--features: only for --data csv=PATH",
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing column",
        "missing feature",
        "non-numeric",
        "nan",
        "inf",
        "empty cell",
        "bad time",
        "duplicate time",
        "unsorted",
        "short series",
        "no target",
        "no such file",
        "flag without csv",
    ],
)
def test_bad_input_is_one_line_exit_2_nothing_written(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    argv, message = _bad_files(data)[case]
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code, out, err = _cli([*_TINY, "--data", *argv])
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert re.search(message, lines[0]), lines[0]
    assert out == "" and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # no run folder


def test_same_time_in_two_series_is_fine_but_not_within_one(tmp_path: Path) -> None:
    table = load_series(_write_long(tmp_path / "long.csv", {"a": 30, "b": 30}))
    assert (table.time[:30] == table.time[30:]).all()  # each series keeps its own clock
    one = tmp_path / "one.csv"
    one.write_text(
        "ds,y\n" + "".join(f"{i},{i}\n" for i in range(30)) + "".join(f"{i},{i}\n" for i in range(29, 40))
    )
    with pytest.raises(ValueError, match=r"one\.csv, line 32, column 'ds': duplicate timestamp"):
        load_series(one)


def _write_bars(path: Path, n: int = 300) -> Path:
    rng = np.random.default_rng(2)
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, size=n)))
    rows = ["Date,Open,High,Low,Close,Volume,Note"]
    rows += [
        f"2019-{1 + i // 28 % 12:02d}-{1 + i % 28:02d}T{i // 336:02d}:00:00,"
        f"{c:.4f},{c * 1.01:.4f},{c * 0.99:.4f},{c:.4f},1000,x"
        for i, c in enumerate(close)
    ]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_ohlcv_file_still_goes_the_market_way(tmp_path: Path) -> None:
    csv = _write_bars(tmp_path / "bars.csv")
    header = read_header(csv)
    assert is_market_csv(header, None, [], None) and is_market_csv(header, "price_z", [], None)
    assert not is_market_csv(header, "Volume", [], None) and not is_market_csv(header, None, ["Open"], None)
    assert not is_market_csv(["ds", "y"], None, [], None)
    run = tmp_path / "run"
    code, _, err = _cli([*_TINY, "--data", f"csv={csv}", "--run-dir", str(run)])
    assert code == 0, err
    report = json.loads((run / "fit_report.json").read_text())
    assert report["target"] == "log_return" and report["meta"]["num_features"] == "6"  # the market features
    assert set(report["normalizer"]) == {"mean", "std"} and "mae_original" not in report["test"]["model"]
    # asking for a column that is not a market target reads the same file as a plain series
    code, _, err = _cli(
        [*_TINY, "--data", f"csv={csv}", "--target", "Volume,Close", "--run-dir", str(tmp_path / "r")]
    )
    assert code == 2 and "column 'Volume'" in err and "constant over its train split" in err


def _write_trend(path: Path, n: int = 720, seed: int = 0) -> Path:
    """A monthly series whose level climbs out of its training range (trend + season + noise), as
    CO2 or GDP do: its test rows lie above every train row."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    y = 0.05 * t + 2.0 * np.sin(2 * np.pi * t / 12) + rng.normal(scale=0.3, size=n)
    rows = ["date,y"] + [f"{1950 + i // 12}-{1 + i % 12:02d}-01,{y[i]:.5f}" for i in t]
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("model", ["mlp", "tcn"])
def test_a_trending_series_beats_naive_at_the_defaults(tmp_path: Path, model: str) -> None:
    """A series CSV is fitted with RevIN by default (every model takes ``revin``), so a level that
    leaves its train range is forecast from each window's own statistics. Without it the MLP's
    test MSE here is 16x the naive forecast's (its inputs and targets lie outside everything it was
    trained on); with it, a third of it. Fixed seed; the margin is wide, so a plain ``<``."""
    csv = _write_trend(tmp_path / "trend.csv")
    argv = ["--model", model, "--data", f"csv={csv}", "--target", "y", "--window", "24", "--season", "12"]
    argv += ["--epochs", "6", "--no-progress", "--no-tensorboard", "--threads", "1"]
    code, out, err = _cli([*argv, "--run-dir", str(tmp_path / "run")])
    assert code == 0, err
    report = json.loads((tmp_path / "run" / "fit_report.json").read_text())
    assert json.loads(report["meta"]["model_kwargs"]) == {"revin": True, "revin_anchor": "last"}
    test = report["test"]
    assert test["model"]["mse"] < test["naive"]["mse"], test
    assert "note:" not in out


def test_a_model_that_loses_to_naive_on_validation_says_so(tmp_path: Path) -> None:
    """``--set revin=False`` on the trending series: the report is printed as always, then one line
    says the model loses to naive on the validation split and names the flag that helps."""
    csv = _write_trend(tmp_path / "trend.csv")
    argv = ["--model", "lstm", "--data", f"csv={csv}", "--target", "y", "--window", "24", "--season", "12"]
    argv += ["--epochs", "2", "--set", "revin=False", "--no-progress", "--no-tensorboard", "--threads", "1"]
    code, out, err = _cli([*argv, "--run-dir", str(tmp_path / "run")])
    assert code == 0, err
    val = json.loads((tmp_path / "run" / "fit_report.json").read_text())["validation"]
    assert val["model"]["mse"] > val["naive"]["mse"]
    notes = [line for line in out.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "loses to the naive" in notes[0] and "--set revin=True" in notes[0], out


def _write_step_with_phase(path: Path, n: int = 3000, seed: int = 0) -> Path:
    """A seasonal ARMA(2,1) (period 24, heteroscedastic noise) with one +2 level shift half-way,
    inside the train rows, and the phase as exogenous columns ``sin``, ``cos``: the case of a regime
    change before "now" with calendar features."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    e = rng.standard_normal(n) * (0.5 + 0.3 * np.sin(2 * np.pi * t / 500) ** 2)
    a = np.zeros(n)
    for i in range(2, n):
        a[i] = 0.5 * a[i - 1] - 0.2 * a[i - 2] + e[i] + 0.3 * e[i - 1]
    phase = 2 * np.pi * t / 24
    y = np.sin(phase) + a + np.where(t >= n // 2, 2.0, 0.0)
    rows = ["t,value,sin,cos"] + [f"{i},{y[i]:.6f},{np.sin(phase[i]):.6f},{np.cos(phase[i]):.6f}" for i in t]
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.learning
@pytest.mark.parametrize(
    "model", ["dlinear", "mlp", "lstm", "gru", "tcn", "transformer", "mamba2", "patchtst"]
)
def test_every_model_beats_both_baselines_after_a_step_with_phase_features(
    tmp_path: Path, model: str
) -> None:
    """Every forecaster at its `fit` defaults (a series: RevIN centred on the last step) on a series
    whose level stepped inside the train rows, with exogenous phase columns, beats the naive and the
    seasonal naive forecasts on the test rows (all at the new level). Fixed seeds, 3 epochs."""
    csv = _write_step_with_phase(tmp_path / "step.csv")
    argv = ["--model", model, "--data", f"csv={csv}", "--target", "value", "--features", "sin,cos"]
    argv += ["--time", "t", "--window", "48", "--season", "24", "--epochs", "3", "--threads", "1"]
    code, out, err = _cli([*argv, "--no-progress", "--no-tensorboard", "--run-dir", str(tmp_path / "run")])
    assert code == 0, err
    test = json.loads((tmp_path / "run" / "fit_report.json").read_text())["test"]
    assert test["model"]["mse"] < min(test["naive"]["mse"], test["seasonal_naive"]["mse"]), test


def test_the_losing_note_names_a_flag_that_applies() -> None:
    """The note's hint fits the run: RevIN when the model could take it and has it off; the change
    mode for a level target of market bars only (series windows refuse it); else more data or time."""
    from tritonrl.agents.forecast import FORECASTERS
    from tritonrl.cli.fit import _loses_to_baseline

    val = {"model": {"mse": 0.5}, "naive": {"mse": 0.4}, "seasonal_naive": {"mse": 0.9}}
    series = {"validation": val, "target": "y", "target_mode": "level", "meta": {"series": ""}}
    market = {"validation": val, "target": "close", "target_mode": "level", "meta": {}}
    off, on = FORECASTERS["mlp"](8, 1), FORECASTERS["mlp"](8, 1, revin=True, revin_anchor="last")
    assert "--set revin=True" in (_loses_to_baseline(series, off) or "")
    assert "--target-mode" not in (_loses_to_baseline(series, on) or "x") and "--window" in (
        _loses_to_baseline(series, on) or ""
    )
    assert "--target-mode change" in (_loses_to_baseline(market, on) or "")
    assert "loses to the naive (0.4);" in (_loses_to_baseline(series, on) or "")
    beaten = {**series, "validation": {**val, "model": {"mse": 0.3}}}
    assert _loses_to_baseline(beaten, on) is None
