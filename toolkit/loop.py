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
    agent = PPO(env.single_observation_space, env.single_action_space, num_envs=8)
    summary = run_training(agent, env, OnPolicySchedule(agent.config.num_steps),
                           LoopConfig(total_steps=50_000, eval_every=10_000, target_return=475))

The checkpoint (``<run_dir>/checkpoint.safetensors``) is written after the step that crosses
each multiple of ``checkpoint_every``; the metric interval is flushed there too, so a run stopped
at step k and resumed writes the same metrics as one that never stopped (``charts/SPS`` aside).
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from toolkit.checkpoint import (
    CheckpointError,
    capture_rng_state,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
)
from toolkit.envs import VecEnv, evaluate
from toolkit.logger import MetricLogger, ProgressBar, plot_learning_curve, read_csv

__all__ = ["CHECKPOINT_NAME", "MAX_SEED", "LoopConfig", "Schedule", "run_training", "seed_everything"]

CHECKPOINT_NAME = "checkpoint.safetensors"
MAX_SEED = 2**32 - 1
"""Largest seed: numpy's global seed takes 32 bits, gymnasium refuses negative seeds (torch takes 64)."""
TRAIN_FORMAT = "tritonrl-train"


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
    resume: bool = False
    """Continue from ``<run_dir>/checkpoint.safetensors`` if it exists."""
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
        return {"step": self.step, "evaluations": self.evaluations, "reached_at": self.reached_at,
                "wall": self.wall}

    def load(self, s: Mapping[str, Any]) -> None:
        self.step = int(s["step"])
        self.evaluations = [list(e) for e in s["evaluations"]]
        self.reached_at = s["reached_at"]
        self.wall = float(s["wall"])


def _crossed(prev: int, now: int, every: int) -> bool:
    return every > 0 and now // every > prev // every


def run_training(agent: Any, env: VecEnv, schedule: Schedule, cfg: LoopConfig) -> dict[str, Any]:
    """Train ``agent`` on ``env`` for ``cfg.total_steps`` environment steps.

    Returns:
        a summary: ``global_step``, ``evaluations`` (``[step, mean_return]`` pairs),
        ``reached_target_at`` (first evaluation step reaching ``target_return``, or ``None``),
        ``final_eval`` (the last evaluation's dict), ``recent_return`` (mean of the last 20
        training episodes), ``wall_s``, ``sps``, ``checkpoint`` (path or ``None``).

    Raises:
        ValueError: inconsistent settings (checkpoints or resume without ``run_dir``).
        CheckpointError: ``resume`` with a checkpoint of another agent, env or format.
    """
    if cfg.total_steps < 1:
        raise ValueError(f"total_steps must be >= 1, got {cfg.total_steps}")
    if (cfg.checkpoint_every or cfg.resume) and cfg.run_dir is None:
        raise ValueError("checkpoint_every and resume need run_dir")
    run_dir = Path(cfg.run_dir) if cfg.run_dir is not None else None
    ckpt_path = run_dir / CHECKPOINT_NAME if run_dir is not None else None
    counters = _Counters()
    meta = dict(cfg.meta)

    resumed = False
    if cfg.resume and ckpt_path is not None and ckpt_path.exists():
        state = load_checkpoint(ckpt_path)
        if state.get("format") != TRAIN_FORMAT:
            raise CheckpointError(f"{ckpt_path}: not a training checkpoint (an agent-only save?)")
        saved_meta = dict(state.get("meta", {}))
        for key, value in meta.items():
            if key in saved_meta and saved_meta[key] != value:
                raise CheckpointError(f"{ckpt_path}: checkpoint was made with {key}={saved_meta[key]!r}, "
                                      f"this run has {key}={value!r}")
        try:
            # cheap checks first: the schedule validates its settings before it sets a counter, the
            # agent validates everything before it loads anything
            schedule.load_state_dict(state["schedule"])
            agent.load_state_dict(state["agent"])
            env.set_state(state["env"])
            counters.load(state["loop"])
            restore_rng_state(state["rng"])
        except CheckpointError as exc:
            raise CheckpointError(f"{ckpt_path}: {exc}") from None
        except (KeyError, TypeError, ValueError) as exc:  # settings of this run differ from the saved one
            raise CheckpointError(f"{ckpt_path}: {exc}") from None
        resumed = True
    else:
        seed_everything(cfg.seed)
        if env.obs is None:
            env.reset()

    logger = None
    if run_dir is not None:
        if resumed:
            _drop_rows_after(run_dir / "metrics.csv", counters.step)
        logger = MetricLogger(run_dir, tensorboard=cfg.tensorboard)

    eval_env_id = cfg.eval_env_id or env.env_id
    bar = ProgressBar(cfg.total_steps, initial=counters.step, enabled=cfg.progress)
    recent: list[float] = []
    final_eval: dict[str, Any] | None = None
    t_start = time.perf_counter()
    wall_before = counters.wall
    t_flush, step_flush = t_start, counters.step
    start_step = counters.step
    obs = env.obs
    stop = False
    interrupted = False

    def save() -> None:
        counters.wall = wall_before + time.perf_counter() - t_start
        save_checkpoint(ckpt_path, {
            "format": TRAIN_FORMAT,
            "meta": meta,
            "agent": agent.state_dict(),
            "env": env.get_state(),
            "schedule": schedule.state_dict(),
            "loop": counters.state(),
            "rng": capture_rng_state(),
        })

    def run_eval(step: int) -> None:
        nonlocal final_eval, stop
        result = evaluate(_eval_policy(agent), eval_env_id, cfg.eval_episodes, seed=cfg.seed + 100_000,
                          device=env.device)
        final_eval = result
        counters.evaluations.append([step, result["mean_return"]])
        if logger is not None:
            logger.log(step, {"eval/mean_return": result["mean_return"]})
        if cfg.target_return is not None and result["mean_return"] >= cfg.target_return:
            if counters.reached_at is None:
                counters.reached_at = step
            stop = True

    while counters.step < cfg.total_steps and not stop:
        prev = counters.step
        actions = agent.act(obs)
        tr = env.step(actions)
        agent.observe(obs, actions, tr.reward, tr.next_obs, tr.terminated, tr.truncated)
        obs = tr.obs
        step = counters.step = prev + env.num_envs
        if tr.episode_returns:
            recent = (recent + tr.episode_returns)[-20:]
            if logger is not None:
                for r, length in zip(tr.episode_returns, tr.episode_lengths, strict=True):
                    logger.log(step, {"charts/episodic_return": r, "charts/episodic_length": float(length)})
        for metrics in schedule.after_step(agent, step):
            if logger is not None:
                logger.log(step, metrics)
        if _crossed(prev, step, cfg.eval_every):
            run_eval(step)
        checkpoint_due = ckpt_path is not None and _crossed(prev, step, cfg.checkpoint_every)
        if logger is not None and (_crossed(prev, step, cfg.log_every) or checkpoint_due):
            now = time.perf_counter()
            logger.log(step, {"charts/SPS": (step - step_flush) / max(now - t_flush, 1e-9)})
            logger.flush(step)
            t_flush, step_flush = now, step
        if checkpoint_due:
            save()
        if bar.enabled:  # the text costs more than a CartPole step: build it only for a drawn bar
            bar.update(step, f"return {np.mean(recent):.1f}" if recent else None)
        if cfg.stop_at is not None and step >= cfg.stop_at and step < cfg.total_steps and not stop:
            interrupted = True
            break
    if not interrupted:
        if cfg.final_eval and not (counters.evaluations and counters.evaluations[-1][0] == counters.step):
            run_eval(counters.step)
        if logger is not None:
            logger.flush(counters.step)
        if ckpt_path is not None:
            save()
    bar.close()
    wall = time.perf_counter() - t_start
    if logger is not None:
        logger.close()
        if cfg.plot and not interrupted and logger.csv_path is not None and logger.csv_path.exists():
            try:
                plot_learning_curve(logger.csv_path, run_dir / "curve.png",
                                    title=" ".join(f"{k}={v}" for k, v in meta.items()) or None)
            except ValueError:
                pass  # no returns were logged (a very short run): no curve to draw
    return {
        "global_step": counters.step,
        "evaluations": [tuple(e) for e in counters.evaluations],
        "reached_target_at": counters.reached_at,
        "final_eval": final_eval,
        "recent_return": float(np.mean(recent)) if recent else None,
        "wall_s": wall,
        "sps": (counters.step - start_step) / max(wall, 1e-9),
        "checkpoint": str(ckpt_path) if ckpt_path is not None and ckpt_path.exists() else None,
        "interrupted": interrupted,
        "config": dataclasses.asdict(cfg),
    }


def _drop_rows_after(csv_path: Path, step: int) -> None:
    """A resumed run rewrites history after its checkpoint: drop CSV rows logged past ``step``."""
    if not csv_path.exists():
        return
    rows = read_csv(csv_path)
    keep = [r for r in rows if r.get("global_step", 0) <= step]
    if len(keep) == len(rows):
        return
    lines = csv_path.read_text().splitlines(keepends=True)
    csv_path.write_text("".join(lines[: 1 + len(keep)]))
