"""Test-only Triton kernel that proves the harness: y = x @ w.T + b (optional ReLU).

:func:`aot_cases` hands its launches to ``tools/aot_compile.py --cases toy_triton:aot_cases``
(``tests/kernels/test_aot_compile.py``), so the toy kernel is compiled for real GPUs too.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import triton
import triton.language as tl
from tritonrl.kernels.tl_helpers import dot, dot_flags


@triton.jit
def _toy_linear_fwd_kernel(
    x,
    w,
    b,
    y,
    M,
    N,
    K,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    RELU: tl.constexpr,
    INTERPRET: tl.constexpr,
    IEEE: tl.constexpr,
):
    i_m = tl.program_id(0).to(tl.int64)
    i_n = tl.program_id(1).to(tl.int64)
    o_m = i_m * BM + tl.arange(0, BM)
    o_n = i_n * BN + tl.arange(0, BN)
    m_m = o_m < M
    m_n = o_n < N
    b_acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, K, BK):
        o_k = k0 + tl.arange(0, BK)
        m_k = o_k < K
        # [BM, BK]
        b_x = tl.load(x + o_m[:, None] * K + o_k[None, :], mask=m_m[:, None] & m_k[None, :], other=0)
        # [BK, BN]
        b_w = tl.load(w + o_n[None, :] * K + o_k[:, None], mask=m_n[None, :] & m_k[:, None], other=0)
        b_acc = dot(b_x, b_w, b_acc, INTERPRET, IEEE)
    # [BN]
    b_b = tl.load(b + o_n, mask=m_n, other=0).to(tl.float32)
    b_y = b_acc + b_b[None, :]
    if RELU:
        b_y = tl.maximum(b_y, 0.0)
    tl.store(
        y + o_m[:, None] * N + o_n[None, :],
        b_y.to(y.dtype.element_ty),
        mask=m_m[:, None] & m_n[None, :],
    )


def toy_linear_triton(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, relu: bool) -> torch.Tensor:
    M, K = x.shape
    N = w.shape[0]
    y = torch.full((M, N), float("nan"), dtype=x.dtype, device=x.device)
    BM, BN, BK = 16, 16, 16
    grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))
    _toy_linear_fwd_kernel[grid](x, w, b, y, M, N, K, BM=BM, BN=BN, BK=BK, RELU=relu, **dot_flags(x.dtype))
    return y


def _toy_launch(m: int, n: int, k: int, dtype: torch.dtype, relu: bool) -> None:
    toy_linear_triton(
        torch.zeros(m, k, dtype=dtype), torch.zeros(n, k, dtype=dtype), torch.zeros(n, dtype=dtype), relu
    )


def aot_cases() -> list[tuple[str, Callable[[], None]]]:
    """The toy kernel's ahead-of-time compile cases: ``(name, run)``, bf16 and f32."""
    dtypes = {"bf16": torch.bfloat16, "f32": torch.float32}
    return [(f"toy_linear {tag}", partial(_toy_launch, 8, 16, 32, dt, True)) for tag, dt in dtypes.items()]
