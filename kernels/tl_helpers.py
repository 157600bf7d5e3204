"""Triton device helpers shared by every kernel. Imported only where a Triton path runs.

bf16 convention (CONTRIBUTING.md, "Kernels"): load bf16, compute element-wise in f32, store with
``.to(ptr.dtype.element_ty)``. `dot` upcasts to f32 only under the interpreter; ``IEEE``
(from `dot_flags`) keeps f32 products exact instead of tf32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from tritonrl.kernels.backend import interpreting

__all__ = ["dot", "dot_flags"]


def dot_flags(dtype: torch.dtype) -> dict[str, bool]:
    """The ``INTERPRET`` and ``IEEE`` constexpr launch arguments for operands of ``dtype``."""
    return {"INTERPRET": interpreting(), "IEEE": dtype == torch.float32}


@triton.jit
def dot(a, b, acc, INTERPRET: tl.constexpr, IEEE: tl.constexpr):
    """``acc + a @ b`` with an f32 accumulator. a: [M, K], b: [K, N], acc: [M, N] f32."""
    if INTERPRET:
        out = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    elif IEEE:
        out = tl.dot(a, b, acc, input_precision="ieee")
    else:
        out = tl.dot(a, b, acc)
    return out
