"""The frame-stack gather: the specification, the CPU path and the test oracle.

A frame store keeps each observation frame once, as uint8, in per-environment rings of ``ring``
slots: ``frames [N, P]`` (``N = E * ring`` rows, ``P`` bytes per frame; environment ``e`` owns rows
``e * ring .. e * ring + ring - 1``) and ``depth [N]`` int32, the number of frames of the slot's
episode up to and including the slot (1 at an episode's first frame). The stacked observation of
row ``r`` is the ``stack`` frames ending at ``r`` in its ring, oldest first; a frame from before the
episode's start is zeros (as a zero-padding frame-stack wrapper gives). Each frame is converted
once to the output dtype and multiplied by ``scale``.
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
    """``[M, stack, P]`` in ``dtype``: ``out[m, j] = frames[src[m, j]] * scale`` where the frame
    belongs to the episode of ``rows[m]`` (``stack - 1 - j < depth[rows[m]]``), else 0, with
    ``src = stack_rows(rows, ring, stack)``. Arguments: see
    :func:`tritonrl.kernels.frame_stack.frame_stack_sample`.

    One gather of uint8 rows, one conversion into the output (exact: a byte is exactly an f32 or
    a bf16) and one in-place multiply by a per-frame weight, ``scale`` rounded to ``dtype`` or 0:
    each product is the f32 product of the byte and the weight rounded once to ``dtype`` (exact
    in f32 for bf16 weights). No mixed-dtype multiply (a slow path on CPU) and no float copy of
    the gathered frames. On CPU the frames go through in chunks of about 256 KiB of bytes, each
    gathered into one reused buffer and converted and scaled while it is in cache.
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
