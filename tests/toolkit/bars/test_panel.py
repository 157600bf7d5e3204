"""`load_panel`: several assets from a long or a wide CSV, aligned on one calendar; a missing bar
refused, or carried forward and flagged with ``fill=True``; bad input one line naming the file, the
line and the column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonrl.toolkit.bars import Panel, load_panel

LONG = """date,symbol,open,high,low,close,volume
2024-01-02,AAA,10,11,9,10.5,100
2024-01-02,BBB,20,21,19,20.5,200
2024-01-03,BBB,20.5,22,20,21,210
2024-01-03,AAA,10.5,12,10,11,110
2024-01-04,AAA,11,11.5,10.5,11.2,120
2024-01-04,BBB,21,21.5,20.5,21.2,220
"""


def _write(tmp_path: Path, text: str, name: str = "p.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_long_format_rows_in_any_order(tmp_path: Path) -> None:
    p = load_panel(_write(tmp_path, LONG))
    assert isinstance(p, Panel) and p.symbols == ("AAA", "BBB") and len(p) == 3
    assert p.close.shape == (3, 2) and p.close.dtype == np.float64
    np.testing.assert_array_equal(p.close, [[10.5, 20.5], [11, 21], [11.2, 21.2]])
    np.testing.assert_array_equal(p.volume[:, 1], [200, 210, 220])
    assert not p.filled.any() and p.periods_per_year == 252
    assert str(p.time[0]) == "2024-01-02T00:00:00"


def test_wide_closes_and_a_gap(tmp_path: Path) -> None:
    wide = "date,AAA,BBB,CCC\n2024-01-02,1,2,3\n2024-01-03,1.1,,3.1\n2024-01-04,1.2,2.2,3.2\n"
    path = _write(tmp_path, wide)
    with pytest.raises(ValueError, match=r"'BBB' has no bar at 2024-01-03T00:00:00 \(fill=True carries"):
        load_panel(path)
    p = load_panel(path, fill=True)
    assert p.symbols == ("AAA", "BBB", "CCC")
    np.testing.assert_array_equal(p.close[:, 1], [2, 2, 2.2])  # carried forward
    np.testing.assert_array_equal(p.filled, [[0, 0, 0], [0, 1, 0], [0, 0, 0]])
    np.testing.assert_array_equal(p.open, p.close)  # a wide file's bars are closes


def test_nothing_to_carry_before_the_first_bar(tmp_path: Path) -> None:
    text = LONG + "2024-01-01,AAA,9,10,8,9.5,90\n"  # AAA starts a day earlier than BBB
    with pytest.raises(ValueError, match=r"'BBB' has no bar at 2024-01-01T00:00:00, before its first bar"):
        load_panel(_write(tmp_path, text), fill=True)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "date,symbol,close\n2024-01-02,AAA,1\n2024-01-02,AAA,2\n2024-01-02,BBB,1\n",
            r"line 3, column 'symbol': a second bar of 'AAA' at 2024-01-02T00:00:00 "
            r"\(the first is on line 2\)",
        ),
        ("date,symbol,close\n2024-01-02,AAA,-1\n", r"line 2, column 'close': price -1 is not positive"),
        ("date,symbol,close\n2024-01-02,AAA,abc\n", r"line 2, column 'close': 'abc' is not a number"),
        ("date,symbol,close\n2024-13-02,AAA,1\n", r"line 2, column 'date': cannot parse '2024-13-02'"),
        ("date,symbol,open,high,low,close\n2024-01-02,AAA,5,4,3,3.5\n", r"line 2, column 'open': open 5"),
        ("date,symbol,close\n2024-01-02,,1\n", r"line 2, column 'symbol': empty value"),
        ("date,symbol,price\n2024-01-02,AAA,1\n", r"no close column"),
        ("symbol,close\nAAA,1\n", r"no time column"),
        ("date,AAA\n2024-01-02,1\n2024-01-03,2\n", r"two or more named, distinct asset columns"),
        (
            "date,symbol,close\n2024-01-02,AAA,1\n2024-01-03,AAA,2\n",
            r"1 asset\(s\) \(AAA\); a panel needs two",
        ),
        ("", r"the file is empty"),
    ],
)
def test_bad_input_is_one_line_naming_the_place(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ValueError, match=message) as info:
        load_panel(path)
    assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.lists(st.booleans(), min_size=3, max_size=3), min_size=2, max_size=12),
    st.integers(0, 2**31 - 1),
)
def test_fill_carries_the_last_close_exactly_where_bars_are_missing(
    tmp_path_factory: pytest.TempPathFactory, present: list[list[bool]], seed: int
) -> None:
    """Any pattern of missing bars in a wide file (each asset's first row present, asset A always,
    so every row is a time of the calendar): with ``fill`` every missing bar is the asset's last
    close and flagged, every present one is as written."""
    rng = np.random.default_rng(seed)
    rows = [[True, *r[1:]] for r in present]
    rows[0] = [True, True, True]
    closes = rng.uniform(1, 100, size=(len(rows), 3)).round(4)
    lines = ["date,A,B,C"] + [
        f"2024-01-{i + 1:02d}," + ",".join(f"{closes[i, k]}" if rows[i][k] else "" for k in range(3))
        for i in range(len(rows))
    ]
    path = tmp_path_factory.mktemp("panel") / "w.csv"
    path.write_text("\n".join(lines) + "\n")
    p = load_panel(path, fill=True)
    want = closes.copy()
    for i in range(1, len(rows)):
        for k in range(3):
            if not rows[i][k]:
                want[i, k] = want[i - 1, k]
    np.testing.assert_array_equal(p.close, want)
    np.testing.assert_array_equal(p.filled, ~np.array(rows))
