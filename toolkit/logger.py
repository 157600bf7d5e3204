"""Metric logging that syncs the device once per log interval, a learning-curve plot, a progress bar.

[`MetricLogger`][tritonrl.toolkit.logger.MetricLogger] keeps running sums as device tensors and writes one
``metrics.csv`` row (CleanRL names: ``charts/episodic_return``, ``losses/value_loss``, ...) and TensorBoard
scalars per flush. The CSV survives a kill at any moment: appends, atomic rewrites,
[`repair_csv`][tritonrl.toolkit.logger.repair_csv] on resume. Imports toolkit root modules only. Guide:
docs/pages/training.md.
"""

from __future__ import annotations

import csv
import io
import math
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO

import torch
from tritonrl.toolkit.checkpoint import atomic_write_bytes
from tritonrl.toolkit.runfolder import save_figure

__all__ = ["MetricLogger", "ProgressBar", "plot_learning_curve", "read_csv", "repair_csv"]


class MetricLogger:
    """Accumulate metrics (means over each interval) and write them at ``flush``.

    Args:
        csv: write ``metrics.csv`` (appended to; a flush at the last row's step merges into it).
        tensorboard: write TensorBoard scalars (without the package: one warning, CSV only).
        purge_step: a resumed run's first step: TensorBoard hides the interrupted run's events from it.
    """

    def __init__(
        self,
        run_dir: str | Path,
        *,
        csv: bool = True,
        tensorboard: bool = True,
        purge_step: int | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.csv_path = self.run_dir / "metrics.csv" if csv else None
        self._sums: dict[str, torch.Tensor | float] = {}
        self._counts: dict[str, int] = {}
        self._columns: list[str] = []
        self._last_step: int | None = None  # the step of the file's last row
        if self.csv_path is not None and self.csv_path.exists():
            self._columns = _header_columns(self.csv_path)
            self._last_step = _last_row_step(self.csv_path)
        self._writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._writer = SummaryWriter(str(self.run_dir), purge_step=purge_step)
            except ImportError:
                print("tensorboard is not installed: logging to metrics.csv only", file=sys.stderr)
        self.last: dict[str, float] = {}

    def log(self, step: int, metrics: Mapping[str, torch.Tensor | float]) -> None:
        """Add one value per metric to the interval (tensors stay on their device; written at `flush`).

        Raises:
            TypeError: a value is neither a number nor a one-element tensor.
        """
        del step
        for name, value in metrics.items():
            if isinstance(value, torch.Tensor):
                if value.numel() != 1:
                    raise TypeError(f"metric {name!r} must be a scalar, got shape {tuple(value.shape)}")
                value = value.detach().reshape(()).float()
            elif not isinstance(value, (int, float)):
                raise TypeError(f"metric {name!r} must be a number or tensor, got {type(value).__name__}")
            prev = self._sums.get(name)
            self._sums[name] = value if prev is None else prev + value
            self._counts[name] = self._counts.get(name, 0) + 1

    def flush(self, step: int) -> dict[str, float]:
        """Write the means of this interval at ``step`` (one device sync) and start a new interval.

        Returns:
            the written means, as floats (also kept in ``self.last``).
        """
        if not self._sums:
            return {}
        names = list(self._sums)
        tensors = [self._sums[n] for n in names]
        devices = {t.device for t in tensors if isinstance(t, torch.Tensor)}
        values: dict[str, float] = {}
        for dev in devices:  # one transfer per device
            on_dev = [
                (i, t) for i, t in enumerate(tensors) if isinstance(t, torch.Tensor) and t.device == dev
            ]
            host = torch.stack([t for _, t in on_dev]).cpu().tolist()
            values.update({names[i]: v for (i, _), v in zip(on_dev, host, strict=True)})
        for i, t in enumerate(tensors):
            if not isinstance(t, torch.Tensor):
                values[names[i]] = float(t)
        means = {n: values[n] / self._counts[n] for n in names}
        self._sums.clear()
        self._counts.clear()
        if self._writer is not None:
            for n, v in means.items():
                self._writer.add_scalar(n, v, step)
        if self.csv_path is not None:
            self._write_row(step, means)
        self.last.update(means)
        return means

    def _write_row(self, step: int, means: Mapping[str, float]) -> None:
        assert self.csv_path is not None
        new = [n for n in means if n not in self._columns]
        merge = step == self._last_step
        self._last_step = step
        if new or merge or not self.csv_path.exists():
            # a new column, or the last row's step again: rewrite the file, atomically (a kill
            # leaves the old file)
            text = self.csv_path.read_text() if self.csv_path.exists() else ""
            lines = text.splitlines()[1:]
            cells: dict[str, float | None] = dict(means)
            if merge and lines:
                parsed = _parse_row(lines[-1], len(self._columns) + 1)
                if parsed is not None:  # this flush's values win over the row's
                    old = dict(zip(self._columns, parsed[1], strict=True))
                    cells = {**old, **means}
                    lines.pop()
            pad = "," * len(new)
            self._columns += new
            out = io.StringIO(newline="")
            w = csv.writer(out, lineterminator="\n")
            w.writerow(["global_step", *self._columns])
            body = out.getvalue() + "".join(line + pad + "\n" for line in lines)
            row = _row_text(step, [_fmt(cells.get(c)) for c in self._columns])
            atomic_write_bytes(self.csv_path, (body + row).encode())
            return
        row = _row_text(step, [_fmt(means.get(c)) for c in self._columns])
        try:
            with open(self.csv_path, "a", newline="") as f:
                f.write(row)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror or str(exc), str(self.csv_path)) from exc

    def close(self) -> None:
        """Flush nothing further; close TensorBoard files."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _header_columns(path: Path) -> list[str]:
    with open(path, newline="") as f:
        return next(csv.reader(f), ["global_step"])[1:]


def _last_row_step(path: Path) -> int | None:
    """The step of the last row of ``metrics.csv`` (only its tail is read), ``None`` without one."""
    with open(path, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - 65536))
        tail = f.read().decode(errors="replace")
    lines = [line for line in tail.splitlines() if line.strip()]
    try:
        return int(next(csv.reader(lines[-1:]))[0])  # the header alone: not a number
    except (csv.Error, StopIteration, ValueError, IndexError):
        return None


def _row_text(step: int, cells: list[str]) -> str:
    out = io.StringIO(newline="")
    csv.writer(out, lineterminator="\n").writerow([step, *cells])
    return out.getvalue()


def _fmt(v: float | None) -> str:
    """A CSV cell: empty for "not logged", ``nan``/``inf``/``-inf`` for a non-finite value."""
    if v is None:
        return ""
    return repr(float(v))  # repr gives 'nan', 'inf', '-inf' and round-trips every float


def _parse_row(line: str, width: int) -> tuple[int, list[float | None]] | None:
    """``(step, cells)`` of one data line (``None`` for an empty cell), or ``None`` for a damaged line."""
    try:
        cells = next(csv.reader([line]))
    except (csv.Error, StopIteration):
        return None
    if len(cells) != width:
        return None
    try:
        return int(cells[0]), [float(c) if c != "" else None for c in cells[1:]]
    except ValueError:
        return None


def _split(text: str) -> tuple[list[str], bool]:
    """The lines of a file (``\n`` or ``\r\n``) and whether the last one is complete."""
    return text.splitlines(), text.endswith("\n")


def read_csv(path: str | Path) -> list[dict[str, float]]:
    """Rows of a ``metrics.csv`` as dicts of floats (empty cells left out; ``nan`` reads as NaN).

    Raises:
        ValueError: a damaged line; the message names the file and line
            ([`repair_csv`][tritonrl.toolkit.logger.repair_csv] fixes it).
    """
    path = Path(path)
    lines, complete = _split(path.read_text())
    if not lines:
        return []
    header = next(csv.reader([lines[0]]))
    if len(lines) > 1 and not complete:
        raise ValueError(f"{path}: line {len(lines)} is cut short (no end of line): a damaged file")
    rows = []
    for i, line in enumerate(lines[1:], start=2):
        parsed = _parse_row(line, len(header))
        if parsed is None:
            raise ValueError(
                f"{path}: line {i} is damaged ({line[:60]!r}): expected {len(header)} numeric fields"
            )
        step, cells = parsed
        row = {"global_step": float(step)}
        row.update({name: v for name, v in zip(header[1:], cells, strict=True) if v is not None})
        rows.append(row)
    return rows


def repair_csv(path: str | Path, up_to_step: int) -> tuple[int, int]:
    """Keep the intact rows of ``metrics.csv`` logged at or before ``up_to_step``; rewrite atomically if
    needed.

    Returns:
        ``(kept, damaged)``: rows kept, damaged lines dropped.

    Raises:
        ValueError: the header is not a ``metrics.csv`` header (``global_step`` first).
        OSError: the file cannot be read or rewritten (the old file stays).
    """
    path = Path(path)
    if not path.exists():
        return 0, 0
    lines, complete = _split(path.read_text())
    if not lines:
        return 0, 0
    try:
        header = next(csv.reader([lines[0]]))
    except (csv.Error, StopIteration):
        header = []
    if not header or header[0] != "global_step" or (len(lines) == 1 and not complete):
        raise ValueError(
            f"{path}: not a metrics file (the first line is not a header starting with global_step)"
        )
    body = lines[1:]
    kept: list[str] = []
    damaged = 0
    for i, line in enumerate(body):
        parsed = None if (i == len(body) - 1 and not complete) else _parse_row(line, len(header))
        if parsed is None:
            damaged += 1
        elif parsed[0] <= up_to_step:
            kept.append(line)
    if len(kept) != len(body) or not complete:
        atomic_write_bytes(path, "".join(line + "\n" for line in [lines[0], *kept]).encode())
    return len(kept), damaged


def plot_learning_curve(
    csv_path: str | Path,
    png_path: str | Path,
    *,
    metrics: tuple[str, ...] = ("charts/episodic_return", "eval/mean_return"),
    title: str | None = None,
) -> Path:
    """Plot the named metrics of a ``metrics.csv`` against ``global_step`` into a PNG; returns its path.

    Raises:
        ValueError: none of ``metrics`` appears in the file.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_csv(csv_path)
    fig, ax = plt.subplots(figsize=(7, 4))
    plotted = 0
    for name in metrics:
        pts = [(r["global_step"], r[name]) for r in rows if name in r]
        if pts:
            ax.plot(*zip(*pts, strict=True), label=name, marker="o" if len(pts) < 30 else None)
            plotted += 1
    if not plotted:
        plt.close(fig)
        raise ValueError(f"none of {list(metrics)} is in {csv_path}")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("return")
    ax.grid(alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title)
    fig.tight_layout()
    try:
        return save_figure(fig, png_path, dpi=100)
    finally:
        plt.close(fig)


class ProgressBar:
    """A one-line progress bar on stderr (plain lines every ``log_interval`` s off a terminal).

    Args:
        initial: the step to start from (a resumed run).
        stream: where to draw (default ``sys.stderr``); ``enabled=False`` draws nothing.
    """

    def __init__(
        self,
        total: int,
        *,
        initial: int = 0,
        stream: IO[str] | None = None,
        enabled: bool = True,
        interval: float = 0.5,
        width: int = 28,
        log_interval: float = 10.0,
    ) -> None:
        self.total = max(int(total), 1)
        self.n = initial
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty and isatty())
        self.interval = interval if self.tty else max(interval, log_interval)
        self.width = width
        self._start = time.perf_counter()
        self._start_n = initial
        self._last_draw = 0.0
        self.postfix = ""

    def update(self, n: int, postfix: str | None = None) -> None:
        """Set the current step to ``n`` (and the text after the bar) and redraw if due."""
        self.n = n
        if postfix is not None:
            self.postfix = postfix
        now = time.perf_counter()
        if self.enabled and now - self._last_draw >= self.interval:
            self._last_draw = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        frac = min(self.n / self.total, 1.0)
        filled = int(frac * self.width)
        rate = (self.n - self._start_n) / max(now - self._start, 1e-9)
        eta = (self.total - self.n) / rate if rate > 0 else float("inf")
        eta_s = "?" if math.isinf(eta) else f"{int(eta) // 60}:{int(eta) % 60:02d}"
        bar = "#" * filled + "-" * (self.width - filled)
        line = f"[{bar}] {self.n}/{self.total} {rate:,.0f} steps/s eta {eta_s} {self.postfix}".rstrip()
        self.stream.write(f"\r{line}\033[K" if self.tty else f"{line}\n")
        self.stream.flush()

    def close(self) -> None:
        """Draw the final state and end the line."""
        if self.enabled:
            self._draw(time.perf_counter())
            if self.tty:
                self.stream.write("\n")
            self.stream.flush()
