"""The loop's public parts: its settings (`LoopConfig`), its errors, and the protocols of what it
drives.

[`tritonrl.toolkit.training.loop`][tritonrl.toolkit.training.loop] re-exports them all. Layer: training.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from tritonrl.kernels.validate import check_int, check_real
from tritonrl.toolkit.checks import MAX_SEED
from tritonrl.toolkit.lifecycle import CHECKPOINT_NAME

__all__ = [
    "CHECKPOINT_NAME",
    "DivergenceError",
    "Evaluator",
    "LoopConfig",
    "MAX_SEED",
    "OVERLAP_LEARNERS",
    "Schedule",
    "StepCollector",
    "TrainingError",
]

OVERLAP_LEARNERS = ("auto", "process", "stream", "inline")
"""The values of `LoopConfig.overlap_learner` (`tritonrl.toolkit.training.overlap`)."""


class TrainingError(RuntimeError):
    """Training stopped by an error; the one-line message names the step and the last good checkpoint."""

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
        """Restore `state_dict` output."""
        ...


@dataclass(frozen=True)
class LoopConfig:
    """Settings of `run_training` (the algorithm's own settings live in the agent's config)."""

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
    overlap: bool = False
    """Act while the learner updates (off-policy agents, feed-forward PPO): acting lags learning by
    at most one ``train_freq`` interval, PPO's by one update
    (`tritonrl.toolkit.training.overlap`); not with a data-parallel
    run; a checkpoint (by steps or wall time) holds the actor's side too (exact resume)."""
    overlap_learner: str = "auto"
    """``"process"``: the learner in a child process (an agent on the CPU); ``"stream"``: in this
    process, its device work on a CUDA stream of its own (an agent on CUDA; elsewhere it is
    ``"inline"``); ``"inline"``: the same semantics in this process, synchronously (the reference
    the others are tested against); ``"auto"``: ``"stream"`` on CUDA, else ``"process"``."""

    def __post_init__(self) -> None:
        """Reject impossible settings at construction.

        Raises:
            ValueError: a field out of range (named in the message).
        """

        for name, low, high in (
            ("total_steps", 1, None),
            ("seed", 0, MAX_SEED),
            ("log_every", 1, None),
            ("eval_every", 0, None),
            ("eval_episodes", 1, None),
            ("checkpoint_every", 0, None),
            ("stop_at", 0, None),
        ):
            value = getattr(self, name)
            if name != "stop_at" or value is not None:
                check_int(f"LoopConfig.{name}", value, low=low, high=high)
        if self.overlap_learner not in OVERLAP_LEARNERS:
            raise ValueError(
                f"LoopConfig.overlap_learner must be one of {', '.join(map(repr, OVERLAP_LEARNERS))}, "
                f"got {self.overlap_learner!r}"
            )
        if self.target_return is not None:
            check_real("LoopConfig.target_return", self.target_return, nonnegative=False)


class StepCollector(Protocol):
    """Steps the env with the agent and stores what happened (e.g. ``Collector``)."""

    def step(self) -> Any:
        """One vector step; returns the env's `Transition`."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """What a resume needs (the checkpoint's ``collector`` section)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict` output; ``ValueError`` (nothing changed) on a bad one.

        An optional ``check_state_dict(state)`` lets a resume check every section before applying any.
        """
        ...


class Evaluator(Protocol):
    """An evaluation other than the gymnasium one (a market run's validation period)."""

    def evaluate_policy(
        self, policy: Callable[[torch.Tensor], torch.Tensor], episodes: int, seed: int
    ) -> dict[str, Any]:
        """Run the greedy ``policy``; return at least ``{"mean_return": float}``."""
        ...
