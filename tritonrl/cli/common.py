"""What the run commands ``train`` (:mod:`tritonrl.cli.train`) and ``fit``
(:mod:`tritonrl.cli.fit`) share: the flags both define the same way, their checks,
the run folder's checks and the signal handling.

Both follow one set of rules: bad input is one ``error:`` line and exit status 2 before anything
is written (:class:`UsageError`; the run folder's write probe, :func:`probe_run_dir`, last); an
empty or impossible ``--run-dir`` is refused (:func:`run_dir_from_flag`); what would not fit in
memory is refused before it is allocated (:func:`check_fits`, :func:`count_parameters`, and
:func:`refuse_failed_allocation` for what no estimate foresaw); an
existing checkpoint is never overwritten without ``--resume`` (:func:`check_no_overwrite`);
SIGINT / SIGTERM set a flag the training loop polls (:func:`stop_on_signals`), and the command
exits with 130 / 143 after saving a checkpoint (:func:`report_interrupted`). Under ``torchrun``,
every rank leaves the process group together and ends there (:func:`end_rank`).
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
    """Add ``--seed`` (default 1), ``--device`` (default cpu) and ``--threads`` (default 1) to ``p``.

    Checked by :func:`check_range` (``--seed`` against ``MAX_SEED``), :func:`parse_device` and
    :func:`check_threads`.
    """
    p.add_argument("--seed", type=int, default=1, help=f"0 to {MAX_SEED} (default 1)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default cpu)")
    p.add_argument("--threads", type=int, default=1, help=threads_help)


def add_run_folder_flags(p: argparse.ArgumentParser, *, default: str, resume_help: str) -> None:
    """Add ``--run-dir`` (default ``None``: the command's ``default`` folder, named in its help) and
    ``--resume`` to ``p``."""
    p.add_argument("--run-dir", default=None, help=f"output folder (default {default})")
    p.add_argument("--resume", action="store_true", help=resume_help)


def add_set_flag(p: argparse.ArgumentParser, *, help: str) -> None:
    """Add the repeatable ``--set KEY=VALUE`` (into ``args.overrides``, a list; parsed by
    :func:`parse_overrides`) to ``p``."""
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
    """``runs/<parts joined by "-">`` with every character outside ``[A-Za-z0-9._-]`` made ``_``
    (an env id such as ``ALE/Pong-v5`` or ``market:synthetic,ar=0.3`` becomes one plain folder name)."""
    return Path("runs") / re.sub(r"[^A-Za-z0-9._-]", "_", "-".join(parts))


def parse_overrides(items: list[str]) -> dict[str, str]:
    """``--set KEY=VALUE`` items as ``{KEY: VALUE}`` (both stripped; a later key wins).

    Raises:
        UsageError: an item without ``=`` or with an empty key.
    """
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
    """``--threads`` lies between 1 and this machine's CPU count.

    Raises:
        UsageError: outside that range.
    """
    check_range("--threads", value, 1, os.cpu_count() or 1, " (the CPU count of this machine)")


# ----------------------------------------------------------------------------- the run folder


def check_run_dir_path(name: str) -> None:
    """``--run-dir`` names a folder or a path that can become one (no writes: see :func:`probe_run_dir`).

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
    """The run folder of ``--run-dir value`` (``None``: not given, ``default``), checked by
    :func:`check_run_dir_path` on the text as typed (``Path("")`` would be the current folder).

    Raises:
        UsageError: empty, a NUL character, a file (or a path under one), or not searchable.
    """
    text = value if value is not None else str(default)
    check_run_dir_path(text)
    return Path(text)


def probe_run_dir(run_dir: Path) -> None:
    """Create ``run_dir`` and write, fsync and remove a probe file in it; undo the folders made on failure.

    A read-only folder (EROFS, or EACCES for a non-root user), a full disk (ENOSPC, often reported
    only at fsync) or a path under a file fails here, before training, with nothing left behind.
    As root, permission bits do not stop writes, so a chmod-ed folder is writable for root.

    Raises:
        UsageError: the folder cannot be created or written.
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
    """Whether the checkpoint ``ckpt`` exists (then ``--resume`` continues it).

    Raises:
        UsageError: it exists and ``resume`` is false (a checkpoint is never overwritten).
    """
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
"""Most parameter and buffer tensors :func:`count_parameters` lets a model register (a deep
Transformer has a few thousand): past it a layer count is a typo, and building on, even on the meta
device, would take minutes."""


class _TooManyTensors(Exception):
    pass


def count_parameters(build: Callable[[torch.device], torch.nn.Module], what: str) -> int | None:
    """The number of parameter and buffer elements of ``build(torch.device("meta"))``: shapes only,
    no memory (a ``--set hidden=10000000000`` model costs nothing to count).

    Returns ``None`` when the model cannot be built on the meta device for another reason than
    its arguments (the real build then says what it says).

    Raises:
        UsageError: ``what: ...`` for arguments the build refuses (``TypeError``, ``ValueError``),
            a tensor of more elements than an int64 counts, or more than
            :data:`MAX_PARAMETER_TENSORS` tensors (the build is stopped there).
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
    """Refuse, before allocating, ``device_parts`` (bytes on ``device``) and ``host_parts`` (bytes
    in host memory) that do not fit in the free memory (one check of both on a CPU device).

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
    """Turn an allocation that fails inside the block (``MemoryError``, torch's out-of-memory error
    or its CPU allocator's ``RuntimeError``) into a :class:`UsageError`: what no estimate foresaw is
    still refused in one line, before anything is written. Other exceptions pass.

    Raises:
        UsageError: ``"<what> needs X for one allocation on cpu; this machine has Y available"``.
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
    """SIGINT and SIGTERM set a flag (polled by the loop) instead of killing the process.

    Yields ``(should_stop, received)``; the previous handlers come back on exit. Outside the main
    thread (where Python cannot install handlers) nothing is installed.
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
    """Print the one line of a run stopped by a signal (``received`` from :func:`stop_on_signals`;
    SIGINT when empty) after saving ``checkpoint`` at ``step``; the exit status ``128 + signum``."""
    signum = received[0] if received else signal.SIGINT
    print(
        f"interrupted by {signal.Signals(signum).name} at step {step}: checkpoint "
        f"saved to {checkpoint}; continue with --resume",
        file=sys.stderr,
    )
    return 128 + int(signum)


def end_rank(ctx: DistContext, body: Callable[[], int]) -> NoReturn:
    """Run ``body()`` (a command on one rank of a ``torchrun`` launch, ``ctx`` its joined
    :class:`~tritonrl.toolkit.distributed.DistContext`), leave the process group, and end the
    process with ``body``'s exit status.

    An outcome every rank shares (any status but 1) leaves together: a barrier first, because a
    rank that tears the group down while another still sends to it can abort in gloo's threads.
    The process then ends with ``os._exit``: gloo's threads can also abort the interpreter's
    normal exit (SIGABRT, "terminate called without an active exception"), which would replace
    the status. Whatever ``body`` wrote is closed by then; the standard streams are flushed here.
    A ``KeyboardInterrupt`` ends with 130, an unexpected exception with its traceback and 1.
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
