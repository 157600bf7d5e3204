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

Environments that keep their tensors on the device (:class:`tritonrl.toolkit.market.env.MarketEnv`)
join through three optional hooks, each used when the env (or ``evaluator``) has it:

- ``env.step_transition(actions) -> Transition`` is called instead of ``env.step`` (a gymnasium
  vector env's ``step`` returns a tuple; this returns the loop's :class:`~tritonrl.toolkit.envs.Transition`,
  with empty episode lists, so nothing is read on the host in a step);
- ``env.episode_stats() -> dict[str, float]`` is called at every metric flush (one sync): the
  episodes finished since the last call are logged as ``charts/episodic_return`` and
  ``charts/episodic_length`` (their means) and the other entries as ``market/<name>``
  (see :func:`episode_metrics`); the progress bar and ``recent_return`` take the mean return;
- ``evaluate_policy(policy, episodes, seed) -> dict`` (with ``"mean_return"``), on the
  ``evaluator`` argument of :func:`run_training` or else on the env, replaces the gymnasium
  :func:`~tritonrl.toolkit.envs.evaluate` (a market run evaluates on its validation period).

A ``collector`` (:class:`tritonrl.toolkit.market.collector.Collector`, or anything with ``step()
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
from tritonrl.toolkit.envs import VecEnv, evaluate
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
    (:class:`tritonrl.toolkit.market.collector.Collector` is one)."""

    def step(self) -> Any:
        """One vector step; returns the env's :class:`~tritonrl.toolkit.envs.Transition`."""
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
) -> dict[str, Any]:
    """Train ``agent`` on ``env`` for ``cfg.total_steps`` environment steps.

    ``env`` is a :class:`~tritonrl.toolkit.envs.VecEnv` or any env with its attributes
    (``num_envs``, ``device``, ``env_id``, ``obs``, ``reset``, ``get_state``/``set_state``) and
    either ``step`` returning a :class:`~tritonrl.toolkit.envs.Transition` or
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

    Returns:
        a summary: ``global_step``, ``evaluations`` (``[step, mean_return]`` pairs),
        ``reached_target_at`` (first evaluation step reaching ``target_return``, or ``None``),
        ``final_eval`` (the last evaluation's dict), ``recent_return`` (mean of the last 20
        training episodes), ``wall_s``, ``sps``, ``checkpoint`` (path or ``None``),
        ``checkpoint_step`` (step of the last checkpoint written or resumed from), ``interrupted``
        and ``stopped`` (``None``, ``"stop_at"`` or ``"should_stop"``).

    Raises:
        ValueError: inconsistent settings (checkpoints or resume without ``run_dir``, a
            ``collector`` of another agent or env).
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
    if cfg.run_dir is None:
        return _run(agent, env, schedule, cfg, should_stop, evaluator, collector)
    with RunLock(cfg.run_dir):
        return _run(agent, env, schedule, cfg, should_stop, evaluator, collector)


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
) -> dict[str, Any]:
    run = _Run(agent, env, schedule, cfg, evaluator, collector)
    run.start()
    run.train(should_stop)
    return run.finish()


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
    ) -> None:
        self.agent, self.env, self.schedule, self.cfg = agent, env, schedule, cfg
        self.collector = collector
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

    # -- start: resume or seed, then the run folder ------------------------------------------------

    def start(self) -> None:
        """Resume from the checkpoint (``cfg.resume``, one exists) or seed a fresh run; prepare the
        run folder and the logger; start the clocks."""
        cfg = self.cfg
        resumed = cfg.resume and self.ckpt_path is not None and self.ckpt_path.exists()
        if resumed:
            self._resume()
            self.checkpoint_step = self.counters.step
        else:
            seed_everything(cfg.seed)
            if self.env.obs is None:
                self.env.reset()
        if self.run_dir is not None:
            assert self.ckpt_path is not None
            _prepare_run_dir(self.run_dir, self.ckpt_path, self.checkpoint_step, cfg)
            self.logger = MetricLogger(
                self.run_dir,
                tensorboard=cfg.tensorboard,
                purge_step=self.counters.step + 1 if resumed else None,
            )
        self.eval_env_id = cfg.eval_env_id or self.env.env_id
        self.bar = ProgressBar(cfg.total_steps, initial=self.counters.step, enabled=cfg.progress)
        self.t_start = time.perf_counter()
        self.wall_before = self.counters.wall
        self.t_flush, self.step_flush = self.t_start, self.counters.step
        self.t_saved = self.t_start
        self.start_step = self.counters.step
        self.obs = self.env.obs
        self.params = _parameters(self.agent)
        self.check_inputs = getattr(self.agent, "check_inputs", None)

    def _resume(self) -> None:
        """Check every saved section against this run, then load them all (or none).

        Raises:
            CheckpointError: another format, identity (``meta``), agent, env or damaged sections.
        """
        assert self.ckpt_path is not None
        ckpt_path = self.ckpt_path
        state = training_sections(load_checkpoint(ckpt_path), str(ckpt_path))
        saved_meta = dict(state["meta"])
        for key, value in self.meta.items():
            if key in saved_meta and saved_meta[key] != value:
                raise CheckpointError(
                    f"{ckpt_path}: checkpoint was made with "
                    f"{key}={brief(saved_meta[key], 60)}, this run has {key}={value!r}"
                )
        agent, env, schedule = self.agent, self.env, self.schedule
        try:
            # every section is checked before any is loaded (the RNG restore checks, then sets)
            for check, key in (
                (getattr(schedule, "check_state_dict", None), "schedule"),
                (getattr(agent, "check_state_dict", None), "agent"),
                (getattr(env, "check_state", None), "env"),
                (_Counters.check, "loop"),
            ):
                if check is not None:
                    check(state[key])
            collector, saved_collector = self.collector, state.get("collector")
            if collector is not None and saved_collector is not None:
                collector.load_state_dict(saved_collector)  # checks before it changes anything
            restore_rng_state(state["rng"], where="random generator states")
            schedule.load_state_dict(state["schedule"])
            agent.load_state_dict(state["agent"])
            env.set_state(state["env"])
            self.counters.load(state["loop"])
            if collector is not None and saved_collector is None and hasattr(collector, "sync"):
                collector.sync()  # a run without a collector saved this: act from the loaded learner
        except CheckpointError as exc:
            raise CheckpointError(f"{ckpt_path}: {cut(str(exc), 300)}") from None
        except (KeyError, TypeError, ValueError) as exc:  # settings of this run differ from the saved one
            raise CheckpointError(f"{ckpt_path}: {cut(str(exc), 300)}") from None

    # -- the loop ----------------------------------------------------------------------------------

    def train(self, should_stop: Callable[[], bool] | None) -> None:
        """Step until ``total_steps``, a reached target, ``stop_at`` or ``should_stop``; at a normal
        end evaluate, flush and save once more. Closes the progress bar and the logger.

        Raises:
            TrainingError: a ``ValueError``, ``RuntimeError`` or ``OSError`` while training
                (:class:`DivergenceError` from :meth:`flush_and_check` passes unchanged).
        """
        cfg, counters = self.cfg, self.counters
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
        step = counters.step = counters.step + env.num_envs
        if tr.episode_returns:
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
            if (
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
        early here, else ``None``."""
        cfg = self.cfg
        if should_stop is not None and should_stop() and step < cfg.total_steps and not self.stop:
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
        """Write the checkpoint (agent, env, schedule, loop counters, RNG states) atomically."""
        assert self.ckpt_path is not None
        counters = self.counters
        counters.wall = self.wall_before + time.perf_counter() - self.t_start
        remove_stale_temps(self.ckpt_path)  # a kill during an earlier save (the folder lock makes this safe)
        state = {
            "format": TRAIN_FORMAT,
            "meta": self.meta,
            "agent": self.agent.state_dict(),
            "env": self.env.get_state(),
            "schedule": self.schedule.state_dict(),
            "loop": counters.state(),
            "rng": capture_rng_state(),
        }
        if self.collector is not None:
            state["collector"] = self.collector.state_dict()
        save_checkpoint(self.ckpt_path, state)
        self.checkpoint_step = counters.step
        self.t_saved = time.perf_counter()

    def flush_and_check(self, step: int, sps: bool = True) -> None:
        """Write the metric interval, then stop on a non-finite loss or parameter (one sync).

        Raises:
            DivergenceError: a ``losses/...`` mean or a parameter is NaN or infinite.
        """
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
            raise DivergenceError(
                f"non-finite {bad} at step {step}{_lr_hint(self.agent)}: stopped; "
                f"{_kept(self.checkpoint_step, self.ckpt_path)}",
                step=step,
                checkpoint_step=self.checkpoint_step,
            )

    def evaluate(self, step: int) -> None:
        """A greedy evaluation at ``step``; sets :attr:`stop` when it reaches ``target_return``."""
        cfg = self.cfg
        if self.evaluate_policy is not None:
            result = self.evaluate_policy(_eval_policy(self.agent), cfg.eval_episodes, cfg.seed + 100_000)
        else:
            result = evaluate(
                _eval_policy(self.agent),
                self.eval_env_id,
                cfg.eval_episodes,
                seed=cfg.seed + 100_000,
                device=self.env.device,
            )
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
        return {
            "global_step": counters.step,
            "evaluations": [tuple(e) for e in counters.evaluations],
            "reached_target_at": counters.reached_at,
            "final_eval": self.final_eval,
            "recent_return": float(np.mean(self.recent)) if self.recent else None,
            "wall_s": wall,
            "sps": (counters.step - self.start_step) / max(wall, 1e-9),
            "checkpoint": str(ckpt_path) if ckpt_path is not None and ckpt_path.exists() else None,
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
