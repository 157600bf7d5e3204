"""The tear sheet of a backtest: six files written whole, a self-contained page, checked input."""

from __future__ import annotations

import base64
import math
import os
import re
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("matplotlib")

import matplotlib.image as mpimg
import tritonrl.toolkit.backtest.tearsheet as ts
from tritonrl.toolkit.backtest.tearsheet import FIGURES, HTML_NAME, write_tearsheet

NAMES = (*(f"{f}.png" for f in FIGURES), HTML_NAME)
METRICS = {
    "agent": {"sharpe": 1.23456, "max_drawdown": 0.0812345, "turnover": 12345.6, "calmar": math.nan},
    "equal weight": {"sharpe": -0.25, "max_drawdown": 0.2},
    "cash": {"sharpe": 0.0, "trades": 3},
}
SHOWN = {  # what the page shows for each metric (4 significant digits, thousands grouped, NaN a dash)
    "agent": ["1.235", "0.08123", "12,346", "\u2013"],
    "equal weight": ["-0.25", "0.2"],
    "cash": ["0", "3"],
}


def _report(periods: int = 100, assets: int = 2, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    dates = [str(np.datetime64("2022-01-03") + i) for i in range(periods + 1)]

    def curve(mu: float, sd: float) -> list[float]:
        return np.concatenate([[1.0], np.cumprod(1.0 + rng.normal(mu, sd, periods))]).tolist()

    return {
        "title": "Agent <vs> baselines",
        "periods_per_year": 252.0,
        "fill": "next_open",
        "strategy": "agent",
        "dates": dates,
        "equity": {
            "equal weight": curve(2e-4, 0.01),
            "agent": curve(5e-4, 0.01),
            "cash": [1.0] * (periods + 1),
        },
        "weights": rng.dirichlet(np.ones(assets + 1), periods).tolist(),
        "symbols": [f"S{i}" for i in range(assets)],
        "turnover": rng.uniform(0.0, 0.5, periods).tolist(),
        "costs": rng.uniform(0.0, 1e-3, periods).tolist(),
        "folds": [dates[periods // 3], dates[2 * periods // 3]],
        "metrics": METRICS,
    }


def _written(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_writes_six_files_and_a_self_contained_page(tmp_path: Path) -> None:
    paths = write_tearsheet(tmp_path / "sheet", _report(), rolling_window=20)
    assert sorted(paths) == sorted([*FIGURES, "html"])
    assert _written(tmp_path / "sheet") == sorted(NAMES)  # and no temporary file
    for name in FIGURES:
        image = mpimg.imread(paths[name])
        assert image.shape[0] >= 300 and image.shape[1] >= 800, (name, image.shape)
        assert image.std() > 0.05, name  # something is drawn, not a blank canvas
    page = paths["html"].read_text(encoding="utf-8")
    assert "<title>Agent &lt;vs&gt; baselines</title>" in page  # escaped
    for name, shown in SHOWN.items():
        row = re.search(rf"<tr[^>]*><th>{re.escape(name)}</th>(.*?)</tr>", page)
        assert row is not None, name
        cells = re.findall(r"<td>(.*?)</td>", row.group(1))
        assert [c for c in cells if c != "\u2013"] == [s for s in shown if s != "\u2013"], (name, cells)
    assert re.findall(r"<th>(\w+)</th>", page.split("<tbody>")[0])[:5] == [
        *("sharpe", "max_drawdown", "turnover", "calmar", "trades")
    ]
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 5 and page.count("data:image/png") == 5
    for name, encoded in zip(FIGURES, images, strict=True):
        assert base64.b64decode(encoded) == paths[name].read_bytes(), name  # the page embeds the files
    lowered = page.lower()
    assert "http://" not in lowered and "https://" not in lowered
    for attr in re.findall(r'\b(?:src|href)\s*=\s*"([^"]*)"', page):
        assert attr.startswith("data:image/png;base64,") and not attr.startswith("//"), attr[:40]
    assert "<script" not in lowered and "<link" not in lowered and "@import" not in lowered
    assert "next_open" in page and "How to read this" in page


def test_a_period_shorter_than_the_window_and_no_costs_or_folds(tmp_path: Path) -> None:
    report = {**_report(periods=10), "folds": []}
    del report["costs"]
    paths = write_tearsheet(tmp_path, report)  # window 63 > 10 periods: the Sharpe figure says so
    assert _written(tmp_path) == sorted(NAMES)
    assert mpimg.imread(paths["rolling_sharpe"]).shape[1] >= 800


def _shorter(key: str) -> Any:
    report = _report()
    if key == "equity":
        report["equity"]["cash"] = report["equity"]["cash"][:-1]
    elif key == "weights":
        report["weights"] = [row[:-1] for row in report["weights"]]
    else:
        report[key] = report[key][:-1]
    return report


@pytest.mark.parametrize("key", ["equity", "weights", "turnover", "costs", "dates"])
def test_mismatched_lengths_raise_one_line_and_write_nothing(key: str, tmp_path: Path) -> None:
    folder = tmp_path / "sheet"
    with pytest.raises(ValueError, match=rf"report\['{key}'\]") as info:  # dates: named as what T is from
        write_tearsheet(folder, _shorter(key))
    assert "\n" not in str(info.value)
    assert _written(folder) == []


@pytest.mark.parametrize(
    ("key", "change"),
    [
        ("turnover", None),  # missing
        ("metrics", None),
        ("strategy", "nobody"),
        ("folds", ["2031-01-01"]),
        ("dates", ["2022-01-03"] * 101),
        ("equity", {"agent": [1.0] + [-1.0] * 100}),
        ("periods_per_year", 0.0),
        ("symbols", "S0"),
    ],
)
def test_a_bad_key_is_named(key: str, change: Any, tmp_path: Path) -> None:
    report = _report()
    if change is None:
        del report[key]
    else:
        report[key] = change
    with pytest.raises(ValueError, match=rf"report\['{key}'\]"):
        write_tearsheet(tmp_path, report)
    with pytest.raises(ValueError, match="rolling_window"):
        write_tearsheet(tmp_path, _report(), rolling_window=1)
    assert _written(tmp_path) == []


def test_a_failure_in_the_page_write_leaves_no_page(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real_replace = os.replace

    def failing_replace(src: Any, dst: Any) -> None:
        if Path(dst).name == HTML_NAME:  # the page's bytes are in its temporary file: fail the rename
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match=HTML_NAME):
        write_tearsheet(tmp_path, _report())
    assert _written(tmp_path) == sorted(f"{f}.png" for f in FIGURES)  # whole figures, no page, no temp


def test_a_failure_while_drawing_writes_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def broken(data: Any) -> bytes:
        raise RuntimeError("drawing failed")

    monkeypatch.setattr(ts, "_turnover_png", broken)
    with pytest.raises(RuntimeError, match="drawing failed"):
        write_tearsheet(tmp_path, _report())
    assert _written(tmp_path) == []


def test_without_matplotlib(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ModuleNotFoundError) as info:
        write_tearsheet(tmp_path, _report())
    assert info.value.name == "matplotlib"  # what the market run's callers test for
    assert _written(tmp_path) == []


def test_many_assets_show_the_nine_largest_and_other(tmp_path: Path) -> None:
    report = _report(assets=20)
    rng = np.random.default_rng(1)
    tilt = np.ones(21)
    tilt[[3, 5, 8, 11, 12, 14, 17, 19, 20]] = 6.0  # columns of S2, S4, S7, ...: the largest on average
    report["weights"] = rng.dirichlet(tilt, 100).tolist()
    weights = np.asarray(report["weights"])
    bands, labels = ts._weight_bands(weights, report["symbols"])
    assert labels == ["cash", "S2", "S4", "S7", "S10", "S11", "S13", "S16", "S18", "S19", "other (11)"]
    # the bands regroup the same weights: equal to summation order (1e-12 on sums of <= 21 values <= 1)
    np.testing.assert_allclose(bands.sum(axis=0), weights.sum(axis=1), rtol=0, atol=1e-12)
    np.testing.assert_allclose(bands[0], weights[:, 0], rtol=0, atol=0)  # exact: cash is copied
    paths = write_tearsheet(tmp_path, report)
    assert mpimg.imread(paths["weights"]).shape[1] >= 800
    few_bands, few_labels = ts._weight_bands(weights[:, :11], report["symbols"][:10])
    assert few_labels == ["cash", *report["symbols"][:10]] and few_bands.shape == (11, 100)


def test_drawdown_and_rolling_sharpe_against_plain_python() -> None:
    equity = np.array([1.0, 1.1, 0.99, 1.05, 1.2, 0.9, 0.95, 1.3])
    peak, expected = 0.0, []
    for e in equity:
        peak = max(peak, e)
        expected.append(e / peak - 1.0)
    # one division each way: equal to a few ulps (1e-12 leaves room, far below any visible difference)
    np.testing.assert_allclose(ts._drawdown(equity), expected, rtol=0, atol=1e-12)
    returns = [equity[i + 1] / equity[i] - 1.0 for i in range(len(equity) - 1)]
    window = 3
    sharpe = [
        statistics.mean(returns[i : i + window]) / statistics.stdev(returns[i : i + window]) * math.sqrt(252)
        for i in range(len(returns) - window + 1)
    ]
    np.testing.assert_allclose(ts._rolling_sharpe(equity, window, 252.0), sharpe, rtol=1e-10, atol=0)
    assert np.isnan(ts._rolling_sharpe(np.ones(6), 3, 252.0)).all()  # flat: no Sharpe, not infinity
    assert ts._rolling_sharpe(equity, 20, 252.0).size == 0
