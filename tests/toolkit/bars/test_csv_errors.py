"""The CSV loader refuses what it cannot read, in one line naming the file (and the line and the
column where there is one), directly and through ``fit --data csv=PATH`` and ``train --env
market:csv=PATH``: exit status 2, nothing written (toolkit/bars/csvbars.py).

:data:`CSV_CASES` writes one malformed file per row; a FIFO and a link to ``/dev/zero`` run in a
subprocess with a timeout, so a loader that blocked on the pipe or read the device forever would
fail instead of hanging the suite.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from tritonrl.cli import main
from tritonrl.toolkit.bars import load_csv
from tritonrl.toolkit.bars.csvbars import MAX_CSV_BYTES, MAX_CSV_LINE, OHLC_RTOL

REPO = Path(__file__).resolve().parents[3]
HEADER = "Date,Open,High,Low,Close,Volume"


def _rows(n: int) -> list[str]:
    return [f"2020-01-{d:02d},10.0,11.0,9.0,10.5,{1000 + d}" for d in range(1, n + 1)]


def _text(*lines: str) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.write_text("\n".join(lines) + "\n")

    return write


def _bytes(data: bytes) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.write_bytes(data)

    return write


def _long_line(path: Path) -> None:  # a 64 MB field: far over the csv module's field limit
    with path.open("w") as f:
        f.write("\n".join([HEADER, *_rows(2)]) + "\n2020-01-03,")
        f.write("1" * (64 << 20))
        f.write(",11,9,10,5\n")


def _long_quoted_field(path: Path) -> None:  # short lines, one quoted field of 200 kB across them
    field = "x" * 99 + "\n"
    path.write_text("\n".join([HEADER, *_rows(2)]) + '\n2020-01-03,"' + field * 2000 + '",11,9,10,5\n')


def _sparse_huge(path: Path) -> None:  # one byte over the cap, no disk used
    with path.open("wb") as f:
        f.truncate(MAX_CSV_BYTES + 1)


def _folder(path: Path) -> None:
    path.mkdir()


def _dangling(path: Path) -> None:
    path.symlink_to(path.parent / "nowhere.csv")


@dataclass(frozen=True)
class Case:
    id: str
    write: Callable[[Path], None]
    match: str
    """Regex searched in the message (``bars.csv`` is the file's name)."""


BAD_UTF8_FAR = "\n".join(
    [HEADER, *(f"2020-01-01T00:{i // 60:02d}:{i % 60:02d},10,11,9,10,5" for i in range(3000))]
)
CSV_CASES = [
    Case(
        "field-over-the-csv-limit",
        _long_line,
        rf"bars\.csv, line 4: longer than {MAX_CSV_LINE} characters \(a row of bars is a few dozen\)$",
    ),
    Case(
        "quoted-field-over-the-csv-limit",
        _long_quoted_field,
        r"bars\.csv, line \d+: not readable as CSV \(field larger than field limit \(131072\)\)$",
    ),
    Case(
        "more-fields-than-the-header",
        _text(HEADER, *_rows(2), "2020-01-03,10,11,9,10,5,7"),
        r"bars\.csv, line 4: 7 fields, the header has 6$",
    ),
    Case(
        "fewer-fields-than-the-header",
        _text(HEADER + ",Adj Close", *(r + ",1" for r in _rows(2)), "2020-01-03,10,11,9,10,5"),
        r"bars\.csv, line 4: 6 fields, the header has 7$",
    ),
    Case(
        "high-below-low",
        _text(HEADER, *_rows(2), "2020-01-03,10,9,11,10,5"),
        r"bars\.csv, line 4, column 'High': high 9 is below the low 11$",
    ),
    Case(
        "open-above-high",
        _text(HEADER, *_rows(2), "2020-01-03,12,11,9,10,5"),
        r"bars\.csv, line 4, column 'Open': open 12 lies outside \[low 9, high 11\]$",
    ),
    Case(
        "open-below-low",
        _text(HEADER, *_rows(2), "2020-01-03,8,11,9,10,5"),
        r"line 4, column 'Open': open 8 lies outside \[low 9, high 11\]$",
    ),
    Case(
        "close-above-high",
        _text("date,open,high,low,close,volume", *_rows(2), "2020-01-03,10,11,9,11.5,5"),
        r"line 4, column 'close': close 11.5 lies outside \[low 9, high 11\]$",
    ),
    Case(
        "close-below-low",
        _text(HEADER, *_rows(2), "2020-01-03,10,11,9,8.99,5"),
        r"line 4, column 'Close': close 8.99 lies outside",
    ),
    Case(
        "not-utf8",
        _bytes(("\n".join([HEADER, *_rows(2)]) + "\n2020-01-03,10,11,").encode() + b"\xff9,10,5\n"),
        r"bars\.csv, line 4: not UTF-8 text \(byte 0xff at position 18 of the line\); save the file as "
        "UTF-8$",
    ),
    Case(
        "not-utf8-in-the-header",
        _bytes(b"Date,Op\xe9n,High,Low,Close,Volume\n" + "\n".join(_rows(3)).encode()),
        r"bars\.csv, line 1: not UTF-8 text \(byte 0xe9 at position 8 of the line\)",
    ),
    Case(
        "not-utf8-past-the-first-chunk",  # the decoder's offset is within a 64 KiB chunk, not the file
        _bytes(BAD_UTF8_FAR.encode() + b"\n2020-01-02,1\xc3(,11,9,10,5\n"),
        r"bars\.csv, line 3002: not UTF-8 text \(byte 0xc3 at position 13 of the line\)",
    ),
    Case("a-folder", _folder, r"bars\.csv: is a folder, not a regular CSV file$"),
    Case("dangling-link", _dangling, r"bars\.csv: no such file \(a link to .*nowhere\.csv\)$"),
    Case(
        "larger-than-the-cap",
        _sparse_huge,
        r"bars\.csv: 1,073,741,825 bytes, more than the 1,073,741,824 \(1 GiB\) a CSV of bars may have",
    ),
    Case("empty", _text(""), r"bars\.csv: the file is empty|bars\.csv: missing column"),
    Case(
        "repeated-column",
        _text(HEADER + ",close", *(r + ",3" for r in _rows(3))),
        r"bars\.csv: the header names column 'close' 2 times",
    ),
    Case(
        "nul-byte",
        _text(HEADER, *_rows(2), "2020-01-03,10\0,11,9,10,5"),
        r"bars\.csv, line 4, column 'Open': '10\\x00' is not a number$",
    ),
]


def _snapshot(root: Path) -> dict[str, int | None]:
    """Every path under ``root`` (links not followed) with its size (``None`` for a folder)."""
    return {
        str(p.relative_to(root)): (None if p.is_dir() and not p.is_symlink() else p.lstat().st_size)
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("case", CSV_CASES, ids=[c.id for c in CSV_CASES])
def test_load_csv_refuses_in_one_line(case: Case, tmp_path: Path) -> None:
    path = tmp_path / "bars.csv"
    case.write(path)
    with pytest.raises(ValueError) as info:
        load_csv(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path)), message
    assert re.search(case.match, message), message


COMMANDS = {
    "fit": lambda path, run: ["fit", "--model", "mlp", "--data", f"csv={path}", "--run-dir", run],
    "train": lambda path, run: ["train", "--agent", "ppo", "--env", f"market:csv={path}", "--run-dir", run],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("case", CSV_CASES, ids=[c.id for c in CSV_CASES])
def test_cli_refuses_a_bad_csv_in_one_line(
    case: Case,
    command: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if command == "train":
        pytest.importorskip("gymnasium")
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "bars.csv"
    case.write(path)
    before = _snapshot(tmp_path)
    threads = torch.get_num_threads()
    try:
        code = main([*COMMANDS[command](path, str(tmp_path / "run")), "--no-progress", "--no-tensorboard"])
    finally:
        torch.set_num_threads(threads)
    out, err = capsys.readouterr()
    assert code == 2, err
    assert out == "" and "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}"), err
    assert re.search(case.match, lines[0]), lines[0]
    assert _snapshot(tmp_path) == before  # no run folder, no .lock


def _fifo(path: Path) -> None:
    os.mkfifo(path)  # nobody writes to it: opening it for reading the usual way blocks forever


def _dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")  # reads never end


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not Path("/dev/zero").exists(), reason="POSIX only")
@pytest.mark.parametrize(
    ("make", "match"),
    [
        (_fifo, r"bars\.csv: is a named pipe \(FIFO\), not a regular CSV file"),
        (_dev_zero, r"bars\.csv: is a character device \(a link to /dev/zero\), not a regular CSV file"),
    ],
    ids=["fifo", "dev-zero"],
)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_cli_never_blocks_on_a_fifo_or_a_device(
    make: Callable[[Path], None], match: str, command: str, tmp_path: Path
) -> None:
    """Through ``python -m tritonrl`` with a timeout: refused at once, exit 2, one line."""
    if command == "train":
        pytest.importorskip("gymnasium")
    path = tmp_path / "bars.csv"
    make(path)
    before = _snapshot(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "tritonrl", *COMMANDS[command](path, str(tmp_path / "run"))],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"error: {path}") and re.search(match, proc.stderr), proc.stderr
    assert _snapshot(tmp_path) == before


def test_ohlc_tolerance_is_round_off_only(tmp_path: Path) -> None:
    """An open above the high by half the relative tolerance is round-off and loads; by twice it is
    refused (the tolerance, :data:`OHLC_RTOL`, covers prices that went through float32)."""
    ok = 11.0 * (1 + OHLC_RTOL / 2)
    path = tmp_path / "ok.csv"
    _text(HEADER, *_rows(2), f"2020-01-03,{ok!r},11,9,10,5")(path)
    np.testing.assert_array_equal(load_csv(path).open, [10.0, 10.0, ok])  # exact: the parsed value
    path = tmp_path / "bad.csv"
    _text(HEADER, *_rows(2), f"2020-01-03,{11.0 * (1 + 2 * OHLC_RTOL)!r},11,9,10,5")(path)
    with pytest.raises(ValueError, match=r"bad\.csv, line 4, column 'Open': open .* lies outside"):
        load_csv(path)


def test_csv_times_match_numpy(tmp_path: Path) -> None:
    """Times are stored as whole seconds the way numpy's ``datetime64[s]`` would (floored, also
    before 1970)."""
    stamps = ["1969-12-31T23:59:59.500000", "1970-01-01T00:00:00", "2020-02-29T12:30:15.999999"]
    path = tmp_path / "t.csv"
    _text("time,open,high,low,close,volume", *(f"{s},1,1,1,1,1" for s in stamps))(path)
    from datetime import datetime

    want = np.array([datetime.fromisoformat(s) for s in stamps], dtype="datetime64[s]")
    np.testing.assert_array_equal(load_csv(path).time, want)  # exact: the same integer seconds
