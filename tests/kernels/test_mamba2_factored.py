"""The scan's factored CPU path (kernels/mamba2/factored.py) against the torch reference, the
oracle: values, final states and gradients of every input; its bound on the factors; which calls
reach it."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import assert_grads_close
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonrl.kernels.mamba2 import mamba2_scan
from tritonrl.kernels.mamba2.factored import CHUNK, MAX_LOG_FACTOR, mamba2_scan_factored, scan_decays
from tritonrl.kernels.mamba2.fast import mamba2_scan_fast
from tritonrl.kernels.mamba2.reference import dt_transform, mamba2_scan_ref

# The factored path forms exp(cs_t - cs_s) as exp(cs_t - r) exp(r - cs_s) (|cs - r| <= 30) and
# sums in another order than the reference: float64 agrees to rounding of O(1) values times
# exponents of at most 30 (1e-12); float32 to a few ulps of those exponents, summed over at most
# a few chunks of 16-32 terms (rtol 1e-4, atol 1e-5), the tolerances of the fast path's tests.
TOL = {torch.float64: {"rtol": 1e-10, "atol": 1e-12}, torch.float32: {"rtol": 1e-4, "atol": 1e-5}}


def _inputs(case: dict, dtype: torch.dtype) -> dict:
    """Inputs whose log factors fit the bound at a chunk of 16 in every case: |dt' A| <= 2.75 per
    step (dt + dt_bias in [-2.5, 1.5], |A| <= 1.1), so a chunk of 8 spans at most 7 * 2.75 < 30."""
    b, L, G, rep, P, N = case["b"], case["L"], case["G"], case["rep"], case["P"], case["N"]
    H = G * rep
    g = torch.Generator().manual_seed(case["seed"])

    def r(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (scale * torch.randn(*shape, generator=g, dtype=torch.float64)).to(dtype).requires_grad_()

    def u(*shape: int, low: float, high: float) -> torch.Tensor:
        v = low + (high - low) * torch.rand(*shape, generator=g, dtype=torch.float64)
        return v.to(dtype).requires_grad_()

    return {
        "x": r(b, L, H, P),
        "dt": u(b, L, H, low=-2.0, high=1.0),
        "A": u(H, low=-1.1, high=-0.1),
        "B": r(b, L, G, N, scale=0.5),
        "C": r(b, L, G, N, scale=0.5),
        "D": r(H, P) if case["D"] == "hp" else (r(H) if case["D"] == "h" else None),
        "z": r(b, L, H, P) if case["z"] else None,
        "dt_bias": u(H, low=-0.5, high=0.5),
        "initial_states": r(b, H, P, N) if case["init"] else None,
    }


def _args(kw: dict, softplus: bool, limit: tuple[float, float]) -> tuple:
    return (kw["x"], kw["dt"], kw["A"], kw["B"], kw["C"], kw["D"], kw["z"], kw["dt_bias"], softplus, limit)


cases = st.fixed_dictionaries(
    {
        "b": st.integers(1, 3),
        "L": st.integers(1, 100),
        "G": st.integers(1, 2),
        "rep": st.integers(1, 3),
        "P": st.sampled_from([1, 4, 8]),
        "N": st.sampled_from([1, 4, 8]),
        "D": st.sampled_from(["h", "hp", None]),
        "z": st.booleans(),
        "init": st.booleans(),
        "softplus": st.booleans(),
        "limit": st.sampled_from([(0.0, math.inf), (1e-3, 0.5)]),
        "seed": st.integers(0, 2**16),
    }
)


@settings(max_examples=150, deadline=None)
@given(case=cases, dtype=st.sampled_from([torch.float64, torch.float32]))
def test_factored_scan_equals_the_reference_values_states_and_gradients(
    case: dict, dtype: torch.dtype
) -> None:
    kw = _inputs(case, dtype)
    a = _args(kw, case["softplus"], case["limit"])
    y_ref, h_ref = mamba2_scan_ref(*a, kw["initial_states"], None, 16, True)
    out = mamba2_scan_factored(*a, kw["initial_states"], 16, True)
    assert out is not None  # the inputs fit the bound (see _inputs)
    y, h = out
    assert y.dtype == dtype and h.dtype == dtype and h.shape == h_ref.shape
    torch.testing.assert_close(y, y_ref, **TOL[dtype])
    torch.testing.assert_close(h, h_ref, **TOL[dtype])
    inputs = [t for t in kw.values() if t is not None]
    g = torch.Generator().manual_seed(case["seed"] + 1)
    gy = torch.randn(y.shape, generator=g, dtype=torch.float64).to(dtype)
    gh = torch.randn(h.shape, generator=g, dtype=torch.float64).to(dtype)
    want = torch.autograd.grad((y_ref, h_ref), inputs, (gy, gh), allow_unused=True)
    got = torch.autograd.grad((y, h), inputs, (gy, gh), allow_unused=True)
    exact = _f64_grads(kw, case, gy, gh) if dtype == torch.float32 else want
    assert_grads_close(got, want, exact, **TOL[dtype])


def _f64_grads(kw: dict, case: dict, gy: torch.Tensor, gh: torch.Tensor) -> tuple:
    """The reference's gradients in f64 from the same (f32) inputs and upstream gradients."""
    up = {k: None if t is None else t.detach().double().requires_grad_() for k, t in kw.items()}
    a = _args(up, case["softplus"], case["limit"])
    y, h = mamba2_scan_ref(*a, up["initial_states"], None, 16, True)
    inputs = [t for t in up.values() if t is not None]
    return torch.autograd.grad((y, h), inputs, (gy.double(), gh.double()), allow_unused=True)


def _case(**over: object) -> dict:
    case = {"b": 2, "L": 70, "G": 1, "rep": 2, "P": 4, "N": 4, "D": "h", "z": True, "init": True, "seed": 3}
    case.update(over)
    return case


def test_gradients_of_some_inputs_alone_and_of_y_alone() -> None:
    """The backward skips what is not asked for; what it returns is unchanged by that."""
    kw = _inputs(_case(), torch.float64)
    a = _args(kw, True, (0.0, math.inf))
    y_ref = mamba2_scan_ref(*a, kw["initial_states"], None, 16, False)
    y = mamba2_scan_factored(*a, kw["initial_states"], 16, False)
    gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for name in ("x", "A", "C", "initial_states", "z"):
        (want,) = torch.autograd.grad(y_ref, kw[name], gy, retain_graph=True)
        (got,) = torch.autograd.grad(y, kw[name], gy, retain_graph=True)
        torch.testing.assert_close(got, want, **TOL[torch.float64])


def test_chunk_halves_where_the_decays_of_a_full_chunk_are_too_large() -> None:
    """A constant decay of 2.5 per step: a chunk of 16 spans 15 * 2.5 > 30 from its first step, a
    chunk of 8 spans 17.5; the path runs on chunks of 8 and still equals the reference. At 4.5
    per step neither fits: None."""
    assert CHUNK == 16 and MAX_LOG_FACTOR == 30.0
    kw = _inputs(_case(D=None, z=False, init=False), torch.float64)
    dt = torch.full_like(kw["dt"], 2.5).requires_grad_()
    A = torch.full_like(kw["A"], -1.0)
    a = (kw["x"], dt, A, kw["B"], kw["C"], None, None, None, False, (0.0, math.inf), None)
    d, _, _ = scan_decays(dt_transform(dt.detach(), None, False, (0.0, math.inf))[:, :64], A, 16)
    assert d.abs().max() > MAX_LOG_FACTOR
    y, h = mamba2_scan_factored(*a, 16, True)
    y_ref, h_ref = mamba2_scan_ref(*a, None, 16, True)
    torch.testing.assert_close(y, y_ref, **TOL[torch.float64])
    torch.testing.assert_close(h, h_ref, **TOL[torch.float64])
    (g,) = torch.autograd.grad(y.sum(), dt)
    (g_ref,) = torch.autograd.grad(y_ref.sum(), dt)
    torch.testing.assert_close(g, g_ref, **TOL[torch.float64])
    steep = torch.full_like(kw["dt"], 4.5)
    assert mamba2_scan_factored(kw["x"], steep, *a[2:], 16, True) is None
    nan = kw["dt"].detach().clone()
    nan[0, 5, 0] = float("nan")
    assert mamba2_scan_factored(kw["x"], nan, *a[2:], 16, True) is None


def test_final_state_can_be_updated_in_place_before_the_backward() -> None:
    kw = _inputs(_case(), torch.float32)
    a = _args(kw, True, (0.0, math.inf))
    y, h = mamba2_scan_factored(*a, kw["initial_states"], 16, True)
    h2 = h.detach()
    h2.mul_(0.5)  # as Mamba2Block.step(inplace=True) does to a state that forward returned
    (g,) = torch.autograd.grad(y.sum(), kw["x"])
    assert torch.isfinite(g).all()


def test_factored_scan_keeps_bf16_inputs_and_f32_states() -> None:
    kw = _inputs(_case(L=40), torch.bfloat16)
    kw["initial_states"] = kw["initial_states"].detach().float()
    a = _args(kw, True, (0.0, math.inf))
    y, h = mamba2_scan_factored(*a, kw["initial_states"], 16, True)
    y_ref, h_ref = mamba2_scan_ref(*a, kw["initial_states"], None, 16, True)
    assert y.dtype == torch.bfloat16 and h.dtype == torch.float32
    torch.testing.assert_close(h, h_ref, rtol=1e-4, atol=1e-5)  # f32 inside on both sides
    torch.testing.assert_close(y, y_ref, rtol=1.6e-2, atol=1e-2)  # one bf16 rounding of y apart at most


def test_cpu_scan_takes_the_factored_path_where_the_decays_fit_and_the_fast_path_elsewhere() -> None:
    kw = _inputs(_case(L=37, G=2), torch.float32)
    public = {k: v for k, v in kw.items() if k not in ("x", "dt", "A", "B", "C")}
    pos = (kw["x"], kw["dt"], kw["A"], kw["B"], kw["C"])
    y, h = mamba2_scan(*pos, **public, chunk_size=16, return_final_states=True)
    y_f, h_f = mamba2_scan_factored(*_args(kw, True, (0.0, math.inf)), kw["initial_states"], 16, True)
    assert torch.equal(y, y_f) and torch.equal(h, h_f)  # the same ops: bit for bit
    steep = {**public, "dt_bias": torch.full_like(kw["dt_bias"], 8.0)}  # dt' ~ 8: 32 per step at most
    y, h = mamba2_scan(*pos, **steep, chunk_size=16, return_final_states=True)
    a = (*pos, kw["D"], kw["z"], steep["dt_bias"], True, (0.0, math.inf), kw["initial_states"])
    assert mamba2_scan_factored(*a, 16, True) is None
    y_fast, h_fast = mamba2_scan_fast(*a, 16, True)
    assert torch.equal(y, y_fast) and torch.equal(h, h_fast)


def test_no_second_derivative_through_the_hand_written_backward() -> None:
    """The backward updates its products in place: asking for a gradient of it raises instead of
    returning a wrong one."""
    kw = _inputs(_case(), torch.float64)
    y = mamba2_scan_factored(*_args(kw, True, (0.0, math.inf)), kw["initial_states"], 16, False)
    (gx,) = torch.autograd.grad(y.square().sum(), kw["x"], create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        gx.sum().backward()
