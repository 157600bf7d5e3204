"""Scores across runs (`tritonrl.toolkit.scores`): IQM, stratified bootstrap intervals and the
probability of improvement, against hand-worked values, scipy, and the figures of the ``rliable``
package on the same scores, seeds and draws (tests/toolkit/data/rliable_reference.json, written by
benchmarks/rliable_check.py; a live comparison runs where rliable imports)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tritonrl.toolkit import scores

REFERENCE = Path(__file__).parent / "data" / "rliable_reference.json"
STATS = ("mean", "median", "iqm", "probability_of_improvement")

finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
matrices = hnp.arrays(np.float64, st.tuples(st.integers(1, 12), st.integers(1, 4)), elements=finite)


def test_iqm_cuts_a_quarter_from_each_end() -> None:
    assert scores.iqm([1, 2, 3, 4, 100, 5, 6, 7]) == 4.5  # middle of 8: 3 4 5 6
    assert scores.iqm([10, -1000, 20, 30, 1000]) == 20.0  # 5: floor(1.25) = 1 cut each end
    assert scores.iqm([3.0]) == 3.0 and scores.iqm([[1, 2], [3, 4]]) == 2.5  # runs and tasks together


@settings(max_examples=60, deadline=None)
@given(matrices)
def test_iqm_is_scipy_trim_mean(x: np.ndarray) -> None:
    stats = pytest.importorskip("scipy.stats")
    expected = stats.trim_mean(x, proportiontocut=0.25, axis=None)
    assert scores.iqm(x) == pytest.approx(expected, rel=1e-12, abs=1e-9)  # same cut, same mean


def test_mean_and_median_are_over_task_means() -> None:
    x = [[0.0, 10.0, 1.0], [2.0, 30.0, 1.0]]  # task means 1, 20, 1
    assert scores.mean(x) == pytest.approx(22 / 3) and scores.median(x) == 1.0


def test_probability_of_improvement_counts_pairs_and_half_ties() -> None:
    assert scores.probability_of_improvement([3, 4], [1, 2]) == 1.0
    assert scores.probability_of_improvement([1, 2], [3, 4]) == 0.0
    # pairs (x, y): (2,1) win, (2,2) tie, (2,3) loss, (0, *) losses: (1 + 0.5) / 6
    assert scores.probability_of_improvement([2, 0], [1, 2, 3]) == pytest.approx(1.5 / 6)
    # two tasks: the average of each task's probability
    assert scores.probability_of_improvement([[1, 5], [2, 6]], [[0, 9], [0, 9]]) == pytest.approx(0.5)


@settings(max_examples=40, deadline=None)
@given(matrices, st.integers(1, 8))
def test_probability_of_improvement_of_x_and_y_sums_to_one(x: np.ndarray, runs_y: int) -> None:
    y = np.roll(x, 1, axis=0)[: min(runs_y, x.shape[0])] + 1.0
    both = scores.probability_of_improvement(x, y) + scores.probability_of_improvement(y, x)
    assert both == pytest.approx(1)


def test_reference_figures_of_rliable_are_matched_to_1e_9() -> None:
    data = json.loads(REFERENCE.read_text())
    assert len(data["cases"]) >= 7
    for case in data["cases"]:
        x, y = np.array(case["x"]), np.array(case["y"])
        for stat in STATS:
            groups = (x, y) if stat == "probability_of_improvement" else (x,)
            ours = scores.bootstrap_interval(stat, *groups, reps=case["reps"], seed=case["seed"])
            # the same draws and percentiles: only summation order may differ (observed 1.4e-14)
            assert ours == pytest.approx(case["rliable"][stat], abs=1e-9, rel=0), (case["name"], stat)


def test_live_rliable_agrees_where_it_imports() -> None:
    try:
        from rliable import library, metrics
    except Exception as exc:  # absent, or arch failing beside pandas 3 (a TypeError)
        pytest.skip(f"rliable does not import here: {type(exc).__name__}")
    x = np.random.RandomState(5).normal(size=(6, 2))
    np.random.seed(9)  # noqa: NPY002 (rliable draws from the global generator)
    point, interval = library.get_interval_estimates(
        {"a": x}, lambda s: np.array([metrics.aggregate_iqm(s)]), reps=500
    )
    ours = scores.bootstrap_interval("iqm", x, reps=500, seed=9)
    assert ours == pytest.approx([point["a"][0], *interval["a"][:, 0]], abs=1e-9)


def test_interval_is_reproducible_and_brackets_the_estimate() -> None:
    x = np.random.default_rng(0).normal(size=10)
    a = scores.bootstrap_interval("iqm", x, reps=3_000, seed=4)
    assert a == scores.bootstrap_interval("iqm", x, reps=3_000, seed=4)
    assert a != scores.bootstrap_interval("iqm", x, reps=3_000, seed=5)
    assert a[1] < a[0] < a[2]
    wide = scores.bootstrap_interval("iqm", x, reps=3_000, seed=4, confidence=0.99)
    assert wide[1] <= a[1] and wide[2] >= a[2]  # a wider coverage, the same replicates
    assert scores.bootstrap_interval("mean", [7.0] * 5, reps=100) == (7.0, 7.0, 7.0)


def test_stratified_resampling_keeps_each_task_its_own_runs() -> None:
    # task 0 holds only 0s and task 1 only 100s: any mixing across tasks would move the median
    x = np.array([[0.0, 100.0]] * 4 + [[1.0, 101.0]])
    est, lo, hi = scores.bootstrap_interval("median", x, reps=2_000, seed=1)
    assert 50.0 <= lo <= est <= hi <= 51.0


@pytest.mark.parametrize(
    ("args", "kwargs", "words"),
    [
        (("nope", [1.0]), {}, "statistic must be one of"),
        (("iqm", [1.0], [2.0]), {}, r"iqm takes 1 score group\(s\), got 2"),
        (("probability_of_improvement", [1.0]), {}, "takes 2 score group"),
        (("iqm", [1.0]), {"reps": 0}, "reps must be an int >= 1"),
        (("iqm", [1.0]), {"confidence": 1.0}, r"confidence must be in \(0, 1\)"),
        (("iqm", [1.0]), {"seed": -1}, "seed must be an int"),
        (("iqm", []), {}, "at least one of each"),
        (("iqm", [1.0, float("nan")]), {}, "must be finite"),
        (("probability_of_improvement", [[1.0, 2.0]], [[1.0]]), {}, "the same number of tasks"),
    ],
)
def test_bad_arguments_are_one_clear_error(args, kwargs, words) -> None:
    with pytest.raises(ValueError, match=words):
        scores.bootstrap_interval(*args, **kwargs)
