"""``tritonrl backtest``: a walk-forward run of a portfolio preset and its refusals.

One small backtest (``dqn-portfolio``, 900 bars of 3 assets, 2 folds of 300 steps, 2 seeds, one
torch thread) writes ``summary.json`` with both seeds, per seed a ``test_report.json`` with the
stitched record, both folds' reports and the four baselines, and a tear sheet. A second run into
the same folder, a non-portfolio ``--env`` (or none, for a preset without a portfolio default),
``--folds 0`` and a bad env field are each one ``error:`` line, exit 2, nothing written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

from tritonrl.cli import main
from tritonrl.toolkit.backtest.tearsheet import FIGURES, HTML_NAME

AGENT = "dqn-portfolio"
ENV = "portfolio:synthetic,bars=900,assets=3"
ARGS = ["backtest", "--agent", AGENT, "--folds", "2", "--steps", "300", "--seeds", "2"]
NAMES = [AGENT, "equal_weight", "buy_and_hold", "minimum_variance", "momentum"]


@pytest.fixture(scope="module")
def backtest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("backtest") / "bt"
    assert main([*ARGS, "--env", ENV, "--run-dir", str(run_dir)]) == 0
    return run_dir


def _one_error_line(err: str, words: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], err


def test_backtest_writes_a_summary_reports_and_tear_sheets(backtest: Path) -> None:
    summary = json.loads((backtest / "summary.json").read_text())
    assert (summary["agent"], summary["env"], summary["folds"], summary["steps"]) == (AGENT, ENV, 2, 300)
    assert sorted(summary["seeds"]) == ["1", "2"]
    for seed in ("1", "2"):
        report = json.loads((backtest / f"seed{seed}" / "test_report.json").read_text())
        assert report["strategy"] == AGENT and list(report["metrics"]) == NAMES
        assert summary["seeds"][seed] == report["metrics"]
        folds = report["fold_reports"]
        assert len(folds) == 2 and all(list(f["metrics"]) == NAMES for f in folds)
        # the stitched record: fold 1's test period starts where fold 0's ends, no return lost
        assert report["fold_starts"] == [f["dates"][0] for f in folds] and report["folds"] == [
            folds[1]["dates"][0]
        ]
        assert folds[0]["dates"][-1] == folds[1]["dates"][0]
        assert len(report["dates"]) == sum(len(f["dates"]) for f in folds) - 1
        assert all(len(e) == len(report["dates"]) for e in report["equity"].values())
        files = sorted(p.name for p in (backtest / f"seed{seed}" / "tearsheet").iterdir())
        assert files == sorted([*(f"{n}.png" for n in FIGURES), HTML_NAME])
    # the seeds train different agents; the baselines do not depend on the seed
    one, two = (summary["seeds"][s] for s in ("1", "2"))
    assert one["equal_weight"] == two["equal_weight"]


def test_a_second_backtest_into_the_same_folder_is_refused(
    backtest: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (backtest / "summary.json").read_bytes()
    capsys.readouterr()
    assert main([*ARGS, "--env", ENV, "--run-dir", str(backtest)]) == 2
    _one_error_line(capsys.readouterr().err, "already holds a backtest")
    assert (backtest / "summary.json").read_bytes() == before


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--env", "market:synthetic"], "--env must be portfolio:SOURCE, got 'market:synthetic'"),
        (["--env", "CartPole-v1"], "--env must be portfolio:SOURCE, got 'CartPole-v1'"),
        (["--agent", "dqn"], "--agent dqn has no portfolio:SOURCE default"),
        (["--env", ENV, "--folds", "0"], "--folds"),
        (["--env", ENV, "--set", "env.fill=x"], "fill"),
    ],
)
def test_backtest_refusals_are_one_line_and_write_nothing(
    argv: list[str], words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "bt"
    assert main([*ARGS, *argv, "--run-dir", str(run_dir)]) == 2
    captured = capsys.readouterr()
    _one_error_line(captured.err, words)
    assert "Traceback" not in captured.err and not run_dir.exists()
