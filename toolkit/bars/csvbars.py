"""Bars from a CSV file: `load_csv` reads any OHLCV file and refuses what it cannot read in
one line naming the file, the line and the column. See docs/pages/market.md ("CSV files")."""

from __future__ import annotations

import codecs
import csv
import math
import os
import stat
from array import array
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TextIO, TypeVar

import numpy as np
from tritonrl.toolkit.bars.types import Bars

__all__ = ["MAX_CSV_BYTES", "MAX_CSV_LINE", "OHLC_RTOL", "PRICE_COLUMNS", "TIME_COLUMNS", "load_csv"]

TIME_COLUMNS = ("datetime", "timestamp", "date", "time")  # preference order when several exist
PRICE_COLUMNS = ("open", "high", "low", "close")
# gym-anytrading's forex files write `01.01.2017 22:00:00.000` (day first); ISO is tried first.
_TIME_FORMATS = ("%d.%m.%Y %H:%M:%S.%f", "%d.%m.%Y %H:%M:%S", "%d.%m.%Y %H:%M", "%d.%m.%Y")
_HOUR, _DAY = 3600.0, 86400.0


def _parse_time(text: str) -> datetime:
    """One timestamp: ISO 8601 (date or datetime; aware ones are converted to UTC) or day-first."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        for fmt in _TIME_FORMATS:
            try:
                return datetime.strptime(text, fmt)
            except ValueError:
                continue
        raise
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


def _periods_per_year(time: np.ndarray) -> float:
    """Bars per year from the median spacing ``d`` of ``time`` (see `load_csv`)."""
    d = float(np.median(np.diff(time).astype(np.int64)))
    if d < 20 * _HOUR:
        return 6240.0 * _HOUR / d  # intraday: 24 h x 5 days x 52 weeks of trading, per bar length
    for upper, periods in ((4 * _DAY, 252.0), (20 * _DAY, 52.0), (80 * _DAY, 12.0)):
        if d < upper:
            return periods
    return 365.25 * _DAY / d


def load_csv(
    path: str | Path,
    *,
    name: str | None = None,
    periods_per_year: float | None = None,
    min_rows: int = 2,
) -> Bars:
    """Read OHLCV bars from a regular UTF-8 CSV file (the csv module and numpy; no pandas).

    The header names a time column and ``open, high, low, close, volume`` in any case and order;
    other columns are ignored. Times are ISO 8601 (aware ones converted to UTC) or day-first
    ``01.01.2017 22:00:00.000``. The checks are in docs/pages/market.md ("CSV files").

    Args:
        name: the label of the bars; defaults to the file's stem.
        periods_per_year: bars per year for annualising; when ``None``, from the median spacing
            (intraday ``6240 h / spacing``, daily 252, weekly 52, monthly 12).
        min_rows: the fewest bars accepted (callers pass ``window + 2``); at least 2.

    Returns:
        [`Bars`][tritonrl.toolkit.bars.csvbars.Bars] with ``[T]`` ``datetime64[s]`` times and f64 prices and
            volumes.

    Raises:
        ValueError: one line naming the file (and the line and the column where there is one)
            for anything unreadable: a missing or irregular file, bad CSV or UTF-8, missing
            columns, bad, non-finite or inconsistent values, unsorted times, too few rows.
    """
    path = Path(path)
    if min_rows < 2:
        raise ValueError(f"min_rows={min_rows}: at least 2 bars are needed (one return)")

    def parse(reader: Any, header: list[str]) -> tuple[str, list[str], array, array, array]:
        time_index, columns = _csv_columns(path, header)
        names = [header[i].strip() for _, i in columns]
        return header[time_index].strip(), names, *_csv_rows(path, reader, header, time_index, columns)

    time_name, names, seconds, values, lines = read_checked_csv(path, parse)
    if len(lines) < min_rows:
        raise ValueError(f"{path}: {len(lines)} rows of bars, fewer than the {min_rows} needed")
    time = np.frombuffer(seconds, dtype=np.int64).astype("datetime64[s]")
    _check_sorted(f"column {time_name!r}", path, time, lines)
    table = np.frombuffer(values, dtype=np.float64).reshape(-1, len(names))
    _check_ohlc(path, names, table, lines)
    return Bars(
        name=name if name is not None else path.stem,
        time=time,
        open=table[:, 0].copy(),
        high=table[:, 1].copy(),
        low=table[:, 2].copy(),
        close=table[:, 3].copy(),
        volume=table[:, 4].copy(),
        periods_per_year=float(periods_per_year) if periods_per_year is not None else _periods_per_year(time),
    )


MAX_CSV_BYTES = 1 << 30
"""The largest CSV file `load_csv` reads (1 GiB, some 20 million bars): split a larger one."""
MAX_CSV_LINE = 1 << 17
"""The longest CSV line in characters (the csv module's own field limit; a row of bars is a few dozen)."""
OHLC_RTOL = 1e-6
"""The relative slack of the ``low <= open, close <= high`` check: prices that went through float32
(relative spacing 1.2e-7) before being written may disagree across columns by a few units in
their last place, which is round-off, not bad data."""
_T = TypeVar("_T")
_EPOCH, _SECOND = datetime(1970, 1, 1), timedelta(seconds=1)


def read_checked_csv(path: Path, parse: Callable[[Any, list[str]], _T]) -> _T:
    """``parse(reader, header)`` over the checked, bounded lines of ``path`` (`_open_csv`), with
    an empty file, bad CSV and bad UTF-8 refused in one line naming the file (and the line)."""
    with _open_csv(path) as f:
        reader = csv.reader(_bounded_lines(path, f))
        try:
            header = next(reader, None)
            if header is None:
                raise ValueError(f"{path}: the file is empty (expected a header line)")
            return parse(reader, header)
        except csv.Error as exc:
            raise ValueError(f"{path}, line {reader.line_num}: not readable as CSV ({exc})") from None
        except UnicodeDecodeError:
            raise ValueError(_utf8_error(path)) from None


def _open_csv(path: Path) -> TextIO:
    """``path`` opened as UTF-8 text once it is a regular file of at most `MAX_CSV_BYTES`
    (opened with ``O_NONBLOCK`` and checked again, so a FIFO swapped in cannot block).

    Raises:
        ValueError: missing, not a regular file, too large, or not readable.
    """
    try:
        st = path.stat()
    except FileNotFoundError:
        link = f" (a link to {os.readlink(path)})" if path.is_symlink() else ""
        raise ValueError(f"{path}: no such file{link}") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    _check_regular(path, st)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        _check_regular(path, os.fstat(fd))
    except ValueError:
        os.close(fd)
        raise
    return open(fd, newline="", encoding="utf-8-sig")  # the caller's `with` closes it


def _check_regular(path: Path, st: os.stat_result) -> None:
    """Raise unless ``st`` is a regular file of at most `MAX_CSV_BYTES`."""
    if not stat.S_ISREG(st.st_mode):
        kinds = (
            (stat.S_ISDIR, "a folder"),
            (stat.S_ISFIFO, "a named pipe (FIFO)"),
            (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"),
            (stat.S_ISSOCK, "a socket"),
        )
        kind = next((k for test, k in kinds if test(st.st_mode)), "not a regular file")
        link = f" (a link to {os.path.realpath(path)})" if path.is_symlink() else ""
        raise ValueError(f"{path}: is {kind}{link}, not a regular CSV file")
    if st.st_size > MAX_CSV_BYTES:
        raise ValueError(
            f"{path}: {st.st_size:,} bytes, more than the {MAX_CSV_BYTES:,} (1 GiB) a CSV of bars may "
            "have (split it, or thin it to longer bars)"
        )


def _bounded_lines(path: Path, f: TextIO) -> Iterator[str]:
    """The lines of ``f``; raises ``ValueError`` at one longer than `MAX_CSV_LINE`."""
    number = 0
    while line := f.readline(MAX_CSV_LINE + 1):
        number += 1
        if len(line) > MAX_CSV_LINE:
            raise ValueError(
                f"{path}, line {number}: longer than {MAX_CSV_LINE} characters (a row of bars is a few dozen)"
            )
        yield line


def _utf8_error(path: Path) -> str:
    """The message saying where ``path`` stops being UTF-8 (line and position)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset, newlines, line_start = 0, 0, 0  # bytes read; newlines and the last line's start before them
    with path.open("rb") as f:
        while chunk := f.read(1 << 16):
            pending = decoder.getstate()[0]  # an incomplete character from the chunk before
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                data, base = pending + chunk, offset - len(pending)  # base: the file offset of data[0]
                head = data[: exc.start]
                if b"\n" in head:
                    line_start = base + head.rindex(b"\n") + 1
                line = newlines + head.count(b"\n") + 1
                return (
                    f"{path}, line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at position "
                    f"{base + exc.start - line_start + 1} of the line); save the file as UTF-8"
                )
            if b"\n" in chunk:
                newlines += chunk.count(b"\n")
                line_start = offset + chunk.rindex(b"\n") + 1
            offset += len(chunk)
    return f"{path}: not UTF-8 text; save the file as UTF-8"


def _csv_rows(
    path: Path, reader: Any, header: list[str], time_index: int, columns: list[tuple[str, int]]
) -> tuple[array, array, array]:
    """The rows of ``reader`` as flat arrays: int64 seconds since 1970, f64 values (``len(columns)``
    a row) and the line numbers.

    Raises:
        ValueError: a malformed row or a bad value (the file, the line and the column).
    """
    seconds, values, lines = array("q"), array("d"), array("q")
    time_where = f"column {header[time_index].strip()!r}"
    for line, row in _data_rows(path, reader, header):
        when = _csv_time(f"{path}, line {line}, {time_where}", row[time_index])
        seconds.append((when - _EPOCH) // _SECOND)  # floors, as numpy's datetime64[s] conversion
        values.extend(
            _csv_value(f"{path}, line {line}, column {header[i].strip()!r}", c, row[i]) for c, i in columns
        )
        lines.append(line)
    return seconds, values, lines


def _data_rows(path: Path, reader: Any, header: list[str]) -> Iterator[tuple[int, list[str]]]:
    """``(line number, cells)`` of every data row of ``reader``; blank lines at the end are skipped.

    Raises:
        ValueError: a blank line before more data, or a row whose field count differs from the header's.
    """
    blank: int | None = None  # first blank line, an error only if data follows it
    for row in reader:
        line = reader.line_num
        if not any(cell.strip() for cell in row):
            blank = line if blank is None else blank
            continue
        if blank is not None:
            raise ValueError(f"{path}, line {blank}: empty row")
        if len(row) != len(header):
            raise ValueError(f"{path}, line {line}: {len(row)} fields, the header has {len(header)}")
        yield line, row


def _check_ohlc(path: Path, names: list[str], table: np.ndarray, lines: Sequence[int]) -> None:
    """Raise at the first row of the ``[T, 5]`` OHLCV ``table`` whose open or close lies outside
    ``[low, high]`` (to a relative [`OHLC_RTOL`][tritonrl.toolkit.bars.csvbars.OHLC_RTOL])."""
    o, h, lo, c = table[:, 0], table[:, 1], table[:, 2], table[:, 3]
    top, bottom = h * (1 + OHLC_RTOL), lo * (1 - OHLC_RTOL)
    bad = np.flatnonzero((lo > top) | (o > top) | (o < bottom) | (c > top) | (c < bottom))
    if not bad.size:
        return
    i = int(bad[0])
    where = f"{path}, line {lines[i]}"
    if lo[i] > top[i]:
        raise ValueError(f"{where}, column {names[1]!r}: high {h[i]:.10g} is below the low {lo[i]:.10g}")
    k = 0 if not bottom[i] <= o[i] <= top[i] else 3
    raise ValueError(
        f"{where}, column {names[k]!r}: {PRICE_COLUMNS[k]} {table[i, k]:.10g} lies outside "
        f"[low {lo[i]:.10g}, high {h[i]:.10g}]"
    )


def _csv_columns(path: Path, header: list[str]) -> tuple[int, list[tuple[str, int]]]:
    """The index of the time column and ``(name, index)`` of open, high, low, close, volume.

    Raises:
        ValueError: a missing or repeated column.
    """
    lower = [h.strip().lower() for h in header]
    time_name = next((c for c in TIME_COLUMNS if c in lower), None)
    wanted = (*PRICE_COLUMNS, "volume")
    missing = [c for c in wanted if c not in lower] + ([] if time_name else ["a time column"])
    if missing or time_name is None:
        raise ValueError(
            f"{path}: missing column(s) {', '.join(missing)} (header: {', '.join(header)}); need a "
            f"time column (one of {', '.join(TIME_COLUMNS)}) and {', '.join(wanted)}, in any case"
        )
    for c in (time_name, *wanted):
        if lower.count(c) > 1:
            raise ValueError(
                f"{path}: the header names column {c!r} {lower.count(c)} times (header: {', '.join(header)})"
            )
    return lower.index(time_name), [(c, lower.index(c)) for c in wanted]


def _csv_time(where: str, cell: str) -> datetime:
    """The timestamp in ``cell``; raises ``ValueError`` (``where`` first) if empty or unparsable."""
    text = cell.strip()
    if not text:
        raise ValueError(f"{where}: empty value")
    try:
        return _parse_time(text)
    except ValueError:
        raise ValueError(
            f"{where}: cannot parse {text!r} as a time (ISO 8601 such as 2017-01-31 or "
            "2017-01-31T22:00:00, or day-first 31.01.2017 22:00:00.000)"
        ) from None


def _csv_number(where: str, cell: str) -> float:
    """The finite number in ``cell``; raises ``ValueError`` (``where`` first) otherwise."""
    text = cell.strip()
    if not text:
        raise ValueError(f"{where}: empty value")
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{where}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{where}: {text!r} is not a finite number")
    return value


def _csv_value(where: str, column: str, cell: str) -> float:
    """The price or volume (``column``) in ``cell``.

    Raises:
        ValueError: a bad or non-finite value, a non-positive price or a negative volume.
    """
    value = _csv_number(where, cell)
    text = cell.strip()
    if column == "volume" and value < 0:
        raise ValueError(f"{where}: negative volume {text}")
    if column != "volume" and value <= 0:
        raise ValueError(f"{where}: price {text} is not positive")
    return value


def _check_sorted(column: str, path: Path, time: np.ndarray, lines: Sequence[int]) -> None:
    """Raise ``ValueError`` at the first duplicate or unsorted timestamp."""
    step = np.diff(time).astype(np.int64)
    bad = np.flatnonzero(step <= 0)
    if bad.size:
        i = int(bad[0]) + 1
        what = "duplicate timestamp" if step[i - 1] == 0 else "timestamps not sorted (oldest first)"
        raise ValueError(
            f"{path}, line {lines[i]}, {column}: {what}: {time[i]} follows {time[i - 1]} "
            f"(line {lines[i - 1]})"
        )
