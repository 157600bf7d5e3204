"""The shared training loop: one loop, parameterised by a schedule (on-policy or off-policy).

The loop owns everything that is not the algorithm: seeding, stepping the vector env (or a
``collector``), episode statistics, metric logging (one device sync per log interval), periodic
greedy evaluation with an optional early stop at a target return, checkpoints with exact resume,
a progress bar and the learning curve. The algorithm enters through the agent protocol
(:mod:`tritonrl.toolkit.agent`) and a :class:`Schedule` that decides after every vector step
whether the agent updates. ::

    env = make_vec_env("CartPole-v1", 8, seed=1)
    agent = PPOAgent(env.single_observation_space, env.single_action_space, num_envs=8)
    summary = run_training(agent, env, OnPolicySchedule(agent.config.num_steps),
                           LoopConfig(total_steps=50_000, eval_every=10_000, target_return=475))

Device environments join through optional hooks (``step_transition``, ``episode_stats``,
``metric_prefix``, ``evaluate_policy``); the run folder's lock, resume, flush, cadence, signal
stop and divergence check are :class:`tritonrl.toolkit.lifecycle.RunLifecycle`, shared with the
forecaster trainer (CONTRIBUTING.md, "Run folders and checkpoints"). Under ``torchrun`` every
rank runs the loop on its shard; rank 0 alone writes the folder. The whole contract:
docs/pages/training.md (hooks, run folders) and docs/pages/scaling.md (data-parallel runs).
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

    ``env`` is a :class:`~tritonrl.toolkit.envs.vector.VecEnv` or any env with its attributes
    (``num_envs``, ``device``, ``env_id``, ``obs``, ``reset``, ``get_state``/``set_state``) and
    either ``step`` returning a :class:`~tritonrl.toolkit.envs.vector.Transition` or
    ``step_transition`` (see the module doc for that hook and ``episode_stats``).

    Args:
        should_stop: polled after every vector step; when it returns true the run ends there
            (metrics flushed, a checkpoint saved when ``run_dir`` is set, ``interrupted`` and
            ``stopped`` = ``"should_stop"`` in the summary). A signal handler setting a
            ``threading.Event`` whose ``is_set`` is passed here is the intended use.
        evaluator: has ``evaluate_policy(policy, episodes, seed) -> dict`` (``"mean_return"``
            at least): used for every evaluation instead of the gymnasium one on
            ``cfg.eval_env_id``; ``None``: the env's own ``evaluate_policy`` if it has one.
        collector: steps ``env`` with ``agent`` (``collector.step()``) instead of ``agent.act``,
            the env step and ``agent.observe``; built for this agent and env (module doc).
        dist: this process's place in a data-parallel run (module doc); ``None``: the agent's
            ``dist`` attribute if it has one, else :func:`tritonrl.toolkit.distributed.current`.

    Returns:
        a summary: ``global_step``, ``evaluations`` (``[step, mean_return]`` pairs),
        ``reached_target_at`` (first evaluation step reaching ``target_return``, or ``None``),
        ``final_eval`` (the last evaluation's dict), ``recent_return`` (mean of the last 20
        training episodes), ``wall_s``, ``sps``, ``checkpoint`` (path or ``None``),
        ``checkpoint_step`` (step of the last checkpoint written or resumed from), ``interrupted``
        and ``stopped`` (``None``, ``"stop_at"`` or ``"should_stop"``). The same on every rank,
        except ``final_eval``'s and ``recent_return``'s sources (all ranks') and ``wall_s``/``sps``
        (each rank's clock).

    Raises:
        ValueError: inconsistent settings (checkpoints or resume without ``run_dir``, a
            ``collector`` of another agent or env, a ``dist`` other than the agent's, ``overlap``
            where :func:`tritonrl.toolkit.training.overlap.check_overlap` refuses it).
        CheckpointError: ``resume`` with a checkpoint of another agent, env or format, or a
            ``metrics.csv`` whose header is not one.
        RunFolderBusy: another process trains in ``run_dir``.
        DivergenceError: a ``losses/...`` metric or a parameter became non-finite.
        TrainingError: a ``ValueError``, ``RuntimeError`` or ``OSError`` during training.
        OSError: the run folder cannot be prepared (lock, moving an earlier run aside).
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
    """``dist``, else the agent's ``dist`` attribute, else the process's context.

    Raises:
        ValueError: ``dist`` and the agent's context name different ranks or world sizes.
    """
    own = getattr(agent, "dist", None)
    if dist is None:
        return own if isinstance(own, DistContext) else current()
    if isinstance(own, DistContext) and (own.rank, own.world_size) != (dist.rank, dist.world_size):
        raise ValueError(
            f"run_training(dist=rank {dist.rank} of {dist.world_size}) but the agent was built for "
            f"rank {own.rank} of {own.world_size}"
        )
    return dist
