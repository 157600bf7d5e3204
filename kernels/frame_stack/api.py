"""The frame-stack sampling op: validation, dispatch and the public function. Imports no triton.

Layout: `tritonrl.kernels.frame_stack.reference`. Ask for a batch's observations and next
observations in one call (``rows`` of both, concatenated).
"""

from __future__ import annotations

import torch
from tritonrl.kernels.backend import KernelOp
from tritonrl.kernels.frame_stack.reference import frame_stack_sample_ref, stack_rows
from tritonrl.kernels.validate import check_int, check_real, check_tensor

__all__ = ["FLOAT_DTYPES", "FRAME_STACK_SAMPLE", "frame_stack_sample", "stack_rows"]

FLOAT_DTYPES = (torch.float32, torch.bfloat16)

# One name: the function, its KernelOp and its registry name (reference frame_stack_sample_ref,
# Triton frame_stack_sample_triton).
FRAME_STACK_SAMPLE = KernelOp(
    "frame_stack_sample",
    frame_stack_sample_ref,
    "tritonrl.kernels.frame_stack.fused:frame_stack_sample_triton",
)


def frame_stack_sample(
    frames: torch.Tensor,
    depth: torch.Tensor,
    rows: torch.Tensor,
    *,
    ring: int,
    stack: int,
    dtype: torch.dtype,
    scale: float = 1.0 / 255.0,
) -> torch.Tensor:
    """The stacked, converted observations of ``rows``.

    Args:
        frames: uint8 ``[N, P]``, contiguous: ``N = E * ring`` frames of ``P`` bytes.
        depth: int32 ``[N]``: frames of each slot's episode up to and including the slot.
        rows: int64 ``[M]``, each in ``[0, N)`` (not checked: reading values would sync).
        ring: slots per environment (``N`` is a multiple of it).
        stack: frames per observation, ``1 <= stack <= ring``.
        dtype: float32 or bfloat16, the output dtype.
        scale: each frame's multiplier (``1/255`` maps bytes to ``[0, 1]``), finite and >= 0.

    Returns:
        ``[M, stack, P]`` in ``dtype``; ``out[m, j]`` is the frame ``stack - 1 - j`` steps before
        ``rows[m]``, zeros before the episode's start.

    Raises:
        TypeError: a tensor of the wrong dtype, or ``dtype`` not float32 / bfloat16.
        ValueError: wrong shapes or devices, a non-contiguous ``frames``, ``ring`` not dividing
            ``N``, ``stack`` outside ``[1, ring]``, or a negative or non-finite ``scale``.
    """
    frames = check_tensor("frames", frames, dtype=torch.uint8, ndim=2, what="[N, P]", contiguous=True)
    device = frames.device
    n = frames.shape[0]
    check_tensor("depth", depth, dtype=torch.int32, shape=(n,), what="[N]", device=device, device_of="frames")
    check_tensor("rows", rows, dtype=torch.int64, ndim=1, what="[M]", device=device, device_of="frames")
    check_int("ring", ring, low=1)
    if n % ring:
        raise ValueError(f"ring={ring} must divide the {n} rows of frames")
    check_int("stack", stack, low=1, high=ring)
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"dtype must be float32 or bfloat16, got {dtype}")
    scale = check_real("scale", scale)
    if torch.compiler.is_compiling():  # the custom op (library.py)
        return torch.ops.tritonrl.frame_stack_sample(frames, depth, rows, ring, stack, dtype, scale)
    return FRAME_STACK_SAMPLE(device, frames, depth, rows, ring, stack, dtype, scale)
