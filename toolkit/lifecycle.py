"""One run's lifecycle in its folder, shared by the RL loop and the forecaster trainer.

`RunLifecycle` holds what `run_training` and `fit` share: the folder lock, fresh start or resume,
the metric flush and divergence check, the checkpoint cadence, the signal stop and the final
report. Rank 0 alone touches the folder; an error it meets there is raised on every rank. A core
module: it imports no toolkit subpackage. Guide: docs/pages/training.md ("Run folders survive
kills, restarts and divergence").
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tritonrl.toolkit.checkpoint import (
    CheckpointError,
    atomic_write_bytes,
    remove_stale_temps,
    save_checkpoint,
)
from tritonrl.toolkit.distributed import DistContext, on_main
from tritonrl.toolkit.logger import MetricLogger, repair_csv
from tritonrl.toolkit.runfolder import RUN_FILES, RunLock, move_aside

__all__ = [
    "CHECKPOINT_NAME",
    "RunLifecycle",
    "crossed",
    "first_nonfinite",
    "notice",
    "parameters",
    "seed_everything",
]

CHECKPOINT_NAME = "checkpoint.safetensors"


def notice(message: str) -> None:
    """One ``notice: ...`` line on stderr."""
    print(f"notice: {message}", file=sys.stderr, flush=True)


def seed_everything(seed: int) -> None:
    """Seed torch (CPU and CUDA), numpy's global RNG and python ``random``."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 (code that uses the global RNG)
    random.seed(seed)


def crossed(prev: int, now: int, every: int) -> bool:
    """Whether the steps from ``prev`` to ``now`` cross a multiple of ``every`` (0: never)."""
    return every > 0 and now // every > prev // every


def parameters(owner: Any) -> list[torch.Tensor]:
    """The floating-point tensors ``owner`` trains (its parameters, else its modules')."""
    params = getattr(owner, "parameters", None)
    if callable(params):
        found = list(params())
    else:
        found = [p for v in vars(owner).values() if isinstance(v, torch.nn.Module) for p in v.parameters()]
    unique = {id(p): p.detach() for p in found if isinstance(p, torch.Tensor) and p.is_floating_point()}
    return list(unique.values())


def first_nonfinite(
    means: Mapping[str, float], watch: Callable[[str], bool], params: Iterable[torch.Tensor] = ()
) -> str | None:
    """The first non-finite watched metric, else ``"parameters"`` if a tensor is, else ``None``."""
    for name, value in means.items():
        if watch(name) and not math.isfinite(value):
            return name
    by_device: dict[torch.device, list[torch.Tensor]] = {}
    for p in params:
        by_device.setdefault(p.device, []).append(p)
    for group in by_device.values():
        if not bool(torch.stack([p.isfinite().all() for p in group]).all()):
            return "parameters"
    return None


class RunLifecycle:
    """The folder side of one run; a context manager that closes the logger and releases the lock.

    Args:
        run_dir: the run folder; ``None``: nothing is written
            ([`save`][tritonrl.toolkit.lifecycle.RunLifecycle.save] refused).
        run_files: glob patterns of what an earlier run left (moved aside by a fresh start).
        checkpoint_seconds: [`due_by_time`][tritonrl.toolkit.lifecycle.RunLifecycle.due_by_time]'s period (0:
            never).
    """

    def __init__(
        self,
        run_dir: str | Path | None,
        ctx: DistContext,
        *,
        run_files: tuple[str, ...] = RUN_FILES,
        checkpoint_seconds: float = 0.0,
    ) -> None:
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.ckpt_path = self.run_dir / CHECKPOINT_NAME if self.run_dir is not None else None
        self.ctx = ctx
        self.main = ctx.is_main
        self.run_files = run_files
        self.checkpoint_seconds = checkpoint_seconds
        self.checkpoint_step: int | None = None  # step of the last checkpoint written or resumed from
        self.logger: MetricLogger | None = None
        self.t_saved = time.perf_counter()
        self._lock = RunLock(self.run_dir) if self.run_dir is not None else None
        self._opened = False  # open() prepared the folder: from then on the run has written to it

    # -- lock, fresh start or resume ---------------------------------------------------------------

    def begin(self, resume: bool, *, refuse_overwrite: str | None = None) -> bool:
        """Lock the folder (rank 0) and say whether a checkpoint is there to resume (every rank).

        Args:
            refuse_overwrite: the ``ValueError`` message when the folder holds a checkpoint and ``resume`` is
                false; ``None``: moved aside.

        Raises:
            RunFolderBusy: another process holds the folder.
            ValueError: ``refuse_overwrite`` applies.
            OSError: the lock file cannot be created.
        """
        ckpt, lock = self.ckpt_path, self._lock

        def take() -> bool:
            if ckpt is None or lock is None:
                return False
            if refuse_overwrite is not None and not resume and ckpt.exists():
                raise ValueError(refuse_overwrite)
            lock.acquire()
            return resume and ckpt.exists()

        return bool(on_main(self.ctx, take))

    def open(
        self,
        resumed_step: int | None,
        fresh_notices: Callable[[Path | None], Iterable[str]],
        *,
        tensorboard: bool = True,
    ) -> None:
        """Prepare the folder on rank 0 (fresh: move an earlier run aside; resumed: trim past
        ``resumed_step``), open the logger.

        Raises:
            CheckpointError: ``metrics.csv`` is not a metrics file.
            OSError: the folder cannot be prepared.
        """
        run_dir, ckpt = self.run_dir, self.ckpt_path
        if run_dir is None or ckpt is None:
            return

        def prepare() -> None:
            self._opened = True  # from here on the run changes the folder: its lock file stays
            for name in dict.fromkeys((ckpt.name, "metrics.csv", *self.run_files)):
                if not any(c in name for c in "*?["):  # a kill during an earlier write of that file
                    remove_stale_temps(run_dir / name)
            if resumed_step is None:
                moved = move_aside(run_dir, self.run_files)
                for line in fresh_notices(moved):
                    notice(line)
            else:
                self._trim_metrics(resumed_step)
            self.logger = MetricLogger(
                run_dir,
                tensorboard=tensorboard,
                purge_step=resumed_step + 1 if resumed_step is not None else None,
            )

        on_main(self.ctx, prepare)

    def _trim_metrics(self, step: int) -> None:
        assert self.run_dir is not None
        csv_path = self.run_dir / "metrics.csv"
        try:
            kept, damaged = repair_csv(csv_path, step)
        except ValueError as exc:
            raise CheckpointError(str(exc)) from None
        if damaged:
            notice(
                f"{csv_path}: dropped {damaged} damaged line{'s' if damaged > 1 else ''} "
                f"(kept {kept} rows up to the checkpoint's step {step})"
            )

    def resumed(self, step: int) -> None:
        """Record that the run continues from the checkpoint of ``step``."""
        self.checkpoint_step = step

    def close(self) -> None:
        """Close the logger and release the lock; a run refused before `open` leaves no lock file."""
        if self.logger is not None:
            self.logger.close()
        if self._lock is not None:
            self._lock.release(undo=not self._opened)  # a no-op on the ranks that never acquired it

    def __enter__(self) -> RunLifecycle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- metrics, divergence -----------------------------------------------------------------------

    def flush(self, step: int) -> dict[str, float]:
        """Write the logger's interval as the row of ``step``; its means (``{}`` without a logger)."""
        return self.logger.flush(step) if self.logger is not None else {}

    def kept(self) -> str:
        """What a run stopped now leaves: the last good checkpoint, or why there is none."""
        if self.ckpt_path is None:
            return "no run folder, nothing saved"
        if self.checkpoint_step is None:
            return "no checkpoint was written"
        return f"the last good checkpoint (step {self.checkpoint_step}) is kept"

    # -- cadence, checkpoint, stop -----------------------------------------------------------------

    def due_by_time(self, now: float | None = None) -> bool:
        """Whether ``checkpoint_seconds`` of wall time passed since the last save (this rank's clock)."""
        now = time.perf_counter() if now is None else now
        return (
            self.ckpt_path is not None
            and self.checkpoint_seconds > 0
            and now - self.t_saved >= self.checkpoint_seconds
        )

    def save(self, step: int, state: Callable[[], Mapping[str, Any]]) -> None:
        """Write ``state()`` (built on rank 0 alone) as the checkpoint of ``step``, atomically.

        Raises:
            ValueError: the run has no folder.
            OSError: the write failed, on every rank (the previous checkpoint stays).
        """
        ckpt = self.ckpt_path
        if ckpt is None:
            raise ValueError("a checkpoint needs a run folder")

        def write() -> None:
            remove_stale_temps(ckpt)  # a kill during an earlier save (the folder lock makes this safe)
            save_checkpoint(ckpt, state())

        on_main(self.ctx, write)
        self.checkpoint_step = step
        self.t_saved = time.perf_counter()

    def stop_requested(self, should_stop: Callable[[], bool] | None) -> bool:
        """``should_stop()`` (a signal handler's flag), true on every rank when set on any."""
        asked = should_stop is not None and bool(should_stop())
        return self.ctx.any(asked) if self.ctx.enabled else asked

    # -- the report --------------------------------------------------------------------------------

    def written(self) -> str | None:
        """The checkpoint's path if this run wrote or resumed one, else ``None`` (every rank)."""
        if self.ckpt_path is None:
            return None
        if self.main:
            return str(self.ckpt_path) if self.ckpt_path.exists() else None
        return str(self.ckpt_path) if self.checkpoint_step is not None else None  # rank 0's folder

    def write_report(self, name: str, report: Mapping[str, Any]) -> None:
        """Write ``report`` as ``<run_dir>/<name>`` (indented JSON, atomically) on rank 0."""
        if self.run_dir is None or not self.main:
            return
        atomic_write_bytes(self.run_dir / name, json.dumps(report, indent=2).encode())
