"""The frame-stack gather: the specification, the CPU path and the test oracle.

Per-environment rings: ``frames [N, P]`` uint8 and ``depth [N]`` int32 (the slot's frames so far
in its episode). An observation is the ``stack`` frames ending at a row, zeros before the start.
"""

from __future__ import annotations

import torch

__all__ = ["frame_stack_sample_ref", "stack_rows"]

_CHUNK_BYTES = 1 << 18  # bytes of frames per CPU chunk: the chunk's output stays in L2


def stack_rows(rows: torch.Tensor, ring: int, stack: int) -> torch.Tensor:
    """int64 ``[M, stack]``: the rows of the ``stack`` frames ending at each of ``rows`` (oldest
    first), wrapping inside each environment's ring of ``ring`` slots."""
    back = torch.arange(stack - 1, -1, -1, device=rows.device)
    base = rows.div(ring, rounding_mode="floor").mul_(ring)
    return base[:, None] + (rows.remainder(ring)[:, None] - back).remainder_(ring)


def frame_stack_sample_ref(
    frames: torch.Tensor,
    depth: torch.Tensor,
    rows: torch.Tensor,
    ring: int,
    stack: int,
    dtype: torch.dtype,
    scale: float,
) -> torch.Tensor:
    """``[M, stack, P]`` in ``dtype``: ``out[m, j] = frames[src[m, j]] * scale`` within the episode of
    ``rows[m]``, else 0, with ``src = stack_rows(rows, ring, stack)``. Arguments: see
    [`tritonrl.kernels.frame_stack.frame_stack_sample`][tritonrl.kernels.frame_stack.frame_stack_sample].

    Each product is the byte times ``scale`` rounded to ``dtype``, rounded once (as the kernel).
    On CPU the frames go through in cache-sized chunks into one reused buffer.
    """
    src = stack_rows(rows, ring, stack).view(-1)
    back = torch.arange(stack - 1, -1, -1, device=rows.device)
    keep = back < depth.index_select(0, rows).to(torch.int64)[:, None]  # [M, stack]
    weight = torch.where(keep, scale, 0.0).to(dtype).view(-1, 1)
    m, p = rows.shape[0], frames.shape[1]
    out = torch.empty((m, stack, p), dtype=dtype, device=frames.device)
    flat, n = out.view(m * stack, p), m * stack
    chunk = n if frames.device.type != "cpu" else max(32, _CHUNK_BYTES // max(p, 1))
    buf = torch.empty((min(chunk, n), p), dtype=torch.uint8, device=frames.device)
    for lo in range(0, n, chunk):
        hi = min(lo + chunk, n)
        gathered = torch.index_select(frames, 0, src[lo:hi], out=buf[: hi - lo])
        flat[lo:hi].copy_(gathered).mul_(weight[lo:hi])
    return out
