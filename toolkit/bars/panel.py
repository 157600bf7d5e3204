"""Bars of several assets on one calendar (a `Panel`), read by `load_panel` from a long CSV
(``date, symbol, open, high, low, close[, volume]``) or a wide one (a time column, then one column
of closes per asset), with the checks of `tritonrl.toolkit.bars.csvbars`: anything unreadable is
one ``ValueError`` naming the file, the line and the column. What a portfolio env reads. Imports the
toolkit core only. See docs/pages/market.md ("Several assets").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tritonrl.toolkit.bars.csvbars import (
    _EPOCH,
    _SECOND,
    PRICE_COLUMNS,
    TIME_COLUMNS,
    _check_ohlc,
    _csv_time,
    _csv_value,
    _data_rows,
    _periods_per_year,
    read_checked_csv,
)

__all__ = ["SYMBOL_COLUMNS", "Panel", "load_panel"]

SYMBOL_COLUMNS = ("symbol", "ticker", "asset")
"""Header names (any case) that make a CSV long-format: one row per (time, symbol)."""


@dataclass(frozen=True)
class Panel:
    """``N`` assets on ``T`` common times. Prices ``[T, N]`` f64 (a wide file's open, high and low
    are its close); ``filled [T, N]`` bool marks bars carried forward by ``load_panel(fill=True)``
    (their open, high, low and close are the last close, their volume 0)."""

    name: str
    time: np.ndarray  # [T] datetime64[s], strictly increasing
    symbols: tuple[str, ...]
    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    volume: np.ndarray  # [T, N] f64; zeros where the file has none
    filled: np.ndarray
    periods_per_year: float

    def __len__(self) -> int:
        return int(self.time.shape[0])


def load_panel(
    path: str | Path,
    *,
    fill: bool = False,
    name: str | None = None,
    periods_per_year: float | None = None,
    min_rows: int = 2,
) -> Panel:
    """Read a long or a wide CSV of several assets and align them on the union of their times.

    Args:
        fill: carry a missing bar forward from the asset's last close (flagged in
            ``Panel.filled``); ``False`` refuses a missing bar. A bar before an asset's first
            one is refused either way (nothing to carry).
        name: the panel's label (default: the file's stem).
        periods_per_year: as `load_csv`'s (default: from the median spacing).
        min_rows: the fewest common times accepted; at least 2.

    Raises:
        ValueError: one line naming the file (the line and the column where there is one): a
            missing time or close column, fewer than two assets, a bad or non-positive price,
            open or close outside [low, high], a repeated (time, symbol), a missing bar without
            ``fill``, too few rows; and everything `load_csv` refuses about the file itself.
    """
    path = Path(path)
    if min_rows < 2:
        raise ValueError(f"min_rows={min_rows}: at least 2 bars are needed (one return)")

    def parse(reader: Any, header: list[str]) -> _Rows:
        lower = [h.strip().lower() for h in header]
        if any(c in lower for c in SYMBOL_COLUMNS):
            return _long_rows(path, reader, header, lower)
        return _wide_rows(path, reader, header, lower)

    rows = read_checked_csv(path, parse)
    return _align(path, rows, fill, name, periods_per_year, min_rows)


_Rows = dict[str, dict[int, tuple[int, np.ndarray]]]
"""symbol -> {seconds: (line, [open, high, low, close, volume])}."""


def _time_index(path: Path, header: list[str], lower: list[str]) -> int:
    """The index of the time column (`TIME_COLUMNS`, in that order of preference)."""
    name = next((c for c in TIME_COLUMNS if c in lower), None)
    if name is None:
        raise ValueError(
            f"{path}: no time column (one of {', '.join(TIME_COLUMNS)}, any case; "
            f"header: {', '.join(header)})"
        )
    return lower.index(name)


def _seconds(where: str, cell: str) -> int:
    """Seconds since 1970 of the time in ``cell``, as `load_csv` counts them."""
    return (_csv_time(where, cell) - _EPOCH) // _SECOND


def _put(path: Path, rows: _Rows, symbol: str, sec: int, line: int, values: np.ndarray, column: str) -> None:
    """Store one bar, refusing a second one at the same time for the same symbol."""
    bars = rows.setdefault(symbol, {})
    if sec in bars:
        raise ValueError(
            f"{path}, line {line}, column {column!r}: a second bar of {symbol!r} at "
            f"{np.datetime64(sec, 's')} (the first is on line {bars[sec][0]})"
        )
    bars[sec] = (line, values)


def _long_rows(path: Path, reader: Any, header: list[str], lower: list[str]) -> _Rows:
    """One row per (time, symbol); open, high and low default to the close, volume to 0."""
    t = _time_index(path, header, lower)
    s = next(lower.index(c) for c in SYMBOL_COLUMNS if c in lower)
    if "close" not in lower:
        raise ValueError(f"{path}: no close column (header: {', '.join(header)})")
    cols = {c: lower.index(c) for c in (*PRICE_COLUMNS, "volume") if c in lower}
    rows: _Rows = {}
    for line, row in _data_rows(path, reader, header):
        symbol = row[s].strip()
        if not symbol:
            raise ValueError(f"{path}, line {line}, column {header[s].strip()!r}: empty value")
        sec = _seconds(f"{path}, line {line}, column {header[t].strip()!r}", row[t])
        got = {
            c: _csv_value(f"{path}, line {line}, column {header[i].strip()!r}", c, row[i])
            for c, i in cols.items()
        }
        close = got["close"]
        bar = np.array([got.get(c, close) for c in PRICE_COLUMNS] + [got.get("volume", 0.0)])
        _check_ohlc(
            path, [header[cols.get(c, cols["close"])].strip() for c in PRICE_COLUMNS], bar[None], [line]
        )
        _put(path, rows, symbol, sec, line, bar, header[s].strip())
    return rows


def _wide_rows(path: Path, reader: Any, header: list[str], lower: list[str]) -> _Rows:
    """A time column, then one column of closes per asset; an empty cell is a missing bar."""
    t = _time_index(path, header, lower)
    assets = [(i, header[i].strip()) for i in range(len(header)) if i != t]
    if len(assets) < 2 or len({a for _, a in assets}) != len(assets) or not all(a for _, a in assets):
        raise ValueError(
            f"{path}: a wide file needs a time column and two or more named, distinct asset columns "
            f"of closes (header: {', '.join(header)}); a long file names a {'/'.join(SYMBOL_COLUMNS)} column"
        )
    rows: _Rows = {}
    for line, row in _data_rows(path, reader, header):
        sec = _seconds(f"{path}, line {line}, column {header[t].strip()!r}", row[t])
        for i, asset in assets:
            if not row[i].strip():
                continue  # no bar of this asset at this time: aligned (or refused) below
            close = _csv_value(f"{path}, line {line}, column {asset!r}", "close", row[i])
            _put(path, rows, asset, sec, line, np.array([close, close, close, close, 0.0]), header[t].strip())
    return rows


def _align(
    path: Path, rows: _Rows, fill: bool, name: str | None, periods_per_year: float | None, min_rows: int
) -> Panel:
    """The rows of every symbol on the union of their times, missing bars refused or carried forward."""
    symbols = tuple(sorted(rows))
    if len(symbols) < 2:
        raise ValueError(
            f"{path}: {len(symbols)} asset(s) ({', '.join(symbols) or 'none'}); a panel needs two or more"
        )
    times = np.array(sorted(set().union(*(rows[s] for s in symbols))), dtype=np.int64)
    if len(times) < min_rows:
        raise ValueError(f"{path}: {len(times)} times, fewer than the {min_rows} needed")
    table = np.zeros((len(times), len(symbols), 5))
    filled = np.zeros((len(times), len(symbols)), dtype=bool)
    for k, symbol in enumerate(symbols):
        bars = rows[symbol]
        last: np.ndarray | None = None
        for j, sec in enumerate(times.tolist()):
            if sec in bars:
                last = table[j, k] = bars[sec][1]
                continue
            when = np.datetime64(sec, "s")
            if last is None or not fill:
                why = ", before its first bar" if last is None else " (fill=True carries its last close)"
                raise ValueError(f"{path}: {symbol!r} has no bar at {when}{why}")
            table[j, k] = (last[3], last[3], last[3], last[3], 0.0)
            filled[j, k] = True
    time = times.astype("datetime64[s]")
    return Panel(
        name=name if name is not None else path.stem,
        time=time,
        symbols=symbols,
        open=table[..., 0].copy(),
        high=table[..., 1].copy(),
        low=table[..., 2].copy(),
        close=table[..., 3].copy(),
        volume=table[..., 4].copy(),
        filled=filled,
        periods_per_year=float(periods_per_year) if periods_per_year is not None else _periods_per_year(time),
    )
