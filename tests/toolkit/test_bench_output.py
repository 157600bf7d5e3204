"""``tritonrl bench --json PATH --plot DIR`` on a folder of fake benchmarks (fast: nothing is timed).

The runner under test is the package's (:mod:`tritonrl.cli.bench`); the folder holds small
benchmark files whose ``run`` returns fixed rows, so the JSON can be compared value for value.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tritonrl.cli import main as cli_main

FAKE = """
from tritonrl.cli.bench import Row

def run(quick: bool = False):
    n = 2 if quick else 3
    rows = [Row("fake", f"b{b}", "eager", 10.0 * b, "calls/s") for b in range(1, n + 1)]
    for b in range(1, n + 1):
        rows.append(Row("fake", f"b{b}", "fused", 25.0 * b, "calls/s", ratio=2.5, note="vs eager"))
    nan, inf = float("nan"), float("inf")
    rows.append(Row("fake", "skipped", "gpu", nan, "", None, "needs CUDA", extra={"mib": inf}))
    return rows
"""
NO_RATIOS = """
from tritonrl.cli.bench import Row

def run(quick: bool = False):
    return [Row("plain", "one", "only", 1.5, "ms", extra={"peak_mib": 3.0})]
"""
BROKEN = """
def run(quick: bool = False):
    raise RuntimeError("this benchmark breaks")
"""


@pytest.fixture
def bench_dir(tmp_path: Path) -> Path:
    """A benchmark folder with two fake benchmarks."""
    folder = tmp_path / "benchmarks"
    folder.mkdir()
    (folder / "fake.py").write_text(FAKE)
    (folder / "plain.py").write_text(NO_RATIOS)
    return folder


def _strict(text: str) -> object:
    def refuse(name: str) -> None:
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_json_holds_every_row_with_config_and_run_info(
    bench_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out" / "bench.json"
    assert cli_main(["bench", "--dir", str(bench_dir), "--quick", "--json", str(out)]) == 0
    assert f"wrote 6 rows to {out}" in capsys.readouterr().out
    doc = _strict(out.read_text())
    assert isinstance(doc, dict)
    assert doc["schema"] == 1
    assert set(doc["run"]) >= {"date", "commit", "torch", "triton", "device", "torch_threads"}
    assert doc["run"]["torch"] == __import__("torch").__version__
    assert doc["run"]["device"]  # the CPU's or GPU's name, never empty
    assert doc["config"] == {"quick": True, "only": [], "directory": str(bench_dir)}
    rows = doc["rows"]
    assert [(r["benchmark"], r["case"], r["impl"]) for r in rows] == [
        ("fake", "b1", "eager"),
        ("fake", "b2", "eager"),
        ("fake", "b1", "fused"),
        ("fake", "b2", "fused"),
        ("fake", "skipped", "gpu"),
        ("plain", "one", "only"),
    ]
    assert rows[3]["value"] == 50.0 and rows[3]["ratio"] == 2.5 and rows[3]["note"] == "vs eager"
    assert rows[4]["value"] is None and rows[4]["extra"] == {"mib": None}  # NaN, inf -> null
    assert rows[5]["extra"] == {"peak_mib": 3.0} and rows[5]["ratio"] is None
    assert all(r["config"] == doc["config"] for r in rows)
    assert doc["failed"] == [] and doc["skipped"] == {}


def test_json_names_the_selected_benchmarks_and_failures(bench_dir: Path, tmp_path: Path) -> None:
    (bench_dir / "broken.py").write_text(BROKEN)
    out = tmp_path / "bench.json"
    assert cli_main(["bench", "--dir", str(bench_dir), "broken", "plain", "--json", str(out)]) == 1
    doc = _strict(out.read_text())
    assert isinstance(doc, dict)
    assert doc["failed"] == ["broken"]
    assert doc["config"]["only"] == ["broken", "plain"] and doc["config"]["quick"] is False
    assert [r["benchmark"] for r in doc["rows"]] == ["plain"]


def test_plot_draws_one_png_per_benchmark_with_ratios(
    bench_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    figs = tmp_path / "figs"
    assert cli_main(["bench", "--dir", str(bench_dir), "--plot", str(figs)]) == 0
    assert "wrote 1 figure to" in capsys.readouterr().out
    assert sorted(p.name for p in figs.iterdir()) == ["fake.png"]  # plain has no ratio: no figure
    data = (figs / "fake.png").read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5_000


def test_plot_without_matplotlib_is_one_notice(
    bench_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    figs, out = tmp_path / "figs", tmp_path / "bench.json"
    assert cli_main(["bench", "--dir", str(bench_dir), "--json", str(out), "--plot", str(figs)]) == 0
    notices = [line for line in capsys.readouterr().out.splitlines() if line.startswith("notice")]
    assert notices == ["notice: matplotlib is not installed: --plot skipped (pip install 'tritonrl[train]')"]
    assert not figs.exists() and out.is_file()  # the JSON is still written


@pytest.mark.parametrize("outside", [None, "f32"])
def test_forced_dtype_decides_inside_and_restores_after(
    outside: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch
    from tritonrl.cli.bench import forced_dtype
    from tritonrl.toolkit.precision import DTYPE_ENV, training_dtype

    if outside is None:
        monkeypatch.delenv(DTYPE_ENV, raising=False)
    else:
        monkeypatch.setenv(DTYPE_ENV, outside)
    training_dtype.cache_clear()
    assert training_dtype("cpu") == torch.float32  # cached from here on
    with forced_dtype("bf16"):
        assert training_dtype("cpu") == torch.bfloat16
        with forced_dtype(None):
            assert training_dtype("cpu") == torch.float32
        assert training_dtype("cpu") == torch.bfloat16
    import os

    assert os.environ.get(DTYPE_ENV) == outside and training_dtype("cpu") == torch.float32
