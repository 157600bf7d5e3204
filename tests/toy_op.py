"""Test-only op registered with the kernel dispatch, to prove the harness."""

from __future__ import annotations

import torch
from tritonrl.kernels.backend import KernelOp


def toy_linear_ref(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, relu: bool) -> torch.Tensor:
    y = torch.nn.functional.linear(x, w, b)
    return torch.relu(y) if relu else y


TOY_LINEAR = KernelOp("toy_linear", torch_impl=toy_linear_ref, triton_impl="toy_triton:toy_linear_triton")


def toy_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, relu: bool = False) -> torch.Tensor:
    for name, t, dim in (("x", x, 2), ("w", w, 2), ("b", b, 1)):
        if t.dim() != dim:
            raise ValueError(f"{name} must be {dim}-D, got shape {tuple(t.shape)}")
    return TOY_LINEAR(x.device, x.contiguous(), w.contiguous(), b.contiguous(), relu)
