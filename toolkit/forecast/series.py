"""Forecasting windows over any numeric time series in a CSV file (not only market bars).

`load_series` reads one or several series (long format) into a `SeriesTable`; `series_windows`
splits each by time, normalises it with its TRAIN rows only (`SeriesNormalizer`) and returns three
`SeriesWindows`, which the trainer takes where it takes
[`WindowData`][tritonrl.toolkit.forecast.series.WindowData]. See docs/pages/forecasting.md ("Any
time series").
"""

from __future__ import annotations

import csv
import math
import re
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tritonrl.toolkit.bars import FEATURES
from tritonrl.toolkit.bars.csvbars import (
    _EPOCH,
    _SECOND,
    PRICE_COLUMNS,
    TIME_COLUMNS,
    _bounded_lines,
    _check_sorted,
    _csv_number,
    _csv_time,
    _data_rows,
    _open_csv,
    _utf8_error,
)
from tritonrl.toolkit.forecast.windows import WindowData

__all__ = [
    "SERIES_TIME_COLUMNS",
    "SeriesNormalizer",
    "SeriesTable",
    "SeriesWindows",
    "is_market_csv",
    "load_series",
    "read_header",
    "series_windows",
]

SERIES_TIME_COLUMNS = ("ds", *TIME_COLUMNS)
"""Time columns recognised without ``time=`` (the first present wins; any case)."""
ID_COLUMN, TARGET_COLUMN = "unique_id", "y"
"""NeuralForecast's series-id and target columns, used when present and not named otherwise."""
_OHLCV = (*PRICE_COLUMNS, "volume")
_INT = re.compile(r"[+-]?\d+")


def read_header(path: str | Path) -> list[str]:
    """The header fields of the CSV file ``path`` (stripped); ``ValueError`` if it cannot be read."""
    path = Path(path)
    with _open_csv(path) as f:
        try:
            header = next(csv.reader(_bounded_lines(path, f)), None)
        except csv.Error as exc:
            raise ValueError(f"{path}, line 1: not readable as CSV ({exc})") from None
        except UnicodeDecodeError:
            raise ValueError(_utf8_error(path)) from None
    if header is None or not any(h.strip() for h in header):
        raise ValueError(f"{path}: the file is empty (expected a header line)")
    return [h.strip() for h in header]


def is_market_csv(
    header: Sequence[str], target: str | None, features: Sequence[str], series_id: str | None
) -> bool:
    """Whether a CSV is read as market bars (`load_csv`): an OHLCV
    header, a market target (or none) and no ``features`` or ``series_id``."""
    lower = {h.strip().lower() for h in header}
    bars = all(c in lower for c in _OHLCV) and any(c in lower for c in TIME_COLUMNS)
    market_target = target is None or target in ("log_return", "close", *FEATURES)
    return bars and market_target and not features and series_id is None


@dataclass(frozen=True, eq=False)
class SeriesTable:
    """Series read from one CSV, grouped by series (each in time order), host arrays: ``values``
    ``[N, T + E]`` f64 (targets, then features), ``time`` ``[N]`` (``datetime64[s]`` or int64),
    ``lines`` ``[N]``; series ``k`` is rows ``starts[k] .. starts[k + 1] - 1``, named ``ids[k]``."""

    name: str
    path: Path
    time_column: str
    targets: tuple[str, ...]
    features: tuple[str, ...]
    ids: tuple[str, ...]
    starts: tuple[int, ...]
    time: np.ndarray
    lines: np.ndarray
    values: np.ndarray

    @property
    def columns(self) -> tuple[str, ...]:
        """The value columns: targets, then features."""
        return (*self.targets, *self.features)

    def __len__(self) -> int:
        return int(self.values.shape[0])

    def label(self, k: int) -> str:
        """``"series 'a' (lines 2-41)"``, for messages."""
        a, b = self.starts[k], self.starts[k + 1] - 1
        who = f"series {self.ids[k]!r}" if self.ids[k] else "the series"
        return f"{who} (lines {self.lines[a]}-{self.lines[b]})"


def _split_names(names: str | Sequence[str] | None) -> tuple[str, ...]:
    if names is None:
        return ()
    parts = names.split(",") if isinstance(names, str) else list(names)
    return tuple(p.strip() for p in parts if p.strip())


def _find(path: Path, header: list[str], name: str, what: str) -> int:
    """The index of column ``name`` (exact, else the one case-insensitive match); ``ValueError`` otherwise."""
    exact = [i for i, h in enumerate(header) if h == name]
    found = exact or [i for i, h in enumerate(header) if h.lower() == name.lower()]
    if len(found) != 1:
        problem = "missing column" if not found else f"{len(found)} columns named"
        raise ValueError(f"{path}: {problem} {name!r} ({what}; header: {', '.join(header)})")
    return found[0]


def _columns(
    path: Path,
    header: list[str],
    target: str | Sequence[str] | None,
    features: str | Sequence[str] | None,
    series_id: str | None,
    time: str | None,
) -> tuple[int, int | None, list[int], list[int]]:
    """The indices of the time, series-id, target and feature columns.

    Raises:
        ValueError: a missing or repeated column, a column used twice, no target.
    """
    lower = [h.lower() for h in header]
    if time is None:
        time = next((c for c in SERIES_TIME_COLUMNS if c in lower), None)
        if time is None:
            raise ValueError(
                f"{path}: missing a time column (one of {', '.join(SERIES_TIME_COLUMNS)}, any case; "
                f"header: {', '.join(header)})"
            )
    t = _find(path, header, time, "the time column")
    if series_id is None and ID_COLUMN in lower:
        series_id = ID_COLUMN
    sid = None if series_id is None else _find(path, header, series_id, "--series-id")
    targets = _split_names(target)
    if not targets:
        if TARGET_COLUMN not in lower:
            rest = ", ".join(h for i, h in enumerate(header) if i not in (t, sid))
            bars = [c for c in _OHLCV if c not in lower]
            why = f"not market bars (no {', '.join(bars)}) and " if bars else ""
            raise ValueError(
                f"{path}: {why}no column 'y': name the target with --target COL (columns: {rest})"
            )
        targets = (TARGET_COLUMN,)
    tcols = [_find(path, header, n, "--target") for n in targets]
    fcols = [_find(path, header, n, "--features") for n in _split_names(features)]
    used = [t, *([] if sid is None else [sid]), *tcols, *fcols]
    for i in used:
        if used.count(i) > 1:
            raise ValueError(
                f"{path}: column {header[i]!r} is given more than one role (time, id, target, feature)"
            )
    return t, sid, tcols, fcols


def load_series(
    path: str | Path,
    target: str | Sequence[str] | None = None,
    *,
    features: str | Sequence[str] | None = None,
    series_id: str | None = None,
    time: str | None = None,
    name: str | None = None,
) -> SeriesTable:
    """Read numeric series from a CSV file.

    Args:
        target: the target column(s), a name, ``"a,b"`` or a sequence; default ``y``.
        features: exogenous input columns (default none).
        series_id: the column naming each row's series (long format); default ``unique_id`` when
            present, else the file is one series.
        time: the time column (integers or dates); default the first of
            [`SERIES_TIME_COLUMNS`][tritonrl.toolkit.forecast.series.SERIES_TIME_COLUMNS] present.

    Raises:
        ValueError: one line naming the file (and the line and the column where there is one):
            an unreadable file, a missing column, a malformed row or value, unsorted times.
    """
    path = Path(path)
    with _open_csv(path) as f:
        reader = csv.reader(_bounded_lines(path, f))
        try:
            header = next(reader, None)
            if header is None or not any(h.strip() for h in header):
                raise ValueError(f"{path}: the file is empty (expected a header line)")
            header = [h.strip() for h in header]
            t, sid, tcols, fcols = _columns(path, header, target, features, series_id, time)
            times, ids, values, lines, integer = _rows(path, reader, header, t, sid, [*tcols, *fcols])
        except csv.Error as exc:
            raise ValueError(f"{path}, line {reader.line_num}: not readable as CSV ({exc})") from None
        except UnicodeDecodeError:
            raise ValueError(_utf8_error(path)) from None
    if not lines:
        raise ValueError(f"{path}: no rows after the header")
    ncol = len(tcols) + len(fcols)
    names = {k: i for i, k in enumerate(dict.fromkeys(ids))}  # first appearance order
    code = np.fromiter((names[k] for k in ids), dtype=np.int64, count=len(ids))
    order = np.argsort(code, kind="stable")  # grouped by series, file order within each
    counts = np.bincount(code, minlength=len(names))
    starts = (0, *np.cumsum(counts).tolist())
    stamp = np.frombuffer(times, dtype=np.int64)[order]
    time_arr = stamp if integer else stamp.astype("datetime64[s]")
    line_arr = np.frombuffer(lines, dtype=np.int64)[order]
    table = SeriesTable(
        name=name if name is not None else path.stem,
        path=path,
        time_column=header[t],
        targets=tuple(header[i] for i in tcols),
        features=tuple(header[i] for i in fcols),
        ids=tuple(names),
        starts=tuple(int(s) for s in starts),
        time=time_arr,
        lines=line_arr,
        values=np.frombuffer(values, dtype=np.float64).reshape(-1, ncol)[order],
    )
    for k, key in enumerate(table.ids):
        a, b = table.starts[k], table.starts[k + 1]
        where = f"column {header[t]!r}" + (f" (series {key!r})" if key else "")
        _check_sorted(where, path, table.time[a:b], table.lines[a:b].tolist())
    return table


def _rows(
    path: Path, reader: Any, header: list[str], t: int, sid: int | None, cols: list[int]
) -> tuple[array, list[str], array, array, bool]:
    """Times (int64), series ids, f64 values, line numbers, and whether the times are integers."""
    times, values, lines, ids = array("q"), array("d"), array("q"), []
    integer: bool | None = None
    for line, row in _data_rows(path, reader, header):
        where = f"{path}, line {line}, column {header[t]!r}"
        text = row[t].strip()
        if integer is None:
            integer = bool(_INT.fullmatch(text))
        if integer:
            if not _INT.fullmatch(text):
                raise ValueError(f"{where}: {text!r} is not an integer time like the rows before it")
            times.append(int(text))
        else:
            times.append((_csv_time(where, row[t]) - _EPOCH) // _SECOND)
        for i in cols:
            values.append(_csv_number(f"{path}, line {line}, column {header[i]!r}", row[i]))
        ids.append("" if sid is None else row[sid].strip())
        lines.append(line)
    return times, ids, values, lines, bool(integer)


def _bounds(n: int, window: int, fractions: Sequence[float]) -> dict[str, tuple[int, int]]:
    """Each split's rows ``(start, stop)`` of ``n`` rows, as `split`."""
    b1, b2 = round(n * fractions[0]), round(n * (fractions[0] + fractions[1]))
    return {"train": (0, b1), "validation": (b1 - window + 1, b2), "test": (b2 - window + 1, n)}


def _long_enough(n: int, window: int, horizon: int, fractions: Sequence[float]) -> bool:
    return all(a >= 0 and b - a >= window + horizon for a, b in _bounds(n, window, fractions).values())


@dataclass(frozen=True)
class SeriesNormalizer:
    """Per series and column ``z = (v - mean) / std``, from each series' train rows only;
    ``mean`` and ``std`` are ``[S][C]`` (columns: targets, then features)."""

    series: tuple[str, ...]
    columns: tuple[str, ...]
    mean: tuple[tuple[float, ...], ...]
    std: tuple[tuple[float, ...], ...]

    def to_dict(self) -> dict[str, list]:
        """``{"series", "columns", "mean", "std"}`` (lists)."""
        return {
            "series": list(self.series),
            "columns": list(self.columns),
            "mean": [list(m) for m in self.mean],
            "std": [list(s) for s in self.std],
        }


class SeriesWindows(WindowData):
    """The windows of one split of every series of a `SeriesTable`: inputs ``[B, W, C]`` in
    the training dtype (targets' history, then features), targets ``[B, H, T]`` f32, all
    normalised. A window never reaches into another series. Duck-types
    [`WindowData`][tritonrl.toolkit.forecast.series.WindowData] for ``fit`` and ``baselines`` without running
    its ``__init__``.
    """

    def __init__(
        self,
        table: SeriesTable,
        x: torch.Tensor,
        y: torch.Tensor,
        rows: torch.Tensor,
        ends: torch.Tensor,
        window_series: torch.Tensor,
        window: int,
        horizon: int,
        normalizer: SeriesNormalizer,
        split: str,
    ) -> None:
        self.data, self.window, self.horizon, self.split = table, window, horizon, split
        self.target = ",".join(table.targets)
        self.num_targets = len(table.targets)
        self.target_channels = tuple(range(self.num_targets))  # the inputs start with the targets
        self.normalizer = normalizer  # type: ignore[assignment]
        self.x, self.rows, self.ends, self.window_series = x, rows, ends, window_series
        self.y = y  # [N, T] f32 normalised (before the inputs' cast)
        self.num_windows = int(ends.shape[0])
        self._x = x.unfold(0, window, 1).transpose(1, 2)  # [N - W + 1, W, C]: row i is rows i..i+W-1
        self._y = self.y.unfold(0, horizon, 1).transpose(1, 2)  # [N - H + 1, H, T]
        self._std = torch.tensor([s[: self.num_targets] for s in normalizer.std], device=x.device)

    @property
    def dtype(self) -> torch.dtype:
        """The inputs' dtype."""
        return self.x.dtype

    @property
    def device(self) -> torch.device:
        """Where the windows live."""
        return self.x.device

    @property
    def num_features(self) -> int:
        """``C``: the targets plus the exogenous features."""
        return int(self.x.shape[1])

    def batch(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Windows ``idx``: ``(x [B, W, C]`` inputs dtype, ``y [B, H, T]`` f32 normalised)."""
        end = self.ends[idx]
        return self._x[end - (self.window - 1)], self._y[end + 1]

    def naive(self, idx: torch.Tensor) -> torch.Tensor:
        """The last observed value, ``[B, H, T]`` f32 normalised (every series is a level)."""
        return self.y[self.ends[idx]][:, None, :].expand(-1, self.horizon, -1)

    def seasonal_naive(self, idx: torch.Tensor, season: int) -> torch.Tensor:
        """The value one season back (as `WindowData.seasonal_naive`), ``[B, H, T]``."""
        if not 1 <= season <= self.window:
            raise ValueError(f"season={season} must lie between 1 and the window {self.window}")
        h = torch.arange(1, self.horizon + 1, device=self.device)
        back = h - season * torch.div(h + season - 1, season, rounding_mode="floor")
        return self.y[self.ends[idx][:, None] + back[None, :]]

    def train_mean(self, idx: torch.Tensor) -> torch.Tensor:
        """Each series' training mean (0 once normalised), ``[B, H, T]`` f32."""
        return torch.zeros(idx.shape[0], self.horizon, self.num_targets, device=self.device)

    def scale(self, idx: torch.Tensor) -> torch.Tensor:
        """The train std of each window's series per target, ``[B, 1, T]`` f32."""
        return self._std[self.window_series[idx]].unsqueeze(1)


def check_series_length(
    table: SeriesTable, window: int, horizon: int, fractions: Sequence[float] = (0.7, 0.15, 0.15)
) -> None:
    """Raise ``ValueError`` at the first series without ``window + horizon`` rows in each split."""
    if window < 1 or horizon < 1:
        raise ValueError(f"window={window} and horizon={horizon} must be >= 1")
    need = next(n for n in range(2, 1 << 40) if _long_enough(n, window, horizon, fractions))
    for k in range(len(table.ids)):
        n = table.starts[k + 1] - table.starts[k]
        if not _long_enough(n, window, horizon, fractions):
            raise ValueError(
                f"{table.path}: {table.label(k)} has {n} rows, too few for window {window} + horizon "
                f"{horizon} in each of the train, validation and test splits: it needs at least {need}"
            )


def _normalizer(table: SeriesTable, window: int, fractions: Sequence[float]) -> SeriesNormalizer:
    """Mean and std (f64) of each series' train rows, per column; a constant feature gets std 1.
    Raises ``ValueError`` for a target constant over a series' train rows."""
    means, stds = [], []
    for k in range(len(table.ids)):
        a = table.starts[k]
        b1 = _bounds(table.starts[k + 1] - a, window, fractions)["train"][1]
        rows = table.values[a : a + b1]
        mean, std = rows.mean(axis=0), rows.std(axis=0)
        for c, name in enumerate(table.columns):
            if not (math.isfinite(std[c]) and std[c] > 0):
                if c < len(table.targets):
                    raise ValueError(
                        f"{table.path}, column {name!r}: {table.label(k)} is constant over its train split "
                        "(std 0): nothing to forecast"
                    )
                std[c] = 1.0
        means.append(tuple(float(v) for v in mean))
        stds.append(tuple(float(v) for v in std))
    return SeriesNormalizer(table.ids, table.columns, tuple(means), tuple(stds))


def series_windows(
    table: SeriesTable,
    window: int,
    horizon: int = 1,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
    fractions: tuple[float, float, float] = (0.7, 0.15, 0.15),
) -> tuple[SeriesWindows, SeriesWindows, SeriesWindows]:
    """Train, validation and test windows of every series of ``table``, each normalised with its
    own train rows, uploaded once per split in ``dtype`` (default ``training_dtype(device)``).

    Raises:
        ValueError: a series too short or with a constant target.
    """
    from tritonrl.toolkit.precision import dtype_or_default

    device = torch.device(device)
    dtype = dtype_or_default(dtype, device)
    check_series_length(table, window, horizon, fractions)
    norm = _normalizer(table, window, fractions)
    mean, std = np.asarray(norm.mean), np.asarray(norm.std)
    out = []
    for label in ("train", "validation", "test"):
        parts, rows, ends, owner, offset = [], [], [], [], 0
        for k in range(len(table.ids)):
            a = table.starts[k]
            lo, hi = _bounds(table.starts[k + 1] - a, window, fractions)[label]
            parts.append((table.values[a + lo : a + hi] - mean[k]) / std[k])
            rows.append(np.arange(a + lo, a + hi))
            local = np.arange(window - 1, hi - lo - horizon)
            ends.append(offset + local)
            owner.append(np.full(local.shape, k))
            offset += hi - lo
        f32 = torch.as_tensor(np.concatenate(parts), dtype=torch.float32).to(device)
        out.append(
            SeriesWindows(
                table,
                f32.to(dtype),
                f32[:, : len(table.targets)].contiguous(),
                torch.as_tensor(np.concatenate(rows), device=device),
                torch.as_tensor(np.concatenate(ends), dtype=torch.int64, device=device),
                torch.as_tensor(np.concatenate(owner), dtype=torch.int64, device=device),
                window,
                horizon,
                norm,
                label,
            )
        )
    return out[0], out[1], out[2]
