"""agents/nets/norm.py: rms_norm against F.rms_norm, forward bit for bit, gradients."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonrl.agents.nets.norm import rms_norm

# Gradients: the same sums in another order (the input gradient from the saved normalised input,
# the weight gradient summed in one reduction): float64 1e-12, float32 a few ulps of O(1) sums
# of at most 64 terms (1e-5).
TOL = {torch.float64: {"rtol": 1e-12, "atol": 1e-12}, torch.float32: {"rtol": 1e-5, "atol": 1e-5}}


@settings(max_examples=40, deadline=None)
@given(
    shape=st.sampled_from([(3, 1), (2, 5, 8), (4, 3, 2, 64), (7, 33)]),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    scale=st.sampled_from([1e-3, 1.0, 1e3]),
    seed=st.integers(0, 2**16),
)
def test_rms_norm_equals_torch_forward_bit_for_bit_and_gradients(
    shape: tuple[int, ...], dtype: torch.dtype, scale: float, seed: int
) -> None:
    g = torch.Generator().manual_seed(seed)
    x = (scale * torch.randn(shape, generator=g, dtype=dtype)).requires_grad_()
    w = torch.randn(shape[-1], generator=g, dtype=dtype).requires_grad_()
    y = rms_norm(x, w, 1e-6)
    y_ref = F.rms_norm(x, (shape[-1],), w, 1e-6)
    assert torch.equal(y, y_ref)
    gy = torch.randn(shape, generator=g, dtype=dtype)
    got = torch.autograd.grad(y, (x, w), gy)
    want = torch.autograd.grad(y_ref, (x, w), gy)
    # absolute tolerances on each gradient's own scale: |gy| |w| / rms(x) for x (1 / scale), |gy|
    # times the rows summed for w (the input gradient of d = 1 is zero up to rounding)
    rstd = torch.rsqrt(x.detach().pow(2).mean(-1) + 1e-6).max().item()
    rows = x.numel() // shape[-1]
    scales = (gy.abs().max().item() * w.abs().max().item() * rstd, gy.abs().max().item() * rows)
    for a, b, s in zip(got, want, scales, strict=True):
        torch.testing.assert_close(a, b, rtol=TOL[dtype]["rtol"], atol=TOL[dtype]["atol"] * s)


def test_rms_norm_gradcheck_and_input_alone() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: rms_norm(a, b, 1e-5), (x, w))
    (gx,) = torch.autograd.grad(rms_norm(x, w.detach(), 1e-5).sum(), x)
    (gx_ref,) = torch.autograd.grad(F.rms_norm(x, (5,), w.detach(), 1e-5).sum(), x)
    torch.testing.assert_close(gx, gx_ref, **TOL[torch.float64])


def test_rms_norm_bf16_is_torch() -> None:
    x = torch.randn(2, 3, 8).bfloat16()
    w = torch.randn(8).bfloat16()
    assert torch.equal(rms_norm(x, w, 1e-6), F.rms_norm(x, (8,), w, 1e-6))
