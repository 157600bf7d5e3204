"""The replay buffers' saved state: header and counter checks, the load-boundary cast, the file.

A state is a dict of tensors plus a JSON ``meta`` entry; the safetensors file holds crc32
checksums (docs/pages/checkpoints.md).
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tritonrl.kernels.validate import check_int
from tritonrl.toolkit.checkpoint import CHECKSUM, atomic_write_bytes, checksum

__all__ = [
    "FORMAT",
    "VERSION",
    "check_config",
    "check_counters",
    "load_tensors",
    "read_meta",
    "read_file",
    "write_file",
]

FORMAT = "tritonrl.replay"
VERSION = 1
_SUMS_KEY = f"{FORMAT}.crc32"  # a file's checksums: {"meta": crc of the FORMAT entry, "tensors": {...}}

Spec = dict[str, tuple[tuple[int, ...], torch.dtype]]


def read_meta(state: Any) -> dict[str, Any]:
    """The ``meta`` entry of a replay-buffer state of this format and version.

    Raises:
        ValueError: not a replay-buffer state, or another format or version.
    """
    if not isinstance(state, dict) or not isinstance(state.get("meta"), dict):
        raise ValueError("not a replay-buffer state: no 'meta' entry")
    meta = state["meta"]
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise ValueError(f"not a {FORMAT} v{VERSION} state: format={meta.get('format')!r}")
    return meta


def check_config(config: Any, mine: dict[str, Any], stagings: tuple[str, ...]) -> str:
    """The staging mode a state was saved with, after checking its ``config`` equals ``mine``.

    Raises:
        ValueError: an unknown staging mode, or another configuration (the differences listed).
    """
    saved_staging = config.get("staging", "host") if isinstance(config, dict) else "host"
    if isinstance(config, dict):
        config = {k: v for k, v in config.items() if k != "staging"}
    mine = {k: v for k, v in mine.items() if k != "staging"}
    if saved_staging not in stagings:
        raise ValueError(f"state has an unknown staging mode {saved_staging!r}")
    if config != mine:
        diff = {
            k: (config.get(k) if isinstance(config, dict) else None, v)
            for k, v in mine.items()
            if not isinstance(config, dict) or config.get(k) != v
        }
        raise ValueError(
            f"state was saved by a buffer with another configuration (saved, this): {str(diff)[:200]}"
        )
    return saved_staging


def check_counters(meta: dict[str, Any], capacity: int, num_envs: int) -> None:
    """Check that ``size``, ``pos``, ``steps`` and ``committed`` of ``meta`` agree.

    Raises:
        ValueError: one is missing, of the wrong type or out of range, or they disagree.
    """
    C, E = capacity, num_envs
    size, pos = meta.get("size"), meta.get("pos")
    if isinstance(size, bool) or isinstance(pos, bool):
        size = pos = None
    if not (isinstance(size, int) and 0 <= size <= C and isinstance(pos, int) and 0 <= pos < C):
        raise ValueError(f"state has invalid counters size={size!r} pos={pos!r}")
    if size < C and pos != size:
        raise ValueError(f"state has pos={pos} but size={size} < capacity")
    steps = check_int("state meta 'steps'", meta.get("steps"), low=0)
    committed = check_int("state meta 'committed'", meta.get("committed"), low=0)
    if committed % C != pos or min(committed, C) != size or committed > steps * E:
        raise ValueError(
            f"state counters disagree: committed={committed}, size={size}, pos={pos}, "
            f"steps={steps} for capacity {C} and {E} environments"
        )


def load_tensors(
    state: dict[str, Any],
    spec: Spec,
    target: Callable[[str, torch.dtype], tuple[torch.device | str, torch.dtype]],
) -> dict[str, torch.Tensor]:
    """The tensors of ``spec`` from ``state``, checked and cast to ``target(key, dtype)``.

    Raises:
        ValueError: a tensor is missing, or has another shape or a dtype that cannot load.
    """
    out: dict[str, torch.Tensor] = {}
    for key, (shape, dtype) in spec.items():
        t = state.get(key)
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"state is missing tensor {key!r}")
        if tuple(t.shape) != shape:
            raise ValueError(f"state tensor {key!r} has shape {tuple(t.shape)}, expected {shape}")
        if t.dtype != dtype and not (t.dtype.is_floating_point and dtype.is_floating_point):
            raise ValueError(f"state tensor {key!r} has dtype {t.dtype}, cannot load into {dtype}")
        if t.dtype != dtype and (dtype == torch.bool or t.dtype == torch.bool):
            raise ValueError(f"state tensor {key!r} has dtype {t.dtype}, cannot load into {dtype}")
        dev, dtype = target(key, dtype)
        out[key] = t.to(device=dev, dtype=dtype)
    return out


def write_file(path: str | os.PathLike[str], state: dict[str, Any]) -> None:
    """Write a state to one safetensors file, atomically, with crc32 checksums."""
    from safetensors.torch import save

    sd = dict(state)
    meta = sd.pop("meta")
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in sd.items()}
    text = json.dumps({**meta, "checksum": CHECKSUM})
    sums = {
        "meta": f"{zlib.crc32(text.encode()):08x}",
        "tensors": {k: checksum(v) for k, v in tensors.items()},
    }
    atomic_write_bytes(path, save(tensors, metadata={FORMAT: text, _SUMS_KEY: json.dumps(sums)}))


def read_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A state read from a file of `write_file` (tensors on the CPU; no checksums: unverified).

    Raises:
        FileNotFoundError: no such file.
        ValueError: truncated, foreign or damaged file, or a checksum mismatch.
    """
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no replay-buffer file at {path}")
    try:
        with safe_open(str(path), framework="pt") as f:
            header = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as exc:  # safetensors raises its own error types for damaged files
        raise ValueError(f"{path} is not a readable safetensors file ({type(exc).__name__}: {exc})") from exc
    if FORMAT not in header:
        raise ValueError(f"{path} is not a replay-buffer file (no {FORMAT!r} metadata)")
    try:
        meta = json.loads(header[FORMAT])
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} has damaged replay-buffer metadata: {exc}") from exc
    marked = isinstance(meta, dict) and meta.pop("checksum", None) is not None
    if marked or _SUMS_KEY in header:
        _verify(path, header, tensors)
    return {**tensors, "meta": meta}


def _verify(path: Path, header: dict[str, str], tensors: dict[str, torch.Tensor]) -> None:
    """Check a replay file's checksums (its metadata and every tensor's dtype, shape and bytes)."""
    try:
        sums = json.loads(header[_SUMS_KEY])
    except (KeyError, json.JSONDecodeError):
        sums = None
    if not isinstance(sums, dict) or not isinstance(sums.get("tensors"), dict):
        raise ValueError(f"{path} is a damaged replay-buffer file (its checksums are missing or unreadable)")
    if sums.get("meta") != f"{zlib.crc32(header[FORMAT].encode()):08x}":
        raise ValueError(f"{path} is a damaged replay-buffer file: its metadata does not match its checksum")
    if set(sums["tensors"]) != set(tensors):
        raise ValueError(
            f"{path} is a damaged replay-buffer file: its tensors are not the ones its checksums list"
        )
    for name, tensor in tensors.items():
        if sums["tensors"][name] != checksum(tensor):
            raise ValueError(
                f"{path} is a damaged replay-buffer file: tensor {name!r} does not match its "
                f"{CHECKSUM} checksum (flipped bits or a bad copy)"
            )
