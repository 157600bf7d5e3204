"""The shared training loop, parameterised by a schedule (on-policy or off-policy).

[`run_training`][tritonrl.toolkit.training.loop.run_training] owns everything but the algorithm, which enters
through the agent protocol and a [`Schedule`][tritonrl.toolkit.training.loop.Schedule]; the folder side is
[`tritonrl.toolkit.lifecycle.RunLifecycle`][tritonrl.toolkit.lifecycle.RunLifecycle]. Layer: training. Guide:
docs/pages/training.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tritonrl.toolkit.agent import Agent
from tritonrl.toolkit.checks import MAX_SEED
from tritonrl.toolkit.distributed import DistContext, current
from tritonrl.toolkit.envs.vector import VecEnv
from tritonrl.toolkit.lifecycle import CHECKPOINT_NAME, seed_everything
from tritonrl.toolkit.training.base import (
    DivergenceError,
    Evaluator,
    LoopConfig,
    Schedule,
    StepCollector,
    TrainingError,
)
from tritonrl.toolkit.training.episodes import DEFAULT_METRIC_PREFIX, episode_metrics, merge_episode_stats
from tritonrl.toolkit.training.overlap import check_overlap
from tritonrl.toolkit.training.ranks import SAME_AS_RANK_0
from tritonrl.toolkit.training.run import run as _run

__all__ = [
    "CHECKPOINT_NAME",
    "DEFAULT_METRIC_PREFIX",
    "DivergenceError",
    "Evaluator",
    "LoopConfig",
    "MAX_SEED",
    "SAME_AS_RANK_0",
    "Schedule",
    "StepCollector",
    "TrainingError",
    "episode_metrics",
    "merge_episode_stats",
    "run_training",
    "seed_everything",
]


def run_training(
    agent: Agent,
    env: VecEnv,
    schedule: Schedule,
    cfg: LoopConfig,
    *,
    should_stop: Callable[[], bool] | None = None,
    evaluator: Evaluator | None = None,
    collector: StepCollector | None = None,
    dist: DistContext | None = None,
) -> dict[str, Any]:
    """Train ``agent`` on ``env`` for ``cfg.total_steps`` environment steps (summed over all ranks).

    Args:
        env: a [`VecEnv`][tritonrl.toolkit.envs.vector.VecEnv], or a device env with ``step_transition``
            (docs/pages/training.md).
        should_stop: polled after every vector step; true ends the run there, flushed and checkpointed.
        evaluator: ``evaluate_policy(policy, episodes, seed) -> dict``; ``None``: the env's own, else
            gymnasium's.
        collector: steps ``env`` with ``agent`` (``collector.step()``) instead of act, step, observe.
        dist: the data-parallel context; ``None``: the agent's ``dist``, else the process's.

    Returns:
        a summary: ``global_step``, ``evaluations``, ``reached_target_at``, ``final_eval``, ``recent_return``,
            ``wall_s``, ``sps``, ``checkpoint``, ``checkpoint_step``, ``interrupted``, ``stopped``.

    Raises:
        ValueError: inconsistent settings (checkpoints without ``run_dir``, a foreign ``collector`` or
            ``dist``, ...).
        CheckpointError: ``resume`` with a checkpoint of another agent, env or format, or a bad
            ``metrics.csv``.
        RunFolderBusy: another process trains in ``run_dir``.
        DivergenceError: a ``losses/...`` metric or a parameter became non-finite.
        TrainingError: a ``ValueError``, ``RuntimeError`` or ``OSError`` during training.
        OSError: the run folder cannot be prepared.
    """
    if cfg.total_steps < 1:
        raise ValueError(f"total_steps must be >= 1, got {cfg.total_steps}")
    if (cfg.checkpoint_every or cfg.resume) and cfg.run_dir is None:
        raise ValueError("checkpoint_every and resume need run_dir")
    if not (cfg.checkpoint_seconds >= 0 and math.isfinite(cfg.checkpoint_seconds)):
        raise ValueError(f"checkpoint_seconds must be finite and >= 0, got {cfg.checkpoint_seconds}")
    if collector is not None and (
        getattr(collector, "agent", agent) is not agent or getattr(collector, "env", env) is not env
    ):
        raise ValueError("the collector was built for another agent or env than run_training's")
    ctx = _context(agent, dist)
    if cfg.overlap:
        check_overlap(agent, schedule, collector, ctx.enabled)
    return _run(agent, env, schedule, cfg, should_stop, evaluator, collector, ctx)


def _context(agent: Any, dist: DistContext | None) -> DistContext:
    """``dist``, else the agent's, else the process's; ``ValueError`` when they disagree."""
    own = getattr(agent, "dist", None)
    if dist is None:
        return own if isinstance(own, DistContext) else current()
    if isinstance(own, DistContext) and (own.rank, own.world_size) != (dist.rank, dist.world_size):
        raise ValueError(
            f"run_training(dist=rank {dist.rank} of {dist.world_size}) but the agent was built for "
            f"rank {own.rank} of {own.world_size}"
        )
    return dist
