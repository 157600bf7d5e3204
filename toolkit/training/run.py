"""One call of `run_training`: what an RL run's step, save and
evaluation are.

The folder side is [`tritonrl.toolkit.lifecycle.RunLifecycle`][tritonrl.toolkit.lifecycle.RunLifecycle].
Layer: training. Guide: docs/pages/training.md, docs/pages/scaling.md.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tritonrl.toolkit.checkpoint import CheckpointError, brief, cut, load_checkpoint
from tritonrl.toolkit.distributed import DistContext, current, on_main
from tritonrl.toolkit.envs.vector import VecEnv, evaluate
from tritonrl.toolkit.lifecycle import (
    CHECKPOINT_NAME,
    RunLifecycle,
    crossed,
    first_nonfinite,
    notice,
    parameters,
    seed_everything,
)
from tritonrl.toolkit.logger import MetricLogger, ProgressBar, plot_learning_curve
from tritonrl.toolkit.runstate import (
    TRAIN_FORMAT,
    capture_rng_state,
    check_rng_state,
    nonfinite_entry,
    restore_rng_state,
    training_sections,
)
from tritonrl.toolkit.training.base import (
    DivergenceError,
    Evaluator,
    LoopConfig,
    Schedule,
    StepCollector,
    TrainingError,
)
from tritonrl.toolkit.training.episodes import episode_metrics, merge_episode_stats, metric_prefix
from tritonrl.toolkit.training.overlap import Overlap, feed_staged
from tritonrl.toolkit.training.ranks import (
    RANK_PARTS,
    agree_on_errors,
    fill_shared,
    first_line,
    rank_seed,
    saved_world_size,
    scatter_from_main,
    shared_marker,
    to_cpu,
)

__all__: list[str] = []


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
        """Raise ``ValueError`` unless ``s`` is a `state`; changes nothing."""

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


def _is_loss(name: str) -> bool:
    return name.startswith("losses/")


def _lr_hint(agent: Any) -> str:
    lr = getattr(getattr(agent, "config", None), "lr", None)
    if isinstance(lr, (int, float)) and not isinstance(lr, bool) and (not math.isfinite(lr) or abs(lr) >= 1):
        return f" (lr={lr:g}?)"
    return ""


def run(
    agent: Any,
    env: VecEnv,
    schedule: Schedule,
    cfg: LoopConfig,
    should_stop: Callable[[], bool] | None,
    evaluator: Evaluator | None,
    collector: StepCollector | None,
    ctx: DistContext,
) -> dict[str, Any]:
    """`run_training` after its argument checks, the folder held by rank 0."""
    run = _Run(agent, env, schedule, cfg, evaluator, collector, ctx)
    with run.life:
        run.start()
        run.train(should_stop)
        return run.finish()


class _Run:
    """One call of `run_training`, in steps: `start`, `train`, `finish`."""

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
        self.metric_prefix = metric_prefix(env) if self.episode_stats is not None else ""
        # the folder side of the run: lock, fresh start or resume, logger, cadence, stop
        self.life = RunLifecycle(cfg.run_dir, self.ctx, checkpoint_seconds=cfg.checkpoint_seconds)
        self.run_dir, self.ckpt_path = self.life.run_dir, self.life.ckpt_path
        self.counters = _Counters()
        self.meta = dict(cfg.meta)
        self.recent: list[float] = []  # returns of the last 20 training episodes
        self.final_eval: dict[str, Any] | None = None
        self.stop = False  # an evaluation reached target_return
        self.stopped: str | None = None  # None, "stop_at" or "should_stop"
        # data-parallel runs: this rank's episodes since the last flush, and what the ranks agreed
        self.pending: list[tuple[float, int]] = []
        self.should_stop: Callable[[], bool] | None = None
        self.stop_agreed = False  # a rank's should_stop was set at the last flush
        self.save_by_time = False  # rank 0's clock asked for a checkpoint at the last flush
        self.overlap: Overlap | None = None  # cfg.overlap: the actor and learner of a lagged run

    # -- start: resume or seed, then the run folder ------------------------------------------------

    @property
    def logger(self) -> MetricLogger | None:
        """The run folder's logger (rank 0 of a run with a folder), else ``None``."""
        return self.life.logger

    @property
    def checkpoint_step(self) -> int | None:
        """The step of the last checkpoint written or resumed from."""
        return self.life.checkpoint_step

    def start(self) -> None:
        """Lock the folder, resume or seed, prepare the folder and logger (rank 0), start the clocks."""
        cfg, ctx, life = self.cfg, self.ctx, self.life
        if life.begin(cfg.resume):
            if cfg.overlap:  # before the load: the actor's seed draw is overwritten by the saved state
                self.overlap = self._make_overlap()
            self._resume()
            life.resumed(self.counters.step)
        else:
            seed_everything(rank_seed(cfg.seed, ctx.rank))
            if self.env.obs is None:
                self.env.reset()
        life.open(self.checkpoint_step, self._fresh_notices, tensorboard=cfg.tensorboard)
        self.eval_env_id = cfg.eval_env_id or self.env.env_id
        self.bar = ProgressBar(
            cfg.total_steps, initial=self.counters.step, enabled=cfg.progress and self.main
        )
        self.t_start = time.perf_counter()
        self.wall_before = self.counters.wall
        self.t_flush, self.step_flush = self.t_start, self.counters.step
        life.t_saved = self.t_start
        self.start_step = self.counters.step
        self.obs = self.env.obs
        self.params = parameters(self.agent)
        self.check_inputs = getattr(self.agent, "check_inputs", None)
        if cfg.overlap and self.overlap is None:
            self.overlap = self._make_overlap()

    def _make_overlap(self) -> Overlap:
        return Overlap(self.agent, self.schedule, self.step_env, self.env.num_envs, self.cfg.overlap_learner)

    def _fresh_notices(self, moved: Path | None) -> list[str]:
        """What a fresh run says about the folder it starts in (``moved``: an earlier run's files)."""
        if self.cfg.resume:
            tail = f"; the earlier run's files moved to {moved}" if moved else ""
            return [f"--resume: {self.run_dir} holds no {CHECKPOINT_NAME}: starting a fresh run{tail}"]
        if moved is not None:
            return [f"{self.run_dir} held files of an earlier run: moved to {moved}; starting a fresh run"]
        return []

    def _read_checkpoint(self) -> list[dict[str, Any]]:
        """Rank 0: read and check the checkpoint's top level; what each rank is to load.

        Returns:
            one dict per rank: ``schedule``, ``loop``, ``agent``, ``exact`` (as many ranks wrote it: ``env``,
                ``rng`` and ``collector`` too) and ``saved_world``.

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
        saved_world = saved_world_size(state, where)
        world = self.ctx.world_size
        shared = {
            "schedule": state["schedule"],
            "loop": state["loop"],
            "saved_world": saved_world,
            "overlap": state.get("overlap"),
        }
        if saved_world != world:
            return [{**shared, "agent": state["agent"], "exact": False} for _ in range(world)]
        out = [{**shared, "exact": True, **{k: state.get(k) for k in RANK_PARTS}}]
        for part in state.get("ranks", []):
            try:
                agent = fill_shared(part["agent"], state["agent"])
            except ValueError as exc:
                raise CheckpointError(f"{where}: {exc}") from None
            out.append({**shared, "exact": True, **{k: part.get(k) for k in RANK_PARTS}, "agent": agent})
        return out

    def _resume(self) -> None:
        """Check every saved section against this run, then load them all (or none); every rank loads its own.

        Raises:
            CheckpointError: another format, identity, agent, env or damaged sections (on every rank when any
                rank's part does not fit).
        """
        assert self.ckpt_path is not None
        ctx = self.ctx
        payload = scatter_from_main(ctx, self._read_checkpoint)
        error: CheckpointError | None = None
        try:
            self._load(payload)
        except CheckpointError as exc:
            error = CheckpointError(f"{self.ckpt_path}: {cut(str(exc), 300)}")
        except (KeyError, TypeError, ValueError) as exc:  # settings of this run differ from the saved one
            error = CheckpointError(f"{self.ckpt_path}: {cut(str(exc), 300)}")
        agree_on_errors(ctx, error)
        if not payload["exact"] and self.main:
            notice(
                f"{self.ckpt_path} was written by {payload['saved_world']} rank"
                f"{'s' if payload['saved_world'] > 1 else ''}, this run has {ctx.world_size}: "
                "the shared state is loaded (weights, optimizer, counters, schedule, normalisation); "
                "each rank's replay or rollout buffer, environments and random streams start fresh"
            )

    def _load(self, payload: Mapping[str, Any]) -> None:
        """Load this rank's ``payload``: every section checked before any is applied."""
        agent, env, schedule, collector = self.agent, self.env, self.schedule, self.collector
        exact = payload["exact"]
        saved_collector = payload.get("collector") if exact else None
        for check, key in (
            (getattr(schedule, "check_state_dict", None), "schedule"),
            (getattr(env, "check_state", None) if exact else None, "env"),
            (_Counters.check, "loop"),
            (
                getattr(collector, "check_state_dict", None) if saved_collector is not None else None,
                "collector",
            ),
        ):
            if check is not None:
                check(payload[key])
        if exact:
            check_rng_state(payload["rng"], where="random generator states")
        if self.overlap is not None and payload.get("overlap") is not None:
            self.overlap.check_state_dict(payload["overlap"])
        check_agent = getattr(agent, "check_state_dict", None)
        if check_agent is not None:
            if exact:
                check_agent(payload["agent"])
            else:
                check_agent(payload["agent"], rank_parts=False)
        else:
            bad = nonfinite_entry(payload["agent"], skip=getattr(agent, "experience_keys", ()))
            if bad is not None:
                raise CheckpointError(f"agent tensor {brief(bad, 100)} holds NaN or infinite values")
        if not exact:
            schedule.load_state_dict(payload["schedule"])
            agent.load_state_dict(payload["agent"], rank_parts=False)
            self.counters.load(payload["loop"])
            step = self.counters.step
            restart = getattr(schedule, "restart_collection", None)
            if restart is not None:
                restart(step)
            seed_everything(rank_seed(self.cfg.seed, self.ctx.rank, step))
            env.reset()
            if collector is not None and hasattr(collector, "sync"):
                collector.sync()  # act from the loaded learner
            return
        if collector is not None and saved_collector is not None:
            collector.load_state_dict(saved_collector)  # checks before it changes anything
        restore_rng_state(payload["rng"], where="random generator states")
        schedule.load_state_dict(payload["schedule"])
        agent.load_state_dict(payload["agent"])
        env.set_state(payload["env"])
        self.counters.load(payload["loop"])
        self._load_overlap(payload.get("overlap"))
        if collector is not None and saved_collector is None and hasattr(collector, "sync"):
            collector.sync()  # a run without a collector saved this: act from the loaded learner

    def _load_overlap(self, saved: Mapping[str, Any] | None) -> None:
        """Restore an overlapped run's actor side, or feed a sequential run the staged steps."""
        if self.overlap is not None:
            if saved is None:
                self.overlap = self._make_overlap()
            else:
                self.overlap.load_state_dict(saved)
        elif saved is not None and saved["staged"]:
            feed_staged(self.agent, self.schedule, saved["staged"], self.counters.step)

    # -- the loop ----------------------------------------------------------------------------------

    def train(self, should_stop: Callable[[], bool] | None) -> None:
        """Step until ``total_steps``, a reached target, ``stop_at`` or ``should_stop``; a normal end
        evaluates and saves.

        Raises:
            TrainingError: a ``ValueError``, ``RuntimeError`` or ``OSError`` while training
                ([`DivergenceError`][tritonrl.toolkit.training.base.DivergenceError] passes unchanged).
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
                self.drain()
                self.end_of_run()
        except TrainingError:
            raise
        except (ValueError, RuntimeError, OSError) as exc:
            raise self._training_error(exc) from exc
        finally:
            if self.overlap is not None:
                self.overlap.close()
            self.bar.close()
            if self.logger is not None:
                self.logger.close()

    def env_step(self) -> int:
        """One vector step with its updates and episode logging; returns the new global step."""
        agent, env, logger, counters = self.agent, self.env, self.logger, self.counters
        if self.overlap is not None:
            tr = self.overlap.step(self.obs)
        elif self.collector is not None:
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
        due: Sequence[Mapping[str, Any]]
        if self.overlap is None:
            due = self.schedule.after_step(agent, step)
        elif step >= self.cfg.total_steps:
            due = self.overlap.drain(step)
        else:
            due = self.overlap.after_step(step - env.num_envs, step)
        for metrics in due:
            if logger is not None:
                logger.log(step, metrics)
        return step

    def after_step(self, prev: int, step: int) -> None:
        """What is due after the step from ``prev`` to ``step``: evaluation, flush, checkpoint, progress bar.

        The final evaluation comes before the last step's flush, so ``metrics.csv`` gets one row per step.
        """
        cfg = self.cfg
        if crossed(prev, step, cfg.eval_every) or (cfg.final_eval and step >= cfg.total_steps):
            self.evaluate(step)
        checkpoint_due = self.ckpt_path is not None and crossed(prev, step, cfg.checkpoint_every)
        if crossed(prev, step, cfg.log_every) or checkpoint_due:
            self.flush_and_check(step)
            if self.ctx.enabled:
                checkpoint_due = checkpoint_due or self.save_by_time
            elif not checkpoint_due and self.life.due_by_time():
                checkpoint_due = True
        if checkpoint_due:
            self.save()
        if self.bar.enabled:  # the text costs more than a CartPole step: build it only for a drawn bar
            self.bar.update(step, f"return {np.mean(self.recent):.1f}" if self.recent else None)

    def _stop_reason(self, step: int, should_stop: Callable[[], bool] | None) -> str | None:
        """``"should_stop"`` or ``"stop_at"`` to end the run here, else ``None``."""
        cfg = self.cfg
        if self.ctx.enabled:
            requested = self.stop_agreed and self.step_flush == step
        else:
            requested = self.life.stop_requested(should_stop)
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
        """The final evaluation, flush and checkpoint, each unless already done at this step."""
        counters = self.counters
        evaluated_here = bool(counters.evaluations) and counters.evaluations[-1][0] == counters.step
        evaluated_now = self.cfg.final_eval and not evaluated_here
        if evaluated_now:
            self.evaluate(counters.step)
        self.flush_and_check(counters.step, sps=False)
        if self.ckpt_path is not None and (evaluated_now or self.checkpoint_step != counters.step):
            self.save()

    # -- the steps the loop calls ------------------------------------------------------------------

    def save(self) -> None:
        """Write the checkpoint atomically (rank 0, every rank's parts gathered)."""
        counters, ctx = self.counters, self.ctx
        # an overlapped run: the learner's state comes into this process's agent, the actor's side
        # goes beside it; neither side changes what it does next
        overlap = self.overlap.state_dict() if self.overlap is not None else None
        counters.wall = self.wall_before + time.perf_counter() - self.t_start
        parts: dict[str, Any] = {
            "agent": self.agent.state_dict(),
            "env": self.env.get_state(),
            "rng": capture_rng_state(),
        }
        if self.collector is not None:
            parts["collector"] = self.collector.state_dict()
        self._refuse_nonfinite(parts)
        gathered = ctx.gather_objects(parts if self.main else to_cpu(parts))

        def state() -> dict[str, Any]:  # rank 0
            assert gathered is not None
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
            if overlap is not None:
                state["overlap"] = overlap
            if ctx.enabled:
                state["ranks"] = [
                    {**part, "agent": shared_marker(part["agent"], own["agent"])} for part in gathered[1:]
                ]
            return state

        self.life.save(counters.step, state)

    def drain(self) -> None:
        """An overlapped run: bring the learner up to the current step and log its last metrics."""
        if self.overlap is None:
            return
        step = self.counters.step
        for metrics in self.overlap.drain(step):
            if self.logger is not None:
                self.logger.log(step, metrics)

    def _refuse_nonfinite(self, parts: Mapping[str, Any]) -> None:
        """Stop the run when a tensor about to be saved is NaN or infinite, so the last good checkpoint stays.

        Raises:
            DivergenceError: naming the first such tensor and the checkpoint kept.
        """
        skip = [f"agent.{k}" for k in getattr(self.agent, "experience_keys", ())]
        bad = nonfinite_entry({"agent": parts["agent"], "collector": parts.get("collector")}, skip=skip)
        if self.ctx.enabled and self.ctx.any(bad is not None) and bad is None:
            bad = "state on another rank"
        if bad is not None:
            raise self._divergence(f"{bad} in the state to save", self.counters.step)

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
            finished = episode_metrics(self.episode_stats(), self.metric_prefix)
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
        if self.overlap is not None:  # the stream learner: these reads come after its round
            self.overlap.settle()
        if self.check_inputs is not None:  # inputs checked on the device without a per-step sync
            self.check_inputs()
        bad = first_nonfinite(means, _is_loss, self.params)
        if bad is not None:
            raise self._divergence(bad, step)

    def _flush_and_check_ranks(self, step: int, sps: bool) -> None:
        """`flush_and_check` of a data-parallel run: one gather, rank 0 logs and decides, every rank
        raises alike.

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
                verdict = ("inputs", first_line(exc))
        if verdict is None and first_nonfinite({}, _is_loss, self.params) is not None:
            verdict = ("diverged", "parameters")
        stop = self.should_stop is not None and self.should_stop()
        seen = ctx.all_gather_objects((self.pending, stats, stop, verdict))
        self.pending = []
        episodes = [ep for rank_episodes, _, _, _ in seen for ep in rank_episodes]
        finished = episode_metrics(merge_episode_stats([s for _, s, _, _ in seen]), self.metric_prefix)
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
            bad = first_nonfinite(means, _is_loss)
            return (None if bad is None else (0, "diverged", bad)), self.life.due_by_time(now)

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
            f"non-finite {bad} at step {step}{_lr_hint(self.agent)}: stopped; {self.life.kept()}",
            step=step,
            checkpoint_step=self.checkpoint_step,
        )

    def evaluate(self, step: int) -> None:
        """A greedy evaluation at ``step`` on rank 0, sent to every rank; may set `stop`."""
        cfg = self.cfg

        policy = _eval_policy(self.agent) if self.overlap is None else self.overlap.eval_policy()

        def run() -> dict[str, Any]:
            if self.evaluate_policy is not None:
                return self.evaluate_policy(policy, cfg.eval_episodes, cfg.seed + 100_000)
            return evaluate(
                policy,
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
            reason = exc.strerror or first_line(exc)
            where = exc.filename if exc.filename is not None else "the run folder"
            what = f"cannot write {where}: {reason}"
        else:
            what = first_line(exc)
        step, kept = self.counters.step, self.life.kept()
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
        return {
            "global_step": counters.step,
            "evaluations": [tuple(e) for e in counters.evaluations],
            "reached_target_at": counters.reached_at,
            "final_eval": self.final_eval,
            "recent_return": float(np.mean(self.recent)) if self.recent else None,
            "wall_s": wall,
            "sps": (counters.step - self.start_step) / max(wall, 1e-9),
            "checkpoint": self.life.written(),
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
        notice(f"matplotlib is not installed: {png_path.name} skipped (pip install 'tritonrl[train]')")
    except ValueError:
        pass  # no returns were logged (a very short run): no curve to draw
