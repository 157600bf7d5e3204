"""Argument checks: the project's one validation dialect (``x must be a torch.Tensor, got list``).

Metadata only, never tensor data (no device sync); ``TypeError`` for a wrong type or dtype,
``ValueError`` otherwise. Imports torch only, so any layer may use it. See
docs/pages/contributing.md ("Validation").
"""

from __future__ import annotations

import functools
import math
import numbers
import re
from collections.abc import Sequence

import torch

__all__ = [
    "check_field",
    "check_int",
    "check_real",
    "check_tensor",
    "describe_interval",
    "dtype_names",
    "in_interval",
    "parse_interval",
]


def dtype_names(dtypes: Sequence[torch.dtype]) -> str:
    """``"float32, bfloat16"``: dtypes without the ``torch.`` prefix, duplicates dropped."""
    return ", ".join(str(d).removeprefix("torch.") for d in dict.fromkeys(dtypes))


def check_tensor(
    name: str,
    t: object,
    *,
    dtype: torch.dtype | Sequence[torch.dtype] | None = None,
    dtype_note: str = "",
    ndim: int | Sequence[int] | None = None,
    shape: Sequence[int] | None = None,
    what: str = "",
    device: torch.device | None = None,
    device_of: str = "x",
    contiguous: bool = False,
) -> torch.Tensor:
    """``t`` is a tensor named ``name`` with the given properties; returns it.

    Args:
        name: the argument's name, first word of every message.
        t: the value to check.
        dtype: the allowed dtype, or a sequence of them.
        dtype_note: said after the allowed dtypes, e.g. ``"(x's dtype)"``.
        ndim: the allowed number of dimensions (or a sequence of them).
        shape: the exact shape.
        what: the shape's meaning in the message, e.g. ``"[B, L, H]"``.
        device: the device every input shares.
        device_of: the argument that device comes from (named in the message).
        contiguous: require a contiguous tensor.

    Raises:
        TypeError: not a tensor, or a dtype not allowed.
        ValueError: wrong number of dimensions, shape, device, or not contiguous.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if ndim is not None:
        dims = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if t.dim() not in dims:
            want = " or ".join(f"{d}-D" for d in dims)
            raise ValueError(f"{name} must be {want}{' ' + what if what else ''}, got shape {tuple(t.shape)}")
    if shape is not None and tuple(t.shape) != tuple(shape):
        label = f"{what} = " if what else ""
        raise ValueError(f"{name} must have shape {label}{tuple(shape)}, got {tuple(t.shape)}")
    if dtype is not None:
        allowed = (dtype,) if isinstance(dtype, torch.dtype) else tuple(dtype)
        if t.dtype not in allowed:
            note = f" {dtype_note}" if dtype_note else ""
            raise TypeError(
                f"{name} must have dtype {dtype_names(allowed)}{note}, got {dtype_names((t.dtype,))}"
            )
    if device is not None and t.device != device:
        raise ValueError(f"{name} is on {t.device} but {device_of} is on {device}")
    if contiguous and not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (strides {t.stride()})")
    return t


def check_int(name: str, value: object, *, low: int | None = None, high: int | None = None) -> int:
    """``value`` is an int (not a bool) in ``[low, high]`` (either bound optional); returns it.

    Raises:
        ValueError: anything else.
    """
    ok = isinstance(value, int) and not isinstance(value, bool)
    ok = ok and (low is None or value >= low) and (high is None or value <= high)  # type: ignore[operator]
    if not ok:
        if high is not None:
            want = f"an int in [{low if low is not None else '-inf'}, {high}]"
        elif low == 1:
            want = "a positive int"
        elif low == 0:
            want = "a non-negative int"
        elif low is not None:
            want = f"an int >= {low}"
        else:
            want = "an int"
        raise ValueError(f"{name} must be {want}, got {value!r}")
    return value  # type: ignore[return-value]


def check_real(name: str, value: object, *, positive: bool = False, nonnegative: bool = True) -> float:
    """``value`` is a finite real number (``>= 0``, or ``> 0`` with ``positive``); returns it.

    Raises:
        ValueError: not a finite int or float (bools refused), or out of range.
    """
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if positive and value <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    if nonnegative and value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return float(value)


# ----------------------------------------------------------------------------- intervals, fields

_INTERVAL = re.compile(r"^\s*([\[(])\s*(-?inf|[-+0-9.e]+)\s*,\s*(-?inf|[-+0-9.e]+)\s*([\])])\s*$")


@functools.cache
def parse_interval(spec: str) -> tuple[float, bool, float, bool]:
    """``"(0, 1]"`` -> ``(low, low_closed, high, high_closed)``; ``inf`` bounds allowed.

    Raises:
        ValueError: ``spec`` is not an interval.
    """
    m = _INTERVAL.match(spec)
    if m is None:
        raise ValueError(f"bad interval {spec!r}: expected e.g. '(0, 1]' or '[1, inf)'")
    return float(m.group(2)), m.group(1) == "[", float(m.group(3)), m.group(4) == "]"


def in_interval(value: float, spec: str) -> bool:
    """Whether ``value`` lies in the interval ``spec`` (`parse_interval`)."""
    low, low_closed, high, high_closed = parse_interval(spec)
    above = value >= low if low_closed else value > low
    return above and (value <= high if high_closed else value < high)


def describe_interval(spec: str) -> str:
    """How a message states the interval: ``">= 1"``, ``"> 0"``, ``"<= 2"``, ``"in (0,1]"``."""
    low, low_closed, high, high_closed = parse_interval(spec)
    if math.isinf(high):
        return f"{'>=' if low_closed else '>'} {low:g}"
    if math.isinf(low):
        return f"{'<=' if high_closed else '<'} {high:g}"
    return f"in {spec.replace(' ', '')}"


def check_field(
    name: str, value: object, interval: str, *, integer: bool = False, each: bool = False
) -> None:
    """A config field's number (or, with ``each``, every item) is a finite int (with ``integer``)
    or real in ``interval``; bools refused. Messages read like ``gamma=1.5 must be in [0,1]``.

    Raises:
        ValueError: the first item that is not such a number.
    """
    items: Sequence[object] = value if each else (value,)  # type: ignore[assignment]
    for item in items:
        if isinstance(item, bool) or not isinstance(item, numbers.Real):
            raise ValueError(f"{name}={value!r} must be {'an int' if integer else 'a number'}")
        if integer and not isinstance(item, numbers.Integral):
            raise ValueError(f"{name}={value!r} must be an int")
        if not math.isfinite(item):
            raise ValueError(f"{name}={value!r} must be a finite number")
        if not in_interval(float(item), interval):
            if each:
                raise ValueError(
                    f"{name}={tuple(items)!r}: each item must be {describe_interval(interval)}, got {item!r}"
                )
            raise ValueError(f"{name}={value!r} must be {describe_interval(interval)}")
