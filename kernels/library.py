"""The kernel ops as torch custom ops (namespace ``tritonrl``): what ``torch.compile`` traces.

Every :class:`~tritonrl.kernels.backend.KernelOp` has a custom op of the same name
(``torch.ops.tritonrl.noisy_linear``, ...; registered in ``kernels/<family>/library.py``, imported
by each family's ``__init__``), with a fake (meta) implementation and, where the op is
differentiable, autograd whose backward is a custom op too (``tritonrl::noisy_linear_backward``,
...). ``torch.compile(fullgraph=True)`` then traces code calling the public functions without a
graph break: under tracing the public functions validate with plain checks (evaluated once, at
trace time) and call the custom op, which the graph keeps as one opaque call.

Design decisions:

- **Opaque ops** (``torch.library.custom_op``), not ``torch.library.triton_op``: the
  implementation is chosen at call time by :meth:`KernelOp.dispatch` (``TRITONRL_BACKEND``,
  the Triton interpreter, the fall back to the torch reference after a device failure, which is
  remembered per device), so ``op.counts`` / ``op.last_backend`` keep recording what ran. A
  ``triton_op`` body is traced into the graph, which would freeze that choice at compile time and
  lose the fallback. The real implementations call the same host launchers as the eager path
  (``noisy_linear_fwd``, ``mamba2_chunk_bwd``, ...) and the same references.
- **Flat schemas**: ``NoisyParams`` and ``SumTree`` become tensor arguments, optional tensors are
  ``Tensor?``. An output that does not exist for some arguments (the expected Q-values without a
  support, the final states when not asked for) is a 0-element f32 tensor (:func:`absent`), so
  every op has one fixed return type. Backward ops return ``Tensor[]``: one gradient per input
  flagged in their ``needs`` argument (:func:`needed_grads`), decided at trace time.
- **Eager calls keep the direct path.** Calling a custom op costs more Python than the small
  layers of RL networks (measured, one thread, ``noisy_linear`` on ``[1, 64] x [64, 64]``, CPU
  time per call: 8 us through the ``KernelOp`` and 16 us through the custom op; 10 us and 38 us
  when the weights require grad), so the public functions route through the custom op only when
  ``torch.compiler.is_compiling()`` (a 50 ns check); eager calls run exactly as before. Tests
  check that both paths give the same outputs and gradients.
- **The torch reference is traced inline where it is what would run** (the noisy-head and the
  Mamba2 ops, :func:`traces_reference`; a compiled PPO-Mamba2 update on a CPU was 0.88x eager
  through the opaque scan, 2.6x with it inline): when the op's selection for the device is the torch reference
  (every CPU tensor unless ``TRITONRL_BACKEND=triton`` under the interpreter), the compiled
  public functions call the reference itself, which Inductor fuses with the code around it. The
  opaque op runs its reference through a Python implementation and a Python backward
  (``reference_grads``) and made a compiled Rainbow-head step on a CPU 1.8x *slower* than eager
  (1,720 against 970 us; traced inline: 830 us). The selection is taken once, when the graph is
  traced (``torch.compiler.assume_constant_result``): a compiled function keeps the backend it
  was traced with (set ``TRITONRL_BACKEND`` before compiling). ``TRITONRL_INLINE_REFERENCE=0``
  (:func:`inline_reference`, read when a graph is traced) routes every compiled call through the
  custom op, to debug or profile the op path on a CPU. Counters: an inlined reference runs inside
  the graph and is not counted in ``op.counts``.
- **Gradients**: the backward ops run the Triton backward on a Triton selection (through
  :meth:`KernelOp.guard`, falling back to :func:`~tritonrl.kernels.fallback.reference_grads`) and
  :func:`~tritonrl.kernels.fallback.reference_grads` over the torch reference otherwise, which is
  the gradient eager autograd gives through the reference. The backward decides its backend when
  it runs (a device that failed in the forward has fallen back for good by then). The backward
  ops have no autograd of their own: no double backward under ``torch.compile``.
- **Autograd inside an op.** A custom op's implementation runs below the autograd dispatch keys
  (``torch._C._AutoDispatchBelowAutograd``), where torch ops record no graph, so
  :func:`~tritonrl.kernels.fallback.reference_grads` could not differentiate the reference there.
  :func:`reference_grads_in_op` runs it with exactly those keys re-enabled (private dispatcher
  guards that torch's own higher-order ops use); the gradients are then the same bits as eager
  autograd through the reference. ``torch.func.vjp`` (public) would work too, but it is about
  1.4x slower on the Mamba2 reference and its ``silu`` backward differs from eager's in the last
  bit.
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
    from tritonrl.kernels.backend import registry

    return inline_reference() and registry()[name].select(torch.device(device)).backend == "torch"


def traces_reference(op: KernelOp, device: torch.device) -> bool:
    """Under ``torch.compile``: call ``op``'s torch reference inline (``True``) or its custom op.

    ``True`` when :func:`inline_reference` is on and ``op`` selects its reference for ``device``
    (decided once per traced graph). Only meaningful while tracing.
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
