"""Checks and conversions of the replay buffers' arguments and of the fields ``add``/``extend`` take.

Ints and reals go through [`tritonrl.kernels.validate`][tritonrl.kernels.validate]; this module adds shapes,
dtype kinds and host reads of rewards and flags. Only metadata is read unless a docstring says "on the host".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from tritonrl.kernels.validate import check_int, check_real
from tritonrl.toolkit.checks import ActionRule

__all__ = [
    "NUMPY_DTYPES",
    "action_rule",
    "as_numpy",
    "check_fraction",
    "check_shape",
    "device_vector",
    "host_array",
    "host_vector",
    "input_tensor",
    "integer_kind",
    "itemsize",
    "kind_rule",
    "leading_dims",
    "with_step_dim",
]

NUMPY_DTYPES = (torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.uint8)
"""Storage dtypes numpy can view (the CPU buffers' numpy fast paths)."""


def check_fraction(name: str, value: object, *, positive: bool = False) -> float:
    """``value`` as a float in ``[0, 1]`` (``(0, 1]`` with ``positive``).

    Raises:
        ValueError: as [`check_real`][tritonrl.kernels.validate.check_real], or above 1.
    """
    v = check_real(name, value, positive=positive)
    if v > 1.0:
        raise ValueError(f"{name} must be in {'(0, 1]' if positive else '[0, 1]'}, got {value!r}")
    return v


def check_shape(name: str, value: Any) -> tuple[int, ...]:
    """A shape argument as a tuple of positive ints.

    Raises:
        TypeError: not an iterable of ints.
        ValueError: a dimension below 1.
    """
    try:
        shape = tuple(int(d) for d in value)
    except TypeError:
        raise TypeError(f"{name} must be a tuple of ints, got {value!r}") from None
    if any(d < 1 for d in shape):
        raise ValueError(f"{name} must have positive dimensions, got {value!r}")
    return shape


def action_rule(
    num_actions: int | Sequence[int] | None, action_shape: tuple[int, ...], action_dtype: torch.dtype
) -> ActionRule | None:
    """The action check of ``add``/``extend``: finite floats, or integers in ``[0, num_actions)``.

    Raises:
        ValueError: ``num_actions`` is not a positive int or ``D`` of them for ``action_shape == (D,)``,
            or is given for floating actions.
    """
    if action_dtype.is_floating_point:
        if num_actions is not None:
            raise ValueError(f"num_actions={num_actions!r} needs an integer action_dtype, got {action_dtype}")
        bound = np.full(max(1, int(np.prod(action_shape))), np.inf)
        return ActionRule.box(-bound, bound, bounded=False)
    if num_actions is None:
        return None
    if isinstance(num_actions, Sequence):
        nvec = [check_int("num_actions", n, low=1) for n in num_actions]
        if action_shape != (len(nvec),):
            raise ValueError(
                f"num_actions={list(nvec)} needs action_shape=({len(nvec)},), got {action_shape}"
            )
        return ActionRule.multidiscrete(nvec)
    n = check_int("num_actions", num_actions, low=1)
    if action_shape == ():
        return ActionRule.discrete(n)
    if len(action_shape) == 1:
        return ActionRule.multidiscrete([n] * action_shape[0])
    raise ValueError(f"num_actions={n} needs action_shape () or (D,), got {action_shape}")


def integer_kind(x: Any) -> bool:
    """``x`` (tensor, array, list or number) has an integer dtype (not bool): metadata only."""
    dtype = x.dtype if isinstance(x, (torch.Tensor, np.ndarray)) else np.asarray(x).dtype
    if isinstance(dtype, torch.dtype):
        return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool
    return dtype.kind in "iu"


def itemsize(dtype: torch.dtype) -> int:
    """Bytes per element of ``dtype``."""
    return torch.empty((), dtype=dtype).element_size()


def _is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


def _is_uint8(dtype: torch.dtype) -> bool:
    return dtype == torch.uint8


def _is_int(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def kind_rule(target: torch.dtype) -> tuple[Callable[[torch.dtype], bool], str]:
    """Which input dtypes a field stored as ``target`` takes, and how errors name them."""
    if target == torch.uint8:
        return _is_uint8, "uint8"
    if target.is_floating_point:
        return _is_float, "a floating dtype"
    return _is_int, "an integer dtype"


def input_tensor(name: str, value: Any, shape: tuple[int, ...], target: torch.dtype) -> torch.Tensor:
    """An input field as a tensor (not yet cast or moved) after shape and dtype-kind checks.

    Raises:
        ValueError: another shape.
        TypeError: a dtype ``target`` storage does not take.
    """
    t = value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")
    ok, want = kind_rule(target)
    if not ok(t.dtype):
        raise TypeError(f"{name} must have {want} (stored as {target}), got {t.dtype}")
    return t


def host_array(name: str, value: Any, shape: tuple[int, ...], kind: str) -> np.ndarray:
    """A reward (``kind="real"``) or flag (``"bool"``) array read on the host, checked.

    Raises:
        ValueError: another shape, or NaN/inf rewards.
        TypeError: a wrong dtype kind.
    """
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()  # a sync if the tensor lives on a GPU
        value = (value.float() if value.dtype in (torch.bfloat16, torch.float16) else value).numpy()
    arr = np.asarray(value)
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
    if kind == "bool" and arr.dtype != np.bool_:
        raise TypeError(f"{name} must be boolean, got dtype {arr.dtype}")
    if kind == "real":
        if arr.dtype == np.bool_ or arr.dtype.kind not in "fiu":
            raise TypeError(f"{name} must be a real number array, got dtype {arr.dtype}")
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            raise ValueError(f"{name} contains NaN or infinite values")
    return arr


def device_vector(name: str, value: Any, E: int, kind: str) -> torch.Tensor:
    """A reward / flag vector ``[E]`` as a tensor (not yet moved), checked without a value read.

    Raises:
        ValueError: another shape.
        TypeError: a wrong dtype kind.
    """
    t = value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))
    if tuple(t.shape) != (E,):
        raise ValueError(f"{name} must have shape {(E,)}, got {tuple(t.shape)}")
    if kind == "bool" and t.dtype != torch.bool:
        raise TypeError(f"{name} must be boolean, got dtype {t.dtype}")
    if kind == "real" and (t.dtype == torch.bool or t.dtype.is_complex):
        raise TypeError(f"{name} must be a real number array, got dtype {t.dtype}")
    return t


def as_numpy(t: torch.Tensor) -> np.ndarray:
    """A tensor's values as an array (no copy on the CPU)."""
    t = t.detach()
    return (t if t.is_cpu else t.cpu()).numpy()


def host_vector(x: Any) -> np.ndarray | None:
    """A CPU tensor or numpy array as an array (no copy), else ``None`` (the general path reads it)."""
    if type(x) is np.ndarray:
        return x
    if type(x) is torch.Tensor and x.device.type == "cpu" and x.dtype in NUMPY_DTYPES + (torch.bool,):
        return x.detach().numpy()
    return None


def leading_dims(x: Any) -> tuple[int, ...]:
    """The shape of an ``extend`` field; raises ``ValueError`` below two dims ``[T, num_envs]``."""
    shape = tuple(x.shape) if hasattr(x, "shape") else np.shape(x)
    if len(shape) < 2:
        raise ValueError(f"obs must have leading dims [T, num_envs], got shape {shape}")
    return shape


def with_step_dim(x: Any) -> Any:
    """Add a leading step dim of 1 (``add`` is ``extend`` of one step)."""
    if isinstance(x, torch.Tensor):
        return x.unsqueeze(0)
    return np.asarray(x)[None]
