"""``tritonrl evaluate``: per-run results on held-out seeds, the grouped summary with intervals, and
every refusal as one line (nothing written then)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

from tritonrl.cli import main
from tritonrl.cli.common import load_run_agent
from tritonrl.cli.evaluate import EVAL_SEED, RESULT_NAME
from tritonrl.toolkit.envs.vector import evaluate
from tritonrl.toolkit.scores import bootstrap_interval, iqm

SMALL = ["--set", "learning_starts=32", "--set", "buffer_size=256", "--set", "batch_size=16"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, list[Path]]:
    """Two seeds of ``dqn`` and two of ``double`` on CartPole-v1 (300 steps each)."""
    root = tmp_path_factory.mktemp("runs")
    out: dict[str, list[Path]] = {}
    for agent in ("dqn", "double"):
        for seed in (1, 2):
            run = root / f"{agent}-s{seed}"
            code = main(
                ["train", "--agent", agent, "--env", "CartPole-v1", "--steps", "300", "--seed", str(seed)]
                + ["--eval-every", "0", "--eval-episodes", "1", "--no-progress", "--no-tensorboard"]
                + ["--run-dir", str(run), *SMALL]
            )
            assert code == 0
            out.setdefault(agent, []).append(run)
    return out


def test_each_run_is_played_on_the_held_out_seeds(runs, tmp_path: Path, capsys) -> None:
    dirs = runs["dqn"] + runs["double"]
    out = tmp_path / "summary.json"
    assert main(["evaluate", *map(str, dirs), "--episodes", "4", "--reps", "500", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for d in dirs:
        result = json.loads((d / RESULT_NAME).read_text())
        assert result["seed"] == EVAL_SEED and result["episodes"] == 4 and result["step"] == 300
        # the same returns as the run's policy played directly on those seeds
        agent, _ = load_run_agent(d, "cpu")
        direct = evaluate(agent.eval_policy(), "CartPole-v1", 4, EVAL_SEED)
        assert result["returns"] == [float(r) for r in direct["returns"]]
        assert result["mean_return"] == pytest.approx(sum(result["returns"]) / 4, rel=1e-12)
        assert f"{d}: {result['agent']} on CartPole-v1 (step 300)" in printed
    summary = json.loads(out.read_text())
    groups = {g["agent"]: g for g in summary["groups"]}
    assert set(groups) == {"dqn", "double"} and summary["episodes"] == 4 and len(summary["runs"]) == 4
    for agent, g in groups.items():
        scores = [json.loads((d / RESULT_NAME).read_text())["mean_return"] for d in runs[agent]]
        assert g["runs"] == 2 and g["scores"] == scores
        est, lo, hi = bootstrap_interval("iqm", scores, reps=500, seed=0)
        assert g["iqm"] == {"estimate": est, "lower": lo, "upper": hi} and est == iqm(scores)
    pairs = {(p["x"], p["y"]): p["estimate"] for p in summary["improvement"]}
    assert set(pairs) == {("dqn", "double"), ("double", "dqn")}
    assert pairs["dqn", "double"] + pairs["double", "dqn"] == pytest.approx(1.0)
    assert "P(dqn > double) on CartPole-v1" in printed


def test_another_seed_plays_other_episodes(runs, capsys) -> None:
    run = runs["dqn"][0]
    assert main(["evaluate", str(run), "--episodes", "3", "--seed", "7", "--reps", "10"]) == 0
    assert json.loads((run / RESULT_NAME).read_text())["seed"] == 7
    capsys.readouterr()


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--episodes", "0"], "--episodes must be between 1 and 65536"),
        (["--reps", "0"], "--reps must be >= 1"),
        (["--confidence", "1.5"], r"--confidence must be in \(0, 1\)"),
        (["--seed", "-1"], "--seed must be between 0 and"),
    ],
)
def test_bad_flags_are_one_line(runs, tmp_path: Path, capsys, flags, words) -> None:
    out = tmp_path / "s.json"
    assert main(["evaluate", str(runs["dqn"][0]), *flags, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and __import__("re").search(words, err[0])
    assert not out.exists()


def test_bad_run_folders_are_one_line(runs, tmp_path: Path, capsys) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [
        ([str(tmp_path / "missing")], "no such run folder"),
        ([str(empty)], "no checkpoint.safetensors"),
        ([str(runs["dqn"][0]), str(runs["dqn"][0])], "a run folder is named twice"),
    ]
    for dirs, words in cases:
        assert main(["evaluate", *dirs, "--reps", "10"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err
