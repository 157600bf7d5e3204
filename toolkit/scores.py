"""Statistics of scores across training runs: interquartile mean, stratified bootstrap intervals and
the probability of improvement (Agarwal et al., 2021; the method of the ``rliable`` package).

A score matrix is ``[runs, tasks]`` f64. The bootstrap resamples runs with replacement within each
task; its draws are rliable's under ``np.random.seed(seed)`` (``RandomState(seed)``: per replicate,
per group, ``[runs, tasks]`` indices), its interval ``np.percentile`` of the replicates. Numpy only.
Guide: docs/pages/training.md ("Evaluating runs").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = [
    "STATISTICS",
    "bootstrap_interval",
    "iqm",
    "mean",
    "median",
    "probability_of_improvement",
]


def _matrix(scores: object, name: str = "scores") -> np.ndarray:
    """``scores`` as a finite f64 ``[runs, tasks]`` matrix (a 1-D one is one task)."""
    a = np.asarray(scores, dtype=np.float64)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1:
        raise ValueError(f"{name} must be [runs] or [runs, tasks], at least one of each, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} must be finite, got {a[~np.isfinite(a)][:3].tolist()}")
    return a


def _iqm_rows(x: np.ndarray) -> np.ndarray:
    """The 25% trimmed mean of each row of ``x [B, n]`` (``scipy.stats.trim_mean``'s cut)."""
    n = x.shape[1]
    cut = int(0.25 * n)
    return np.sort(x, axis=1)[:, cut : n - cut].mean(axis=1)


def iqm(scores: object) -> float:
    """The interquartile mean of every score (runs and tasks together): the mean of the middle
    half after cutting ``floor(n / 4)`` scores from each end, as ``scipy.stats.trim_mean(x, 0.25)``.

    Raises:
        ValueError: not ``[runs]`` / ``[runs, tasks]``, empty, or not finite.
    """
    a = _matrix(scores)
    return float(_iqm_rows(a.reshape(1, -1))[0])


def mean(scores: object) -> float:
    """The mean over tasks of each task's mean score. Raises as `iqm`."""
    return float(_matrix(scores).mean(axis=0).mean())


def median(scores: object) -> float:
    """The median over tasks of each task's mean score (rliable's ``aggregate_median``). Raises as `iqm`."""
    return float(np.median(_matrix(scores).mean(axis=0)))


def probability_of_improvement(x: object, y: object) -> float:
    """P(X > Y): for each task the chance that a run of ``x`` scores above one of ``y`` (ties count
    one half: the Mann-Whitney U over ``runs_x * runs_y``), averaged over tasks.

    Raises:
        ValueError: as `iqm`, or a different number of tasks.
    """
    a, b = _matrix(x, "x"), _matrix(y, "y")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"x and y must have the same number of tasks, got {a.shape[1]} and {b.shape[1]}")
    return float(_improvement(a[None], b[None])[0])


def _improvement(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`probability_of_improvement` of each replicate: ``a [B, n, T]``, ``b [B, m, T]`` -> ``[B]``."""
    diff = a[:, :, None, :] - b[:, None, :, :]
    u = (diff > 0).sum(axis=(1, 2)) + 0.5 * (diff == 0).sum(axis=(1, 2))
    return (u / (a.shape[1] * b.shape[1])).mean(axis=1)


def _mean_rows(x: np.ndarray) -> np.ndarray:
    return x.mean(axis=1).mean(axis=1)


def _median_rows(x: np.ndarray) -> np.ndarray:
    return np.median(x.mean(axis=1), axis=1)


STATISTICS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "mean": _mean_rows,
    "median": _median_rows,
    "iqm": lambda x: _iqm_rows(x.reshape(x.shape[0], -1)),
}
"""The one-group statistics `bootstrap_interval` knows, each over replicates ``[B, runs, tasks] -> [B]``."""


def bootstrap_interval(
    statistic: str,
    *groups: object,
    reps: int = 50_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``(estimate, lower, upper)``: a statistic of score matrices and its stratified-bootstrap
    percentile interval.

    ``statistic`` is ``"mean"``, ``"median"`` or ``"iqm"`` of one group, or
    ``"probability_of_improvement"`` of two (``x`` over ``y``, resampled independently).

    Raises:
        ValueError: an unknown statistic, the wrong number of groups, bad scores, ``reps < 1``,
            ``confidence`` outside (0, 1) or a negative ``seed``.
    """
    pair = statistic == "probability_of_improvement"
    if not pair and statistic not in STATISTICS:
        known = [*STATISTICS, "probability_of_improvement"]
        raise ValueError(f"statistic must be one of {known}, got {statistic!r}")
    if len(groups) != (2 if pair else 1):
        raise ValueError(f"{statistic} takes {2 if pair else 1} score group(s), got {len(groups)}")
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise ValueError(f"reps must be an int >= 1, got {reps!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ValueError(f"seed must be an int in [0, 2**32), got {seed!r}")
    mats = [_matrix(g, f"group {i}") for i, g in enumerate(groups)]
    if pair and mats[0].shape[1] != mats[1].shape[1]:
        tasks = (mats[0].shape[1], mats[1].shape[1])
        raise ValueError(f"the two groups must have the same number of tasks, got {tasks[0]} and {tasks[1]}")
    replicates = _resample(mats, reps, seed)
    if pair:
        estimate = float(_improvement(mats[0][None], mats[1][None])[0])
        values = np.concatenate([_improvement(a, b) for a, b in _chunks(replicates)])
    else:
        estimate = float(STATISTICS[statistic](mats[0][None])[0])
        values = np.concatenate([STATISTICS[statistic](a) for (a,) in _chunks(replicates)])
    alpha = (1.0 - confidence) / 2
    lower, upper = np.percentile(values, [100 * alpha, 100 * (1.0 - alpha)])
    return estimate, float(lower), float(upper)


def _resample(mats: Sequence[np.ndarray], reps: int, seed: int) -> list[np.ndarray]:
    """Each group's replicates ``[reps, runs, tasks]``, drawn as rliable draws them: per replicate,
    per group, ``randint(0, runs, (runs, tasks))`` from one ``RandomState(seed)``."""
    rng = np.random.RandomState(seed)
    shapes = [m.shape for m in mats]
    if len({s[0] for s in shapes}) == 1:  # one bound: one call gives the same stream as reps calls
        size = sum(s[0] * s[1] for s in shapes)
        flat = rng.randint(0, shapes[0][0], size=(reps, size))
        parts = np.split(flat, np.cumsum([s[0] * s[1] for s in shapes])[:-1], axis=1)
        idx = [p.reshape(reps, *s) for p, s in zip(parts, shapes, strict=True)]
    else:
        idx = [np.empty((reps, *s), dtype=np.int64) for s in shapes]
        for r in range(reps):
            for i, s in enumerate(shapes):
                idx[i][r] = rng.randint(0, s[0], size=s)
    tasks = [np.arange(s[1])[None, None, :] for s in shapes]
    return [m[i, t] for m, i, t in zip(mats, idx, tasks, strict=True)]


def _chunks(replicates: list[np.ndarray], size: int = 4_096):
    """The replicates in blocks of ``size`` (bounded memory for the pairwise differences)."""
    reps = replicates[0].shape[0]
    for start in range(0, reps, size):
        yield tuple(r[start : start + size] for r in replicates)
