"""Shared assertions and inputs for kernel tests."""

from __future__ import annotations

import math

import torch
from tritonrl.kernels.noisy_head import NoisyParams

# bf16 keeps 8 bits of mantissa: one rounding costs up to 2**-8 relative.
BF16_EPS = 2.0**-8


def assert_bf16_close(
    out: torch.Tensor,
    ref_f32: torch.Tensor,
    torch_bf16: torch.Tensor,
    *,
    k: float = 2.0,
    atol: float = 1e-3,
    name: str = "output",
) -> None:
    """Bound a bf16 kernel's error by what bf16 itself costs (STYLE item 7).

    ``max|out - ref| <= k * max|torch_bf16 - ref| + atol``: the kernel may not be worse than
    ``k`` times plain torch computing the same thing in bf16. ``atol`` covers outputs where torch
    bf16 happens to be exact.
    """
    ref = ref_f32.float()
    err = (out.float() - ref).abs().max().item()
    base = (torch_bf16.float() - ref).abs().max().item()
    assert err <= k * base + atol, (
        f"{name}: kernel error {err:.3e} > {k} x torch-bf16 error {base:.3e} + {atol:.1e}"
    )


def nan_like(t: torch.Tensor) -> torch.Tensor:
    """A fresh buffer like ``t`` filled with NaN, so unwritten elements fail comparisons."""
    return torch.full_like(t, float("nan"))


def make_layer(
    o: int,
    i: int,
    gen: torch.Generator,
    *,
    lead: tuple[int, ...] = (),
    bias: bool = True,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
) -> NoisyParams:
    """Random layer tensors; weights and biases are leaves that require grad, noise does not."""

    def leaf(t: torch.Tensor) -> torch.Tensor:
        return t.to(device=device, dtype=dtype).requires_grad_()

    def noise(*shape: int) -> torch.Tensor:
        u = torch.randn(*shape, generator=gen)
        return (u.sign() * u.abs().sqrt()).to(device=device, dtype=dtype)

    s = 1.0 / math.sqrt(i)
    return NoisyParams(
        leaf(torch.randn(*lead, o, i, generator=gen) * s),
        leaf((0.5 + torch.rand(*lead, o, i, generator=gen)) * s),
        leaf(torch.randn(*lead, o, generator=gen) * 0.1) if bias else None,
        leaf((0.5 + torch.rand(*lead, o, generator=gen)) * s) if bias else None,
        noise(*lead, i),
        noise(*lead, o),
    )
