"""`tritonrl.toolkit.scores` against the ``rliable`` package on the same scores, seeds and draws.

    python benchmarks/rliable_check.py [--write tests/toolkit/data/rliable_reference.json]

Runs where ``rliable`` imports: it needs ``arch``, which (7.2) fails to import beside pandas 3,
so use a venv of its own (``python -m venv V && V/bin/pip install rliable "pandas<3"``). Needs no
torch: the module is loaded from its file. For each case (runs x tasks, ties, unequal run
counts), rliable's point estimate and 95% percentile interval of the mean, median, IQM and
probability of improvement (``np.random.seed(s)`` before each, as rliable draws from numpy's
global generator) beside ours with ``seed=s``; prints the largest difference. ``--write`` saves
rliable's figures for ``tests/toolkit/test_scores.py``. Then the speed of both on the zoo table's
case (the IQM interval of 5 runs, 50,000 replicates): three runs each, one thread, and the ratio.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one thread: set before numpy loads its BLAS

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
REPS = 2_000
CASES = [  # (name, runs, tasks, runs of y, ties)
    ("5x1", 5, 1, 5, False),
    ("5x3", 5, 3, 5, False),
    ("10x2", 10, 2, 10, False),
    ("3x1", 3, 1, 3, False),
    ("7x4-vs-6x4", 7, 4, 6, False),
    ("5x1-ties", 5, 1, 5, True),
    ("20x1", 20, 1, 20, False),
]


def _scores_module():
    spec = importlib.util.spec_from_file_location("scores", ROOT / "toolkit" / "scores.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _timed(f, repeats: int = 3) -> list[float]:
    """``repeats`` wall times of ``f()`` in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return times


def _speed(library, metrics, scores) -> None:
    """Both bootstraps on the zoo table's case, side by side: three runs each and the ratio."""
    x = np.random.RandomState(7).normal(size=(5, 1)) * 100
    reps = 50_000

    def theirs():
        np.random.seed(0)  # noqa: NPY002 (rliable draws from the global generator)
        library.get_interval_estimates({"a": x}, lambda s: np.array([metrics.aggregate_iqm(s)]), reps=reps)

    rliable_s = _timed(theirs)
    ours_s = _timed(lambda: scores.bootstrap_interval("iqm", x, reps=reps, seed=0))
    ratio = [min(rliable_s) / max(ours_s), max(rliable_s) / min(ours_s)]
    print(f"speed, IQM interval of 5 runs x 1 task, {reps:,} replicates, one thread, 3 runs each:")
    print(f"  rliable  {min(rliable_s):.3f}-{max(rliable_s):.3f} s")
    print(f"  tritonrl {min(ours_s) * 1e3:.1f}-{max(ours_s) * 1e3:.1f} ms")
    print(f"  ratio    {ratio[0]:.0f}-{ratio[1]:.0f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", default=None, metavar="PATH")
    args = parser.parse_args()
    try:
        from rliable import library, metrics
    except Exception as exc:  # arch's import fails beside pandas 3 with a TypeError
        print(f"rliable does not import here ({type(exc).__name__}: {exc}); see the docstring")
        return 2
    scores = _scores_module()
    funcs = {"mean": metrics.aggregate_mean, "median": metrics.aggregate_median, "iqm": metrics.aggregate_iqm}
    rng = np.random.RandomState(2021)
    out, worst = [], 0.0
    for i, (name, runs, tasks, runs_y, ties) in enumerate(CASES):
        x = rng.normal(size=(runs, tasks)) * 100
        y = rng.normal(size=(runs_y, tasks)) * 100 + 20
        if ties:
            x, y = np.round(x / 50) * 50, np.round(y / 50) * 50
        case = {"name": name, "x": x.tolist(), "y": y.tolist(), "reps": REPS, "seed": 100 + i, "rliable": {}}
        for stat, f in funcs.items():
            np.random.seed(case["seed"])  # noqa: NPY002 (rliable draws from the global generator)
            point, interval = library.get_interval_estimates(
                {"a": x}, lambda s, f=f: np.array([f(s)]), reps=REPS
            )
            theirs = [float(point["a"][0]), float(interval["a"][0, 0]), float(interval["a"][1, 0])]
            ours = scores.bootstrap_interval(stat, x, reps=REPS, seed=case["seed"])
            case["rliable"][stat] = theirs
            worst = max(worst, *(abs(a - b) for a, b in zip(theirs, ours, strict=True)))
        np.random.seed(case["seed"])  # noqa: NPY002 (rliable draws from the global generator)
        point, interval = library.get_interval_estimates(
            {"p": [x, y]}, lambda a, b: np.array([metrics.probability_of_improvement(a, b)]), reps=REPS
        )
        theirs = [float(point["p"][0]), float(interval["p"][0, 0]), float(interval["p"][1, 0])]
        ours = scores.bootstrap_interval("probability_of_improvement", x, y, reps=REPS, seed=case["seed"])
        case["rliable"]["probability_of_improvement"] = theirs
        worst = max(worst, *(abs(a - b) for a, b in zip(theirs, ours, strict=True)))
        out.append(case)
        print(f"{name:<12} iqm {case['rliable']['iqm']}  P(X>Y) {theirs}")
    what = f"{len(CASES)} cases x 4 statistics x (estimate, lower, upper)"
    print(f"largest |ours - rliable| over {what}: {worst:.3g}")
    _speed(library, metrics, scores)
    if args.write:
        import rliable

        Path(args.write).write_text(
            json.dumps({"rliable": getattr(rliable, "__version__", "1.2.0"), "cases": out}, indent=1) + "\n"
        )
        print(f"wrote {args.write}")
    return 0 if worst <= 1e-9 else 1


if __name__ == "__main__":
    sys.exit(main())
