"""Episode statistics of device environments as metric names (the loop's ``env.episode_stats()`` hook).

An env's ``metric_prefix`` (``MarketEnv``: ``"market"``, else
[`DEFAULT_METRIC_PREFIX`][tritonrl.toolkit.training.episodes.DEFAULT_METRIC_PREFIX]) names its family's
metrics. Layer: training. Guide: docs/pages/training.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULT_METRIC_PREFIX", "episode_metrics", "merge_episode_stats", "metric_prefix"]

DEFAULT_METRIC_PREFIX = "env"
"""Prefix of the ``episode_stats()`` entries of an env without a ``metric_prefix`` attribute."""


def metric_prefix(env: Any) -> str:
    """``env.metric_prefix`` (non-empty, no ``/``), else `DEFAULT_METRIC_PREFIX`."""
    prefix = getattr(env, "metric_prefix", None)
    if prefix is None:
        return DEFAULT_METRIC_PREFIX
    if not isinstance(prefix, str) or not prefix or "/" in prefix:
        raise ValueError(f"the env's metric_prefix must be a non-empty string without '/', got {prefix!r}")
    return prefix


_STATS_RETURN = ("mean_return", "return", "episodic_return")
_STATS_LENGTH = ("mean_length", "length", "episodic_length")
_STATS_COUNT = ("count", "episodes")


def episode_metrics(stats: Mapping[str, float], prefix: str) -> dict[str, float]:
    """Metric names for an ``env.episode_stats()`` dict; ``{}`` when no episode finished.

    The mean return and length become ``charts/episodic_return`` and ``charts/episodic_length``; other entries
    ``<prefix>/<name>`` (``mean_sharpe`` -> ``market/sharpe``); the count is left out.
    """
    count = next((stats[k] for k in _STATS_COUNT if k in stats), None)
    if count is not None and count <= 0:
        return {}
    out: dict[str, float] = {}
    for key, value in stats.items():
        if key in _STATS_COUNT:
            continue
        if key in _STATS_RETURN:
            out["charts/episodic_return"] = float(value)
        elif key in _STATS_LENGTH:
            out["charts/episodic_length"] = float(value)
        else:
            out[f"{prefix}/{key.removeprefix('mean_')}"] = float(value)
    return out


def merge_episode_stats(stats: list[Mapping[str, float] | None]) -> dict[str, float]:
    """One ``episode_stats()`` dict for several ranks', means weighted by counts."""
    present = [s for s in stats if s]
    if not present:
        return {}
    counts = [next((float(s[k]) for k in _STATS_COUNT if k in s), None) for s in present]
    known = [c for c in counts if c is not None]
    counted = len(known) == len(present)
    weights = known if counted else [1.0] * len(present)
    out: dict[str, float] = {}
    count_key = next((k for k in _STATS_COUNT if k in present[0]), None)
    if counted and count_key is not None:
        out[count_key] = sum(weights)
    keys = [k for s in present for k in s if k not in _STATS_COUNT]
    for key in dict.fromkeys(keys):
        pairs = [(float(s[key]), w) for s, w in zip(present, weights, strict=True) if key in s and w > 0]
        total = sum(w for _, w in pairs)
        if total > 0:
            out[key] = sum(v * w for v, w in pairs) / total
    return out
