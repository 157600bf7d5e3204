"""The kernel ops as torch custom ops (namespace ``tritonrl``): what ``torch.compile`` traces.

Every :class:`~tritonrl.kernels.backend.KernelOp` has a custom op of the same name
(``torch.ops.tritonrl.noisy_linear``, ...; registered in ``kernels/<family>/library.py``, imported
by each family's ``__init__``), with a fake (meta) implementation and, where the op is
differentiable, autograd whose backward is a custom op too. Under tracing the public functions
call them, so code using the kernels compiles with ``fullgraph=True``; eager calls keep the direct
path. This module holds the shared pieces: :func:`inline_reference` and :func:`traces_reference`
(the torch reference traced inline where it is what would run), :func:`absent` and
:func:`needed_grads` (flat schemas), :func:`run_backward` and :func:`reference_grads_in_op`
(gradients inside an op).

Guide: docs/pages/kernels.md ("torch.compile: the ops as custom ops": the design decisions);
measurements: docs/pages/speed.md.
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
    """Whether compiled calls of the noisy-head and Mamba2 ops trace the torch reference inline
    where it is what would run (see the module doc): ``TRITONRL_INLINE_REFERENCE``, on when unset.

    ``0`` routes every compiled call through the custom op. Read when a graph is traced (a
    compiled function keeps the choice it was traced with), never in eager calls.

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
    """:func:`inline_reference`, and op ``name`` would run its torch reference on ``device``
    (taken at trace time)."""
    from tritonrl.kernels.backend import references_forced, registry

    if references_forced():  # an export trace: the reference, whatever TRITONRL_INLINE_REFERENCE says
        return True
    return inline_reference() and registry()[name].select(torch.device(device)).backend == "torch"


def traces_reference(op: KernelOp, device: torch.device) -> bool:
    """Under ``torch.compile``: call ``op``'s torch reference inline (``True``) or its custom op.

    ``True`` inside :func:`tritonrl.kernels.backend.references_only` (an export trace), or when
    :func:`inline_reference` is on and ``op`` selects its reference for ``device`` (decided once
    per traced graph). Only meaningful while tracing.
    """
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
    """:func:`~tritonrl.kernels.fallback.reference_grads` callable from a custom op's
    implementation: the same arguments and result, with the autograd dispatch keys that the op
    machinery excluded turned back on while it runs."""
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
    """The gradients a backward op returns: one contiguous tensor per input that ``needs`` flags
    and that exists, in order; a gradient the backend did not produce (the input does not reach
    the output) is zeros like its input.
    """
    return [
        (torch.zeros_like(t, memory_format=torch.contiguous_format) if g is None else g.contiguous())
        for g, t, n in zip(grads, inputs, needs, strict=True)
        if n and t is not None
    ]


def fake_grads(inputs: Sequence[torch.Tensor | None], needs: Sequence[bool]) -> list[torch.Tensor]:
    """The fake counterpart of :func:`needed_grads`: empty contiguous tensors like the inputs."""
    return [t.new_empty(t.shape) for t, n in zip(inputs, needs, strict=True) if n and t is not None]


def place_grads(flat: Sequence[torch.Tensor], needs: Sequence[bool]) -> list[torch.Tensor | None]:
    """Undo :func:`needed_grads` in an autograd backward: one entry per input, ``None`` where
    ``needs`` is false (``needs`` is ``ctx.needs_input_grad``, false for absent inputs)."""
    it = iter(flat)
    return [next(it) if n else None for n in needs]


def run_backward(
    op: KernelOp, device: torch.device, triton_call: Callable[[], T], reference_call: Callable[[], T]
) -> T:
    """A backward op's dispatch, as in eager mode: on a Triton selection the Triton backward
    through :meth:`KernelOp.guard` (counted; a device failure falls back to ``reference_call``),
    else ``reference_call`` (not counted: eager autograd through the reference counts nothing)."""
    if op.select(device).backend == "torch":
        return reference_call()
    return op.guard(device, triton_call, reference_call)
