"""The Triton kernel of the frame-stack gather (layout: `tritonrl.kernels.frame_stack.reference`).

One program per (row, stack position, block of pixels). Equal to the reference bit for bit on
CUDA (the interpreter truncates f32 -> bf16: one ulp). No autograd.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import empty

__all__ = ["frame_stack_sample_fwd", "frame_stack_sample_triton"]

_MAX_BLOCK = 1024  # pixels per program: 1 KiB of uint8 in, 2 or 4 KiB out


@triton.jit
def _frame_stack_sample_kernel(
    frames,
    depth,
    rows,
    out,
    P,
    ring,
    weight,
    STACK: tl.constexpr,
    BLOCK: tl.constexpr,
):
    i_mj = tl.program_id(0).to(tl.int64)
    i_p = tl.program_id(1).to(tl.int64)
    i_m = i_mj // STACK
    back = STACK - 1 - i_mj % STACK  # frames before rows[m]: 0 for the newest (j = STACK - 1)
    b_row = tl.load(rows + i_m)
    b_base = (b_row // ring) * ring
    b_src = b_base + (b_row - b_base - back + ring) % ring  # the argument of % is in [1, 2 * ring)
    keep = back < tl.load(depth + b_row).to(tl.int64)
    n_read = tl.where(keep, P, 0)  # pixels to load: none from before the episode's start
    o_p = i_p * BLOCK + tl.arange(0, BLOCK)
    m_p = o_p < P
    # [BLOCK]
    b_x = tl.load(frames + b_src * P + o_p, mask=o_p < n_read, other=0).to(tl.float32)
    b_y = b_x * weight
    tl.store(out + i_mj * P + o_p, b_y.to(out.dtype.element_ty), mask=m_p)


def _block(P: int) -> tuple[int, int]:
    """``(BLOCK, num_warps)`` for frames of ``P`` bytes: the next power of two up to 1024."""
    block = min(_MAX_BLOCK, max(128, triton.next_power_of_2(P)))
    return block, max(1, min(4, block // 256))


def frame_stack_sample_fwd(
    frames: torch.Tensor,
    depth: torch.Tensor,
    rows: torch.Tensor,
    ring: int,
    stack: int,
    dtype: torch.dtype,
    weight: float,
) -> torch.Tensor:
    """Launch the gather: ``[M, stack, P]`` in ``dtype``; ``weight`` is the multiplier already
    rounded to ``dtype``. Validates nothing."""
    m, p = rows.shape[0], frames.shape[1]
    out = empty((m, stack, p), dtype=dtype, device=frames.device)
    if m == 0 or p == 0:
        return out
    block, warps = _block(p)
    grid = (m * stack, triton.cdiv(p, block))
    _frame_stack_sample_kernel[grid](
        frames, depth, rows, out, p, ring, weight, STACK=stack, BLOCK=block, num_warps=warps
    )
    return out


def frame_stack_sample_triton(
    frames: torch.Tensor,
    depth: torch.Tensor,
    rows: torch.Tensor,
    ring: int,
    stack: int,
    dtype: torch.dtype,
    scale: float,
) -> torch.Tensor:
    """The Triton implementation of `frame_stack_sample_ref`."""
    # the reference's weight: scale rounded to f32, then to dtype (a host-side scalar, no sync)
    weight = float(torch.tensor(scale, dtype=torch.float32).to(dtype).float())
    return frame_stack_sample_fwd(frames, depth, rows, ring, stack, dtype, weight)
