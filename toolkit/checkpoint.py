"""Checkpoints: one safetensors file holding the tensors and, in its header, a JSON tree.

``save_checkpoint(path, state)`` takes a nested structure of dicts, lists, tuples, tensors and
JSON scalars (model and optimizer state dicts, counters, config, RNG states). Tensors go to the
safetensors payload under flat names; everything else, with a placeholder where each tensor was,
is a JSON document stored in the safetensors header metadata. One file means one atomic write:
the bytes go to a temporary file in the same folder, are flushed to disk, and ``os.replace`` puts
them in place, so a crash mid-save leaves the previous checkpoint intact.

``load_checkpoint(path)`` never unpickles anything: safetensors tensors plus ``json.loads``.
Truncated, foreign (not written here) or unreadable files raise :class:`CheckpointError` with one
line naming the file and the problem.

Cross-dtype loading is the consumer's business, done once at load: :func:`load_into_module`
checks names and shapes of every tensor against a module *before* touching it, then copies,
casting floating tensors to the dtype of the parameter they land in (bf16 -> f32 on a CPU,
f32 -> bf16 on an Ampere GPU).
"""

from __future__ import annotations

import errno
import json
import os
import random
import struct
import tempfile
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
    "FORMAT",
    "VERSION",
    "CheckpointError",
    "capture_rng_state",
    "check_module_tensors",
    "load_checkpoint",
    "load_into_module",
    "remove_stale_temps",
    "restore_rng_state",
    "save_checkpoint",
]

FORMAT = "tritonrl-checkpoint"
VERSION = 1
_META_KEY = "tritonrl"


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
        return {"__dict__": [[k, _encode(v, f"{path}.{k}" if path else str(k), tensors)]
                             for k, v in obj.items()]}
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


def _decode(obj: Any, tensors: Mapping[str, torch.Tensor], where: str) -> Any:
    if isinstance(obj, list):
        return [_decode(v, tensors, where) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if "__tensor__" in obj:
        name = obj["__tensor__"]
        if name not in tensors:
            raise CheckpointError(f"{where}: tensor {name!r} is named in the header but missing")
        return tensors[name]
    if "__dict__" in obj:
        return {k: _decode(v, tensors, where) for k, v in obj["__dict__"]}
    if "__tuple__" in obj:
        return tuple(_decode(v, tensors, where) for v in obj["__tuple__"])
    if "__ndarray__" in obj:
        return np.asarray(obj["__ndarray__"], dtype=obj["dtype"])
    if "__dtype__" in obj:
        return getattr(torch, obj["__dtype__"])
    return {k: _decode(v, tensors, where) for k, v in obj.items()}


# ----------------------------------------------------------------------------- save / load


def save_checkpoint(path: str | os.PathLike, state: Mapping[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically (temporary file in the same folder + ``os.replace``).

    Args:
        path: destination file (conventionally ``*.safetensors``); parent folders are created.
        state: nested dicts (str or int keys), lists, tuples, tensors (any device and dtype:
            stored as they are, on the CPU), numpy arrays and JSON scalars.

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
    header = json.dumps({"format": FORMAT, "version": VERSION, "state": tree})
    atomic_write_bytes(path, st_save(tensors, metadata={_META_KEY: header}))


def atomic_write_bytes(path: str | os.PathLike, payload: bytes) -> None:
    """Write ``payload`` to ``path`` so that readers see the old file or the new one, never a mix.

    The bytes go to a temporary file ``.<name>.<random>.tmp`` in the same folder, reach the disk
    (``fsync``), ``os.replace`` makes them current, and the folder is fsynced so that the rename
    itself survives a power cut; parent folders are created. On any failure the temporary file
    is removed and the previous file at ``path`` is untouched. A process killed mid-write can
    leave its temporary file behind: :func:`remove_stale_temps` clears those.

    Raises:
        OSError: the write failed (disk full, read-only folder, ...); the error names ``path``.
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
    """Remove the temporary files :func:`atomic_write_bytes` left for ``path`` (a killed writer).

    Only ``.<name>.*.tmp`` files of this one destination are touched. Call it only while no other
    process can be writing ``path`` (the run folder's lock guarantees that for the training loop).

    Returns:
        the files removed.
    """
    dest = Path(path)
    removed = []
    for tmp in dest.parent.glob(f".{glob_escape(dest.name)}.*.tmp"):
        try:
            tmp.unlink()
        except FileNotFoundError:
            continue
        removed.append(tmp)
    return removed


def _read_header(data: bytes, where: str) -> dict:
    if len(data) < 8:
        raise CheckpointError(f"{where}: not a checkpoint (file of {len(data)} bytes is too short)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise CheckpointError(f"{where}: truncated or not a safetensors file (header of {n} bytes "
                              f"does not fit in {len(data)} bytes)")
    try:
        header = json.loads(data[8 : 8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CheckpointError(f"{where}: not a safetensors file (unreadable header)") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{where}: not a safetensors file (header is not a JSON object)")
    return header


def load_checkpoint(path: str | os.PathLike, *, device: torch.device | str | None = None) -> dict:
    """Read a checkpoint written by :func:`save_checkpoint`; no pickle is involved.

    Args:
        path: the checkpoint file.
        device: where tensors go (default: CPU). Dtypes are kept as stored; converting them is
            the consumer's job (see :func:`load_into_module`).

    Returns:
        the nested ``state`` as saved (tuples come back as tuples, int keys as ints).

    Raises:
        CheckpointError: missing, truncated, foreign (not a tritonrl checkpoint) or a newer format.
    """
    where = str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"{where}: no such checkpoint file") from None
    except OSError as exc:
        raise CheckpointError(f"{where}: cannot read checkpoint ({exc.strerror})") from None
    header = _read_header(data, where)
    meta = header.get("__metadata__") or {}
    if _META_KEY not in meta:
        raise CheckpointError(f"{where}: a safetensors file but not a tritonrl checkpoint (no "
                              f"'{_META_KEY}' metadata)")
    try:
        doc = json.loads(meta[_META_KEY])
    except json.JSONDecodeError:
        raise CheckpointError(f"{where}: corrupt checkpoint metadata") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CheckpointError(f"{where}: not a tritonrl checkpoint (format {doc.get('format')!r})"
                              if isinstance(doc, dict) else f"{where}: corrupt checkpoint metadata")
    if doc.get("version") != VERSION:
        raise CheckpointError(f"{where}: checkpoint format version {doc.get('version')!r}, this "
                              f"tritonrl reads version {VERSION}")
    try:
        tensors = st_load(data)
    except Exception as exc:  # safetensors raises its own error type for truncation/corruption
        raise CheckpointError(f"{where}: truncated or corrupt tensor data ({exc})") from None
    if device is not None and torch.device(device).type != "cpu":
        tensors = {k: v.to(device) for k, v in tensors.items()}
    state = _decode(doc["state"], tensors, where)
    if not isinstance(state, dict):
        raise CheckpointError(f"{where}: corrupt checkpoint (state is not a dict)")
    return state


# ----------------------------------------------------------------------------- modules


def check_module_tensors(module: torch.nn.Module, tensors: Mapping[str, Any], *, where: str = "checkpoint"
                         ) -> None:
    """Raise :class:`CheckpointError` unless ``tensors`` fits ``module.state_dict()`` exactly.

    Checks: the same names, each value a tensor of the same shape, floating where the module's
    entry is floating. Touches nothing.
    """
    own = module.state_dict()
    missing = sorted(set(own) - set(tensors))
    extra = sorted(set(tensors) - set(own))
    if missing or extra:
        raise CheckpointError(
            f"{where}: does not match {type(module).__name__}"
            + (f"; missing {missing[:4]}{'...' if len(missing) > 4 else ''}" if missing else "")
            + (f"; unexpected {extra[:4]}{'...' if len(extra) > 4 else ''}" if extra else "")
        )
    for name, ref in own.items():
        got = tensors[name]
        if not isinstance(got, torch.Tensor):
            raise CheckpointError(f"{where}: {name} is {type(got).__name__}, expected a tensor")
        if tuple(got.shape) != tuple(ref.shape):
            raise CheckpointError(f"{where}: {name} has shape {tuple(got.shape)}, "
                                  f"{type(module).__name__} expects {tuple(ref.shape)}")
        if ref.is_floating_point() != got.is_floating_point():
            raise CheckpointError(f"{where}: {name} is {got.dtype}, expected {ref.dtype}")


def load_into_module(module: torch.nn.Module, tensors: Mapping[str, Any], *, where: str = "checkpoint"
                     ) -> None:
    """Copy ``tensors`` into ``module`` after checking all of them (see :func:`check_module_tensors`).

    Floating tensors are cast to the dtype (and device) of the entry they replace: a bf16
    checkpoint loads into an f32 module and the other way round, converted once here.

    Raises:
        CheckpointError: names, shapes or kinds differ; ``module`` is left untouched then.
    """
    check_module_tensors(module, tensors, where=where)
    own = module.state_dict()
    with torch.no_grad():
        for name, ref in own.items():
            ref.copy_(tensors[name].to(device=ref.device, dtype=ref.dtype))


# ----------------------------------------------------------------------------- RNG


def capture_rng_state() -> dict:
    """The global RNG states: torch CPU, every CUDA device (if initialised), numpy, python ``random``."""
    np_state = np.random.get_state()  # noqa: NPY002 (the legacy global RNG is what we capture)
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {"kind": np_state[0], "keys": np_state[1], "pos": int(np_state[2]),
                  "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Put back the RNG states captured by :func:`capture_rng_state`.

    Raises:
        CheckpointError: ``state`` lacks an entry or has the wrong shape.
    """
    try:
        torch_state = state["torch"]
        np_s = state["numpy"]
        py = state["python"]
        np_tuple = (np_s["kind"], np.asarray(np_s["keys"], dtype=np.uint32), int(np_s["pos"]),
                    int(np_s["has_gauss"]), float(np_s["cached_gaussian"]))
        py_tuple = (py[0], tuple(int(x) for x in py[1]), py[2])
    except (KeyError, TypeError, IndexError) as exc:
        raise CheckpointError(f"RNG state is incomplete ({exc!r})") from None
    torch.set_rng_state(torch_state.to("cpu", torch.uint8))
    np.random.set_state(np_tuple)  # noqa: NPY002
    random.setstate(py_tuple)
    if "cuda" in state and torch.cuda.is_available():
        cuda_states = [s.to("cpu", torch.uint8) for s in state["cuda"]]
        if len(cuda_states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda_states)
