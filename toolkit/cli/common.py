"""What the run commands ``train`` (:mod:`tritonrl.toolkit.cli.train`) and ``fit``
(:mod:`tritonrl.toolkit.cli.fit`) share: the flags both define the same way, their checks,
the run folder's checks and the signal handling.

Both follow one set of rules: bad input is one ``error:`` line and exit status 2 before anything
is written (:class:`UsageError`; the run folder's write probe, :func:`probe_run_dir`, last); an
existing checkpoint is never overwritten without ``--resume`` (:func:`check_no_overwrite`);
SIGINT / SIGTERM set a flag the training loop polls (:func:`stop_on_signals`), and the command
exits with 130 / 143 after saving a checkpoint (:func:`report_interrupted`).
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
from typing import Any

import torch
from tritonrl.toolkit.checks import MAX_SEED  # light: ``--help`` must not import the loop

__all__ = [
    "default_run_dir",
    "UsageError",
    "add_output_flags",
    "add_run_folder_flags",
    "add_seed_device_flags",
    "add_set_flag",
    "check_no_overwrite",
    "check_range",
    "check_run_dir_path",
    "check_threads",
    "parse_device",
    "parse_overrides",
    "probe_run_dir",
    "report_interrupted",
    "stop_on_signals",
]


class UsageError(ValueError):
    """A command-line mistake: reported as one line, exit status 2."""


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
