"""``tritonrl bench``: run the benchmark files of ``--dir`` (default ``benchmarks``) and print one
table; the timing helpers they import (``from tritonrl.cli.bench import Row, time_fn``).

A benchmark is ``benchmarks/<name>.py`` with ``run(quick: bool = False) -> list[Row]``; one whose
``REQUIRES`` do not import is skipped. ``ratio`` compares a row with its baseline in the same run.
Speed is measured here, never asserted in a test. See docs/pages/speed.md.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.util
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tritonrl.toolkit.runfolder import atomic_write_text, save_figure

__all__ = [
    "JSON_SCHEMA",
    "Row",
    "discover",
    "env_header",
    "format_table",
    "load",
    "main",
    "missing_requirements",
    "one_cpu_thread",
    "plot_ratios",
    "run_info",
    "time_fn",
    "time_loop",
    "to_json",
]

JSON_SCHEMA = 1
"""Version of the ``--json`` document's layout (`to_json`); bumped when a key changes meaning."""


@dataclass
class Row:
    """One measurement. ``value`` is in ``unit``; ``ratio`` is speed relative to the baseline."""

    benchmark: str
    case: str
    impl: str
    value: float
    unit: str
    ratio: float | None = None
    note: str = ""
    extra: dict[str, float] = field(default_factory=dict)


@contextmanager
def one_cpu_thread(enabled: bool = True) -> Iterator[None]:
    """Pin torch to one CPU thread inside the block (when ``enabled``), then restore the count."""
    threads = torch.get_num_threads()
    if enabled:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@contextmanager
def forced_dtype(name: str | None) -> Iterator[None]:
    """Inside the block, ``training_dtype`` answers ``name`` (``"f32"``, ``"bf16"``; ``None``: detected),
    through ``TRITONRL_DTYPE``; both are restored after it."""
    from tritonrl.toolkit.precision import DTYPE_ENV, training_dtype

    saved = os.environ.get(DTYPE_ENV)
    if name is None:
        os.environ.pop(DTYPE_ENV, None)
    else:
        os.environ[DTYPE_ENV] = name
    training_dtype.cache_clear()  # type: ignore[attr-defined]
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(DTYPE_ENV, None)
        else:
            os.environ[DTYPE_ENV] = saved
        training_dtype.cache_clear()  # type: ignore[attr-defined]


def time_fn(
    fn: Callable[[], object],
    device: torch.device | str = "cpu",
    *,
    warmup: int = 3,
    min_time: float = 0.2,
    max_reps: int = 10_000,
) -> dict[str, float]:
    """Median, first and third quartile of one call of ``fn``, in seconds.

    On CUDA ``triton.testing.do_bench`` (L2 flushed between runs); on CPU ``fn`` repeats for ``min_time``.
    """
    dev = torch.device(device)
    if dev.type == "cuda":
        from triton.testing import do_bench

        q20, q50, q80 = do_bench(fn, quantiles=[0.25, 0.5, 0.75], return_mode="median")
        return {"median": q50 / 1e3, "q1": q20 / 1e3, "q3": q80 / 1e3}
    for _ in range(warmup):
        fn()
    times: list[float] = []
    start = time.perf_counter()
    while (time.perf_counter() - start < min_time or len(times) < 5) and len(times) < max_reps:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    q = statistics.quantiles(times, n=4) if len(times) >= 2 else [times[0]] * 3
    return {"median": statistics.median(times), "q1": q[0], "q3": q[2]}


def time_loop(
    fn: Callable[[], object],
    device: torch.device | str = "cpu",
    *,
    block: int = 16,
    min_time: float = 0.2,
) -> dict[str, float]:
    """Median, first and third quartile of one call of ``fn`` called in a loop, in seconds.

    For loop-level work whose launch overhead counts: on CUDA, blocks of ``block`` calls ending in one
    synchronize; on CPU, `time_fn`.
    """
    if torch.device(device).type != "cuda":
        return time_fn(fn, "cpu", min_time=min_time)

    def run_block() -> None:
        for _ in range(block):
            fn()
        torch.cuda.synchronize()

    stats = time_fn(run_block, "cpu", warmup=2, min_time=min_time)
    return {k: v / block for k, v in stats.items()}


def _git_commit(short: bool) -> str | None:
    """The checkout's HEAD commit (``+dirty`` when tracked files differ), or None outside a git checkout."""
    try:
        args = ["git", "rev-parse", *(["--short"] if short else []), "HEAD"]
        commit = subprocess.run(args, capture_output=True, text=True, timeout=5).stdout.strip()
        if not commit:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        return commit + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux), else ``platform.processor()`` or ``"unknown"``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_info() -> dict[str, Any]:
    """Where and when the benchmarks ran: date, commit, torch and triton versions, device, CPU count
    and threads, Python and OS."""
    try:
        import triton

        triton_version: str | None = triton.__version__
    except Exception:
        triton_version = None
    cuda = torch.cuda.is_available()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": _git_commit(short=False),
        "torch": torch.__version__,
        "triton": triton_version,
        "device": torch.cuda.get_device_name(0) if cuda else f"cpu: {_cpu_name()}",
        "cuda": cuda,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
    }


def env_header() -> str:
    """Machine, versions, commit and thread settings, printed above every table."""
    commit = _git_commit(short=True) or "unknown"
    info = run_info()
    gpu = info["device"] if info["cuda"] else "none (CPU only)"
    return (
        f"tritonrl bench | commit {commit} | torch {info['torch']}"
        f" | triton {info['triton'] or 'not installed'}"
        f" | GPU {gpu} | torch CPU threads {info['torch_threads']}"
    )


def _finite(x: float | None) -> float | None:
    """``x``, or None for NaN and infinities (which strict JSON cannot hold)."""
    return None if x is None or not math.isfinite(x) else float(x)


def to_json(
    rows: Sequence[Row],
    info: Mapping[str, Any],
    config: Mapping[str, Any],
    *,
    failed: Sequence[str] = (),
    skipped: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ``--json`` document: ``schema``, ``run``, ``config``, ``rows``, ``failed`` and ``skipped``;
    non-finite numbers become ``null`` (strict JSON)."""
    out_rows = []
    for r in rows:
        d = dataclasses.asdict(r)
        d["value"] = _finite(r.value)
        d["ratio"] = _finite(r.ratio)
        d["extra"] = {k: _finite(v) for k, v in r.extra.items()}
        d["config"] = dict(config)
        out_rows.append(d)
    return {
        "schema": JSON_SCHEMA,
        "run": dict(info),
        "config": dict(config),
        "rows": out_rows,
        "failed": list(failed),
        "skipped": dict(skipped or {}),
    }


def plot_ratios(rows: Sequence[Row], out_dir: Path, *, subtitle: str = "") -> list[Path]:
    """One PNG per benchmark in ``out_dir``: each row's ``ratio`` as a bar, a line at 1; returns the files.

    Raises:
        ImportError: matplotlib is not installed (the ``train`` extra).
    """
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for bench in dict.fromkeys(r.benchmark for r in rows):
        rated = [r for r in rows if r.benchmark == bench and r.ratio is not None and math.isfinite(r.ratio)]
        if not any(r.ratio != 1.0 for r in rated):
            continue
        impls = list(dict.fromkeys(r.impl for r in rated))
        colors = plt.get_cmap("tab10")
        ys, labels, y, last_case = [], [], 0.0, None
        for r in rated:  # in the benchmark's order; a gap between cases
            if last_case is not None and r.case != last_case:
                y += 0.6
            ys.append(y)
            label = f"{r.case}: {r.impl}"
            labels.append(label if len(label) <= 70 else label[:67] + "...")
            last_case, y = r.case, y + 1
        fig, ax = plt.subplots(figsize=(9, 1.4 + 0.24 * y))
        ax.barh(
            ys,
            [r.ratio or 0.0 for r in rated],  # never None here (filtered above): for mypy
            height=0.8,
            color=[colors(impls.index(r.impl) % 10) for r in rated],
        )
        for yi, r in zip(ys, rated, strict=True):
            ax.annotate(f"{r.ratio:.2f}x", (r.ratio, yi), xytext=(3, 0), textcoords="offset points",
                        va="center", fontsize=6)  # fmt: skip
        ax.axvline(1.0, color="black", linewidth=0.8)
        ratios = [r.ratio for r in rated if r.ratio and r.ratio > 0]
        if ratios and max(ratios) / min(ratios) > 30:
            ax.set_xscale("log")
        ax.set_yticks(ys, labels, fontsize=6.5)
        ax.invert_yaxis()
        ax.margins(x=0.12)
        ax.set_xlabel("ratio against the baseline in the same run (> 1: faster)", fontsize=8)
        title = bench if not subtitle else bench + "\n" + "\n".join(textwrap.wrap(subtitle, 100))
        ax.set_title(title, fontsize=8)
        fig.tight_layout()
        path = out_dir / f"{bench}.png"
        try:
            written.append(save_figure(fig, path, dpi=110))
        finally:
            plt.close(fig)
    return written


def format_table(rows: Sequence[Row]) -> str:
    """Rows as an aligned text table."""
    header = ("benchmark", "case", "impl", "value", "unit", "ratio", "note")
    body = [
        (
            r.benchmark,
            r.case,
            r.impl,
            f"{r.value:.4g}",
            r.unit,
            "" if r.ratio is None else f"{r.ratio:.2f}x",
            r.note,
        )
        for r in rows
    ]
    widths = [max(len(str(c)) for c in col) for col in zip(header, *body, strict=True)]

    def line(cells):
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True))

    out = [line(header), line(["-" * w for w in widths])]
    out.extend(line(b) for b in body)
    return "\n".join(s.rstrip() for s in out)


def discover(directory: Path) -> list[Path]:
    """Benchmark files in ``directory``: ``*.py`` not starting with an underscore."""
    return sorted(p for p in directory.glob("*.py") if not p.name.startswith("_"))


def load(path: Path) -> Any:
    """Import the benchmark file ``path`` (not kept in ``sys.modules``); its own errors propagate."""
    spec = importlib.util.spec_from_file_location(f"tritonrl_bench_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load benchmark {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def missing_requirements(module: object) -> list[str]:
    """The packages named in ``module.REQUIRES`` (import names) that do not import here."""
    requires = getattr(module, "REQUIRES", ())
    missing = []
    for name in (requires,) if isinstance(requires, str) else requires:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def main(
    directory: str | Path = "benchmarks",
    only: Sequence[str] = (),
    quick: bool = False,
    *,
    json_path: str | Path | None = None,
    plot_dir: str | Path | None = None,
) -> int:
    """Run every benchmark in ``directory`` (or those in ``only``) and print one table.

    ``json_path`` also writes `to_json`; ``plot_dir`` one PNG per benchmark (`plot_ratios`).
    Returns the exit code: 1 if a benchmark raised, 2 if ``directory`` is missing or ``only`` names
    an unknown benchmark.
    """
    directory = Path(directory)
    if not directory.is_dir():
        print(f"error: no benchmark folder at {directory.resolve()}", file=sys.stderr)
        return 2
    known = [p.stem for p in discover(directory)]
    unknown = [name for name in only if name not in known]
    if unknown:
        print(
            f"error: unknown benchmark{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"known benchmarks: {', '.join(known) or f'none in {directory}'}",
            file=sys.stderr,
        )
        return 2
    if not torch.cuda.is_available():
        torch.set_num_threads(1)
    print(env_header())
    rows: list[Row] = []
    failed = []
    skipped: dict[str, str] = {}
    for path in discover(directory):
        if only and path.stem not in only:
            continue
        print(f"running {path.stem} ...", flush=True)
        try:
            module = load(path)
            if missing := missing_requirements(module):
                print(f"skipped {path.stem}: needs {', '.join(missing)}, which is not installed", flush=True)
                skipped[path.stem] = f"needs {', '.join(missing)}"
                continue
            rows.extend(module.run(quick=quick))
        except Exception:
            failed.append(path.stem)
            traceback.print_exc()
    print(format_table(rows))
    if json_path is not None:
        config = {"quick": quick, "only": list(only), "directory": str(directory)}
        doc = to_json(rows, run_info(), config, failed=failed, skipped=skipped)
        json_path = Path(json_path)
        atomic_write_text(json_path, json.dumps(doc, indent=1, allow_nan=False) + "\n")
        print(f"wrote {len(rows)} rows to {json_path}")
    if plot_dir is not None:
        try:
            written = plot_ratios(
                rows, Path(plot_dir), subtitle=env_header().removeprefix("tritonrl bench | ")
            )
        except ImportError as exc:
            if exc.name is None or exc.name.split(".")[0] != "matplotlib":
                raise
            print("notice: matplotlib is not installed: --plot skipped (pip install 'tritonrl[train]')")
        else:
            print(f"wrote {len(written)} figure{'s' if len(written) != 1 else ''} to {plot_dir}")
    if failed:
        print(f"benchmarks that failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
