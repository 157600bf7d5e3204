"""Run a function on N gloo ranks in fresh processes (the tests of data-parallel training).

:func:`run_ranks` starts ``world`` processes with the environment ``torchrun`` would give them
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT`` on a free port), joins
them with :func:`tritonrl.toolkit.distributed.init_distributed` on the CPU (gloo), calls
``fn(ctx, *args)`` on each and returns the results indexed by rank. A rank that raises fails the
call with that rank's traceback; a run that does not finish in ``timeout`` seconds is killed and
fails (a hang is a failure, never a stuck CI job). ``fn`` and its results must be picklable
(a module-level function; tensors are fine).
"""

from __future__ import annotations

import os
import pickle
import queue
import socket
import traceback
from collections.abc import Callable
from typing import Any

import torch.multiprocessing as mp

__all__ = ["free_port", "run_ranks"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(rank: int, world: int, port: int, fn: Callable[..., Any], args: tuple, out: Any) -> None:
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        TRITONRL_DIST_TIMEOUT=os.environ.get("TRITONRL_DIST_TIMEOUT", "60"),
    )
    import torch

    torch.set_num_threads(1)
    from tritonrl.toolkit import distributed

    try:
        ctx = distributed.init_distributed("cpu")
        try:
            # pickled here, tensors by value: the queue's own pickler would share their storage
            # through this process, which may have exited before the parent unpickles them
            out.put((rank, True, pickle.dumps(fn(ctx, *args))))
        finally:
            distributed.shutdown()
    except BaseException:  # reported to the parent, which fails the test with it
        out.put((rank, False, traceback.format_exc()))


def run_ranks(fn: Callable[..., Any], world: int = 2, *args: Any, timeout: float = 180.0) -> list[Any]:
    """``[fn(ctx_0, *args), ..., fn(ctx_{world-1}, *args)]``, each run in its own process.

    Raises:
        AssertionError: a rank raised (its traceback is the message) or the run timed out.
    """
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=_worker, args=(r, world, port, fn, args, out), daemon=True) for r in range(world)
    ]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    try:
        for _ in range(world):
            try:
                rank, ok, value = out.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"the {world} ranks did not finish within {timeout:.0f} s") from None
            if not ok:
                raise AssertionError(f"rank {rank} raised:\n{value}")
            results[rank] = pickle.loads(value)
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return [results[r] for r in range(world)]
