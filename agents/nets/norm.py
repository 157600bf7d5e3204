"""RMSNorm over the last dimension with a hand-written backward.

`rms_norm` equals ``F.rms_norm`` bit for bit forward; its backward forms the input gradient
from the saved normalised input in about half the passes over ``x`` that autograd takes.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

__all__ = ["rms_norm"]


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)  # F.rms_norm's operations
        xhat = x * rstd
        ctx.save_for_backward(xhat, rstd, weight)
        return xhat * weight

    @staticmethod
    @once_differentiable  # in-place products: no second derivative through this backward
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        xhat, rstd, weight = ctx.saved_tensors
        gxhat = grad * weight
        gw = (grad * xhat).flatten(0, -2).sum(0) if ctx.needs_input_grad[1] else None
        gx = None
        if ctx.needs_input_grad[0]:  # rstd (gxhat - xhat mean(gxhat xhat))
            dot = (gxhat * xhat).mean(-1, keepdim=True)
            gx = torch.addcmul(gxhat, xhat, dot, value=-1).mul_(rstd)
        return gx, gw, None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``F.rms_norm(x, (d,), weight, eps)`` of ``x [..., d]``, ``weight [d]``; f32 and f64 take the
    hand-written backward, other dtypes and traced code ``F.rms_norm``."""
    if (
        x.dtype in (torch.float32, torch.float64)
        and weight.dtype == x.dtype
        and x.dim() >= 2
        and not torch.compiler.is_compiling()
    ):
        return _RMSNorm.apply(x, weight, eps)
    return F.rms_norm(x, (x.shape[-1],), weight, eps)
