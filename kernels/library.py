"""The kernel ops as torch custom ops (namespace ``tritonrl``): what ``torch.compile`` traces.

The pieces every family's ``library.py`` shares. Imports torch and ``kernels`` only.
See docs/pages/kernels.md ("torch.compile: the ops as custom ops").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
from tritonrl.kernels.backend import KernelOp
from tritonrl.kernels.fallback import reference_grads

__all__ = [
    "INLINE_REFERENCE_ENV",
    "NAMESPACE",
    "absent",
    "fake_grads",
    "inline_reference",
    "needed_grads",
    "place_grads",
    "reference_grads_in_op",
    "run_backward",
    "traces_reference",
]

T = TypeVar("T")

NAMESPACE = "tritonrl"

INLINE_REFERENCE_ENV = "TRITONRL_INLINE_REFERENCE"
_ON, _OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def inline_reference() -> bool:
    """Whether compiled calls trace the torch reference inline where it would run:
    ``TRITONRL_INLINE_REFERENCE``, on when unset; read at trace time only.

    Raises:
        ValueError: the variable holds anything but 1/0 (true/false, yes/no, on/off).
    """
    raw = os.environ.get(INLINE_REFERENCE_ENV, "1")
    value = raw.strip().lower() or "1"
    if value not in _ON + _OFF:
        raise ValueError(f"{INLINE_REFERENCE_ENV}={raw!r} is not a switch; allowed values: 1, 0")
    return value in _ON


@torch.compiler.assume_constant_result
def _traces_reference(name: str, device: str) -> bool:
    """`inline_reference`, and op ``name`` would run its reference on ``device`` (trace time)."""
    from tritonrl.kernels.backend import references_forced, registry

    if references_forced():  # an export trace: the reference, whatever TRITONRL_INLINE_REFERENCE says
        return True
    return inline_reference() and registry()[name].select(torch.device(device)).backend == "torch"


def traces_reference(op: KernelOp, device: torch.device) -> bool:
    """Under ``torch.compile``: call ``op``'s torch reference inline (``True``) or its custom op
    (inside `references_only`, or by `inline_reference`)."""
    return _traces_reference(op.name, str(device))


def _autograd_keys() -> torch._C.DispatchKeySet:
    """The dispatch keys a custom op's implementation runs without (read once, at import)."""
    outside = torch._C._dispatch_tls_local_exclude_set()
    with torch._C._AutoDispatchBelowAutograd():
        inside = torch._C._dispatch_tls_local_exclude_set()
    return inside - outside


_AUTOGRAD_KEYS = _autograd_keys()


def reference_grads_in_op(
    fn: Callable[..., torch.Tensor | tuple[torch.Tensor, ...]],
    inputs: Sequence[torch.Tensor | None],
    needs: Sequence[bool],
    grad_outputs: Sequence[torch.Tensor | None],
) -> tuple[torch.Tensor | None, ...]:
    """`reference_grads` with autograd turned back on, for use
    inside a custom op's implementation."""
    include = torch._C._dispatch_tls_local_include_set()
    exclude = torch._C._dispatch_tls_local_exclude_set() - _AUTOGRAD_KEYS
    with torch._C._ForceDispatchKeyGuard(include, exclude):
        return reference_grads(fn, inputs, needs, grad_outputs)


def absent(like: torch.Tensor) -> torch.Tensor:
    """The stand-in for an output that does not exist: an empty f32 ``[0]`` on ``like``'s device."""
    return torch.empty(0, dtype=torch.float32, device=like.device)


def needed_grads(
    grads: Sequence[torch.Tensor | None],
    inputs: Sequence[torch.Tensor | None],
    needs: Sequence[bool],
) -> list[torch.Tensor]:
    """A backward op's outputs: one contiguous gradient per existing input that ``needs`` flags,
    zeros where the backend produced none."""
    return [
        (torch.zeros_like(t, memory_format=torch.contiguous_format) if g is None else g.contiguous())
        for g, t, n in zip(grads, inputs, needs, strict=True)
        if n and t is not None
    ]


def fake_grads(inputs: Sequence[torch.Tensor | None], needs: Sequence[bool]) -> list[torch.Tensor]:
    """The fake counterpart of `needed_grads`: empty contiguous tensors like the inputs."""
    return [t.new_empty(t.shape) for t, n in zip(inputs, needs, strict=True) if n and t is not None]


def place_grads(flat: Sequence[torch.Tensor], needs: Sequence[bool]) -> list[torch.Tensor | None]:
    """Undo `needed_grads`: one entry per input, ``None`` where ``needs`` is false."""
    it = iter(flat)
    return [next(it) if n else None for n in needs]


def run_backward(
    op: KernelOp, device: torch.device, triton_call: Callable[[], T], reference_call: Callable[[], T]
) -> T:
    """A backward op's dispatch: the Triton backward through `KernelOp.guard` (counted)
    on a Triton selection, else ``reference_call`` (not counted)."""
    if op.select(device).backend == "torch":
        return reference_call()
    return op.guard(device, triton_call, reference_call)
