"""Mamba2 scan, torch path: chunked reference vs the sequential oracle, gradients, the step form,
chunk-size invariance, dispatch and input validation (all on CPU, no Triton)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from mamba2_cases import Case, make_inputs, ref_call, with_grad
from tritonrl.kernels.mamba2 import MAMBA2_SCAN, MAMBA2_STEP, mamba2_scan, mamba2_step, mamba2_step_unchecked
from tritonrl.kernels.mamba2.naive import mamba2_scan_naive
from tritonrl.kernels.mamba2.reference import dt_transform, mamba2_scan_ref, mamba2_step_ref

CHUNK = 16


@pytest.fixture(autouse=True)
def _torch_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONRL_BACKEND", "torch")


def _naive(kw: dict):
    return mamba2_scan_naive(
        kw["x"],
        kw["dt"],
        kw["A"],
        kw["B"],
        kw["C"],
        D=kw.get("D"),
        z=kw.get("z"),
        dt_bias=kw.get("dt_bias"),
        dt_softplus=kw["dt_softplus"],
        dt_limit=kw["dt_limit"],
        initial_states=kw.get("initial_states"),
        resets=kw.get("resets"),
        return_final_states=True,
    )


cases = st.builds(
    Case,
    batch=st.integers(1, 2),
    length=st.sampled_from([1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5]),
    nheads=st.sampled_from([2, 4]),
    headdim=st.integers(1, 6),
    ngroups=st.sampled_from([1, 2]),
    dstate=st.integers(1, 5),
    d_mode=st.sampled_from(["none", "h", "hp"]),
    gate=st.booleans(),
    bias=st.booleans(),
    init=st.booleans(),
    resets=st.sampled_from(["none", "random", "all"]),
    softplus=st.booleans(),
    limit=st.sampled_from([(0.0, math.inf), (0.05, 2.0)]),
    seed=st.integers(0, 2**16),
)


@settings(max_examples=100)
@given(case=cases)
def test_reference_matches_naive_f64(case: Case) -> None:
    kw = make_inputs(case, torch.float64)
    y, h = ref_call(mamba2_scan_ref, kw, CHUNK)
    y0, h0 = _naive(kw)
    # float64 on both sides: the two algorithms differ only by summation order (~1e-15 relative).
    torch.testing.assert_close(y, y0, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(h, h0, rtol=1e-10, atol=1e-10)


@settings(max_examples=40)
@given(case=cases)
def test_reference_gradients_match_naive_f64(case: Case) -> None:
    kw = make_inputs(case, torch.float64)
    g = torch.Generator().manual_seed(case.seed + 1)
    a, names = with_grad(kw)
    b, _ = with_grad(kw)
    y, h = ref_call(mamba2_scan_ref, a, CHUNK)
    y0, h0 = _naive(b)
    gy = torch.randn(y.shape, generator=g, dtype=torch.float64)
    gh = torch.randn(h.shape, generator=g, dtype=torch.float64)
    got = torch.autograd.grad((y, h), [a[k] for k in names], (gy, gh), allow_unused=True)
    want = torch.autograd.grad((y0, h0), [b[k] for k in names], (gy, gh), allow_unused=True)
    for k, g1, g0 in zip(names, got, want, strict=True):
        g1 = torch.zeros_like(a[k]) if g1 is None else g1
        g0 = torch.zeros_like(b[k]) if g0 is None else g0
        # float64 autograd through two algorithms: rounding only.
        torch.testing.assert_close(g1, g0, rtol=1e-9, atol=1e-9, msg=lambda m, k=k: f"grad {k}: {m}")


def test_reference_gradcheck_small() -> None:
    kw = make_inputs(
        Case(batch=1, length=5, nheads=2, headdim=2, ngroups=1, dstate=2, d_mode="hp"), torch.float64
    )
    a, names = with_grad(kw)

    def f(*ts):
        kk = dict(a)
        kk.update(zip(names, ts, strict=True))
        return ref_call(mamba2_scan_ref, kk, 4)

    assert torch.autograd.gradcheck(f, tuple(a[k] for k in names))


@pytest.mark.parametrize("chunks", [(16, 32), (16, 64), (1, 7)])
def test_chunk_size_invariance(chunks: tuple[int, int]) -> None:
    kw = make_inputs(Case(length=70, seed=3), torch.float32)
    y1, h1 = ref_call(mamba2_scan_ref, kw, chunks[0])
    y2, h2 = ref_call(mamba2_scan_ref, kw, chunks[1])
    # float32, same math in a different grouping: a few ulps of values of order 10.
    torch.testing.assert_close(y1, y2, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(h1, h2, rtol=1e-5, atol=1e-5)


@settings(max_examples=20)
@given(case=cases)
def test_step_equals_scan(case: Case) -> None:
    kw = make_inputs(case, torch.float64)
    y, h = ref_call(mamba2_scan_ref, kw, CHUNK)
    state = kw["initial_states"].clone() if case.init else torch.zeros_like(h)
    resets = kw.get("resets")
    ys = []
    for t in range(case.length):
        ys.append(
            mamba2_step_ref(
                state,
                kw["x"][:, t],
                kw["dt"][:, t],
                kw["A"],
                kw["B"][:, t],
                kw["C"][:, t],
                kw.get("D"),
                None if kw.get("z") is None else kw["z"][:, t],
                kw.get("dt_bias"),
                kw["dt_softplus"],
                kw["dt_limit"],
                None if resets is None else resets[:, t],
            )
        )
    torch.testing.assert_close(torch.stack(ys, 1), y, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(state, h, rtol=1e-10, atol=1e-10)


def test_public_scan_cpu_runs_reference_and_dtypes() -> None:
    kw = make_inputs(Case(length=20), torch.float32)
    MAMBA2_SCAN.reset()
    y, h = mamba2_scan(**kw, chunk_size=16, return_final_states=True)
    assert MAMBA2_SCAN.last_backend == "torch"
    assert y.dtype == torch.float32 and h.dtype == torch.float32 and h.shape == (2, 4, 5, 3)
    y0, h0 = _naive(
        {
            k: (v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
            for k, v in kw.items()
        }
    )
    torch.testing.assert_close(y.double(), y0, rtol=1e-4, atol=1e-4)  # f32 vs f64 oracle
    y_only = mamba2_scan(**kw, chunk_size=32)
    assert isinstance(y_only, torch.Tensor)
    torch.testing.assert_close(y_only, y, rtol=1e-5, atol=1e-5)


def test_public_scan_bf16_on_cpu() -> None:
    kw = make_inputs(Case(length=20), torch.bfloat16)
    y, h = mamba2_scan(**kw, chunk_size=16, return_final_states=True)
    assert y.dtype == torch.bfloat16 and h.dtype == torch.float32
    ref = make_inputs(Case(length=20), torch.float32)
    for k in ("x", "dt", "B", "C", "z"):
        ref[k] = kw[k].float()  # the same bf16-rounded numbers, computed in f32
    y32, h32 = mamba2_scan(**ref, chunk_size=16, return_final_states=True)
    torch.testing.assert_close(h, h32, rtol=1e-5, atol=1e-5)  # f32 math inside: same state
    torch.testing.assert_close(y.float(), y32, rtol=2**-7, atol=1e-2)  # one bf16 rounding of y


def test_public_step_cpu_updates_in_place() -> None:
    kw = make_inputs(Case(length=3), torch.float32)
    state = kw["initial_states"].clone()
    ptr = state.data_ptr()
    MAMBA2_STEP.reset()
    y = mamba2_step(
        state,
        kw["x"][:, 0],
        kw["dt"][:, 0],
        kw["A"],
        kw["B"][:, 0],
        kw["C"][:, 0],
        D=kw["D"],
        z=kw["z"][:, 0],
        dt_bias=kw["dt_bias"],
        reset=kw["resets"][:, 0],
    )
    assert MAMBA2_STEP.last_backend == "torch" and state.data_ptr() == ptr
    y1, h1 = mamba2_scan(
        **{**kw, **{k: kw[k][:, :1] for k in ("x", "dt", "B", "C", "z", "resets")}},
        chunk_size=16,
        return_final_states=True,
    )
    torch.testing.assert_close(y, y1[:, 0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(state, h1, rtol=1e-5, atol=1e-5)
    # reset zeroes the state before the step: only the new input remains
    r = torch.ones(2, dtype=torch.bool)
    state2 = torch.randn_like(state)
    mamba2_step(state2, kw["x"][:, 1], kw["dt"][:, 1], kw["A"], kw["B"][:, 1], kw["C"][:, 1], reset=r)
    fresh = torch.zeros_like(state)
    mamba2_step(fresh, kw["x"][:, 1], kw["dt"][:, 1], kw["A"], kw["B"][:, 1], kw["C"][:, 1])
    torch.testing.assert_close(state2, fresh)


def _bad(kw: dict, **changes) -> dict:
    out = dict(kw)
    out.update(changes)
    return out


def test_scan_bad_inputs_name_the_argument() -> None:
    kw = make_inputs(Case(length=8), torch.float32)
    cases = [
        (ValueError, "x must be 4-D", _bad(kw, x=kw["x"][0])),
        (TypeError, "x must have dtype", _bad(kw, x=kw["x"].double())),
        (TypeError, "x must be a torch.Tensor", _bad(kw, x=[1.0])),
        (ValueError, "dt must have shape", _bad(kw, dt=kw["dt"][:, :5])),
        (ValueError, "A must have shape", _bad(kw, A=kw["A"][:3])),
        (
            ValueError,
            "divisible by the groups G=3",
            _bad(kw, B=torch.randn(2, 8, 3, 3), C=torch.randn(2, 8, 3, 3)),
        ),
        (ValueError, "C must have shape", _bad(kw, C=kw["C"][..., :2])),
        (TypeError, "B must have dtype", _bad(kw, B=kw["B"].bfloat16())),
        (ValueError, "D must have shape", _bad(kw, D=torch.randn(3))),
        (ValueError, "z must have shape", _bad(kw, z=kw["z"][:, :3])),
        (ValueError, "dt_bias must have shape", _bad(kw, dt_bias=torch.randn(5))),
        (
            TypeError,
            "initial_states must have dtype",
            _bad(kw, initial_states=kw["initial_states"].bfloat16()),
        ),
        (ValueError, "initial_states must have shape", _bad(kw, initial_states=torch.randn(2, 4, 5, 4))),
        (TypeError, "resets must have dtype", _bad(kw, resets=kw["resets"].float())),
        (ValueError, "resets must have shape", _bad(kw, resets=kw["resets"][:, :3])),
        (ValueError, "dt_limit", _bad(kw, dt_limit=(1.0, 0.5))),
        (ValueError, "chunk_size must be a power of two", _bad(kw, chunk_size=48)),
        (ValueError, "chunk_size must be a power of two", _bad(kw, chunk_size=8)),
    ]
    for exc, msg, bad in cases:
        with pytest.raises(exc, match=msg):
            mamba2_scan(**bad)
    with pytest.raises(ValueError, match="A is on meta but x is on cpu"):
        mamba2_scan(**_bad(kw, A=kw["A"].to("meta")))


def test_step_bad_inputs_name_the_argument() -> None:
    x, dt, A = torch.randn(2, 4, 5), torch.randn(2, 4), -torch.rand(4)
    B = C = torch.randn(2, 2, 3)
    state = torch.zeros(2, 4, 5, 3)
    with pytest.raises(TypeError, match="state must have dtype float32"):
        mamba2_step(state.bfloat16(), x, dt, A, B, C)
    with pytest.raises(ValueError, match="state must be contiguous"):
        mamba2_step(torch.zeros(2, 4, 3, 5).transpose(2, 3), x, dt, A, B, C)
    with pytest.raises(ValueError, match="state must have shape"):
        mamba2_step(torch.zeros(2, 4, 5, 2), x, dt, A, B, C)
    with pytest.raises(ValueError, match="divisible by the groups G=3"):
        mamba2_step(torch.zeros(2, 4, 5, 3), x, dt, A, torch.randn(2, 3, 3), torch.randn(2, 3, 3))
    with pytest.raises(ValueError, match="reset must have shape"):
        mamba2_step(state, x, dt, A, B, C, reset=torch.zeros(3, dtype=torch.bool))
    with pytest.raises(TypeError, match="reset must have dtype bool"):
        mamba2_step(state, x, dt, A, B, C, reset=torch.zeros(2))
    with pytest.raises(ValueError, match="dt must have shape"):
        mamba2_step(state, x, dt[:, :2], A, B, C)


def _step_per_head(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_limit, reset):
    """The single step written per head (B and C repeated for every head of their group, the
    reset as a ``where``): the form of ``mamba2_step_ref`` before it broadcast B and C over the
    heads of a group. The oracle of the grouped form."""
    sdt = state.dtype
    rep = x.shape[1] // B.shape[1]
    w = dt.to(sdt) if dt_bias is None else dt.to(sdt) + dt_bias.to(sdt)
    w = (F.softplus(w) if dt_softplus else w).clamp(min=dt_limit[0], max=dt_limit[1])
    decay = torch.exp(w * A.to(sdt))
    if reset is not None:
        decay = torch.where(reset[:, None], torch.zeros_like(decay), decay)
    xf = x.to(sdt)
    Bh = B.to(sdt).repeat_interleave(rep, dim=1)
    Ch = C.to(sdt).repeat_interleave(rep, dim=1)
    state.mul_(decay[:, :, None, None]).add_((w[:, :, None] * xf)[..., None] * Bh[:, :, None, :])
    y = torch.einsum("bhpn,bhn->bhp", state, Ch)
    if D is not None:
        y = y + (D[:, None] if D.dim() == 1 else D) * xf
    if z is not None:
        y = y * F.silu(z.to(sdt))
    return y.to(x.dtype)


@settings(max_examples=40)
@given(case=cases, dtype=st.sampled_from([torch.float32, torch.float64]))
def test_step_ref_matches_the_per_head_form(case: Case, dtype: torch.dtype) -> None:
    """The grouped single step (B, C broadcast over a group's heads, the reset by masked_fill)
    against the per-head form, over a sequence with random resets (t = 0, mid, last)."""
    kw = make_inputs(case, dtype)
    h0 = kw.get("initial_states")
    state = h0 if h0 is not None else torch.zeros(case.batch, case.nheads, case.headdim, case.dstate)
    state = state.to(torch.float64 if dtype == torch.float64 else torch.float32)
    s1, s2 = state.clone(), state.clone()
    resets = kw.get("resets")
    for t in range(case.length):
        args = [
            kw["x"][:, t],
            kw["dt"][:, t],
            kw["A"],
            kw["B"][:, t],
            kw["C"][:, t],
            kw.get("D"),
            None if kw.get("z") is None else kw["z"][:, t],
            kw.get("dt_bias"),
            kw["dt_softplus"],
            kw["dt_limit"],
            None if resets is None else resets[:, t],
        ]
        y1 = mamba2_step_ref(s1, *args)
        y2 = _step_per_head(s2, *args)
        # the same products summed in another order (a sum over N instead of einsum's bmm; a fused
        # multiply-add): f64 to ~1e-15, f32 to a few ulps of O(1) values, over up to 53 steps
        tol = {"rtol": 1e-12, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 1e-5}
        torch.testing.assert_close(y1, y2, **tol)
        torch.testing.assert_close(s1, s2, **tol)


def test_dt_transform_skips_only_a_clamp_that_changes_nothing() -> None:
    dt = torch.cat([torch.linspace(-200.0, 50.0, 101), torch.tensor([math.nan, -math.inf, math.inf])])
    bias = None
    for softplus, limit in [(True, (0.0, math.inf)), (True, (0.05, 2.0)), (False, (0.0, math.inf))]:
        got = dt_transform(dt, bias, softplus, limit)
        want = (F.softplus(dt) if softplus else dt).clamp(min=limit[0], max=limit[1])
        # exact: an element-wise clamp skipped only where it is a no-op
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("reset", [None, "some"])
def test_step_unchecked_is_the_public_step(reset: str | None) -> None:
    """The unchecked entry runs the same dispatch and computation as the public op (bit for bit)."""
    kw = make_inputs(Case(length=2, seed=5), torch.float32)
    r = torch.tensor([True, False]) if reset else None  # batch 2: one row starts an episode
    args = [kw["x"][:, 1], kw["dt"][:, 1], kw["A"], kw["B"][:, 1], kw["C"][:, 1]]
    s1, s2 = kw["initial_states"].clone(), kw["initial_states"].clone()
    MAMBA2_STEP.reset()
    y1 = mamba2_step(s1, *args, D=kw["D"], z=kw["z"][:, 1], dt_bias=kw["dt_bias"], reset=r)
    y2 = mamba2_step_unchecked(s2, *args, kw["D"], kw["z"][:, 1], kw["dt_bias"], True, (0.0, math.inf), r)
    assert MAMBA2_STEP.counts["torch"] == 2
    torch.testing.assert_close(y1, y2, rtol=0, atol=0)  # exact: the same dispatch and computation
    torch.testing.assert_close(s1, s2, rtol=0, atol=0)  # exact: the same dispatch and computation
