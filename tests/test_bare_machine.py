"""A bare GPU machine (no gymnasium, no registry) must collect every test file and import every
benchmark, and ``python -m tritonrl bench`` skips a benchmark whose package is missing in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bare_collect import KERNEL_FILES, MIN_GPU_TESTS
from tritonrl.cli.bench import discover
from tritonrl.cli.bench import main as bench_main

ROOT = Path(__file__).resolve().parents[1]


def _bare_collect(*hide: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    args = [a for name in hide for a in ("--hide", name)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "bare_collect.py"), *args, "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("BARE-COLLECT ")]
    assert lines, f"no summary line (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc, json.loads(lines[-1].removeprefix("BARE-COLLECT "))


def test_suite_collects_and_benchmarks_import_without_gymnasium() -> None:
    proc, summary = _bare_collect("gymnasium")
    assert summary["hidden"] == ["gymnasium"]
    assert summary["errors"] == [], f"test files that do not collect without gymnasium: {summary['errors']}"
    assert summary["benchmark_failures"] == {}
    assert sorted(summary["benchmarks"]) == sorted(p.stem for p in discover(ROOT / "benchmarks"))
    assert summary["gpu"] >= MIN_GPU_TESTS, summary["gpu_per_file"]
    assert all(summary["gpu_per_file"].get(f, 0) > 0 for f in KERNEL_FILES), summary["gpu_per_file"]
    # a file that skips as a whole says why, and only for the missing package
    assert summary["skipped_modules"], "nothing skipped although gymnasium is hidden"
    for nodeid, reason in summary["skipped_modules"].items():
        assert "gymnasium" in reason, (nodeid, reason)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_bench_skips_a_benchmark_whose_requirement_is_missing(tmp_path: Path, capsys) -> None:
    (tmp_path / "needs_more.py").write_text(
        "REQUIRES = ('tritonrl_no_such_package',)\n"
        "def run(quick=False):\n    raise AssertionError('run() of a skipped benchmark was called')\n"
    )
    (tmp_path / "plain.py").write_text(
        "from tritonrl.cli.bench import Row\n"
        "def run(quick=False):\n    return [Row('plain', 'case', 'impl', 1.5, 'ms')]\n"
    )
    assert bench_main(tmp_path, quick=True) == 0
    out, err = capsys.readouterr()
    skipped = [ln for ln in out.splitlines() if "needs_more" in ln and "running" not in ln]
    assert skipped == ["skipped needs_more: needs tritonrl_no_such_package, which is not installed"]
    table = [ln.split() for ln in out.splitlines() if ln.startswith("plain")]
    assert table == [["plain", "case", "impl", "1.5", "ms"]]
    assert "Traceback" not in err and "failed" not in err


def test_gymnasium_benchmarks_skip_in_one_line_without_gymnasium(
    monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setitem(sys.modules, "gymnasium", None)  # `import gymnasium` raises ModuleNotFoundError
    names = ["dqn_loop", "market_collect", "market_env", "ppo_loop"]
    assert bench_main(ROOT / "benchmarks", only=names, quick=True) == 0
    out, err = capsys.readouterr()
    assert [ln for ln in out.splitlines() if ln.startswith("skipped")] == [
        f"skipped {name}: needs gymnasium, which is not installed" for name in names
    ]
    assert "Traceback" not in err


def test_train_without_gymnasium_is_one_line(tmp_path: Path) -> None:
    """`python -m tritonrl train` without gymnasium: one line naming it, exit 2, no run folder."""
    shim = (
        "import sys\n"
        "sys.modules['gymnasium'] = None\n"  # `import gymnasium` raises ModuleNotFoundError
        "from tritonrl.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-c", shim, "train", "--steps", "100", "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "error: training needs the gymnasium package, which is not installed (pip install gymnasium)"
    ]
    assert not run_dir.exists()
