"""The precision policy: the one place that decides the training dtype of a device.

bf16 on CUDA with compute capability >= (8, 0), f32 elsewhere; never fp16 (it needs loss scaling).
``TRITONRL_DTYPE`` (``auto`` | ``bf16`` | ``f32``) or ``override=`` force a choice. Decisions are cached per
(device, override); ``training_dtype.cache_clear()`` empties the cache. Imports torch only. Guide:
docs/pages/precision.md.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch

__all__ = [
    "BF16_MIN_CAPABILITY",
    "DTYPE_ENV",
    "PrecisionDecision",
    "PrecisionError",
    "dtype_or_default",
    "explain",
    "training_dtype",
]

DTYPE_ENV = "TRITONRL_DTYPE"
BF16_MIN_CAPABILITY = (8, 0)
_CHOICES = {"auto": None, "bf16": torch.bfloat16, "f32": torch.float32}


class PrecisionError(RuntimeError):
    """A forced dtype that the device cannot train in."""


@dataclass(frozen=True)
class PrecisionDecision:
    """Why a device trains in the dtype it does.

    Attributes:
        device: the normalised device (``cuda:0``, ``cpu``).
        name: GPU name from ``torch.cuda.get_device_name``, or the device type.
        capability: CUDA compute capability ``(major, minor)``, ``None`` off CUDA.
        dtype: the training dtype.
        source: ``"detected"`` or ``"overridden"`` (by argument or ``TRITONRL_DTYPE``).
        reason: one sentence a person can read.
    """

    device: str
    name: str
    capability: tuple[int, int] | None
    dtype: torch.dtype
    source: str
    reason: str


def _normalise(device: torch.device | str | int | None) -> torch.device:
    if device is None:
        device = "cpu"
    if isinstance(device, int):
        device = torch.device("cuda", device)
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def _parse_override(override: str | None) -> str:
    raw = override if override is not None else os.environ.get(DTYPE_ENV, "auto")
    value = raw.strip().lower() or "auto"
    if value not in _CHOICES:
        source = "override" if override is not None else DTYPE_ENV
        raise ValueError(f"{source}={raw!r} is not a training dtype; allowed values: {', '.join(_CHOICES)}")
    return value


@functools.cache
def _decide(device: torch.device, choice: str) -> PrecisionDecision:
    forced = _CHOICES[choice]
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        capability = (major, minor)
        name = torch.cuda.get_device_name(device)
        supports_bf16 = capability >= BF16_MIN_CAPABILITY
        if forced is torch.bfloat16 and not supports_bf16:
            raise PrecisionError(
                f"bf16 was forced ({DTYPE_ENV} or override) on {device} ({name}, compute "
                f"capability {capability[0]}.{capability[1]}), but bf16 training needs compute "
                f"capability >= {BF16_MIN_CAPABILITY[0]}.{BF16_MIN_CAPABILITY[1]} (Ampere). "
                f"Use f32 or auto."
            )
        if forced is not None:
            return PrecisionDecision(
                str(device),
                name,
                capability,
                forced,
                "overridden",
                f"{choice} forced by {DTYPE_ENV} or override",
            )
        if supports_bf16:
            reason = f"compute capability {capability[0]}.{capability[1]} >= 8.0: bf16 tensor cores"
            return PrecisionDecision(str(device), name, capability, torch.bfloat16, "detected", reason)
        reason = (
            f"compute capability {capability[0]}.{capability[1]} < 8.0: no bf16 tensor cores; "
            "f32 (fp16 would need loss scaling)"
        )
        return PrecisionDecision(str(device), name, capability, torch.float32, "detected", reason)

    name = device.type
    if forced is not None:
        return PrecisionDecision(
            str(device),
            name,
            None,
            forced,
            "overridden",
            f"{choice} forced by {DTYPE_ENV} or override"
            + (" (bf16 is emulated on CPUs: slow)" if forced is torch.bfloat16 else ""),
        )
    return PrecisionDecision(
        str(device),
        name,
        None,
        torch.float32,
        "detected",
        f"{device.type} device: f32 (bf16 is not proven fast here)",
    )


def explain(device: torch.device | str | int | None = None, override: str | None = None) -> PrecisionDecision:
    """The full decision for ``device`` (a device, ``"cuda:0"``, an index, or ``None``: CPU).

    Raises:
        ValueError: ``override`` or ``TRITONRL_DTYPE`` is not auto, bf16 or f32.
        PrecisionError: bf16 forced on CUDA below compute capability (8, 0).
    """
    return _decide(_normalise(device), _parse_override(override))


def training_dtype(
    device: torch.device | str | int | None = None, override: str | None = None
) -> torch.dtype:
    """The dtype of parameters, stored states and uploads on ``device``.

    Raises:
        ValueError: ``override`` or ``TRITONRL_DTYPE`` is not auto, bf16 or f32.
        PrecisionError: bf16 forced on CUDA below compute capability (8, 0).
    """
    return explain(device, override).dtype


training_dtype.cache_clear = _decide.cache_clear  # type: ignore[attr-defined]
explain.cache_clear = _decide.cache_clear  # type: ignore[attr-defined]


def dtype_or_default(
    dtype: torch.dtype | None, device: torch.device | str | int | None = None
) -> torch.dtype:
    """``dtype`` when given, else `training_dtype` of ``device``."""
    return dtype if dtype is not None else training_dtype(device)
