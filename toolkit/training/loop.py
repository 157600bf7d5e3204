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
  ``charts/episodic_length`` (their means) and the other entries as ``market/<name>``
  (see :func:`episode_metrics`); the progress bar and ``recent_return`` take the mean return;
- ``evaluate_policy(policy, episodes, seed) -> dict`` (with ``"mean_return"``), on the
  ``evaluator`` argument of :func:`run_training` or else on the env, replaces the gymnasium
  :func:`~tritonrl.toolkit.envs.vector.evaluate` (a market run evaluates on its validation period).

A ``collector`` (:class:`tritonrl.toolkit.training.collector.Collector`, or anything with ``step()
-> Transition`` and ``state_dict``/``load_state_dict``) replaces the act / env step / observe of
each vector step: ``collector.step()`` acts, steps the env, stores the transition and counts the
env steps. Its state is the checkpoint's ``collector`` section; a checkpoint without one (written
by a run without a collector) leaves the collector as built and calls its ``sync()``, if it has
one, after the agent is loaded.

The run folder is as crash-safe as the checkpoint (DESIGN.md section 8):

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

import dataclasses
import math
import random
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from tritonrl.toolkit.agent import Agent
from tritonrl.toolkit.checkpoint import (
    TRAIN_FORMAT,
    CheckpointError,
    brief,
    capture_rng_state,
    cut,
    load_checkpoint,
    remove_stale_temps,
    restore_rng_state,
    save_checkpoint,
    training_sections,
)
from tritonrl.toolkit.checks import MAX_SEED
from tritonrl.toolkit.distributed import AGREED_ERRORS, DistContext, current, on_main, picklable_error
from tritonrl.toolkit.envs.vector import VecEnv, evaluate
from tritonrl.toolkit.logger import MetricLogger, ProgressBar, plot_learning_curve, repair_csv
from tritonrl.toolkit.runfolder import RunLock, move_aside

__all__ = [
    "CHECKPOINT_NAME",
    "DivergenceError",
    "Evaluator",
    "LoopConfig",
    "MAX_SEED",
    "Schedule",
    "StepCollector",
    "TrainingError",
    "episode_metrics",
    "merge_episode_stats",
    "run_training",
    "seed_everything",
]

CHECKPOINT_NAME = "checkpoint.safetensors"


class TrainingError(RuntimeError):
    """Training stopped by an error (bad data from the env, a failed write, divergence).

    The message is one line naming the step and the last good checkpoint, which stays on disk.
    """

    def __init__(self, message: str, *, step: int, checkpoint_step: int | None) -> None:
        super().__init__(message)
        self.step = step
        self.checkpoint_step = checkpoint_step


class DivergenceError(TrainingError):
    """A ``losses/...`` metric or a parameter became NaN or infinite; nothing was saved after it."""


class Schedule(Protocol):
    """When the agent learns. Called by the loop after each vector step."""

    def after_step(self, agent: Any, step: int) -> list[Mapping[str, torch.Tensor]]:
        """Run any updates due at global env step ``step``; return their metrics (device tensors)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Counters needed to resume."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        ...


@dataclass(frozen=True)
class LoopConfig:
    """Settings of :func:`run_training` (the algorithm's own settings live in the agent's config)."""

    total_steps: int
    """Environment steps to train for (summed over the vector envs)."""
    seed: int = 1
    """Seeds torch, numpy and python ``random`` at the start of a fresh run."""
    run_dir: str | None = None
    """Folder for ``metrics.csv``, TensorBoard files, the checkpoint and the curve PNG; ``None``: none."""
    log_every: int = 2048
    """Flush metrics (one device sync) after the step crossing each multiple of this."""
    eval_every: int = 0
    """Greedy evaluation after the step crossing each multiple of this; 0: only at the end."""
    eval_episodes: int = 10
    """Episodes per evaluation (run in parallel, one per environment)."""
    eval_env_id: str | None = None
    """Environment of the evaluation; ``None``: the training environment's id."""
    final_eval: bool = True
    """Evaluate once more at the end (unless the last evaluation was at the final step)."""
    target_return: float | None = None
    """Stop as soon as an evaluation's mean return reaches this."""
    checkpoint_every: int = 0
    """Checkpoint after the step crossing each multiple of this (0: only at the end); needs ``run_dir``."""
    checkpoint_seconds: float = 600.0
    """Also checkpoint at the first metric flush at least this long (wall time) after the last save
    (0: off). Saving at a flush adds no metric row, so runs stay reproducible."""
    resume: bool = False
    """Continue from ``<run_dir>/checkpoint.safetensors`` if it exists (else start fresh, with a notice)."""
    stop_at: int | None = None
    """Stop (as if interrupted) after the step crossing this, once any checkpoint due there is written."""
    progress: bool = False
    """Draw a progress bar on stderr."""
    tensorboard: bool = True
    """Write TensorBoard event files next to ``metrics.csv``."""
    plot: bool = True
    """Write ``curve.png`` (episodic and evaluation returns) at the end."""
    meta: tuple[tuple[str, str], ...] = ()
    """Identity stored in the checkpoint and checked on resume (agent name, env id, ...)."""

    def __post_init__(self) -> None:
        """Reject impossible settings at construction, before any training.

        Raises:
            ValueError: a field out of range (named in the message).
        """

        def whole(name: str, lo: int, hi: int | None = None, *, optional: bool = False) -> None:
            v = getattr(self, name)
            if v is None and optional:
                return
            if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
                bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
                raise ValueError(f"LoopConfig.{name} must be an int {bound}, got {v!r}")

        whole("total_steps", 1)
        whole("seed", 0, MAX_SEED)
        whole("log_every", 1)
        whole("eval_every", 0)
        whole("eval_episodes", 1)
        whole("checkpoint_every", 0)
        whole("stop_at", 0, optional=True)
        t = self.target_return
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t)):
            raise ValueError(f"LoopConfig.target_return must be a finite number or None, got {t!r}")


def seed_everything(seed: int) -> None:
    """Seed torch (CPU and CUDA), numpy's global RNG and python ``random``."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 (code that uses the global RNG)
    random.seed(seed)


class StepCollector(Protocol):
    """Steps the env with the agent and stores what happened, for :func:`run_training`
    (:class:`tritonrl.toolkit.training.collector.Collector` is one)."""

    def step(self) -> Any:
        """One vector step; returns the env's :class:`~tritonrl.toolkit.envs.vector.Transition`."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """What a resume needs (the checkpoint's ``collector`` section)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output; raise ``ValueError`` (changing nothing) on a bad one."""
        ...


class Evaluator(Protocol):
    """An evaluation other than the gymnasium one (a market run's validation period)."""

    def evaluate_policy(
        self, policy: Callable[[torch.Tensor], torch.Tensor], episodes: int, seed: int
    ) -> dict[str, Any]:
        """Run the greedy ``policy``; return at least ``{"mean_return": float}``."""
        ...


_STATS_RETURN = ("mean_return", "return", "episodic_return")
_STATS_LENGTH = ("mean_length", "length", "episodic_length")
_STATS_COUNT = ("count", "episodes")


def episode_metrics(stats: Mapping[str, float]) -> dict[str, float]:
    """Metric names for an ``env.episode_stats()`` dict (means over the episodes it drained).

    The mean return (key ``mean_return``, ``return`` or ``episodic_return``) becomes
    ``charts/episodic_return``, the mean length (``mean_length``, ``length``,
    ``episodic_length``) ``charts/episodic_length``, any other entry ``market/<name>`` (a
    ``mean_`` prefix dropped: ``mean_sharpe`` -> ``market/sharpe``); the count (``count`` or
    ``episodes``) is left out. No finished episode (a count of 0): an empty dict.
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
            out[f"market/{key.removeprefix('mean_')}"] = float(value)
    return out


def merge_episode_stats(stats: list[Mapping[str, float] | None]) -> dict[str, float]:
    """One ``env.episode_stats()`` dict for several ranks' (``None``: a rank without the hook).

    Each mean is weighted by its rank's episode count (``count`` or ``episodes``; without one, the
    ranks weigh equally); the count becomes the sum. Ranks without finished episodes add nothing.
    """
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


def _eval_policy(agent: Any):
    make = getattr(agent, "eval_policy", None)
    if make is not None:
        return make()
    return lambda obs: agent.act(obs, explore=False)


class _Counters:
    def __init__(self) -> None:
        self.step = 0
        self.evaluations: list[list[float]] = []  # [step, mean_return]
        self.reached_at: int | None = None
        self.wall = 0.0

    def state(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "evaluations": self.evaluations,
            "reached_at": self.reached_at,
            "wall": self.wall,
        }

    @staticmethod
    def check(s: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` unless ``s`` is a :meth:`state`; changes nothing."""

        def num(x: Any) -> bool:
            return isinstance(x, (int, float)) and not isinstance(x, bool)

        ok = (
            isinstance(s, Mapping)
            and type(s.get("step")) is int
            and s["step"] >= 0
            and isinstance(s.get("evaluations"), list)
            and all(isinstance(e, list) and len(e) == 2 and num(e[0]) and num(e[1]) for e in s["evaluations"])
            and "reached_at" in s
            and (s["reached_at"] is None or num(s["reached_at"]))
            and num(s.get("wall"))
        )
        if not ok:
            raise ValueError("the loop counters section ('loop') is damaged")

    def load(self, s: Mapping[str, Any]) -> None:
        self.step = int(s["step"])
        self.evaluations = [list(e) for e in s["evaluations"]]
        self.reached_at = s["reached_at"]
        self.wall = float(s["wall"])


def _crossed(prev: int, now: int, every: int) -> bool:
    return every > 0 and now // every > prev // every


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
    if cfg.run_dir is None:
        return _run(agent, env, schedule, cfg, should_stop, evaluator, collector, ctx)
    if not ctx.enabled:
        with RunLock(cfg.run_dir):
            return _run(agent, env, schedule, cfg, should_stop, evaluator, collector, ctx)
    lock = RunLock(cfg.run_dir)

    def take() -> None:  # rank 0 alone holds the folder; a busy folder fails every rank
        lock.acquire()

    on_main(ctx, take)
    try:
        return _run(agent, env, schedule, cfg, should_stop, evaluator, collector, ctx)
    finally:
        lock.release()  # a no-op on the ranks that never acquired it


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


def _scatter_from_main(ctx: DistContext, fn: Callable[[], list[Any]]) -> Any:
    """``fn()[rank]`` on every rank, ``fn`` (one item per rank) run on rank 0 alone; an error it
    raises as in :func:`~tritonrl.toolkit.distributed.on_main` (one scatter)."""
    if not ctx.enabled:
        return fn()[0]
    items: list[tuple[bool, Any]] | None = None
    error: BaseException | None = None
    if ctx.is_main:
        try:
            items = [(True, x) for x in fn()]
        except AGREED_ERRORS as exc:
            error = exc
            items = [(False, picklable_error(exc))] * ctx.world_size
    ok, value = ctx.scatter_objects(items)
    if ok:
        return value
    raise error if error is not None else value


def _agree_on_errors(ctx: DistContext, error: BaseException | None) -> None:
    """Raise on every rank when ``error`` (this rank's, or ``None``) is set on any rank: the first
    rank's, its message prefixed with ``rank R:`` for a rank other than this one."""
    if not ctx.enabled:
        if error is not None:
            raise error
        return
    seen = ctx.all_gather_objects(None if error is None else picklable_error(error))
    for rank, exc in enumerate(seen):
        if exc is None:
            continue
        if rank == ctx.rank and error is not None:
            raise error
        assert isinstance(exc, BaseException)
        try:
            raise type(exc)(f"rank {rank}: {_first_line(exc)}")
        except TypeError:  # an exception type with another signature
            raise RuntimeError(f"rank {rank}: {_first_line(exc)}") from None


def _notice(message: str) -> None:
    print(f"notice: {message}", file=sys.stderr, flush=True)


def _parameters(agent: Any) -> list[torch.Tensor]:
    """The agent's trainable tensors: ``agent.parameters()`` if it has one, else those of every
    ``nn.Module`` attribute (DQN's ``online``/``target``, PPO's ``policy``, ...)."""
    params = getattr(agent, "parameters", None)
    if callable(params):
        found = list(params())
    else:
        found = [p for v in vars(agent).values() if isinstance(v, torch.nn.Module) for p in v.parameters()]
    unique = {id(p): p.detach() for p in found if isinstance(p, torch.Tensor) and p.is_floating_point()}
    return list(unique.values())


def _nonfinite(means: Mapping[str, float], params: list[torch.Tensor]) -> str | None:
    """The first non-finite ``losses/...`` metric, ``"parameters"``, or ``None`` (one sync per device)."""
    for name, value in means.items():
        if name.startswith("losses/") and not math.isfinite(value):
            return name
    by_device: dict[torch.device, list[torch.Tensor]] = {}
    for p in params:
        by_device.setdefault(p.device, []).append(p)
    for group in by_device.values():
        if not bool(torch.stack([p.isfinite().all() for p in group]).all()):
            return "parameters"
    return None


def _lr_hint(agent: Any) -> str:
    lr = getattr(getattr(agent, "config", None), "lr", None)
    if isinstance(lr, (int, float)) and not isinstance(lr, bool) and (not math.isfinite(lr) or abs(lr) >= 1):
        return f" (lr={lr:g}?)"
    return ""


def _kept(checkpoint_step: int | None, ckpt_path: Path | None) -> str:
    if ckpt_path is None:
        return "no run folder, nothing saved"
    if checkpoint_step is None:
        return "no checkpoint was written"
    return f"the last good checkpoint (step {checkpoint_step}) is kept"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _prepare_run_dir(run_dir: Path, ckpt_path: Path, resume_step: int | None, cfg: LoopConfig) -> None:
    """Clear stale temporary files; move an earlier run aside (fresh run) or trim it (resumed run)."""
    remove_stale_temps(ckpt_path)
    remove_stale_temps(run_dir / "metrics.csv")
    if resume_step is None:
        moved = move_aside(run_dir)
        if cfg.resume:
            tail = f"; the earlier run's files moved to {moved}" if moved else ""
            _notice(f"--resume: {run_dir} holds no {CHECKPOINT_NAME}: starting a fresh run{tail}")
        elif moved is not None:
            _notice(f"{run_dir} held files of an earlier run: moved to {moved}; starting a fresh run")
        return
    csv_path = run_dir / "metrics.csv"
    try:
        kept, damaged = repair_csv(csv_path, resume_step)
    except ValueError as exc:
        raise CheckpointError(str(exc)) from None
    if damaged:
        _notice(
            f"{csv_path}: dropped {damaged} damaged line{'s' if damaged > 1 else ''} "
            f"(kept {kept} rows up to the checkpoint's step {resume_step})"
        )


def _run(
    agent: Any,
    env: VecEnv,
    schedule: Schedule,
    cfg: LoopConfig,
    should_stop: Callable[[], bool] | None,
    evaluator: Evaluator | None = None,
    collector: StepCollector | None = None,
    ctx: DistContext | None = None,
) -> dict[str, Any]:
    run = _Run(agent, env, schedule, cfg, evaluator, collector, ctx)
    run.start()
    run.train(should_stop)
    return run.finish()


SAME_AS_RANK_0 = "__same_as_rank_0__"
"""Key of the marker ``{SAME_AS_RANK_0: True}`` that stands, in a rank's checkpoint part, for a
subtree equal to rank 0's (stored once, in the top-level section)."""


def _same(a: Any, b: Any) -> bool:
    """Whether two leaves of a state are equal (tensors: dtype, shape and every element)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and bool(torch.equal(a.cpu(), b.cpu()))
        )
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and bool(np.array_equal(a, b))
        )
    return type(a) is type(b) and a == b


def _shared_marker(tree: Any, base: Any) -> Any:
    """``tree`` with every subtree equal to ``base``'s at the same place replaced by the marker
    (:data:`SAME_AS_RANK_0`): a rank's agent state stored without what it shares with rank 0."""
    marker = {SAME_AS_RANK_0: True}
    if isinstance(tree, Mapping) and isinstance(base, Mapping):
        out = {k: _shared_marker(v, base[k]) if k in base else v for k, v in tree.items()}
        if out.keys() == base.keys() and all(_is_marker(v) for v in out.values()):
            return marker
        return out
    if isinstance(tree, (list, tuple)) and isinstance(base, (list, tuple)) and type(tree) is type(base):
        if len(tree) != len(base):
            return tree
        items = [_shared_marker(v, b) for v, b in zip(tree, base, strict=True)]
        if all(_is_marker(v) for v in items):
            return marker
        return type(tree)(items)
    if isinstance(tree, (Mapping, list, tuple)) or isinstance(base, (Mapping, list, tuple)):
        return tree
    return marker if _same(tree, base) else tree


def _fill_shared(tree: Any, base: Any) -> Any:
    """Undo :func:`_shared_marker`: every marker replaced by ``base``'s subtree at its place.

    Raises:
        ValueError: a marker where ``base`` has nothing (a damaged checkpoint).
    """
    if _is_marker(tree):
        return base
    if isinstance(tree, Mapping):
        if not any(_holds_marker(v) for v in tree.values()):
            return dict(tree)
        if not isinstance(base, Mapping):
            raise ValueError("a rank's agent state refers to rank 0's where rank 0 has no such entry")
        return {k: _fill_shared(v, base.get(k)) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        if not any(_holds_marker(v) for v in tree):
            return tree
        if not isinstance(base, (list, tuple)) or len(base) != len(tree):
            raise ValueError("a rank's agent state refers to rank 0's where rank 0 has no such entry")
        return type(tree)(_fill_shared(v, b) for v, b in zip(tree, base, strict=True))
    return tree


def _is_marker(tree: Any) -> bool:
    return isinstance(tree, Mapping) and tree.keys() == {SAME_AS_RANK_0}


def _holds_marker(tree: Any) -> bool:
    if isinstance(tree, Mapping):
        return _is_marker(tree) or any(_holds_marker(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return any(_holds_marker(v) for v in tree)
    return False


def _to_cpu(tree: Any) -> Any:
    """``tree`` with every tensor copied to the CPU (sent to rank 0 by pickling)."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu()
    if isinstance(tree, Mapping):
        return {k: _to_cpu(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_to_cpu(v) for v in tree)
    return tree


_RANK_PARTS = ("agent", "env", "rng", "collector")
"""A rank's own sections of a checkpoint (``ranks[r - 1]`` for rank ``r >= 1``)."""


def _saved_world_size(state: Mapping[str, Any], where: str) -> int:
    """The number of ranks that wrote ``state`` (1 for a checkpoint without ``meta["world_size"]``).

    Raises:
        CheckpointError: a world size that is not an int >= 1, or a ``ranks`` section that does
            not hold one dict with the per-rank parts for each rank but 0.
    """
    world = state["meta"].get("world_size", 1)
    if type(world) is not int or world < 1:
        raise CheckpointError(f"{where}: the world size in the run identity section is {brief(world, 20)}")
    ranks = state.get("ranks", [])
    if (
        not isinstance(ranks, list)
        or len(ranks) != world - 1
        or not all(isinstance(p, Mapping) and all(k in p for k in ("agent", "env", "rng")) for p in ranks)
    ):
        raise CheckpointError(
            f"{where}: the per-rank section ('ranks') is damaged: {world} ranks need {world - 1} "
            "entries with 'agent', 'env' and 'rng'"
        )
    return world


def _rank_seed(seed: int, rank: int, step: int = 0) -> int:
    """The global RNG seed of ``rank``: ``seed`` on rank 0 of a fresh run (a single process's),
    ``seed + rank`` on the others, plus ``step`` when per-rank parts restart mid-run."""
    return (seed + rank + step) % 2**63


class _Run:
    """One call of :func:`run_training`, in steps: :meth:`start` (resume or seed, prepare the run
    folder), :meth:`train` (the loop: :meth:`env_step`, then evaluation, :meth:`flush_and_check`
    and :meth:`save` when due; the end of the run), :meth:`finish` (the curve and the summary)."""

    def __init__(
        self,
        agent: Any,
        env: VecEnv,
        schedule: Schedule,
        cfg: LoopConfig,
        evaluator: Evaluator | None = None,
        collector: StepCollector | None = None,
        ctx: DistContext | None = None,
    ) -> None:
        self.agent, self.env, self.schedule, self.cfg = agent, env, schedule, cfg
        self.collector = collector
        self.ctx = ctx if ctx is not None else current()
        self.main = self.ctx.is_main
        # the optional hooks of a device env (module doc)
        self.step_env: Callable[[Any], Any] = getattr(env, "step_transition", None) or env.step
        self.episode_stats: Callable[[], Mapping[str, float]] | None = getattr(env, "episode_stats", None)
        self.evaluate_policy = getattr(evaluator if evaluator is not None else env, "evaluate_policy", None)
        self.run_dir = Path(cfg.run_dir) if cfg.run_dir is not None else None
        self.ckpt_path = self.run_dir / CHECKPOINT_NAME if self.run_dir is not None else None
        self.counters = _Counters()
        self.meta = dict(cfg.meta)
        self.checkpoint_step: int | None = None  # step of the last checkpoint written or resumed from
        self.logger: MetricLogger | None = None
        self.recent: list[float] = []  # returns of the last 20 training episodes
        self.final_eval: dict[str, Any] | None = None
        self.stop = False  # an evaluation reached target_return
        self.stopped: str | None = None  # None, "stop_at" or "should_stop"
        # data-parallel runs: this rank's episodes since the last flush, and what the ranks agreed
        self.pending: list[tuple[float, int]] = []
        self.should_stop: Callable[[], bool] | None = None
        self.stop_agreed = False  # a rank's should_stop was set at the last flush
        self.save_by_time = False  # rank 0's clock asked for a checkpoint at the last flush

    # -- start: resume or seed, then the run folder ------------------------------------------------

    def start(self) -> None:
        """Resume from the checkpoint (``cfg.resume``, one exists) or seed a fresh run; prepare the
        run folder and the logger (rank 0); start the clocks."""
        cfg, ctx = self.cfg, self.ctx
        ckpt = self.ckpt_path
        resumed = on_main(ctx, lambda: cfg.resume and ckpt is not None and ckpt.exists())
        if resumed:
            self._resume()
            self.checkpoint_step = self.counters.step
        else:
            seed_everything(_rank_seed(cfg.seed, ctx.rank))
            if self.env.obs is None:
                self.env.reset()
        if self.run_dir is not None:
            run_dir = self.run_dir
            assert ckpt is not None

            def prepare() -> None:
                _prepare_run_dir(run_dir, ckpt, self.checkpoint_step, cfg)
                self.logger = MetricLogger(
                    run_dir,
                    tensorboard=cfg.tensorboard,
                    purge_step=self.counters.step + 1 if resumed else None,
                )

            on_main(ctx, prepare)
        self.eval_env_id = cfg.eval_env_id or self.env.env_id
        self.bar = ProgressBar(
            cfg.total_steps, initial=self.counters.step, enabled=cfg.progress and self.main
        )
        self.t_start = time.perf_counter()
        self.wall_before = self.counters.wall
        self.t_flush, self.step_flush = self.t_start, self.counters.step
        self.t_saved = self.t_start
        self.start_step = self.counters.step
        self.obs = self.env.obs
        self.params = _parameters(self.agent)
        self.check_inputs = getattr(self.agent, "check_inputs", None)

    def _read_checkpoint(self) -> list[dict[str, Any]]:
        """Rank 0: read and check the checkpoint's top level; what each rank is to load.

        Returns:
            one dict per rank of this run: ``schedule``, ``loop``, ``agent`` (complete), ``exact``
            (the checkpoint was written by as many ranks: each rank also gets its ``env``,
            ``rng`` and ``collector``) and ``saved_world``.

        Raises:
            CheckpointError: another format, identity (``meta``), or a damaged ``ranks`` section.
        """
        assert self.ckpt_path is not None
        ckpt_path = self.ckpt_path
        where = str(ckpt_path)
        state = training_sections(load_checkpoint(ckpt_path), where)
        saved_meta = dict(state["meta"])
        for key, value in self.meta.items():
            if key in saved_meta and saved_meta[key] != value:
                raise CheckpointError(
                    f"{ckpt_path}: checkpoint was made with "
                    f"{key}={brief(saved_meta[key], 60)}, this run has {key}={value!r}"
                )
        saved_world = _saved_world_size(state, where)
        world = self.ctx.world_size
        shared = {"schedule": state["schedule"], "loop": state["loop"], "saved_world": saved_world}
        if saved_world != world:
            return [{**shared, "agent": state["agent"], "exact": False} for _ in range(world)]
        out = [{**shared, "exact": True, **{k: state.get(k) for k in _RANK_PARTS}}]
        for part in state.get("ranks", []):
            try:
                agent = _fill_shared(part["agent"], state["agent"])
            except ValueError as exc:
                raise CheckpointError(f"{where}: {exc}") from None
            out.append({**shared, "exact": True, **{k: part.get(k) for k in _RANK_PARTS}, "agent": agent})
        return out

    def _resume(self) -> None:
        """Check every saved section against this run, then load them all (or none); every rank
        loads its own (module doc: resume on another number of ranks).

        Raises:
            CheckpointError: another format, identity (``meta``), agent, env or damaged sections
                (on every rank when any rank's part does not fit).
        """
        assert self.ckpt_path is not None
        ctx = self.ctx
        payload = _scatter_from_main(ctx, self._read_checkpoint)
        error: CheckpointError | None = None
        try:
            self._load(payload)
        except CheckpointError as exc:
            error = CheckpointError(f"{self.ckpt_path}: {cut(str(exc), 300)}")
        except (KeyError, TypeError, ValueError) as exc:  # settings of this run differ from the saved one
            error = CheckpointError(f"{self.ckpt_path}: {cut(str(exc), 300)}")
        _agree_on_errors(ctx, error)
        if not payload["exact"] and self.main:
            _notice(
                f"{self.ckpt_path} was written by {payload['saved_world']} rank"
                f"{'s' if payload['saved_world'] > 1 else ''}, this run has {ctx.world_size}: "
                "the shared state is loaded (weights, optimizer, counters, schedule, normalisation); "
                "each rank's replay or rollout buffer, environments and random streams start fresh"
            )

    def _load(self, payload: Mapping[str, Any]) -> None:
        """Load this rank's ``payload`` (from :meth:`_read_checkpoint`), each section checked first."""
        agent, env, schedule, collector = self.agent, self.env, self.schedule, self.collector
        exact = payload["exact"]
        # every section is checked before any is loaded (the RNG restore checks, then sets)
        for check, key in (
            (getattr(schedule, "check_state_dict", None), "schedule"),
            (getattr(env, "check_state", None) if exact else None, "env"),
            (_Counters.check, "loop"),
        ):
            if check is not None:
                check(payload[key])
        check_agent = getattr(agent, "check_state_dict", None)
        if check_agent is not None:
            if exact:
                check_agent(payload["agent"])
            else:
                check_agent(payload["agent"], rank_parts=False)
        if not exact:
            schedule.load_state_dict(payload["schedule"])
            agent.load_state_dict(payload["agent"], rank_parts=False)
            self.counters.load(payload["loop"])
            step = self.counters.step
            restart = getattr(schedule, "restart_collection", None)
            if restart is not None:
                restart(step)
            seed_everything(_rank_seed(self.cfg.seed, self.ctx.rank, step))
            env.reset()
            if collector is not None and hasattr(collector, "sync"):
                collector.sync()  # act from the loaded learner
            return
        saved_collector = payload.get("collector")
        if collector is not None and saved_collector is not None:
            collector.load_state_dict(saved_collector)  # checks before it changes anything
        restore_rng_state(payload["rng"], where="random generator states")
        schedule.load_state_dict(payload["schedule"])
        agent.load_state_dict(payload["agent"])
        env.set_state(payload["env"])
        self.counters.load(payload["loop"])
        if collector is not None and saved_collector is None and hasattr(collector, "sync"):
            collector.sync()  # a run without a collector saved this: act from the loaded learner

    # -- the loop ----------------------------------------------------------------------------------

    def train(self, should_stop: Callable[[], bool] | None) -> None:
        """Step until ``total_steps``, a reached target, ``stop_at`` or ``should_stop``; at a normal
        end evaluate, flush and save once more. Closes the progress bar and the logger.

        Raises:
            TrainingError: a ``ValueError``, ``RuntimeError`` or ``OSError`` while training
                (:class:`DivergenceError` from :meth:`flush_and_check` passes unchanged).
        """
        cfg, counters = self.cfg, self.counters
        self.should_stop = should_stop
        try:
            while counters.step < cfg.total_steps and not self.stop:
                prev = counters.step
                step = self.env_step()
                self.after_step(prev, step)
                self.stopped = self._stop_reason(step, should_stop)
                if self.stopped is not None:
                    break
            if self.stopped is None:
                self.end_of_run()
        except TrainingError:
            raise
        except (ValueError, RuntimeError, OSError) as exc:
            raise self._training_error(exc) from exc
        finally:
            self.bar.close()
            if self.logger is not None:
                self.logger.close()

    def env_step(self) -> int:
        """One vector step: act, step the env, observe (or ``collector.step()``), log finished
        episodes, run the schedule's updates. Returns the new global step."""
        agent, env, logger, counters = self.agent, self.env, self.logger, self.counters
        if self.collector is not None:
            tr = self.collector.step()
        else:
            actions = agent.act(self.obs)
            tr = self.step_env(actions)
            agent.observe(self.obs, actions, tr.reward, tr.next_obs, tr.terminated, tr.truncated)
        self.obs = tr.obs
        step = counters.step = counters.step + env.num_envs * self.ctx.world_size
        if tr.episode_returns:
            if self.ctx.enabled:  # gathered and logged by rank 0 at the next flush
                self.pending.extend(zip(tr.episode_returns, tr.episode_lengths, strict=True))
            else:
                self.recent = (self.recent + tr.episode_returns)[-20:]
                if logger is not None:
                    for r, n in zip(tr.episode_returns, tr.episode_lengths, strict=True):
                        logger.log(step, {"charts/episodic_return": r, "charts/episodic_length": float(n)})
        for metrics in self.schedule.after_step(agent, step):
            if logger is not None:
                logger.log(step, metrics)
        return step

    def after_step(self, prev: int, step: int) -> None:
        """What is due after the step from ``prev`` to ``step``: evaluation, metric flush (and the
        wall-time checkpoint it may trigger), checkpoint, progress bar."""
        cfg = self.cfg
        if _crossed(prev, step, cfg.eval_every):
            self.evaluate(step)
        checkpoint_due = self.ckpt_path is not None and _crossed(prev, step, cfg.checkpoint_every)
        if _crossed(prev, step, cfg.log_every) or checkpoint_due:
            self.flush_and_check(step)
            if self.ctx.enabled:
                checkpoint_due = checkpoint_due or self.save_by_time
            elif (
                self.ckpt_path is not None
                and not checkpoint_due
                and cfg.checkpoint_seconds > 0
                and time.perf_counter() - self.t_saved >= cfg.checkpoint_seconds
            ):
                checkpoint_due = True
        if checkpoint_due:
            self.save()
        if self.bar.enabled:  # the text costs more than a CartPole step: build it only for a drawn bar
            self.bar.update(step, f"return {np.mean(self.recent):.1f}" if self.recent else None)

    def _stop_reason(self, step: int, should_stop: Callable[[], bool] | None) -> str | None:
        """``"should_stop"`` (after flushing and saving this step) or ``"stop_at"`` to end the run
        early here, else ``None``. A data-parallel run stops on ``should_stop`` only at the flush
        that agreed on it (:meth:`flush_and_check`)."""
        cfg = self.cfg
        if self.ctx.enabled:
            requested = self.stop_agreed and self.step_flush == step
        else:
            requested = should_stop is not None and should_stop()
        if requested and step < cfg.total_steps and not self.stop:
            if self.step_flush != step:  # a flush at this step already wrote its row
                self.flush_and_check(step)
            if self.ckpt_path is not None and self.checkpoint_step != step:
                self.save()
            return "should_stop"
        if cfg.stop_at is not None and step >= cfg.stop_at and step < cfg.total_steps and not self.stop:
            return "stop_at"
        return None

    def end_of_run(self) -> None:
        """The final evaluation (unless the last one was at this step), flush and checkpoint."""
        counters = self.counters
        evaluated_here = bool(counters.evaluations) and counters.evaluations[-1][0] == counters.step
        if self.cfg.final_eval and not evaluated_here:
            self.evaluate(counters.step)
        self.flush_and_check(counters.step, sps=False)
        if self.ckpt_path is not None:
            self.save()

    # -- the steps the loop calls ------------------------------------------------------------------

    def save(self) -> None:
        """Write the checkpoint (agent, env, schedule, loop counters, RNG states) atomically; in a
        data-parallel run every rank's parts are gathered to rank 0, which writes (module doc)."""
        assert self.ckpt_path is not None
        ckpt_path, counters, ctx = self.ckpt_path, self.counters, self.ctx
        counters.wall = self.wall_before + time.perf_counter() - self.t_start
        parts: dict[str, Any] = {
            "agent": self.agent.state_dict(),
            "env": self.env.get_state(),
            "rng": capture_rng_state(),
        }
        if self.collector is not None:
            parts["collector"] = self.collector.state_dict()
        gathered = ctx.gather_objects(parts if self.main else _to_cpu(parts))

        def write() -> None:
            assert gathered is not None
            remove_stale_temps(ckpt_path)  # a kill during an earlier save (the folder lock makes this safe)
            own = gathered[0]
            state = {
                "format": TRAIN_FORMAT,
                "meta": {**self.meta, "world_size": ctx.world_size},
                "agent": own["agent"],
                "env": own["env"],
                "schedule": self.schedule.state_dict(),
                "loop": counters.state(),
                "rng": own["rng"],
            }
            if "collector" in own:
                state["collector"] = own["collector"]
            if ctx.enabled:
                state["ranks"] = [
                    {**part, "agent": _shared_marker(part["agent"], own["agent"])} for part in gathered[1:]
                ]
            save_checkpoint(ckpt_path, state)

        on_main(ctx, write)
        self.checkpoint_step = counters.step
        self.t_saved = time.perf_counter()

    def flush_and_check(self, step: int, sps: bool = True) -> None:
        """Write the metric interval, then stop on a non-finite loss or parameter (one sync).

        Raises:
            DivergenceError: a ``losses/...`` mean or a parameter is NaN or infinite.
        """
        if self.ctx.enabled:
            self._flush_and_check_ranks(step, sps)
            return
        logger = self.logger
        means: Mapping[str, float] = {}
        if self.episode_stats is not None:  # a device env's finished episodes (one sync)
            finished = episode_metrics(self.episode_stats())
            if "charts/episodic_return" in finished:
                self.recent = (self.recent + [finished["charts/episodic_return"]])[-20:]
            if logger is not None and finished:
                logger.log(step, finished)
        if logger is not None:
            now = time.perf_counter()
            if sps:
                logger.log(step, {"charts/SPS": (step - self.step_flush) / max(now - self.t_flush, 1e-9)})
            means = logger.flush(step)
            self.t_flush, self.step_flush = now, step
        if self.check_inputs is not None:  # inputs checked on the device without a per-step sync
            self.check_inputs()
        bad = _nonfinite(means, self.params)
        if bad is not None:
            raise self._divergence(bad, step)

    def _flush_and_check_ranks(self, step: int, sps: bool) -> None:
        """:meth:`flush_and_check` of a data-parallel run: every rank's episodes, ``episode_stats``,
        stop request and check verdict gathered (one ``all_gather_objects``); rank 0 logs and
        flushes, then broadcasts its verdict (a non-finite loss) and whether its clock asks for a
        checkpoint. Every rank raises the same error.

        Raises:
            DivergenceError: a non-finite ``losses/...`` mean (rank 0's) or parameter (any rank's).
            ValueError: a rank's deferred input check failed (``rank R: ...`` on the others).
        """
        ctx, logger = self.ctx, self.logger
        stats = dict(self.episode_stats()) if self.episode_stats is not None else None
        verdict: tuple[str, str] | None = None  # ("inputs", message) or ("diverged", what)
        if self.check_inputs is not None:
            try:
                self.check_inputs()
            except ValueError as exc:
                verdict = ("inputs", _first_line(exc))
        if verdict is None and _nonfinite({}, self.params) is not None:
            verdict = ("diverged", "parameters")
        stop = self.should_stop is not None and self.should_stop()
        seen = ctx.all_gather_objects((self.pending, stats, stop, verdict))
        self.pending = []
        episodes = [ep for rank_episodes, _, _, _ in seen for ep in rank_episodes]
        finished = episode_metrics(merge_episode_stats([s for _, s, _, _ in seen]))
        returns = [float(r) for r, _ in episodes]
        if "charts/episodic_return" in finished:
            returns.append(finished["charts/episodic_return"])
        self.recent = (self.recent + returns)[-20:]
        self.stop_agreed = any(s for _, _, s, _ in seen)
        now = time.perf_counter()
        first = next(((r, v) for r, (_, _, _, v) in enumerate(seen) if v is not None), None)

        def flush() -> tuple[tuple[int, str, str] | None, bool]:
            means: Mapping[str, float] = {}
            if logger is not None:
                for r, n in episodes:
                    logger.log(step, {"charts/episodic_return": r, "charts/episodic_length": float(n)})
                if finished:
                    logger.log(step, finished)
                if sps:
                    logger.log(step, {"charts/SPS": (step - self.step_flush) / max(now - self.t_flush, 1e-9)})
                means = logger.flush(step)
            if first is not None:
                return (first[0], *first[1]), False
            bad = _nonfinite(means, [])
            by_time = (
                self.ckpt_path is not None
                and self.cfg.checkpoint_seconds > 0
                and now - self.t_saved >= self.cfg.checkpoint_seconds
            )
            return (None if bad is None else (0, "diverged", bad)), by_time

        outcome, self.save_by_time = on_main(ctx, flush)
        self.t_flush, self.step_flush = now, step
        if outcome is None:
            return
        rank, kind, what = outcome
        if kind == "inputs":
            raise ValueError(what if rank == ctx.rank else f"rank {rank}: {what}")
        where = "" if what.startswith("losses/") else f" on rank {rank}"
        raise self._divergence(f"{what}{where}", step)

    def _divergence(self, bad: str, step: int) -> DivergenceError:
        return DivergenceError(
            f"non-finite {bad} at step {step}{_lr_hint(self.agent)}: stopped; "
            f"{_kept(self.checkpoint_step, self.ckpt_path)}",
            step=step,
            checkpoint_step=self.checkpoint_step,
        )

    def evaluate(self, step: int) -> None:
        """A greedy evaluation at ``step`` (on rank 0, its result sent to every rank); sets
        :attr:`stop` when it reaches ``target_return``."""
        cfg = self.cfg

        def run() -> dict[str, Any]:
            if self.evaluate_policy is not None:
                return self.evaluate_policy(_eval_policy(self.agent), cfg.eval_episodes, cfg.seed + 100_000)
            return evaluate(
                _eval_policy(self.agent),
                self.eval_env_id,
                cfg.eval_episodes,
                seed=cfg.seed + 100_000,
                device=self.env.device,
            )

        result = on_main(self.ctx, run)
        self.final_eval = result
        self.counters.evaluations.append([step, result["mean_return"]])
        if self.logger is not None:
            self.logger.log(step, {"eval/mean_return": result["mean_return"]})
        if cfg.target_return is not None and result["mean_return"] >= cfg.target_return:
            if self.counters.reached_at is None:
                self.counters.reached_at = step
            self.stop = True

    def _training_error(self, exc: ValueError | RuntimeError | OSError) -> TrainingError:
        """``exc`` as one line naming the step and the checkpoint kept."""
        if isinstance(exc, OSError):
            reason = exc.strerror or _first_line(exc)
            where = exc.filename if exc.filename is not None else "the run folder"
            what = f"cannot write {where}: {reason}"
        else:
            what = _first_line(exc)
        step, kept = self.counters.step, _kept(self.checkpoint_step, self.ckpt_path)
        return TrainingError(
            f"{what} (at step {step}): stopped; {kept}", step=step, checkpoint_step=self.checkpoint_step
        )

    # -- finish ------------------------------------------------------------------------------------

    def finish(self) -> dict[str, Any]:
        """Draw the learning curve (a run that ended normally) and return the summary."""
        cfg, counters, logger = self.cfg, self.counters, self.logger
        wall = time.perf_counter() - self.t_start
        if (
            logger is not None
            and self.run_dir is not None
            and cfg.plot
            and self.stopped is None
            and logger.csv_path is not None
            and logger.csv_path.exists()
        ):
            _plot(logger.csv_path, self.run_dir / "curve.png", self.meta)
        ckpt_path = self.ckpt_path
        if self.main:
            saved = ckpt_path is not None and ckpt_path.exists()
        else:  # rank 0's folder may be on another node
            saved = ckpt_path is not None and self.checkpoint_step is not None
        return {
            "global_step": counters.step,
            "evaluations": [tuple(e) for e in counters.evaluations],
            "reached_target_at": counters.reached_at,
            "final_eval": self.final_eval,
            "recent_return": float(np.mean(self.recent)) if self.recent else None,
            "wall_s": wall,
            "sps": (counters.step - self.start_step) / max(wall, 1e-9),
            "checkpoint": str(ckpt_path) if saved else None,
            "checkpoint_step": self.checkpoint_step,
            "interrupted": self.stopped is not None,
            "stopped": self.stopped,
            "config": dataclasses.asdict(cfg),
        }


def _plot(csv_path: Path, png_path: Path, meta: Mapping[str, str]) -> None:
    """Draw the learning curve; a missing matplotlib (the ``train`` extra) costs one notice line."""
    try:
        plot_learning_curve(csv_path, png_path, title=" ".join(f"{k}={v}" for k, v in meta.items()) or None)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != "matplotlib":
            raise
        _notice(f"matplotlib is not installed: {png_path.name} skipped (pip install 'tritonrl[train]')")
    except ValueError:
        pass  # no returns were logged (a very short run): no curve to draw
