"""Data-parallel training on ``torch.distributed``: one process per device, launched by ``torchrun``.

[`init_distributed`][tritonrl.toolkit.distributed.init_distributed] joins the process group (NCCL on CUDA,
gloo on a CPU) and returns the process's [`DistContext`][tritonrl.toolkit.distributed.DistContext]: rank,
world size, the collectives and the checks every rank must agree on. A single process gets
[`SINGLE_PROCESS`][tritonrl.toolkit.distributed.SINGLE_PROCESS], whose collectives return at once. Imports
torch only. Guide: docs/pages/scaling.md.
"""

from __future__ import annotations

import datetime
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

__all__ = [
    "AGREED_ERRORS",
    "DEFAULT_TIMEOUT_S",
    "SINGLE_PROCESS",
    "DistContext",
    "DistributedError",
    "current",
    "init_distributed",
    "launched_by_torchrun",
    "on_main",
    "picklable_error",
    "shutdown",
]

DEFAULT_TIMEOUT_S = 300.0
"""Seconds a collective waits for the other ranks (``TRITONRL_DIST_TIMEOUT`` overrides it)."""


class DistributedError(RuntimeError):
    """A data-parallel run that cannot go on (ranks disagree, an uneven split, an incomplete launch)."""


@dataclass(frozen=True)
class DistContext:
    """The process's place in a data-parallel run.

    Attributes:
        local_rank: the rank on this node (the CUDA device index of a GPU rank).
        backend: ``"nccl"``, ``"gloo"``, or ``None`` for a single process.
        device: the device this rank trains on.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def enabled(self) -> bool:
        """True when collectives reach other processes (``world_size > 1``)."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """True on rank 0: the process that writes the run folder."""
        return self.rank == 0

    # -- collectives -------------------------------------------------------------------------------

    def all_reduce_mean_(self, tensors: Sequence[torch.Tensor | None]) -> None:
        """Average ``tensors`` across ranks in place: one flat all-reduce per (device, dtype), in f32, no host
        read.

        Every rank passes the same shapes in the same order; ``None`` entries are skipped.

        Raises:
            TypeError: a tensor is not floating point.
        """
        if not self.enabled:
            return
        groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
        for t in tensors:
            if t is None:
                continue
            if not t.is_floating_point():
                raise TypeError(f"all_reduce_mean_ averages floating-point tensors, got {t.dtype}")
            groups.setdefault((t.device, t.dtype), []).append(t)
        for group in groups.values():
            flat = torch.cat([t.detach().reshape(-1).float() for t in group])
            dist.all_reduce(flat)
            flat.div_(self.world_size)
            offset = 0
            with torch.no_grad():
                for t in group:
                    n = t.numel()
                    t.copy_(flat[offset : offset + n].view_as(t))
                    offset += n

    def all_reduce_sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` across ranks in place and return it (no host read)."""
        if self.enabled:
            dist.all_reduce(tensor)
        return tensor

    def broadcast_tensors_(self, tensors: Sequence[torch.Tensor]) -> None:
        """Overwrite ``tensors`` on every rank with rank 0's values, in place."""
        if not self.enabled:
            return
        with torch.no_grad():
            for t in tensors:
                dist.broadcast(t.data if isinstance(t, torch.nn.Parameter) else t, src=0)

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's ``obj`` (picklable) on every rank."""
        if not self.enabled:
            return obj
        box = [obj if self.is_main else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def all_gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (picklable), indexed by rank."""
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def gather_objects(self, obj: Any) -> list[Any] | None:
        """Every rank's picklable ``obj`` on rank 0 (``None`` elsewhere); move tensors to the CPU first."""
        if not self.enabled:
            return [obj]
        out: list[Any] | None = [None] * self.world_size if self.is_main else None
        dist.gather_object(obj, out, dst=0)
        return out

    def scatter_objects(self, objs: Sequence[Any] | None) -> Any:
        """``objs[rank]`` on every rank: rank 0 passes one picklable object per rank (else ``ValueError``)."""
        if self.is_main and (objs is None or len(objs) != self.world_size):
            raise ValueError(
                f"scatter_objects needs {self.world_size} objects on rank 0, got "
                f"{None if objs is None else len(objs)}"
            )
        if not self.enabled:
            assert objs is not None
            return objs[0]
        box: list[Any] = [None]
        dist.scatter_object_list(box, list(objs) if self.is_main and objs is not None else None, src=0)
        return box[0]

    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on any rank (one small all-reduce)."""
        if not self.enabled:
            return flag
        t = torch.tensor([1.0 if flag else 0.0], device=self.device)
        dist.all_reduce(t)
        return bool(t.item() > 0)

    def barrier(self) -> None:
        """Wait until every rank arrives here."""
        if self.enabled:
            dist.barrier()

    # -- checks ------------------------------------------------------------------------------------

    def check_same(self, what: str, value: Any) -> None:
        """Raise on every rank unless every rank passes an equal ``value`` (compared as JSON).

        Raises:
            DistributedError: ``"<what> differs across ranks: rank 0 has ...; rank 1 has ..."``.
        """
        if not self.enabled:
            return
        mine = json.dumps(value, sort_keys=True, default=repr)
        seen = self.all_gather_objects(mine)
        if any(s != seen[0] for s in seen):
            differ = [r for r, s in enumerate(seen) if s != seen[0]]
            keys = _differing_keys(seen[0], seen[differ[0]])
            if keys:  # mappings: name the entries that differ, not the first characters of each
                ranks = [0, *differ[:2]]
                shown = "; ".join(
                    f"{k}: " + ", ".join(f"rank {r} has {_brief(_entry(seen[r], k), 60)}" for r in ranks)
                    for k in keys[:3]
                )
            else:
                shown = "; ".join(f"rank {r} has {_brief(seen[r])}" for r in [0, *differ[:2]])
            raise DistributedError(f"{what} differs across ranks: {shown}")

    def shard(self, total: int, what: str) -> int:
        """``total / world_size``: each rank's share of a global count.

        Raises:
            DistributedError: ``total`` is not divisible by the world size.
        """
        if total % self.world_size:
            raise DistributedError(
                f"{what}={total} is not divisible by the world size {self.world_size}: "
                f"use a multiple of {self.world_size} (each of the {self.world_size} ranks takes an "
                "equal share)"
            )
        return total // self.world_size


SINGLE_PROCESS = DistContext()
"""The context of a run in one process: every collective returns at once."""

_current: DistContext = SINGLE_PROCESS


def _brief(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _differing_keys(a: str, b: str) -> list[str]:
    """The keys whose values differ between two JSON objects (sorted); ``[]`` unless both are."""
    x, y = json.loads(a), json.loads(b)
    if not (isinstance(x, dict) and isinstance(y, dict)):
        return []
    return sorted(k for k in x.keys() | y.keys() if k not in x or k not in y or x[k] != y[k])


def _entry(text: str, key: str) -> str:
    """Entry ``key`` of a JSON object, as JSON (``<absent>`` when missing)."""
    value = json.loads(text)
    return json.dumps(value[key], sort_keys=True) if key in value else "<absent>"


def launched_by_torchrun() -> bool:
    """True when the launch environment (``torchrun``) asks for more than one process."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


def _env_int(name: str) -> int:
    raw = os.environ.get(name)
    if raw is None:
        raise DistributedError(
            f"{name} is not set: start data-parallel runs with torchrun "
            "(torchrun --nproc-per-node N -m tritonrl train ...)"
        )
    try:
        return int(raw)
    except ValueError:
        raise DistributedError(f"{name}={raw!r} is not an integer") from None


def _timeout(timeout_s: float | None) -> float:
    if timeout_s is None:
        raw = os.environ.get("TRITONRL_DIST_TIMEOUT")
        try:
            timeout_s = float(raw) if raw is not None else DEFAULT_TIMEOUT_S
        except ValueError:
            raise DistributedError(f"TRITONRL_DIST_TIMEOUT={raw!r} is not a number of seconds") from None
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise DistributedError(
            f"the collective timeout must be a finite number of seconds > 0, got {timeout_s}"
        )
    return timeout_s


def init_distributed(
    device: torch.device | str | None = None, *, timeout_s: float | None = None
) -> DistContext:
    """Join the process group ``torchrun`` describes (once) and return this process's context.

    Without a multi-process launch: [`SINGLE_PROCESS`][tritonrl.toolkit.distributed.SINGLE_PROCESS] on
    ``device``.

    Args:
        device: ``"cpu"``, ``"cuda"``, ``"auto"`` or ``None``; ``cuda:N`` only with ``N`` the local rank.
        timeout_s: a collective's wait (default ``TRITONRL_DIST_TIMEOUT`` or
            [`DEFAULT_TIMEOUT_S`][tritonrl.toolkit.distributed.DEFAULT_TIMEOUT_S]).

    Raises:
        DistributedError: an incomplete launch, too few GPUs, ``cuda:N`` not the local rank, a bad timeout.
    """
    global _current
    if dist.is_available() and dist.is_initialized() and _current.enabled:
        return _current
    name = "auto" if device is None else str(device)
    if not launched_by_torchrun():
        if name == "auto":
            name = "cuda" if torch.cuda.is_available() else "cpu"
        dev = torch.device(name)
        _current = DistContext(device=dev)
        return _current
    if not dist.is_available():
        raise DistributedError("this torch build has no torch.distributed support")
    rank, world, local = _env_int("RANK"), _env_int("WORLD_SIZE"), _env_int("LOCAL_RANK")
    timeout = _timeout(timeout_s)
    asked = torch.device(name) if name != "auto" else None
    use_cuda = torch.cuda.is_available() if asked is None else asked.type == "cuda"
    if use_cuda:
        if asked is not None and asked.index is not None and asked.index != local:
            raise DistributedError(
                f"--device {name} on local rank {local}: each rank trains on cuda:<LOCAL_RANK>; "
                "give --device cuda (or auto) and choose GPUs with CUDA_VISIBLE_DEVICES"
            )
        if local >= torch.cuda.device_count():
            raise DistributedError(
                f"local rank {local} needs cuda:{local}, but this machine has "
                f"{torch.cuda.device_count()} CUDA device(s): use --nproc-per-node "
                f"{torch.cuda.device_count()} or fewer"
            )
        torch.cuda.set_device(local)
        dev, backend = torch.device("cuda", local), "nccl"
    else:
        dev, backend = torch.device("cpu"), "gloo"
    kwargs: dict[str, Any] = {"backend": backend, "timeout": datetime.timedelta(seconds=timeout)}
    if backend == "nccl":
        kwargs["device_id"] = dev  # binds the communicator to this rank's GPU
    dist.init_process_group(**kwargs)
    _current = DistContext(rank=rank, world_size=world, local_rank=local, backend=backend, device=dev)
    return _current


AGREED_ERRORS: tuple[type[BaseException], ...] = (ValueError, RuntimeError, OSError)
"""What `on_main` sends from rank 0 to every rank (usage errors, failed reads and writes);
other exceptions are bugs and stay on rank 0 (the others then fail at their next collective)."""


def on_main(ctx: DistContext, fn: Callable[[], Any]) -> Any:
    """``fn()`` run on rank 0 alone, its picklable result returned on every rank (one broadcast).

    An error of [`AGREED_ERRORS`][tritonrl.toolkit.distributed.AGREED_ERRORS] that ``fn`` raises is raised on
    every rank, so no rank goes on alone.
    """
    if not ctx.enabled:
        return fn()
    outcome: tuple[bool, Any] | None = None
    error: BaseException | None = None
    if ctx.is_main:
        try:
            outcome = (True, fn())
        except AGREED_ERRORS as exc:
            error = exc
            outcome = (False, picklable_error(exc))
    outcome = ctx.broadcast_object(outcome)
    assert outcome is not None
    ok, value = outcome
    if ok:
        return value
    raise error if error is not None else value


def picklable_error(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a ``RuntimeError`` with its first line."""
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        text = str(exc).strip()
        return RuntimeError(text.splitlines()[0] if text else type(exc).__name__)


def current() -> DistContext:
    """The context `init_distributed` set up in this process (`SINGLE_PROCESS` before)."""
    return _current


def shutdown() -> None:
    """Leave the process group (if joined) and return to `SINGLE_PROCESS`."""
    global _current
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _current = SINGLE_PROCESS
