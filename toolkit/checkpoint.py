"""Checkpoints: one safetensors file holding the tensors and, in its header, a JSON tree.

Atomic writes, no pickle, crc32 of the header and every tensor; a bad file is one :class:`CheckpointError`
line. Also the training-run sections, RNG states and the checked, dtype-casting load into a module. A core
module. Guide: docs/pages/checkpoints.md.
"""

from __future__ import annotations

import errno
import json
import os
import random
import stat
import struct
import tempfile
import zlib
from collections.abc import Iterable, Mapping
from glob import escape as glob_escape
from pathlib import Path
from typing import Any, cast

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
    "capture_rng_state",
    "check_module_tensors",
    "check_rng_state",
    "checksum",
    "nonfinite_entry",
    "load_checkpoint",
    "load_into_module",
    "remove_stale_temps",
    "restore_rng_state",
    "save_checkpoint",
    "SECTIONS",
    "TRAIN_FORMAT",
    "agent_state",
    "training_sections",
    "generator_state_fits",
    "section",
]

FORMAT = "tritonrl-checkpoint"
VERSION = 1
_META_KEY = "tritonrl"
_SUMS_KEY = "tritonrl.crc32"  # {"header": crc of the _META_KEY document, "tensors": {name: crc}}
CHECKSUM = "crc32"
"""The ``checksum`` entry of a checkpoint's document: its checksums are crc32 (:func:`checksum`)."""


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
    """An entry of the header's state tree that :func:`_encode` cannot have written."""


def _decode(obj: Any, tensors: Mapping[str, torch.Tensor]) -> Any:
    """Inverse of :func:`_encode`. Raises :class:`_Corrupt` (one short line) for malformed entries."""
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
    :func:`remove_stale_temps`.

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
    """Remove and return the temporary files :func:`atomic_write_bytes` left for ``path`` (hold the lock)."""
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
"""Largest safetensors header :func:`load_checkpoint` reads (the JSON tree of counters, config and
names; a big replay buffer's header stays far below): a larger length field means a foreign file."""


def _read_file(path: str | os.PathLike, where: str, *, payload: bool = True) -> bytes:
    """The bytes of a regular-file checkpoint (``payload=False``: length and header only).

    Non-regular files (a FIFO, ``/dev/zero``) and header lengths beyond the file or :data:`MAX_HEADER_BYTES`
    are refused unread.
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
    """Read a checkpoint written by :func:`save_checkpoint` (no pickle); dtypes kept as stored.

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


# ----------------------------------------------------------------------------- sections

TRAIN_FORMAT = "tritonrl-train"
"""``format`` entry of a training-run checkpoint (:mod:`tritonrl.toolkit.training.loop`): sections
``agent``, ``env``,
``schedule``, ``loop``, ``rng`` and ``meta``."""

SECTIONS = {
    "agent": "the agent section",
    "env": "the environment state section",
    "schedule": "the update schedule section",
    "loop": "the loop counters section",
    "rng": "the random generator states section",
    "meta": "the run identity section",
}
"""The sections of a training-run checkpoint, in words for messages."""
_OPTIONAL_SECTIONS = {"format", "collector", "ranks", "overlap"}  # a collector's state; the other ranks'
# parts; an overlapped run's actor side


def section(state: Any, key: str, where: str, words: str | None = None) -> Any:
    """``state[key]``, or a :class:`CheckpointError` naming the section in words."""
    if not isinstance(state, Mapping) or key not in state:
        what = words or SECTIONS.get(key, "the entry")
        raise CheckpointError(f"{where}: {what} ({key!r}) is missing")
    return state[key]


def training_sections(state: Any, where: str) -> dict:
    """Check the top level of a training-run checkpoint and return it.

    Raises:
        CheckpointError: another format, a section missing, mistyped or unknown, named in words.
    """
    if not isinstance(state, Mapping) or state.get("format") != TRAIN_FORMAT:
        what = (
            "an agent-only save"
            if isinstance(state, Mapping) and isinstance(state.get("agent"), str)
            else "not a training-run checkpoint"
        )
        raise CheckpointError(
            f"{where}: {what} (no format {TRAIN_FORMAT!r}); a run folder's checkpoint is "
            "written by `python -m tritonrl train`"
        )
    for key in SECTIONS:
        value = section(state, key, where)
        if not isinstance(value, Mapping):
            raise CheckpointError(
                f"{where}: {SECTIONS[key]} ({key!r}) is a {type(value).__name__}, not a dict"
            )
    unknown = sorted(str(k) for k in set(state) - set(SECTIONS) - _OPTIONAL_SECTIONS)
    if unknown:
        raise CheckpointError(
            f"{where}: unknown section {brief(unknown[0], 40)} in a training-run checkpoint"
        )
    return dict(state)


def agent_state(state: Any, kind: str, where: str) -> dict:
    """The agent state of ``kind``: a whole agent save, or a training checkpoint's ``agent`` section.

    Raises:
        CheckpointError: another agent kind, or no usable agent section.
    """
    if isinstance(state, Mapping) and state.get("format") == TRAIN_FORMAT:
        state = section(state, "agent", where)
        if not isinstance(state, Mapping):
            raise CheckpointError(
                f"{where}: a training-run checkpoint whose agent section is a "
                f"{type(state).__name__}, not a dict"
            )
    if not isinstance(state, Mapping):
        raise CheckpointError(f"{where}: holds a {type(state).__name__}, not an agent state")
    got = state.get("agent")
    if got != kind:
        if isinstance(got, str):
            what = f"a {brief(got, 40)} agent"
        elif got is None:
            what = "no agent kind (its 'agent' entry is missing)"
        elif isinstance(got, Mapping):
            what = "an 'agent' section but no training-run 'format' entry (a damaged training checkpoint?)"
        else:
            what = f"an 'agent' entry of type {type(got).__name__}"
        raise CheckpointError(f"{where}: holds {what}, not a {kind!r} agent")
    return dict(state)


def generator_state_fits(state: Any, device: torch.device | str) -> bool:
    """Whether a saved generator state restores on ``device`` (``False`` across device types: reseed).

    Raises:
        ValueError: not a 1-D uint8 generator state.
    """
    if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8 or state.dim() != 1:
        got = (
            f"{state.dtype} {tuple(state.shape)}" if isinstance(state, torch.Tensor) else type(state).__name__
        )
        raise ValueError(f"generator state is {got}, not a 1-D uint8 tensor")
    try:
        torch.Generator(device=device).set_state(state.cpu())
        return True
    except RuntimeError:
        if state.numel() in (_CUDA_GENERATOR_BYTES, _CPU_GENERATOR_BYTES):
            return False
        raise ValueError(f"generator state of {state.numel()} bytes fits no device's generator") from None


_CPU_GENERATOR_BYTES = torch.Generator().get_state().numel()
_CUDA_GENERATOR_BYTES = 16  # seed and offset of the Philox generator


# ----------------------------------------------------------------------------- modules


def check_module_tensors(
    module: torch.nn.Module, tensors: Mapping[str, Any], *, where: str = "checkpoint"
) -> None:
    """Raise :class:`CheckpointError` unless ``tensors`` fits ``module.state_dict()`` exactly.

    The same names, shapes and floating kinds, and no NaN or infinity. Touches nothing.
    """
    if not isinstance(tensors, Mapping):
        raise CheckpointError(f"{where}: is a {type(tensors).__name__}, not a dict of tensors")
    own = module.state_dict()
    missing = sorted(set(own) - set(tensors))
    extra = sorted(set(tensors) - set(own))
    if missing or extra:
        raise CheckpointError(
            f"{where}: does not match {type(module).__name__}"
            + (f"; missing {brief(missing[:4])}{'...' if len(missing) > 4 else ''}" if missing else "")
            + (f"; unexpected {brief(extra[:4])}{'...' if len(extra) > 4 else ''}" if extra else "")
        )
    for name, ref in own.items():
        got = tensors[name]
        if not isinstance(got, torch.Tensor):
            raise CheckpointError(f"{where}: {name} is {type(got).__name__}, expected a tensor")
        if tuple(got.shape) != tuple(ref.shape):
            raise CheckpointError(
                f"{where}: {name} has shape {tuple(got.shape)}, "
                f"{type(module).__name__} expects {tuple(ref.shape)}"
            )
        if ref.is_floating_point() != got.is_floating_point():
            raise CheckpointError(f"{where}: {name} is {got.dtype}, expected {ref.dtype}")
    bad = nonfinite_entry({name: tensors[name] for name in own})
    if bad is not None:
        raise CheckpointError(f"{where}: {bad} holds NaN or infinite values (weights of a diverged run?)")


def nonfinite_entry(state: Any, *, skip: Iterable[str] = ()) -> str | None:
    """The path (``"online.fc.weight"``) of the first floating tensor of ``state`` holding a NaN or an
    infinity, else ``None``.

    Entries whose paths ``skip`` names (``"replay"``) are not looked at. One host sync per device.
    """
    skipped = set(skip)
    found: list[tuple[str, torch.Tensor]] = []

    def walk(obj: Any, path: str) -> None:
        if isinstance(obj, torch.Tensor):
            if obj.is_floating_point() or obj.is_complex():
                found.append((path, obj))
        elif isinstance(obj, Mapping):
            for k, v in obj.items():
                child = f"{path}.{k}" if path else str(k)
                if child not in skipped:
                    walk(v, child)
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                walk(v, f"{path}.{i}" if path else str(i))

    walk(state, "")
    by_device: dict[torch.device, list[int]] = {}
    for i, (_, t) in enumerate(found):
        by_device.setdefault(t.device, []).append(i)
    bad = []
    for idx in by_device.values():
        flags = torch.stack([found[i][1].isfinite().all() for i in idx])
        if not bool(flags.all()):
            bad.append(idx[int((~flags).nonzero()[0, 0])])
    return found[min(bad)][0] if bad else None


def load_into_module(
    module: torch.nn.Module, tensors: Mapping[str, Any], *, where: str = "checkpoint"
) -> None:
    """Copy ``tensors`` into ``module``, all checked first, floats cast to each entry's dtype and device.

    Raises:
        CheckpointError: names, shapes or kinds differ, or a tensor is not finite; ``module`` untouched.
    """
    check_module_tensors(module, tensors, where=where)
    own = module.state_dict()
    with torch.no_grad():
        for name, ref in own.items():
            ref.copy_(tensors[name].to(device=ref.device, dtype=ref.dtype))


# ----------------------------------------------------------------------------- RNG


def capture_rng_state() -> dict:
    """The global RNG states: torch CPU, every CUDA device (if initialised), numpy, python ``random``."""
    # the legacy global RNG is what we capture; numpy's stub says dict | tuple, legacy=True gives the tuple
    np_state = cast("tuple[str, np.ndarray, int, int, float]", np.random.get_state())  # noqa: NPY002
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "kind": np_state[0],
            "keys": np_state[1],
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def check_rng_state(state: Any, *, where: str = "RNG state") -> tuple:
    """Check RNG states of :func:`capture_rng_state`; returned staged for :func:`restore_rng_state`.

    Raises:
        CheckpointError: a missing entry or a wrong shape (message starts with ``where``).
    """
    try:
        if not isinstance(state, Mapping):
            raise TypeError(f"not a dict but {type(state).__name__}")
        torch_state, np_s, py = state["torch"], state["numpy"], state["python"]
        if not isinstance(torch_state, torch.Tensor):
            raise TypeError(f"torch state is {type(torch_state).__name__}, not a tensor")
        torch_state = torch_state.to("cpu", torch.uint8)
        torch.Generator().set_state(torch_state)  # scratch: raises on a short or long state
        np_tuple = (
            str(np_s["kind"]),
            np.asarray(np_s["keys"], dtype=np.uint32),
            int(np_s["pos"]),
            int(np_s["has_gauss"]),
            float(np_s["cached_gaussian"]),
        )
        np.random.RandomState().set_state(np_tuple)  # a scratch generator checks the state
        if not isinstance(py, (list, tuple)) or len(py) != 3:
            raise TypeError("python state is not a (version, internal state, gauss) triple")
        py_tuple = (int(py[0]), tuple(int(x) for x in py[1]), None if py[2] is None else float(py[2]))
        random.Random().setstate(py_tuple)  # scratch check
        cuda_states = None
        if "cuda" in state and torch.cuda.is_available():
            cuda_states = [s.to("cpu", torch.uint8) for s in state["cuda"]]
    except KeyError as exc:
        raise CheckpointError(f"{where}: the {exc.args[0]!r} entry is missing") from None
    except (TypeError, ValueError, IndexError, RuntimeError, AttributeError, OverflowError) as exc:
        raise CheckpointError(f"{where}: does not fit ({brief(str(exc), 120)})") from None
    return torch_state, np_tuple, py_tuple, cuda_states


def restore_rng_state(state: Mapping[str, Any], *, where: str = "RNG state") -> None:
    """Put back the RNG states of :func:`capture_rng_state`, all checked first.

    Raises:
        CheckpointError: a missing entry or a wrong shape; no RNG changed.
    """
    torch_state, np_tuple, py_tuple, cuda_states = check_rng_state(state, where=where)
    torch.set_rng_state(torch_state)
    np.random.set_state(np_tuple)  # noqa: NPY002
    random.setstate(py_tuple)
    if cuda_states is not None and len(cuda_states) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda_states)
