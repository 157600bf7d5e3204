"""The scan's CPU path without resets (kernels/mamba2/fast.py) against the torch reference, the
oracle: values, final states and gradients of every input, and which calls reach which."""

from __future__ import annotations

import math

import torch
from helpers import assert_grads_close
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonrl.kernels.mamba2 import mamba2_scan
from tritonrl.kernels.mamba2.api import mamba2_scan_torch
from tritonrl.kernels.mamba2.fast import mamba2_scan_fast
from tritonrl.kernels.mamba2.reference import mamba2_scan_ref

# The fast path computes the reference's sums in another order (dt' x formed first, C.B per group,
# the group's heads in one product): float64 agrees to rounding of O(1) values (1e-12); float32 to
# a few ulps, summed over at most a few chunks of 16-32 terms (rtol 1e-4, atol 1e-5).
TOL = {torch.float64: {"rtol": 1e-10, "atol": 1e-12}, torch.float32: {"rtol": 1e-4, "atol": 1e-5}}


def _inputs(case: dict, dtype: torch.dtype) -> dict:
    b, L, G, rep, P, N = case["b"], case["L"], case["G"], case["rep"], case["P"], case["N"]
    H = G * rep
    g = torch.Generator().manual_seed(case["seed"])

    def r(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (scale * torch.randn(*shape, generator=g, dtype=torch.float64)).to(dtype).requires_grad_()

    kw = {
        "x": r(b, L, H, P),
        "dt": r(b, L, H),
        "A": (-0.1 - torch.rand(H, generator=g, dtype=torch.float64)).to(dtype).requires_grad_(),
        "B": r(b, L, G, N, scale=0.5),
        "C": r(b, L, G, N, scale=0.5),
        "D": r(H, P) if case["D"] == "hp" else (r(H) if case["D"] == "h" else None),
        "z": r(b, L, H, P) if case["z"] else None,
        "dt_bias": r(H, scale=0.5),
        "initial_states": r(b, H, P, N) if case["init"] else None,
    }
    return kw


def _call(fn, kw: dict, chunk: int, softplus: bool, limit: tuple[float, float], final: bool, **extra):
    a = (kw["x"], kw["dt"], kw["A"], kw["B"], kw["C"], kw["D"], kw["z"], kw["dt_bias"], softplus, limit)
    return fn(*a, kw["initial_states"], *extra.values(), chunk, final)


cases = st.fixed_dictionaries(
    {
        "b": st.integers(1, 3),
        "L": st.integers(1, 70),
        "G": st.integers(1, 2),
        "rep": st.integers(1, 3),
        "P": st.sampled_from([1, 4, 8]),
        "N": st.sampled_from([1, 4, 8]),
        "chunk": st.sampled_from([16, 32]),
        "D": st.sampled_from(["h", "hp", None]),
        "z": st.booleans(),
        "init": st.booleans(),
        "softplus": st.booleans(),
        "limit": st.sampled_from([(0.0, math.inf), (1e-3, 0.5)]),
        "seed": st.integers(0, 2**16),
    }
)


@settings(max_examples=60)
@given(case=cases, dtype=st.sampled_from([torch.float64, torch.float32]))
def test_fast_scan_equals_the_reference_values_states_and_gradients(case: dict, dtype: torch.dtype) -> None:
    kw = _inputs(case, dtype)
    args = (case["chunk"], case["softplus"], case["limit"], True)
    y_ref, h_ref = _call(mamba2_scan_ref, kw, *args, resets=None)
    y, h = _call(mamba2_scan_fast, kw, *args)
    assert y.dtype == dtype and h.dtype == dtype and h.shape == h_ref.shape
    torch.testing.assert_close(y, y_ref, **TOL[dtype])
    torch.testing.assert_close(h, h_ref, **TOL[dtype])
    inputs = [t for t in kw.values() if t is not None]
    g = torch.Generator().manual_seed(case["seed"] + 1)
    gy = torch.randn(y.shape, generator=g, dtype=torch.float64).to(dtype)
    gh = torch.randn(h.shape, generator=g, dtype=torch.float64).to(dtype)
    want = torch.autograd.grad((y_ref, h_ref), inputs, (gy, gh), allow_unused=True)
    got = torch.autograd.grad((y, h), inputs, (gy, gh), allow_unused=True)
    exact = want if dtype == torch.float64 else _f64_grads(kw, args, gy, gh)
    assert_grads_close(got, want, exact, **TOL[dtype])


def _f64_grads(kw: dict, args: tuple, gy: torch.Tensor, gh: torch.Tensor) -> tuple:
    """The reference's gradients in f64 from the same (f32) inputs and upstream gradients."""
    up = {k: None if t is None else t.detach().double().requires_grad_() for k, t in kw.items()}
    y, h = _call(mamba2_scan_ref, up, *args, resets=None)
    inputs = [t for t in up.values() if t is not None]
    return torch.autograd.grad((y, h), inputs, (gy.double(), gh.double()), allow_unused=True)


def test_fast_scan_keeps_bf16_inputs_and_f32_states() -> None:
    case = {"b": 2, "L": 40, "G": 1, "rep": 2, "P": 4, "N": 4, "D": "h", "z": True, "init": True, "seed": 3}
    kw = _inputs(case, torch.bfloat16)
    kw["initial_states"] = kw["initial_states"].detach().float()
    y, h = _call(mamba2_scan_fast, kw, 16, True, (0.0, math.inf), True)
    y_ref, h_ref = _call(mamba2_scan_ref, kw, 16, True, (0.0, math.inf), True, resets=None)
    assert y.dtype == torch.bfloat16 and h.dtype == torch.float32
    torch.testing.assert_close(h, h_ref, rtol=1e-4, atol=1e-5)  # f32 inside on both sides
    torch.testing.assert_close(y, y_ref, rtol=1.6e-2, atol=1e-2)  # one bf16 rounding of y apart at most


def test_cpu_scan_takes_the_reference_with_resets_or_keyword_options() -> None:
    """(Without them: the factored path or this one, tests/kernels/test_mamba2_factored.py.)"""
    case = {"b": 2, "L": 37, "G": 2, "rep": 2, "P": 4, "N": 8, "D": "h", "z": True, "init": True, "seed": 5}
    kw = _inputs(case, torch.float32)
    public = {k: v for k, v in kw.items() if k not in ("x", "dt", "A", "B", "C")}
    pos = (kw["x"], kw["dt"], kw["A"], kw["B"], kw["C"])
    resets = torch.rand(2, 37, generator=torch.Generator().manual_seed(0)) < 0.2
    y, h = mamba2_scan(*pos, **public, resets=resets, chunk_size=16, return_final_states=True)
    y_ref, h_ref = _call(mamba2_scan_ref, kw, 16, True, (0.0, math.inf), True, resets=resets)
    assert torch.equal(y, y_ref) and torch.equal(h, h_ref)
    # keyword options of the reference (chunk states) go to the reference too
    out = mamba2_scan_torch(
        *pos, kw["D"], kw["z"], kw["dt_bias"], True, (0.0, math.inf), kw["initial_states"], None, 16, True,
        return_chunk_states=True,
    )  # fmt: skip
    assert len(out) == 3 and out[2].shape == (2, 4, 3, 4, 8)
