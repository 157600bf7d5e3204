"""A run folder's housekeeping: one writer at a time, and never two runs mixed in one folder.

`RunLock` (an ``fcntl.flock`` the OS releases however its holder exits), `move_aside` (an earlier
run's files into ``stale-<UTC time>/``, nothing deleted), and `atomic_write_text` / `save_figure`
(a kill leaves the old file or the new one). A core module: it imports no toolkit subpackage. Guide:
docs/pages/training.md ("Run folders survive kills, restarts and divergence").
"""

from __future__ import annotations

import datetime as _dt
import io
import os
import socket
from pathlib import Path
from typing import Any

from tritonrl.toolkit.checkpoint import atomic_write_bytes

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; the folder is then unguarded
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "LOCK_NAME",
    "RUN_FILES",
    "RunFolderBusy",
    "RunLock",
    "atomic_write_text",
    "move_aside",
    "save_figure",
]

LOCK_NAME = ".lock"
RUN_FILES = (
    "metrics.csv",
    "checkpoint.safetensors",
    "curve.png",
    "test_report.json",
    "equity.png",
    "events.out.tfevents.*",
)
"""Glob patterns of the files a run writes into its folder (what `move_aside` moves; the
temporary files a kill left for the plain names are removed at the next start)."""


class RunFolderBusy(RuntimeError):
    """Another process holds the run folder's lock."""


class RunLock:
    """An exclusive lock on ``<run_dir>/.lock`` (folder created), held from `acquire` to
    `release`.

    Raises:
        RunFolderBusy: (from `acquire`) another process holds it; the message names its PID, host and
            start.
        OSError: the lock file cannot be created.
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self._fd: int | None = None
        self._made: list[Path] = []  # what acquire created: the folders (outermost first), then the file

    def acquire(self) -> RunLock:
        """Take the lock or raise `RunFolderBusy` at once (never waits).

        A lock file its holder removed meanwhile is opened again, so two processes never hold two files of one
        name.
        """
        if self._fd is not None:
            return self
        made = [p for p in (self.run_dir, *self.run_dir.parents) if not p.exists()][::-1]
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for _ in range(100):  # a holder removing the file between our open and flock: open again
            fd, created = _open_lock(self.path)
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = os.read(fd, 4096).decode(errors="replace").strip() or "another process"
                    os.close(fd)
                    raise RunFolderBusy(f"{self.run_dir} is in use by {holder}") from None
                except OSError:
                    os.close(fd)
                    _remove([self.path] if created else [], made)
                    raise
            if _same_file(fd, self.path):
                break
            os.close(fd)  # the file we locked was removed by its last holder: not the lock any more
        else:
            raise RunFolderBusy(f"{self.run_dir}: its lock file keeps being replaced")
        started = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        os.ftruncate(fd, 0)
        os.write(fd, f"process {os.getpid()} on host {socket.gethostname()} (started {started})\n".encode())
        self._fd = fd
        self._made = [*made, self.path] if created else made
        return self

    def release(self, *, undo: bool = False) -> None:
        """Let the lock go; the file stays, emptied.

        ``undo``: the lock file and the folders `acquire` created go too, removed while still locked (a
        folder no longer empty stays).
        """
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        made, self._made = self._made, []
        if undo and made:
            files = [p for p in made if p == self.path]
            _remove(files, [p for p in made if p != self.path])
        else:
            try:
                os.ftruncate(fd, 0)
            except OSError:
                pass
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _open_lock(path: Path) -> tuple[int, bool]:
    """``path`` opened for reading and writing, and whether this call created it."""
    while True:
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644), True
        except FileExistsError:
            pass
        try:
            return os.open(path, os.O_RDWR), False
        except FileNotFoundError:  # removed between the two opens: create it
            continue


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def _remove(files: list[Path], folders: list[Path]) -> None:
    """Remove ``files``, then ``folders`` innermost first while they are empty (never raises)."""
    for f in files:
        try:
            f.unlink(missing_ok=True)
        except OSError:
            pass
    for d in reversed(folders):
        try:
            d.rmdir()
        except OSError:
            break


def move_aside(run_dir: str | Path, names: tuple[str, ...] = RUN_FILES) -> Path | None:
    """Move an earlier run's files (glob ``names``) into ``<run_dir>/stale-<UTC time>/``; returns it, or
    ``None``.

    Raises:
        OSError: a file cannot be moved (those moved stay in the stale folder).
    """
    run_dir = Path(run_dir)
    found = sorted({p for pattern in names for p in run_dir.glob(pattern) if p.is_file()})
    if not found:
        return None
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    dest = run_dir / f"stale-{stamp}"
    n = 1
    while dest.exists():
        n += 1
        dest = run_dir / f"stale-{stamp}-{n}"
    dest.mkdir()
    for p in found:
        os.replace(p, dest / p.name)
    return dest


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns the path.

    Raises:
        OSError: the write failed (the old file stays); the error names ``path``.
    """
    atomic_write_bytes(path, text.encode())
    return Path(path)


def save_figure(fig: Any, path: str | Path, *, dpi: int = 100) -> Path:
    """Render a matplotlib figure (format from the suffix, PNG without one) to ``path`` atomically; returns
    the path.

    Raises:
        OSError: the write failed (the old file stays); the error names ``path``.
    """
    path = Path(path)
    buf = io.BytesIO()
    fig.savefig(buf, format=path.suffix.lstrip(".").lower() or "png", dpi=dpi)
    atomic_write_bytes(path, buf.getvalue())
    return path
