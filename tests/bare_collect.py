"""What a bare GPU machine does first, without the GPU: import every benchmark, collect the tests.

A bare GPU machine holds torch, triton, numpy, safetensors, pytest and hypothesis but no
gymnasium, and reaches no package registry; ``benchmarks/gpu-check.sh`` runs there from the source
tree. This script, run from anywhere with any Python that has those packages::

    python tests/bare_collect.py [--hide gymnasium] [--min-gpu N] [--json]

1. makes each ``--hide`` package unimportable (a meta-path finder raising ``ModuleNotFoundError``),
   to play a machine without it inside a full environment (``tests/test_bare_machine.py`` does);
2. runs ``pytest --collect-only -m gpu`` over the whole suite (every test file is imported; the
   ``gpu`` marker only deselects) and counts the ``gpu``-marked tests per file;
3. imports every benchmark the way ``python -m tritonrl bench`` loads it (through
   :func:`tritonrl.cli.bench.load`, the bench runner whose helpers the benchmarks import).

Exits 1 when a benchmark does not import, a test file does not collect, fewer than ``--min-gpu``
tests are marked ``gpu`` or a kernel parity file has none (a file that started to skip as a whole
would otherwise hide), else 0. Prints a summary; with ``--json``, its last line is
``BARE-COLLECT <json>`` for the test to read. ``benchmarks/bare-check.sh`` runs it in a fresh
environment holding only those packages (CI does).
"""

from __future__ import annotations

import argparse
import importlib.abc
import json
import os
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The compiled-kernel parity suite: none of these may need an optional package. 97 ``gpu`` tests
# today (noisy head 45, sum tree 26, mamba2 15, harness 8, noisy modules 2, replay 1); the floor
# leaves room for a parametrisation being trimmed, the per-file check catches a file dropping out.
KERNEL_FILES = (
    "tests/kernels/test_harness.py",
    "tests/kernels/test_mamba2_kernels.py",
    "tests/kernels/test_noisy_head.py",
    "tests/agents/test_noisy_head_modules.py",
    "tests/toolkit/test_replay_checkpoint.py",
    "tests/kernels/test_sumtree.py",
)
MIN_GPU_TESTS = 90


class HidePackages(importlib.abc.MetaPathFinder):
    """A meta-path finder under which ``names`` (and their submodules) cannot be imported."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(
                f"No module named {fullname!r} (hidden by bare_collect.py)", name=fullname
            )
        return None


class _Tally:
    """pytest plugin: collection errors, modules skipped as a whole (with reasons), gpu tests."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.skipped: dict[str, str] = {}
        self.gpu: Counter[str] = Counter()
        self.total = 0

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self.errors.append(report.nodeid or "<session>")
        elif report.skipped:
            longrepr = report.longrepr
            reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            self.skipped[report.nodeid] = reason

    def pytest_deselected(self, items) -> None:
        self.total += len(items)

    def pytest_collection_finish(self, session) -> None:
        self.total += len(session.items)
        for item in session.items:
            if item.get_closest_marker("gpu") is not None:
                self.gpu[item.nodeid.split("::")[0]] += 1


def _import_benchmarks() -> tuple[list[str], dict[str, str]]:
    from tritonrl.cli.bench import discover, load

    imported, failed = [], {}
    for path in discover(ROOT / "benchmarks"):
        try:
            load(path)
            imported.append(path.stem)
        except Exception as exc:
            failed[path.stem] = f"{type(exc).__name__}: {exc}"
    return imported, failed


def main(argv: list[str] | None = None) -> int:
    """Run the checks described in the module docstring; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--hide",
        action="append",
        default=[],
        metavar="PACKAGE",
        help="make PACKAGE unimportable first (repeatable)",
    )
    parser.add_argument(
        "--min-gpu",
        type=int,
        default=MIN_GPU_TESTS,
        help=f"fewest gpu-marked tests accepted (default {MIN_GPU_TESTS})",
    )
    parser.add_argument("--json", action="store_true", help="end with a BARE-COLLECT <json> line")
    args = parser.parse_args(argv)
    hidden = set(args.hide)
    if hidden:
        sys.meta_path.insert(0, HidePackages(hidden))
    sys.path.insert(0, str(ROOT))  # the source tree, never an installed copy
    os.chdir(ROOT)

    import pytest

    tally = _Tally()
    rc = pytest.main(
        ["--collect-only", "-qq", "-m", "gpu", "-p", "no:cacheprovider", "tests"], plugins=[tally]
    )
    benchmarks, bench_failed = _import_benchmarks()
    missing_kernel_files = [f for f in KERNEL_FILES if tally.gpu[f] == 0]
    gpu = sum(tally.gpu.values())
    problems = [f"benchmark {name} does not import: {why}" for name, why in bench_failed.items()]
    problems += [f"collection error: {nodeid}" for nodeid in tally.errors]
    if rc != 0 and not tally.errors:
        problems.append(f"pytest --collect-only exited {int(rc)}")
    if gpu < args.min_gpu:
        problems.append(f"only {gpu} gpu-marked tests collected (at least {args.min_gpu} expected)")
    problems += [f"no gpu-marked test collected from {f}" for f in missing_kernel_files]
    print(
        f"bare collect (hidden: {', '.join(sorted(hidden)) or 'nothing'}): "
        f"{len(benchmarks)} benchmarks imported ({', '.join(benchmarks)}); {tally.total} tests collected, "
        f"{gpu} marked gpu"
    )
    if tally.skipped:
        print(f"{len(tally.skipped)} test files skipped as a whole (pytest's SKIPPED lines above say why)")
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if args.json:
        summary = {
            "hidden": sorted(hidden),
            "benchmarks": benchmarks,
            "benchmark_failures": bench_failed,
            "errors": tally.errors,
            "skipped_modules": tally.skipped,
            "total": tally.total,
            "gpu": gpu,
            "gpu_per_file": dict(tally.gpu),
            "problems": problems,
            "pytest_exit": int(rc),
        }
        print("BARE-COLLECT " + json.dumps(summary))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
