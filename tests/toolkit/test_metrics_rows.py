"""``metrics.csv`` holds one row per step: the end-of-run evaluation joins the last step's row.

The last step of a run is often a metric flush too (``total_steps`` a multiple of ``log_every``):
its final evaluation is logged before that flush, so one row carries both, in a fresh run, a
resumed one and a run resumed from a finished one. A second flush at the file's last step (a
resumed run that evaluates at its checkpoint's step) merges into that row. Every test that uses
``tmp_path`` is checked the same way afterwards (``tests/conftest.py``); the two-rank run is in
test_distributed_loop.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("gymnasium")

from helpers import assert_one_row_per_step
from test_run_folder import _rows, _run
from tritonrl.toolkit.logger import MetricLogger, read_csv


def test_a_second_flush_at_the_last_step_merges_into_its_row(tmp_path: Path) -> None:
    log = MetricLogger(tmp_path, tensorboard=False)
    log.log(4, {"losses/a": torch.tensor(1.5), "charts/SPS": 10.0})
    log.flush(4)
    log.log(8, {"losses/a": 2.0})
    log.flush(8)
    log.log(8, {"eval/mean_return": 7.0})  # a new column, at the same step
    log.flush(8)
    log.log(8, {"losses/a": 3.0})  # a value the row holds: this flush's wins
    log.flush(8)
    log.close()
    assert (tmp_path / "metrics.csv").read_text().splitlines() == [
        "global_step,losses/a,charts/SPS,eval/mean_return",
        "4,1.5,10.0,",
        "8,3.0,,7.0",
    ]
    reopened = MetricLogger(tmp_path, tensorboard=False)  # a resumed run: the file's last row is step 8
    reopened.log(8, {"charts/SPS": 5.0})
    reopened.flush(8)
    reopened.log(12, {"losses/a": 4.0})
    reopened.flush(12)
    reopened.close()
    assert [(r["global_step"], r.get("charts/SPS")) for r in read_csv(tmp_path / "metrics.csv")] == [
        (4.0, 10.0),
        (8.0, 5.0),
        (12.0, None),
    ]


def test_the_final_evaluation_joins_the_last_flush(tmp_path: Path) -> None:
    # 384 = 6 x log_every: the last step is a flush; eval_every=160 evaluated last at 320
    summary = _run(tmp_path, total_steps=384)
    assert summary["evaluations"][-1][0] == 384
    rows = read_csv(tmp_path / "metrics.csv")
    assert assert_one_row_per_step(tmp_path / "metrics.csv") == [64, 96, 128, 192, 256, 288, 320, 384]
    last = rows[-1]
    assert last["eval/mean_return"] == summary["final_eval"]["mean_return"]
    assert "losses/toy" in last and "charts/SPS" in last  # the flush's own metrics, on the same row


def test_a_resumed_run_writes_one_row_per_step_and_the_same_rows(tmp_path: Path) -> None:
    _run(tmp_path / "full", total_steps=384)
    _run(tmp_path / "split", total_steps=384, stop_at=200)  # the checkpoint of step 192 stays
    _run(tmp_path / "split", total_steps=384, resume=True)
    assert_one_row_per_step(tmp_path / "split" / "metrics.csv")
    assert _rows(tmp_path / "split" / "metrics.csv") == _rows(tmp_path / "full" / "metrics.csv")


def test_resuming_a_finished_run_evaluates_into_its_last_row(tmp_path: Path) -> None:
    """A run that ended without a final evaluation, resumed with one: the evaluation is at the
    checkpoint's step, whose row the file already holds."""
    _run(tmp_path, total_steps=384, final_eval=False, eval_every=0)
    before = read_csv(tmp_path / "metrics.csv")
    summary = _run(tmp_path, total_steps=384, resume=True)
    assert summary["global_step"] == 384 and [e[0] for e in summary["evaluations"]] == [384]
    after = read_csv(tmp_path / "metrics.csv")
    assert [r["global_step"] for r in after] == [r["global_step"] for r in before]
    assert after[:-1] == before[:-1]
    assert after[-1] == {**before[-1], "eval/mean_return": summary["final_eval"]["mean_return"]}
