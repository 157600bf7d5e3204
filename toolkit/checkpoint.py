"""Checkpoints: one safetensors file holding the tensors and, in its header, a JSON tree.

Atomic writes, no pickle, crc32 of the header and every tensor; a bad file is one
[`CheckpointError`][tritonrl.toolkit.checkpoint.CheckpointError] line. What a training run keeps in one (its
sections, RNG states, checked loads into modules) is [`tritonrl.toolkit.runstate`][tritonrl.toolkit.runstate].
A core module. Guide: docs/pages/checkpoints.md.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import struct
import tempfile
import zlib
from collections.abc import Mapping
from glob import escape as glob_escape
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

__all__ = [
    "atomic_write_bytes",
    "brief",
    "cut",
    "FORMAT",
    "MAX_HEADER_BYTES",
    "VERSION",
    "CheckpointError",
    "checksum",
    "load_checkpoint",
    "remove_stale_temps",
    "save_checkpoint",
]

FORMAT = "tritonrl-checkpoint"
VERSION = 1
_META_KEY = "tritonrl"
_SUMS_KEY = "tritonrl.crc32"  # {"header": crc of the _META_KEY document, "tensors": {name: crc}}
CHECKSUM = "crc32"
"""The ``checksum`` entry of a checkpoint's document: its checksums are crc32 (`checksum`)."""


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used: truncated, foreign, or not matching its consumer."""


# ----------------------------------------------------------------------------- encoding


def _encode(obj: Any, path: str, tensors: dict[str, torch.Tensor]) -> Any:
    """JSON-able tree for ``obj``; tensors are moved into ``tensors`` under their tree path."""
    if isinstance(obj, torch.Tensor):
        name = path or "tensor"
        while name in tensors:  # keys holding dots can collide with nested paths
            name += "~"
        tensors[name] = obj.detach().to("cpu").contiguous()
        return {"__tensor__": name}
    if isinstance(obj, Mapping):
        keys = list(obj.keys())
        if all(isinstance(k, str) and not k.startswith("__") for k in keys):
            return {k: _encode(v, f"{path}.{k}" if path else k, tensors) for k, v in obj.items()}
        for k in keys:
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                raise TypeError(f"checkpoint dict keys must be str or int, got {k!r} at {path or '<root>'}")
        return {
            "__dict__": [[k, _encode(v, f"{path}.{k}" if path else str(k), tensors)] for k, v in obj.items()]
        }
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v, f"{path}.{i}", tensors) for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [_encode(v, f"{path}.{i}", tensors) for i, v in enumerate(obj)]
    if isinstance(obj, np.ndarray):
        return {"__ndarray__": obj.tolist(), "dtype": str(obj.dtype)}
    if isinstance(obj, np.generic):
        return obj.item()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, torch.dtype):
        return {"__dtype__": str(obj).removeprefix("torch.")}
    raise TypeError(
        f"cannot store {type(obj).__name__} at {path or '<root>'} in a checkpoint: use tensors, "
        "dicts, lists, tuples, numpy arrays and JSON scalars"
    )


def brief(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters (error messages never dump a whole state)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def cut(text: str, limit: int = 200) -> str:
    """``text`` on one line, cut to ``limit`` characters (for messages that embed another message)."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# Every dtype a checkpoint may name: torch's own dtype objects, nothing else reachable by getattr.
_TORCH_DTYPES = {name: obj for name in dir(torch) if isinstance(obj := getattr(torch, name), torch.dtype)}
_NDARRAY_KINDS = "biuf"  # bool, signed, unsigned, floating: what _encode writes for numeric arrays
_MARKERS = {
    "__tensor__": {"__tensor__"},
    "__dict__": {"__dict__"},
    "__tuple__": {"__tuple__"},
    "__ndarray__": {"__ndarray__", "dtype"},
    "__dtype__": {"__dtype__"},
}


class _Corrupt(Exception):
    """An entry of the header's state tree that `_encode` cannot have written."""


def _decode(obj: Any, tensors: Mapping[str, torch.Tensor]) -> Any:
    """Inverse of `_encode`. Raises `_Corrupt` (one short line) for malformed entries."""
    if isinstance(obj, list):
        return [_decode(v, tensors) for v in obj]
    if not isinstance(obj, dict):
        return obj
    marker = next((k for k in obj if k.startswith("__")), None)
    if marker is None:
        return {k: _decode(v, tensors) for k, v in obj.items()}
    if marker not in _MARKERS or set(obj) != _MARKERS[marker]:
        raise _Corrupt(f"malformed entry {brief(obj)}")
    value = obj[marker]
    if marker == "__tensor__":
        if not isinstance(value, str) or value not in tensors:
            raise _Corrupt(f"tensor {brief(value)} is named in the header but missing")
        return tensors[value]
    if marker == "__dict__":
        if not isinstance(value, list) or not all(
            isinstance(kv, list)
            and len(kv) == 2
            and isinstance(kv[0], (str, int))
            and not isinstance(kv[0], bool)
            for kv in value
        ):
            raise _Corrupt(f"malformed __dict__ entry {brief(value)}")
        return {k: _decode(v, tensors) for k, v in value}
    if marker == "__tuple__":
        if not isinstance(value, list):
            raise _Corrupt(f"malformed __tuple__ entry {brief(value)}")
        return tuple(_decode(v, tensors) for v in value)
    if marker == "__ndarray__":
        try:
            dtype = np.dtype(obj["dtype"]) if isinstance(obj["dtype"], str) else None
        except TypeError:
            dtype = None
        if dtype is None or dtype.kind not in _NDARRAY_KINDS:
            raise _Corrupt(f"array dtype {brief(obj['dtype'])} is not a numeric numpy dtype")
        try:
            return np.asarray(value, dtype=dtype)
        except (TypeError, ValueError, OverflowError):
            raise _Corrupt(f"malformed {dtype} array {brief(value)}") from None
    # __dtype__
    if not isinstance(value, str) or value not in _TORCH_DTYPES:
        raise _Corrupt(f"{brief(value)} is not a torch dtype")
    return _TORCH_DTYPES[value]


# ----------------------------------------------------------------------------- save / load


def save_checkpoint(path: str | os.PathLike, state: Mapping[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically (temporary file + ``os.replace``; parent folders created).

    Args:
        state: nested dicts (str or int keys), lists, tuples, tensors (any device and dtype), arrays, JSON
            scalars.

    Raises:
        TypeError: ``state`` holds something else (the message names where).
    """
    if not isinstance(state, Mapping):
        raise TypeError(f"state must be a mapping, got {type(state).__name__}")
    tensors: dict[str, torch.Tensor] = {}
    tree = _encode(state, "", tensors)
    # safetensors refuses tensors that share memory: views and repeats get their own storage.
    seen: set[int] = set()
    for k, v in tensors.items():
        storage = v.untyped_storage()
        if storage.data_ptr() in seen or storage.nbytes() != v.numel() * v.element_size():
            v = tensors[k] = v.clone()
        seen.add(v.untyped_storage().data_ptr())
    header = json.dumps({"format": FORMAT, "version": VERSION, "checksum": CHECKSUM, "state": tree})
    sums = {"header": _crc_text(header), "tensors": {k: checksum(v) for k, v in tensors.items()}}
    atomic_write_bytes(path, st_save(tensors, metadata={_META_KEY: header, _SUMS_KEY: json.dumps(sums)}))


def checksum(tensor: torch.Tensor) -> str:
    """The crc32 (8 hex digits) of a CPU tensor's dtype, shape and bytes."""
    flat = tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy().data
    start = zlib.crc32(f"{tensor.dtype}:{list(tensor.shape)}".encode())
    return f"{zlib.crc32(flat, start):08x}"


def _crc_text(text: str) -> str:
    return f"{zlib.crc32(text.encode()):08x}"


def _verify_sums(meta: Mapping[str, Any], doc: Mapping[str, Any], payload: Any, where: str) -> None:
    """Check ``meta``'s checksums against the document and tensors (none stored: not checked)."""
    raw = meta.get(_SUMS_KEY)
    if "checksum" not in doc and raw is None:
        return  # written before checksums existed
    if doc.get("checksum") != CHECKSUM or not isinstance(raw, str):
        raise CheckpointError(f"{where}: damaged checkpoint (its checksums are missing or unreadable)")
    try:
        sums = json.loads(raw)
    except json.JSONDecodeError:
        sums = None
    if not isinstance(sums, dict) or not isinstance(sums.get("tensors"), dict):
        raise CheckpointError(f"{where}: damaged checkpoint (its checksums are unreadable)")
    if sums.get("header") != _crc_text(meta[_META_KEY]):
        raise CheckpointError(
            f"{where}: damaged checkpoint: its header (config, counters, structure) does not match "
            f"its {CHECKSUM} checksum"
        )
    if payload is None:
        return
    if set(sums["tensors"]) != set(payload):
        raise CheckpointError(f"{where}: damaged checkpoint: its tensors are not the ones its checksums list")
    for name, tensor in payload.items():
        if sums["tensors"][name] != checksum(tensor):
            raise CheckpointError(
                f"{where}: damaged checkpoint: tensor {brief(name, 100)} does not match its "
                f"{CHECKSUM} checksum (flipped bits or a bad copy)"
            )


def atomic_write_bytes(path: str | os.PathLike, payload: bytes) -> None:
    """Write ``payload`` to ``path`` so that readers see the old file or the new one, never a mix.

    Temporary file, ``fsync``, ``os.replace``, folder fsync; a killed writer's temporary is cleared by
    [`remove_stale_temps`][tritonrl.toolkit.checkpoint.remove_stale_temps].

    Raises:
        OSError: the write failed (the previous file stays); the error names ``path``.
    """
    dest = Path(path)
    tmp = None
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a checkpoint is an ordinary file
        os.replace(tmp, dest)
        tmp = None
        _fsync_dir(dest.parent)
    except OSError as exc:
        named = exc.filename
        if named is None or os.path.basename(str(named)).startswith(f".{dest.name}."):
            # write/fsync errors name no file, mkstemp/replace errors the temporary one: name the destination
            raise OSError(exc.errno, exc.strerror or str(exc), str(dest)) from exc
        raise
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def _fsync_dir(folder: Path) -> None:
    """Flush a folder's entries (a rename) to disk; a no-op where folders cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):  # filesystems without it
            raise
    finally:
        os.close(fd)


def remove_stale_temps(path: str | os.PathLike) -> list[Path]:
    """Remove and return the temporary files `atomic_write_bytes` left for ``path`` (hold the lock)."""
    dest = Path(path)
    removed = []
    for tmp in dest.parent.glob(f".{glob_escape(dest.name)}.*.tmp"):
        try:
            tmp.unlink()
        except FileNotFoundError:
            continue
        removed.append(tmp)
    return removed


MAX_HEADER_BYTES = 100 * 2**20
"""Largest safetensors header `load_checkpoint` reads (the JSON tree of counters, config and
names; a big replay buffer's header stays far below): a larger length field means a foreign file."""


def _read_file(path: str | os.PathLike, where: str, *, payload: bool = True) -> bytes:
    """The bytes of a regular-file checkpoint (``payload=False``: length and header only).

    Non-regular files (a FIFO, ``/dev/zero``) and header lengths beyond the file or
    [`MAX_HEADER_BYTES`][tritonrl.toolkit.checkpoint.MAX_HEADER_BYTES] are refused unread.
    """
    try:
        # O_NONBLOCK: opening a FIFO without a writer would otherwise block right here
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise CheckpointError(f"{where}: no such checkpoint file") from None
    except OSError as exc:
        raise CheckpointError(f"{where}: cannot read checkpoint ({exc.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = (
            "a directory"
            if stat.S_ISDIR(st.st_mode)
            else "a FIFO"
            if stat.S_ISFIFO(st.st_mode)
            else "a device"
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
            else "a socket"
        )
        raise CheckpointError(f"{where}: not a regular file ({kind}); a checkpoint is a file")
    with os.fdopen(fd, "rb") as f:
        size = st.st_size
        if size < 8:
            raise CheckpointError(f"{where}: not a checkpoint (file of {size} bytes is too short)")
        try:
            head = f.read(8)
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES:
                raise CheckpointError(
                    f"{where}: not a safetensors file (header length field says {n} "
                    f"bytes, more than the {MAX_HEADER_BYTES} bytes allowed)"
                )
            if n > size - 8:
                raise CheckpointError(
                    f"{where}: truncated or not a safetensors file (header of {n} bytes "
                    f"does not fit in {size} bytes)"
                )
            header = f.read(n)
            _parse_header(header, where)  # a bad header is reported before the payload is read
            rest = f.read() if payload else b""
        except OSError as exc:
            raise CheckpointError(f"{where}: cannot read checkpoint ({exc.strerror})") from None
    return head + header + rest


def _parse_header(raw: bytes, where: str) -> dict:
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CheckpointError(f"{where}: not a safetensors file (unreadable header)") from None
    except RecursionError:
        raise CheckpointError(f"{where}: not a safetensors file (header nested too deeply)") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{where}: not a safetensors file (header is not a JSON object)")
    return header


class _NoTensors(dict):
    """Stands for the payload when only the header is read: every tensor name maps to ``None``."""

    def __contains__(self, key: object) -> bool:
        return True

    def __missing__(self, key: str) -> None:
        return None


def load_checkpoint(
    path: str | os.PathLike, *, device: torch.device | str | None = None, tensors: bool = True
) -> dict:
    """Read a checkpoint written by `save_checkpoint` (no pickle); dtypes kept as stored.

    Args:
        tensors: ``False`` reads the header alone, ``None`` where each tensor was.

    Returns:
        the nested ``state`` as saved (tuples come back as tuples, int keys as ints).

    Raises:
        CheckpointError: missing, not a regular file, truncated, foreign, newer, damaged, or crafted; one line
            starting with ``path``.
    """
    where = str(path)
    data = _read_file(path, where, payload=tensors)
    (n,) = struct.unpack("<Q", data[:8])
    header = _parse_header(data[8 : 8 + n], where)
    meta = header.get("__metadata__")
    if not isinstance(meta, dict) or _META_KEY not in meta:
        raise CheckpointError(
            f"{where}: a safetensors file but not a tritonrl checkpoint (no '{_META_KEY}' metadata)"
        )
    if not isinstance(meta[_META_KEY], str):
        raise CheckpointError(f"{where}: corrupt checkpoint metadata (not a string)")
    try:
        doc = json.loads(meta[_META_KEY])
    except json.JSONDecodeError:
        raise CheckpointError(f"{where}: corrupt checkpoint metadata") from None
    except RecursionError:
        raise CheckpointError(f"{where}: corrupt checkpoint metadata (nested too deeply)") from None
    if not isinstance(doc, dict):
        raise CheckpointError(f"{where}: corrupt checkpoint metadata (not a JSON object)")
    if doc.get("format") != FORMAT:
        raise CheckpointError(f"{where}: not a tritonrl checkpoint (format {brief(doc.get('format'))})")
    if doc.get("version") != VERSION:
        raise CheckpointError(
            f"{where}: checkpoint format version {brief(doc.get('version'))}, this "
            f"tritonrl reads version {VERSION}"
        )
    if not isinstance(doc.get("state"), dict):
        raise CheckpointError(f"{where}: corrupt checkpoint (state is missing or not a dict)")
    payload: Mapping[str, torch.Tensor]
    if not tensors:
        _verify_sums(meta, doc, None, where)
        payload = _NoTensors()
    else:
        try:
            payload = st_load(data)
        except Exception as exc:  # safetensors raises its own error type for truncation/corruption
            raise CheckpointError(
                f"{where}: truncated or corrupt tensor data ({brief(str(exc), 120)})"
            ) from None
        _verify_sums(meta, doc, payload, where)
        if device is not None and torch.device(device).type != "cpu":
            payload = {k: v.to(device) for k, v in payload.items()}
    try:
        state = _decode(doc["state"], payload)
    except _Corrupt as exc:
        raise CheckpointError(f"{where}: corrupt checkpoint ({exc})") from None
    except RecursionError:
        raise CheckpointError(f"{where}: corrupt checkpoint (state nested too deeply)") from None
    return state
