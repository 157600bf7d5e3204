"""Triton device helpers shared by every kernel. Imported only where a Triton path runs.

The bf16 convention (CONTRIBUTING.md, "Kernels"): kernels load bf16, convert to f32 before element-wise
math, and store with ``.to(ptr.dtype.element_ty)``. Every matrix product goes through
:func:`dot`, which upcasts its operands to f32 only under the Triton interpreter (the interpreter
does no arithmetic on bf16) and otherwise feeds them to tensor cores as they are.

Host side, kernels take two ``tl.constexpr`` flags computed by :func:`dot_flags`:
``INTERPRET`` (the interpreter is on) and ``IEEE`` (f32 operands: IEEE f32 products, so the f32
variant matches the f32 reference tightly instead of rounding through tf32).
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
