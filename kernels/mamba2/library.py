"""The Mamba2 ops as torch custom ops (design: `tritonrl.kernels.library`).

``mamba2_scan`` returns ``(y, final_states, chunk_states)`` (an empty f32 ``[0]`` where not asked
for); ``mamba2_step`` updates ``state`` in place. Imports no triton.
"""

from __future__ import annotations

from typing import Any

import torch
from tritonrl.kernels.library import (
    absent,
    fake_grads,
    needed_grads,
    place_grads,
    reference_grads_in_op,
    run_backward,
)
from tritonrl.kernels.mamba2.api import MAMBA2_SCAN, MAMBA2_STEP
from tritonrl.kernels.mamba2.reference import mamba2_scan_ref, mamba2_step_ref

__all__ = ["mamba2_scan_backward_op", "mamba2_scan_op", "mamba2_step_op"]

Tensor = torch.Tensor
_PARAMS = (
    "Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, Tensor? dt_bias, bool dt_softplus, "
    "float dt_min, float dt_max"
)
_INPUTS = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states")  # differentiable, in order


def _state_dtype(x: Tensor) -> torch.dtype:
    """The dtype of the states the reference returns (float64 only for float64 x)."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


@torch.library.custom_op(
    "tritonrl::mamba2_scan",
    mutates_args=(),
    schema=(
        f"(Tensor x, Tensor dt, {_PARAMS}, Tensor? initial_states, Tensor? resets, int chunk_size, "
        "bool return_final_states, bool store_states) -> (Tensor, Tensor, Tensor)"
    ),
)
def mamba2_scan_op(
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor | None,
    z: Tensor | None,
    dt_bias: Tensor | None,
    dt_softplus: bool,
    dt_min: float,
    dt_max: float,
    initial_states: Tensor | None,
    resets: Tensor | None,
    chunk_size: int,
    return_final_states: bool,
    store_states: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """`mamba2_scan` as an op: ``(y, final_states, chunk_states)``."""
    limit = (dt_min, dt_max)

    def triton() -> tuple[Tensor, Tensor | None, Tensor | None]:
        from tritonrl.kernels.mamba2.chunk import mamba2_chunk_fwd

        return mamba2_chunk_fwd(
            x,
            dt,
            A,
            B,
            C,
            D,
            z,
            dt_bias,
            dt_softplus,
            limit,
            initial_states,
            resets,
            chunk_size,
            store_final=return_final_states,
            store_states=store_states,
        )

    def reference() -> tuple[Tensor, Tensor | None, Tensor | None]:
        res = mamba2_scan_ref(
            x,
            dt,
            A,
            B,
            C,
            D,
            z,
            dt_bias,
            dt_softplus,
            limit,
            initial_states,
            resets,
            chunk_size,
            True,
            return_chunk_states=store_states,
        )
        return res if store_states else (*res, None)

    y, final, chunks = MAMBA2_SCAN.dispatch(x.device, triton, reference)
    return (
        y.contiguous(),
        final.contiguous() if return_final_states else absent(x),
        chunks.contiguous() if store_states else absent(x),
    )


@mamba2_scan_op.register_fake
def _(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, *rest: Any) -> tuple[Tensor, Tensor, Tensor]:
    chunk_size, return_final, store = rest[-3:]
    batch, length, nheads, headdim = x.shape
    dstate = B.shape[-1]
    sdt = _state_dtype(x)
    nchunks = (length + chunk_size - 1) // chunk_size
    missing = x.new_empty((0,), dtype=torch.float32)  # like absent()
    final = x.new_empty((batch, nheads, headdim, dstate), dtype=sdt) if return_final else missing
    chunks = x.new_empty((batch, nheads, nchunks, headdim, dstate), dtype=sdt) if store else missing
    return x.new_empty(x.shape), final, chunks


@torch.library.custom_op(
    "tritonrl::mamba2_scan_backward",
    mutates_args=(),
    schema=(
        f"(Tensor grad_y, Tensor? grad_final, Tensor chunk_states, Tensor x, Tensor dt, {_PARAMS}, "
        "Tensor? initial_states, Tensor? resets, int chunk_size, bool[] needs) -> Tensor[]"
    ),
)
def mamba2_scan_backward_op(
    grad_y: Tensor,
    grad_final: Tensor | None,
    chunk_states: Tensor,
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor | None,
    z: Tensor | None,
    dt_bias: Tensor | None,
    dt_softplus: bool,
    dt_min: float,
    dt_max: float,
    initial_states: Tensor | None,
    resets: Tensor | None,
    chunk_size: int,
    needs: list[bool],
) -> list[Tensor]:
    """Gradients of `mamba2_scan_op` for the inputs ``needs`` flags, in argument order.
    ``chunk_states`` may be an empty ``[0]`` (the Triton path then recomputes them)."""
    limit = (dt_min, dt_max)
    inputs = (x, dt, A, B, C, D, z, dt_bias, initial_states)

    def triton() -> tuple[Tensor | None, ...]:
        from tritonrl.kernels.mamba2.chunk import mamba2_chunk_bwd, mamba2_chunk_fwd

        hc = chunk_states
        if hc.numel() == 0:
            cfg = (dt_softplus, limit, initial_states, resets, chunk_size)
            hc = mamba2_chunk_fwd(x, dt, A, B, C, D, z, dt_bias, *cfg, store_final=False, store_states=True)[
                2
            ]
        grads = mamba2_chunk_bwd(
            grad_y, grad_final, hc, x, dt, A, B, C, D, z, dt_bias, dt_softplus, limit, resets, chunk_size
        )
        return tuple(grads.get(k) for k in _INPUTS)

    def reference() -> tuple[Tensor | None, ...]:
        def fn(*t: Tensor) -> tuple[Tensor, Tensor]:
            x_, dt_, A_, B_, C_, D_, z_, bias_, h0_ = t
            return mamba2_scan_ref(
                x_, dt_, A_, B_, C_, D_, z_, bias_, dt_softplus, limit, h0_, resets, chunk_size, True
            )  # type: ignore[return-value]

        return reference_grads_in_op(fn, inputs, needs, (grad_y, grad_final))

    return needed_grads(run_backward(MAMBA2_SCAN, x.device, triton, reference), inputs, needs)


@mamba2_scan_backward_op.register_fake
def _(grad_y: Tensor, grad_final: Tensor | None, chunk_states: Tensor, *rest: Any) -> list[Tensor]:
    return fake_grads((*rest[:8], rest[11]), rest[-1])


def _scan_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor, Tensor]) -> None:
    x, dt, A, B, C, D, z, dt_bias, softplus, dt_min, dt_max, h0, resets, chunk_size, ret_final, _ = inputs
    _, final, chunks = output
    ctx.cfg = (softplus, dt_min, dt_max, chunk_size, ret_final)
    ctx.mark_non_differentiable(chunks, *(() if ret_final else (final,)))
    ctx.save_for_backward(x, dt, A, B, C, D, z, dt_bias, h0, resets, chunks)


def _scan_backward(
    ctx: Any, grad_y: Tensor | None, grad_final: Tensor | None, _grad_chunks: Tensor | None
) -> tuple[Tensor | None, ...]:
    x, dt, A, B, C, D, z, dt_bias, h0, resets, chunks = ctx.saved_tensors
    softplus, dt_min, dt_max, chunk_size, ret_final = ctx.cfg
    n = ctx.needs_input_grad
    needs = [*n[:8], n[11]]
    if not any(needs):
        return (None,) * 16
    if grad_y is None:
        grad_y = torch.zeros_like(x)
    flat = torch.ops.tritonrl.mamba2_scan_backward(
        grad_y,
        grad_final if ret_final else None,
        chunks,
        x,
        dt,
        A,
        B,
        C,
        D,
        z,
        dt_bias,
        softplus,
        dt_min,
        dt_max,
        h0,
        resets,
        chunk_size,
        needs,
    )
    g = place_grads(flat, needs)
    return (*g[:8], None, None, None, g[8], None, None, None, None)


mamba2_scan_op.register_autograd(_scan_backward, setup_context=_scan_setup)


@torch.library.custom_op(
    "tritonrl::mamba2_step",
    mutates_args=("state",),
    schema=f"(Tensor(a!) state, Tensor x, Tensor dt, {_PARAMS}, Tensor? reset) -> Tensor",
)
def mamba2_step_op(
    state: Tensor,
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor | None,
    z: Tensor | None,
    dt_bias: Tensor | None,
    dt_softplus: bool,
    dt_min: float,
    dt_max: float,
    reset: Tensor | None,
) -> Tensor:
    """`mamba2_step` as an op: updates ``state``, returns ``y``."""
    args = (state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, (dt_min, dt_max), reset)

    def triton() -> Tensor:
        from tritonrl.kernels.mamba2.step import mamba2_step_triton

        return mamba2_step_triton(*args)

    return MAMBA2_STEP.dispatch(x.device, triton, lambda: mamba2_step_ref(*args)).contiguous()


@mamba2_step_op.register_fake
def _(state: Tensor, x: Tensor, *_rest: Any) -> Tensor:
    return x.new_empty(x.shape)
