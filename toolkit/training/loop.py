"""The shared training loop: one loop, parameterised by a schedule (on-policy or off-policy).

The loop owns everything that is not the algorithm: seeding, stepping the vector env, episode
statistics, metric logging (one device sync per log interval), periodic greedy evaluation with
an optional early stop at a target return, checkpoints every N steps with exact resume (agent
state, schedule counters, loop counters, RNG states, environment state), a progress bar, and the
learning-curve PNG at the end.

The algorithm enters through the agent protocol (``act``, ``observe``, ``update``,
``state_dict``/``load_state_dict``) and a :class:`Schedule` that decides, after every vector step,
whether the agent updates (PPO: every rollout of T steps; DQN: ``learning_starts``,
``train_freq``, ``gradient_steps``, target updates). ::

    env = make_vec_env("CartPole-v1", 8, seed=1)
    agent = PPOAgent(env.single_observation_space, env.single_action_space, num_envs=8)
    summary = run_training(agent, env, OnPolicySchedule(agent.config.num_steps),
                           LoopConfig(total_steps=50_000, eval_every=10_000, target_return=475))

The checkpoint (``<run_dir>/checkpoint.safetensors``) is written after the step that crosses
each multiple of ``checkpoint_every``; the metric interval is flushed there too, so a run stopped
at step k and resumed writes the same metrics as one that never stopped (``charts/SPS`` aside).
By default it is also written every ``checkpoint_seconds`` (600 s) of wall time, at the first
metric flush past that time (so it adds no metric row and keeps runs reproducible), and at the end.

Environments that keep their tensors on the device (:class:`tritonrl.toolkit.envs.market.env.MarketEnv`)
join through three optional hooks, each used when the env (or ``evaluator``) has it:

- ``env.step_transition(actions) -> Transition`` is called instead of ``env.step`` (a gymnasium
  vector env's ``step`` returns a tuple; this returns the loop's
  :class:`~tritonrl.toolkit.envs.vector.Transition`,
  with empty episode lists, so nothing is read on the host in a step);
- ``env.episode_stats() -> dict[str, float]`` is called at every metric flush (one sync): the
  episodes finished since the last call are logged as ``charts/episodic_return`` and
  ``charts/episodic_length`` (their means) and the other entries as ``<prefix>/<name>``, the
  prefix being the env's ``metric_prefix`` attribute (``"market"`` for a market env; without one
  :data:`DEFAULT_METRIC_PREFIX`, see :func:`episode_metrics`); the progress bar and
  ``recent_return`` take the mean return;
- ``evaluate_policy(policy, episodes, seed) -> dict`` (with ``"mean_return"``), on the
  ``evaluator`` argument of :func:`run_training` or else on the env, replaces the gymnasium
  :func:`~tritonrl.toolkit.envs.vector.evaluate` (a market run evaluates on its validation period).

A ``collector`` (:class:`tritonrl.toolkit.training.collector.Collector`, or anything with ``step()
-> Transition`` and ``state_dict``/``load_state_dict``) replaces the act / env step / observe of
each vector step: ``collector.step()`` acts, steps the env, stores the transition and counts the
env steps. Its state is the checkpoint's ``collector`` section; a checkpoint without one (written
by a run without a collector) leaves the collector as built and calls its ``sync()``, if it has
one, after the agent is loaded.

The run folder is as crash-safe as the checkpoint (DESIGN.md section 8); the lifecycle below is
:class:`tritonrl.toolkit.lifecycle.RunLifecycle`, the same as the forecaster trainer's:

- one writer: the folder is locked (``<run_dir>/.lock``, :class:`tritonrl.toolkit.runfolder.RunLock`) for
  the whole run; a second run on it raises :class:`tritonrl.toolkit.runfolder.RunFolderBusy`;
- a fresh run (no ``resume``, or ``resume`` without a checkpoint) never mixes with an earlier one:
  files of an earlier run move to ``<run_dir>/stale-<UTC time>/`` with one notice line on stderr;
- a resumed run drops the CSV rows logged after its checkpoint (and damaged lines a kill left,
  with a notice) atomically, and TensorBoard hides the events past the checkpoint (``purge_step``);
- temporary files a kill left during a save are removed at the start and at each save;
- ``should_stop`` (a callable, e.g. ``threading.Event().is_set``, set by a signal handler) ends
  the run after the current step: metrics flushed, a checkpoint saved, ``interrupted`` in the
  summary. The loop installs no signal handler itself; ``python -m tritonrl.toolkit train`` does;
- at every metric flush the agent's deferred input checks (``agent.check_inputs()``, if it has
  one), the ``losses/...`` means and the agent's parameters (one device sync) are checked: a
  non-finite one raises :class:`DivergenceError` before anything else is saved, so the last
  checkpoint on disk is the last good one;
- ``ValueError``, ``RuntimeError`` and ``OSError`` raised while training (the agent refusing bad
  data, a failed write) become :class:`TrainingError` naming the step and the last checkpoint.
  Other exceptions (``TypeError``, ``KeyError``, ...) are bugs and propagate unchanged.

Data-parallel runs (``torchrun``, :mod:`tritonrl.toolkit.distributed`): every rank calls
:func:`run_training` with its own agent and its own shard of the environments; ``cfg`` is the
same on every rank (``run_dir`` included).

- The step counter is global: a vector step adds ``env.num_envs * world_size``, so every rank
  reaches each multiple of ``log_every``, ``eval_every`` and ``checkpoint_every`` at the same
  vector step and the schedules stay in step without communication.
- Rank 0 alone touches the run folder: the lock, moving an earlier run aside, ``metrics.csv``,
  TensorBoard, the progress bar, ``curve.png``, the checkpoint, the notices. The other ranks write
  and print nothing.
- Episode returns and lengths of every rank (and every rank's ``env.episode_stats()``, merged by
  :func:`merge_episode_stats`) are gathered at each metric flush (one ``all_gather_objects``) and
  logged by rank 0; ``recent_return`` is then the mean over all ranks' episodes. ``losses/...``
  metrics are rank 0's (gradients are averaged, so every rank holds the same weights).
- Rank 0 evaluates; the result, and with it the target-return stop, is broadcast.
- ``should_stop`` is polled at each metric flush, not after every vector step, and a stop on
  any rank stops every rank at that flush: the cost is the flag riding on the flush's gather, and a
  stop waits up to ``log_every`` env steps. The wall-time checkpoint is rank 0's clock, broadcast.
- Divergence and input checks agree: a non-finite parameter or a refused input on any rank
  raises the same error on every rank at that flush (naming the rank), before anything is saved.
- The checkpoint is one file written by rank 0: the sections of a single-process checkpoint hold
  rank 0's state, ``meta["world_size"]`` the number of ranks, and ``ranks`` (world > 1) one entry
  per other rank with its own ``env``, ``rng``, ``collector`` and ``agent`` state, in which every
  part equal to rank 0's (the averaged weights, the optimizer, the counters) is stored once, as
  the marker ``{"__same_as_rank_0__": True}``. Every rank's parts are gathered to rank 0 first
  (``gather_objects``), so a save is all ranks' or none.
- Resume on M ranks of a checkpoint written by N: M == N resumes each rank exactly from its own
  parts. M != N loads what the ranks share (the agent with ``load_state_dict(...,
  rank_parts=False)``, schedule, loop counters) and starts each rank's own parts fresh: replay
  and rollout buffers empty, environments reset, random streams seeded from ``(seed, rank, step)``,
  the on-policy schedule restarting its rollout and the off-policy one refilling the replay for
  ``learning_starts`` steps (``restart_collection``); rank 0 prints one notice line.
- An error on rank 0 while it alone works (the lock, the run folder, reading the checkpoint,
  evaluating, writing) is broadcast and raised on every rank; a rank that dies or hangs makes
  the others fail at their next collective (``TRITONRL_DIST_TIMEOUT``), not hang.
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
            ``collector`` of another agent or env, a ``dist`` other than the agent's).
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
