"""The frame-stack gather as a torch custom op (design: `tritonrl.kernels.library`).

``torch.ops.tritonrl.frame_stack_sample``, called under ``torch.compile``: eager mode's dispatch,
a fake for the ``[M, stack, P]`` output, not differentiable. Imports no triton.
"""

from __future__ import annotations

import torch
from tritonrl.kernels.frame_stack.api import FRAME_STACK_SAMPLE
from tritonrl.kernels.frame_stack.reference import frame_stack_sample_ref

__all__ = ["frame_stack_sample_op"]

Tensor = torch.Tensor


@torch.library.custom_op(
    "tritonrl::frame_stack_sample",
    mutates_args=(),
    schema=(
        "(Tensor frames, Tensor depth, Tensor rows, int ring, int stack, ScalarType dtype, "
        "float scale) -> Tensor"
    ),
)
def frame_stack_sample_op(
    frames: Tensor, depth: Tensor, rows: Tensor, ring: int, stack: int, dtype: torch.dtype, scale: float
) -> Tensor:
    """`frame_stack_sample` as an op: ``[M, stack, P]`` in ``dtype``."""

    def triton() -> Tensor:
        from tritonrl.kernels.frame_stack.fused import frame_stack_sample_triton

        return frame_stack_sample_triton(frames, depth, rows, ring, stack, dtype, scale)

    return FRAME_STACK_SAMPLE.dispatch(
        frames.device, triton, lambda: frame_stack_sample_ref(frames, depth, rows, ring, stack, dtype, scale)
    )


@frame_stack_sample_op.register_fake
def _(
    frames: Tensor, depth: Tensor, rows: Tensor, ring: int, stack: int, dtype: torch.dtype, scale: float
) -> Tensor:
    return frames.new_empty((rows.shape[0], stack, frames.shape[1]), dtype=dtype)
