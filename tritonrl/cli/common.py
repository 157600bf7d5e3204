"""What ``train`` and ``fit`` share: their common flags, the checks of input, memory and run
folder, and the signal handling.

Bad input is one ``error:`` line and exit status 2 before anything is written; SIGINT / SIGTERM
save a checkpoint and exit with 130 / 143. See docs/pages/training.md, "Command line".
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import torch
from tritonrl.toolkit.checks import MAX_SEED  # light: ``--help`` must not import the loop

if TYPE_CHECKING:
    from tritonrl.toolkit.distributed import DistContext

__all__ = [
    "default_run_dir",
    "UsageError",
    "add_output_flags",
    "add_run_folder_flags",
    "add_seed_device_flags",
    "add_set_flag",
    "check_no_overwrite",
    "check_fits",
    "check_range",
    "check_run_dir_path",
    "check_threads",
    "count_parameters",
    "end_rank",
    "parse_device",
    "parse_overrides",
    "plain",
    "probe_run_dir",
    "refuse_failed_allocation",
    "report_interrupted",
    "run_dir_from_flag",
    "stop_on_signals",
]


class UsageError(ValueError):
    """A command-line mistake: reported as one line, exit status 2."""


_ROLE = re.compile(r":[a-z]+:`(~?)([^`]+)`")


def plain(text: str) -> str:
    """``text`` (a docstring line) without its reST markup, for ``--help`` and listings: a role
    keeps its target (``~`` its last part), double backticks are dropped."""
    text = _ROLE.sub(lambda m: m.group(2).rpartition(".")[2] if m.group(1) else m.group(2), text)
    return text.replace("``", "")


# ----------------------------------------------------------------------------- the shared flags


def add_seed_device_flags(p: argparse.ArgumentParser, *, threads_help: str) -> None:
    """Add ``--seed`` (default 1), ``--device`` (default cpu) and ``--threads`` (default 1) to ``p``."""
    p.add_argument("--seed", type=int, default=1, help=f"0 to {MAX_SEED} (default 1)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default cpu)")
    p.add_argument("--threads", type=int, default=1, help=threads_help)


def add_run_folder_flags(p: argparse.ArgumentParser, *, default: str, resume_help: str) -> None:
    """Add ``--run-dir`` (default ``None``: the command's ``default`` folder) and ``--resume`` to ``p``."""
    p.add_argument("--run-dir", default=None, help=f"output folder (default {default})")
    p.add_argument("--resume", action="store_true", help=resume_help)


def add_set_flag(p: argparse.ArgumentParser, *, help: str) -> None:
    """Add the repeatable ``--set KEY=VALUE`` (into ``args.overrides``) to ``p``."""
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=help,
    )


def add_output_flags(p: argparse.ArgumentParser) -> None:
    """Add ``--no-progress`` and ``--no-tensorboard`` to ``p``."""
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-tensorboard", action="store_true", help="metrics.csv only")


# ----------------------------------------------------------------------------- checks


def default_run_dir(*parts: str) -> Path:
    """``runs/<parts joined by "-">``, every character outside ``[A-Za-z0-9._-]`` made ``_``."""
    return Path("runs") / re.sub(r"[^A-Za-z0-9._-]", "_", "-".join(parts))


def parse_overrides(items: list[str]) -> dict[str, str]:
    """``--set KEY=VALUE`` items as ``{KEY: VALUE}`` (a later key wins); `UsageError` if malformed."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def parse_device(name: str) -> torch.device:
    """``--device``: ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (CUDA when available) as a device.

    Raises:
        UsageError: not a device, another device type, or CUDA (or that index) not available.
    """
    supported = "supported: cpu, cuda, cuda:N, auto"
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device {name!r} is not a device ({supported})") from None
    if dev.type == "cpu" and dev.index in (None, 0):
        return torch.device("cpu")
    if dev.type != "cuda":
        raise UsageError(f"--device {name!r} is not supported ({supported})")
    if not torch.cuda.is_available():
        raise UsageError(f"--device {name!r}: CUDA is not available on this machine")
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise UsageError(f"--device {name!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return dev


def check_range(flag: str, value: int | None, lo: int, hi: int | None = None, why: str = "") -> None:
    """``value`` (``None``: not given, the default applies) must lie in ``[lo, hi]``.

    Raises:
        UsageError: ``flag must be >= lo`` / ``between lo and hi``, then ``why``.
    """
    if value is None:
        return
    if value < lo or (hi is not None and value > hi):
        bound = f">= {lo}" if hi is None else f"between {lo} and {hi}"
        raise UsageError(f"{flag} must be {bound}{why}, got {value}")


def check_threads(value: int) -> None:
    """``--threads`` lies between 1 and this machine's CPU count, else `UsageError`."""
    check_range("--threads", value, 1, os.cpu_count() or 1, " (the CPU count of this machine)")


# ----------------------------------------------------------------------------- the run folder


def load_run_agent(run_dir: Path, device: str) -> tuple[Any, dict[str, Any]]:
    """The agent of ``run_dir``'s checkpoint, rebuilt on ``device``, and the checkpoint's state
    (its ``meta`` names the preset and env).

    Raises:
        ValueError: no such folder, no checkpoint in it, a checkpoint of no training run, or a preset
            the registry lacks.
        CheckpointError: a damaged checkpoint.
    """
    from tritonrl.cli.registry import get_agent
    from tritonrl.toolkit.checkpoint import load_checkpoint
    from tritonrl.toolkit.lifecycle import CHECKPOINT_NAME

    ckpt = run_dir / CHECKPOINT_NAME
    if not run_dir.is_dir():
        raise ValueError(f"{run_dir}: no such run folder")
    if not ckpt.is_file():
        raise ValueError(f"{run_dir}: no {CHECKPOINT_NAME} (train into it first, or name another run folder)")
    state = load_checkpoint(ckpt)
    if not isinstance(state, dict) or "agent" not in state or not isinstance(state.get("meta"), dict):
        raise ValueError(f"{ckpt}: not a training-run checkpoint (no agent and meta sections)")
    name = state["meta"].get("agent")
    if not isinstance(name, str):
        raise ValueError(f"{ckpt}: the checkpoint names no agent (not a run folder of `tritonrl train`)")
    agent_class: Any = get_agent(name).agent  # an AgentBase subclass (its classmethod load)
    return agent_class.load(ckpt, device=device), state


def check_run_dir_path(name: str) -> None:
    """``--run-dir`` names a folder or a path that can become one (no writes).

    Raises:
        UsageError: empty, a NUL character, a file (or a path under one), or not searchable.
    """
    if not name.strip():
        raise UsageError("--run-dir must not be empty")
    if "\0" in name:
        raise UsageError(f"--run-dir {name!r} contains a NUL character")
    path = Path(name)
    try:
        for p in (path, *path.parents):
            if p.exists() or p.is_symlink():
                if not p.is_dir():
                    what = "is" if p == path else f"is under {p}, which is"
                    raise UsageError(f"--run-dir {name} {what} not a folder")
                return
    except OSError as exc:  # e.g. a parent folder that may not be searched
        raise UsageError(f"--run-dir {name} cannot be checked: {exc.strerror or exc}") from None


def run_dir_from_flag(value: str | None, default: Path) -> Path:
    """The run folder of ``--run-dir value`` (``None``: ``default``), see `check_run_dir_path`."""
    text = value if value is not None else str(default)
    check_run_dir_path(text)
    return Path(text)


def probe_run_dir(run_dir: Path) -> None:
    """Create ``run_dir`` and write, fsync and remove a probe file in it; undo the folders made on failure.

    Raises:
        UsageError: the folder cannot be created or written (read-only, full disk, under a file).
    """
    made = [p for p in (run_dir, *run_dir.parents) if not p.exists()][::-1]  # outermost first
    probe = run_dir / f".write-probe-{os.getpid()}"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"tritonrl write probe\n")
            os.fsync(fd)
        finally:
            os.close(fd)
    except (OSError, ValueError) as exc:
        reasons: dict[int | None, str] = {
            errno.ENOSPC: "the disk is full",
            errno.EDQUOT: "the disk quota is exceeded",
            errno.EROFS: "the file system is read-only",
            errno.EACCES: "permission denied",
            errno.EPERM: "permission denied",
            errno.ENOTDIR: "a part of the path is a file",
            errno.EEXIST: "a part of the path is a file",
        }
        reason = reasons.get(getattr(exc, "errno", None), getattr(exc, "strerror", None) or str(exc))
        _undo(probe, made)
        raise UsageError(f"--run-dir {run_dir} is not writable: {reason}") from None
    _undo(probe, [])


def _undo(probe: Path, made: list[Path]) -> None:
    try:
        probe.unlink(missing_ok=True)
    except OSError:
        pass
    for p in reversed(made):  # innermost first; rmdir only removes an empty folder
        try:
            p.rmdir()
        except OSError:
            break


def check_no_overwrite(ckpt: Path, resume: bool) -> bool:
    """Whether the checkpoint ``ckpt`` exists; `UsageError` if it does and ``resume`` is false."""
    if not ckpt.exists():
        return False
    if not resume:
        raise UsageError(
            f"{ckpt.parent} already holds a checkpoint: pass --resume to continue it, or "
            "choose another --run-dir"
        )
    return True


# ----------------------------------------------------------------------------- memory

MAX_PARAMETER_TENSORS = 10_000
"""Most parameter and buffer tensors `count_parameters` lets a model register (a deep
Transformer has a few thousand): past it a layer count is a typo, and building on, even on the meta
device, would take minutes."""


class _TooManyTensors(Exception):
    pass


def count_parameters(build: Callable[[torch.device], torch.nn.Module], what: str) -> int | None:
    """The number of parameter and buffer elements of ``build(torch.device("meta"))``: shapes only,
    no memory. ``None`` when the meta build fails for another reason than its arguments.

    Raises:
        UsageError: arguments the build refuses, a tensor over int64 elements, or more than
            `MAX_PARAMETER_TENSORS` tensors.
    """
    from torch.nn.modules.module import (
        register_module_buffer_registration_hook,
        register_module_parameter_registration_hook,
    )

    registered = 0

    def count(module: torch.nn.Module, name: str, tensor: Any) -> None:
        nonlocal registered
        del module, name, tensor
        registered += 1
        if registered > MAX_PARAMETER_TENSORS:
            raise _TooManyTensors

    hooks = [
        register_module_parameter_registration_hook(count),
        register_module_buffer_registration_hook(count),
    ]
    try:
        model = build(torch.device("meta"))
    except _TooManyTensors:
        raise UsageError(
            f"{what}: more than {MAX_PARAMETER_TENSORS:,} parameter tensors (a layer count that large "
            "cannot train)"
        ) from None
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{what}: {exc}") from None
    except RuntimeError as exc:
        if "overflow" in str(exc):  # more elements than an int64 counts: no machine holds it
            raise UsageError(f"{what}: a tensor too large to exist ({exc})") from None
        return None  # an op the meta device lacks: no estimate
    except Exception:  # the same: no estimate
        return None
    finally:
        for hook in hooks:
            hook.remove()
    return sum(t.numel() for t in (*model.parameters(), *model.buffers()))


def check_fits(
    what: str, device_parts: dict[str, int], host_parts: dict[str, int], device: torch.device
) -> None:
    """Refuse, before allocating, ``device_parts`` and ``host_parts`` (bytes) that do not fit in free memory.

    Raises:
        UsageError: ``"<what> needs X (part a, ...) on cpu; this machine has Y available"``.
    """
    from tritonrl.toolkit.checks import check_memory

    try:
        if device.type == "cpu":
            check_memory(what, {**host_parts, **device_parts}, device)
        else:
            check_memory(what, host_parts, "cpu")
            check_memory(what, device_parts, device)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


_ASKED = re.compile(
    r"tried to allocate (\d+ bytes|[\d.]+ [KMGTP]i?B)|unable to allocate ([\d.]+ [KMGTP]i?B)", re.IGNORECASE
)


@contextmanager
def refuse_failed_allocation(what: str, device: torch.device) -> Iterator[None]:
    """Turn an allocation that fails inside the block (``MemoryError``, CUDA or CPU out-of-memory)
    into a `UsageError`; other exceptions pass.
    """
    from tritonrl.toolkit.checks import available_memory, format_bytes

    try:
        yield
    except (MemoryError, RuntimeError) as exc:
        text = str(exc)
        if not isinstance(exc, (MemoryError, torch.cuda.OutOfMemoryError)) and not (
            "can't allocate memory" in text or "out of memory" in text
        ):
            raise
        found = _ASKED.search(text)
        asked = next((g for g in found.groups() if g), "") if found else ""
        if asked.endswith(" bytes"):
            asked = format_bytes(int(asked.split()[0]))
        free = available_memory(device)
        where = "this machine" if device.type == "cpu" else str(device)
        has = (
            f"{where} has {format_bytes(free)} available" if free is not None else f"{where} is out of memory"
        )
        need = f"needs {asked} for one allocation" if asked else "does not fit in memory"
        raise UsageError(f"{what} {need} on {device.type}; {has}") from None


# ----------------------------------------------------------------------------- signals


@contextmanager
def stop_on_signals() -> Iterator[tuple[Callable[[], bool], list[int]]]:
    """SIGINT and SIGTERM set a flag the loop polls; yields ``(should_stop, received)``.

    The previous handlers come back on exit; outside the main thread nothing is installed.
    """
    event = threading.Event()
    received: list[int] = []

    def handler(signum: int, frame: object) -> None:
        del frame
        received.append(signum)  # a second signal while saving just lands here: the save completes
        event.set()

    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handler)
    try:
        yield event.is_set, received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)


def report_interrupted(received: list[int], step: int, checkpoint: Any) -> int:
    """Print the one line of a run stopped by a signal (``received`` from `stop_on_signals`;
    SIGINT when empty) after saving ``checkpoint`` at ``step``; the exit status ``128 + signum``."""
    signum = received[0] if received else signal.SIGINT
    print(
        f"interrupted by {signal.Signals(signum).name} at step {step}: checkpoint "
        f"saved to {checkpoint}; continue with --resume",
        file=sys.stderr,
    )
    return 128 + int(signum)


def end_rank(ctx: DistContext, body: Callable[[], int]) -> NoReturn:
    """Run ``body()`` on one ``torchrun`` rank, leave the process group and end with its exit status.

    A status every rank shares (any but 1) passes a barrier first, and the process ends with
    ``os._exit``: gloo's threads can abort a normal teardown and replace the status.
    ``KeyboardInterrupt`` ends with 130, an unexpected exception with its traceback and 1.
    """
    import traceback

    from tritonrl.toolkit import distributed

    status = 1
    try:
        status = body()
        if status != 1:
            ctx.barrier()
    except KeyboardInterrupt:
        status = 130
    except BaseException:  # a bug, or the group failing as the ranks leave: the traceback, status 1
        traceback.print_exc()
        status = 1
    finally:
        try:
            distributed.shutdown()
        except Exception:  # a broken group may refuse to be destroyed: the process ends anyway
            pass
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
