"""The sum-tree ops as torch custom ops (design: `tritonrl.kernels.library`). Imports no triton.

``torch.ops.tritonrl.per_sample`` / ``per_update`` / ``per_insert`` are what the public functions
call under ``torch.compile``. A [`SumTree`][tritonrl.kernels.sumtree.reference.SumTree] is its five tensors;
the schemas declare which ones each op writes. Same implementations as eager mode; not differentiable.
"""

from __future__ import annotations

from typing import Any

import torch
from tritonrl.kernels.sumtree.api import PER_INSERT, PER_SAMPLE, PER_UPDATE
from tritonrl.kernels.sumtree.cpu import per_insert_eager, per_sample_eager, per_update_eager
from tritonrl.kernels.sumtree.reference import SumTree

__all__ = ["per_insert_op", "per_sample_op", "per_update_op"]

Tensor = torch.Tensor


@torch.library.custom_op(
    "tritonrl::per_sample",
    mutates_args=(),
    schema=(
        "(Tensor sums, Tensor mins, Tensor scratch, Tensor max_priority, Tensor status, "
        "Tensor uniforms, float beta, SymInt size) -> (Tensor, Tensor)"
    ),
)
def per_sample_op(
    sums: Tensor,
    mins: Tensor,
    scratch: Tensor,
    max_priority: Tensor,
    status: Tensor,
    uniforms: Tensor,
    beta: float,
    size: int,
) -> tuple[Tensor, Tensor]:
    """`per_sample` as an op: ``(indices int64 [B], weights f32 [B])``."""
    tree = SumTree(sums, mins, scratch, max_priority, status)

    def triton() -> tuple[Tensor, Tensor]:
        from tritonrl.kernels.sumtree.fused import per_sample_triton

        return per_sample_triton(tree, uniforms, beta, size)

    return PER_SAMPLE.dispatch(sums.device, triton, lambda: per_sample_eager(tree, uniforms, beta, size))


@per_sample_op.register_fake
def _(sums: Tensor, *rest: Any) -> tuple[Tensor, Tensor]:
    batch = rest[4].shape[0]
    return sums.new_empty((batch,), dtype=torch.int64), sums.new_empty((batch,), dtype=torch.float32)


@torch.library.custom_op(
    "tritonrl::per_update",
    mutates_args=("sums", "mins", "scratch", "max_priority", "status"),
    schema=(
        "(Tensor(a!) sums, Tensor(b!) mins, Tensor(c!) scratch, Tensor(d!) max_priority, "
        "Tensor(e!) status, Tensor indices, Tensor td_errors, float alpha, float eps, SymInt size) -> ()"
    ),
)
def per_update_op(
    sums: Tensor,
    mins: Tensor,
    scratch: Tensor,
    max_priority: Tensor,
    status: Tensor,
    indices: Tensor,
    td_errors: Tensor,
    alpha: float,
    eps: float,
    size: int,
) -> None:
    """`per_update` as an op (writes the tree in place)."""
    tree = SumTree(sums, mins, scratch, max_priority, status)

    def triton() -> None:
        from tritonrl.kernels.sumtree.fused import per_update_triton

        per_update_triton(tree, indices, td_errors, alpha, eps, size)

    PER_UPDATE.dispatch(
        sums.device, triton, lambda: per_update_eager(tree, indices, td_errors, alpha, eps, size)
    )


@per_update_op.register_fake
def _(*_args: Any) -> None:
    return None


@torch.library.custom_op(
    "tritonrl::per_insert",
    mutates_args=("sums", "mins"),
    schema=(
        "(Tensor(a!) sums, Tensor(b!) mins, Tensor scratch, Tensor max_priority, Tensor status, "
        "SymInt start, SymInt count, float alpha) -> ()"
    ),
)
def per_insert_op(
    sums: Tensor,
    mins: Tensor,
    scratch: Tensor,
    max_priority: Tensor,
    status: Tensor,
    start: int,
    count: int,
    alpha: float,
) -> None:
    """`per_insert` as an op (writes ``sums`` and ``mins`` in place)."""
    tree = SumTree(sums, mins, scratch, max_priority, status)

    def triton() -> None:
        from tritonrl.kernels.sumtree.fused import per_insert_triton

        per_insert_triton(tree, start, count, alpha)

    PER_INSERT.dispatch(sums.device, triton, lambda: per_insert_eager(tree, start, count, alpha))


@per_insert_op.register_fake
def _(*_args: Any) -> None:
    return None
