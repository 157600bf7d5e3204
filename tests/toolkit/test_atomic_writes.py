"""Every file a run writes is written whole: a ``kill -9`` at any point leaves the old file or the new.

Each writer of a run folder (and of ``tritonrl bench``) runs in a forked child that dies inside
the write of its file: mid-write (``RLIMIT_FSIZE`` at half the file's size, so the kernel kills
the child with ``SIGXFSZ`` in the middle of the bytes, whatever writes them), just before the
rename (``os.replace`` sends ``SIGKILL``) and just after it (the folder's ``fsync``). The file is
then the old one byte for byte, or the new one whole. A source scan keeps a new in-place write of
a run file from slipping in.
"""

from __future__ import annotations

import ast
import json
import os
import resource
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("matplotlib")

import tritonrl.toolkit.checkpoint as ckpt_mod
from tritonrl.toolkit.checkpoint import load_checkpoint, save_checkpoint
from tritonrl.toolkit.distributed import SINGLE_PROCESS
from tritonrl.toolkit.lifecycle import RunLifecycle
from tritonrl.toolkit.logger import MetricLogger, plot_learning_curve, read_csv
from tritonrl.toolkit.runfolder import RUN_FILES

ROOT = Path(__file__).resolve().parents[2]
OLD = b"the old file\n"
PNG_START, PNG_END = b"\x89PNG\r\n\x1a\n", b"IEND\xaeB`\x82"

# -- the writers: each writes one file of `folder` (named by the case), the old one already there


def _metrics(folder: Path, *, new_column: bool) -> None:
    """A flush that rewrites metrics.csv: a new column (``b``), or a second flush at the last row's
    step (its ``eval/mean_return`` merges into that row)."""
    log = MetricLogger(folder, tensorboard=False)
    if new_column:
        log.log(3, {"a": 3.0, "b": 1.0})
    else:
        log.log(2, {"eval/mean_return": 7.0})
    log.flush(3 if new_column else 2)
    log.close()


def _old_metrics(folder: Path) -> None:
    (folder / "metrics.csv").write_text("global_step,a,eval/mean_return\n1,0.5,\n2,0.25,\n")


def _curve(folder: Path) -> None:
    (folder / "m.csv").write_text("global_step,charts/episodic_return\n1,1.0\n2,3.0\n3,2.0\n")
    plot_learning_curve(folder / "m.csv", folder / "curve.png")


def _fit_report(folder: Path) -> None:
    life = RunLifecycle(folder, SINGLE_PROCESS)
    life.write_report(
        "fit_report.json", {"stopped": "epochs", "test": {"mse": 0.5}, "rows": list(range(200))}
    )


class _Flat:
    """A market agent that always holds cash (greedy action 0 of a discrete market env)."""

    def act(self, obs: torch.Tensor, explore: bool = True) -> torch.Tensor:
        return torch.zeros(obs.shape[0], dtype=torch.long)


def _market_report(folder: Path) -> None:
    from tritonrl.toolkit.training.market import build_market_run, env_config_for, market_report

    run = build_market_run("market:synthetic", 1, env_config_for(object(), {}), seed=0)
    market_report(_Flat(), run, seed=0, run_dir=folder)  # test_report.json, then equity.png


def _equity(folder: Path) -> None:
    from tritonrl.toolkit.envs.market.evaluate import plot_equity

    report = {
        "period": {"name": "test", "start": "2024-01-01"},
        "agent": {"equity": [1.0, 1.1, 0.9, 1.2], "sharpe": 0.5},
        "buy_and_hold": {"equity": [1.0, 0.9, 1.0, 1.05], "sharpe": 0.1},
    }
    plot_equity(report, folder / "equity.png")  # what market_report draws, after its JSON


_BENCH = """
from tritonrl.cli.bench import Row

def run(quick=False):
    return [Row("fake", f"b{b}", impl, 10.0 * b * (1 + i), "calls/s", ratio=1.0 + i)
            for b in range(1, 4) for i, impl in enumerate(("eager", "fused"))]
"""


def _bench_json(folder: Path) -> None:
    from tritonrl.cli import bench

    (folder / "benchmarks").mkdir(exist_ok=True)
    (folder / "benchmarks" / "fake.py").write_text(_BENCH)
    assert bench.main(folder / "benchmarks", json_path=folder / "bench.json") == 0


def _bench_figure(folder: Path) -> None:
    from tritonrl.cli.bench import Row, plot_ratios

    rows = [Row("fake", f"b{b}", "fused", 10.0 * b, "calls/s", ratio=1.0 + b) for b in range(1, 4)]
    assert plot_ratios(rows, folder) == [folder / "fake.png"]


def _checkpoint(folder: Path) -> None:
    save_checkpoint(folder / "checkpoint.safetensors", {"w": torch.arange(4096.0), "step": 3})


def _json_ok(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def _png_ok(data: bytes) -> bool:
    return data.startswith(PNG_START) and data.endswith(PNG_END)


def _csv_ok(path: Path) -> bool:
    try:
        return len(read_csv(path)) >= 2
    except ValueError:
        return False


def _ckpt_ok(path: Path) -> bool:
    return load_checkpoint(path)["step"] == 3


# (writer, the file it writes, whether the new file is whole, a setup that writes the old file)
_Writer = Callable[[Path], None]
WRITERS: dict[str, tuple[_Writer, str, Callable[[Path], bool], _Writer | None]] = {
    "metrics.csv new column": (lambda f: _metrics(f, new_column=True), "metrics.csv", _csv_ok, _old_metrics),
    "metrics.csv merged row": (lambda f: _metrics(f, new_column=False), "metrics.csv", _csv_ok, _old_metrics),
    "curve.png": (_curve, "curve.png", lambda p: _png_ok(p.read_bytes()), None),
    "fit_report.json": (_fit_report, "fit_report.json", lambda p: _json_ok(p.read_bytes()), None),
    "test_report.json": (_market_report, "test_report.json", lambda p: _json_ok(p.read_bytes()), None),
    "equity.png": (_equity, "equity.png", lambda p: _png_ok(p.read_bytes()), None),
    "bench json": (_bench_json, "bench.json", lambda p: _json_ok(p.read_bytes()), None),
    "bench figure": (_bench_figure, "fake.png", lambda p: _png_ok(p.read_bytes()), None),
    "checkpoint": (_checkpoint, "checkpoint.safetensors", _ckpt_ok, None),
}


def _prepare(folder: Path, case: str) -> Path:
    _, name, _, old = WRITERS[case]
    folder.mkdir(parents=True, exist_ok=True)
    if old is not None:
        old(folder)
    else:
        (folder / name).write_bytes(OLD)
    return folder / name


def _die_inside(point: str, name: str, limit: int) -> None:
    """Arrange for this (child) process to die at ``point`` of the write of ``name``."""
    if point == "mid-write":
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it: writes would fail instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    elif point == "before-rename":
        real_replace = os.replace

        def replace(src: Any, dst: Any) -> None:
            if Path(dst).name == name:
                os.kill(os.getpid(), signal.SIGKILL)
            real_replace(src, dst)

        os.replace = replace  # the child's own module object: gone with the child
    else:  # after-rename: the rename happened, the folder's fsync did not
        real_replace, real_fsync_dir = os.replace, ckpt_mod._fsync_dir
        renamed = []

        def replace_and_note(src: Any, dst: Any) -> None:
            real_replace(src, dst)
            renamed.append(Path(dst).name)

        def fsync_dir(folder: Path) -> None:
            if name in renamed:
                os.kill(os.getpid(), signal.SIGKILL)
            real_fsync_dir(folder)

        os.replace = replace_and_note
        ckpt_mod._fsync_dir = fsync_dir


@pytest.fixture(scope="module")
def new_sizes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    """The size of each writer's new file (written once here, which also warms matplotlib's caches)."""
    sizes = {}
    for case, (write, name, whole, _) in WRITERS.items():
        folder = tmp_path_factory.mktemp("sizes")
        _prepare(folder, case)
        write(folder)
        assert whole(folder / name), case
        sizes[case] = (folder / name).stat().st_size
    return sizes


@pytest.mark.skipif(not hasattr(os, "fork"), reason="kills a forked child (POSIX only)")
@pytest.mark.parametrize("point", ["mid-write", "before-rename", "after-rename"])
@pytest.mark.parametrize("case", list(WRITERS))
def test_a_kill_inside_any_write_leaves_the_old_file_or_the_new(
    case: str, point: str, tmp_path: Path, new_sizes: dict[str, int]
) -> None:
    write, name, whole, _ = WRITERS[case]
    path = _prepare(tmp_path / "run", case)
    old = path.read_bytes()
    limit = new_sizes[case] // 2
    pid = os.fork()
    if pid == 0:  # the child writes until the injected fault kills it
        code = 1  # the writer raised
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)  # pytest's capture files may lie past the size limit
            os.dup2(devnull, 2)
            sys.dont_write_bytecode = True  # no .pyc of the fake benchmark under the size limit
            _die_inside(point, name, limit)
            write(path.parent)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    expected = signal.SIGXFSZ if point == "mid-write" else signal.SIGKILL
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == expected, (
        f"{case}: no kill at {point} ({status})"
    )
    temps = list(path.parent.glob(f".{name}.*.tmp"))
    if point == "after-rename":
        assert whole(path), f"{case}: the renamed file is not whole"
        assert not temps
    else:
        assert path.read_bytes() == old, f"{case}: killed {point}, the old file changed"
        (temp,) = temps  # killed inside this file's write, on its temporary file
        if point == "mid-write":
            assert 0 < temp.stat().st_size <= limit < new_sizes[case]
        else:
            assert whole(temp), f"{case}: the temporary file is not the whole new file"
    assert ckpt_mod.remove_stale_temps(path) == temps


def test_a_new_start_removes_the_temporary_files_a_killed_write_left(tmp_path: Path) -> None:
    ours = [f".{name}.k1ll.tmp" for name in RUN_FILES if "*" not in name]
    for name in [*ours, ".fit_report.json.k1ll.tmp", ".notes.txt.k1ll.tmp"]:
        (tmp_path / name).write_bytes(b"partial")
    with RunLifecycle(tmp_path, SINGLE_PROCESS) as life:
        life.begin(resume=False)
        life.open(None, lambda moved: [], tensorboard=False)
    left = sorted(p.name for p in tmp_path.glob(".*.tmp"))
    assert left == [".fit_report.json.k1ll.tmp", ".notes.txt.k1ll.tmp"]  # not this run's files
    assert {".curve.png.k1ll.tmp", ".test_report.json.k1ll.tmp", ".equity.png.k1ll.tmp"} <= set(ours)


# -- no in-place write of a run file in the sources


_WRITE_METHODS = {"write_text", "write_bytes", "savefig", "to_csv", "tofile"}
_DUMPERS = {("json", "dump"), ("pickle", "dump"), ("torch", "save"), ("np", "save"), ("np", "savez")}
_WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}

# each designed exception, by (file, enclosing function, kind); the test also checks each is there
ALLOWED = {
    ("toolkit/checkpoint.py", "atomic_write_bytes", "os.fdopen"): "the atomic writer's temporary file",
    ("toolkit/runfolder.py", "save_figure", "savefig"): "renders into memory, then writes atomically",
    ("toolkit/runfolder.py", "_open_lock", "os.open"): "the lock file (module docstring)",
    ("toolkit/logger.py", "MetricLogger._write_row", "open"): "metrics.csv's append-only rows",
    (
        "toolkit/envs/market/live.py",
        "LiveTrader._open",
        "open",
    ): "the trade CSV's append-only rows (a cut line is truncated on resume)",
    ("tritonrl/cli/common.py", "probe_run_dir", "os.open"): "a probe file, removed at once",
    ("toolkit/backtest/tearsheet.py", "_finish", "savefig"): "renders into memory, then writes atomically",
    (
        "toolkit/envs/portfolio/live.py",
        "PortfolioTrader.__init__",
        "open",
    ): "the portfolio trade CSV's append-only rows (created new, flushed row by row)",
    ("toolkit/training/overlap.py", "_learner_main", "torch.save"): "into memory, sent to the main process",
}


def _mode(call: ast.Call, position: int) -> str | None:
    node = call.args[position] if len(call.args) > position else None
    for kw in call.keywords:
        if kw.arg == "mode":
            node = kw.value
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _kind(call: ast.Call) -> str | None:
    """What write ``call`` is (``None``: not a file write)."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else None
    if name in _WRITE_METHODS:
        return name
    if (owner, name) in _DUMPERS:
        return f"{owner}.{name}"
    if name == "open" and owner == "os":
        flags = {
            n.attr if isinstance(n, ast.Attribute) else getattr(n, "id", "") for n in ast.walk(call.args[1])
        }
        return "os.open" if flags & _WRITE_FLAGS else None
    if name in ("open", "fdopen"):
        mode = _mode(call, 0 if owner not in (None, "io", "os") else 1)
        if mode is not None and set(mode) & set("wax+"):
            return f"os.{name}" if owner == "os" else "open"
    return None


def _writes(path: Path) -> list[tuple[str, str, int]]:
    """``(enclosing function, kind, line)`` of every file write in ``path``."""
    found: list[tuple[str, str, int]] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, f"{where}.{child.name}" if where else child.name)
                continue
            if isinstance(child, ast.Call) and (kind := _kind(child)) is not None:
                found.append((where, kind, child.lineno))
            visit(child, where)

    visit(ast.parse(path.read_text(), str(path)), "")
    return found


def test_no_run_file_is_written_in_place() -> None:
    """Every write in toolkit/, agents/ and tritonrl/cli/ goes through the atomic writers, except the
    designed ones."""
    seen = set()
    bad = []
    for folder in ("toolkit", "agents", "tritonrl/cli"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for where, kind, line in _writes(path):
                if (rel, where, kind) in ALLOWED:
                    seen.add((rel, where, kind))
                else:
                    bad.append(f"{rel}:{line} ({where or 'module'}): {kind}")
    assert not bad, "in-place writes (use runfolder.atomic_write_text / save_figure): " + "; ".join(bad)
    assert seen == set(ALLOWED), f"allowed writes no longer in the sources: {set(ALLOWED) - seen}"


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ("Path(p).write_text('x')", "write_text"),
        ("fig.savefig(p)", "savefig"),
        ("open(p, 'w')", "open"),
        ("open(p, mode='ab')", "open"),
        ("p.open('w')", "open"),
        ("json.dump(d, f)", "json.dump"),
        ("os.open(p, os.O_WRONLY | os.O_CREAT)", "os.open"),
        ("os.fdopen(fd, 'wb')", "os.fdopen"),
        ("torch.save(s, p)", "torch.save"),
    ],
)
def test_the_scan_sees_each_kind_of_write(source: str, kind: str, tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(f"def f():\n    {source}\n    open(p)\n    os.open(p, os.O_RDONLY)\n")
    assert _writes(tmp_path / "m.py") == [("f", kind, 2)]
