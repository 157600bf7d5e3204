"""Mamba2 Triton kernels vs the torch reference: under the interpreter on CPU (small shapes) and
compiled on CUDA with ``--gpu`` (realistic shapes). Forward, every gradient, the step kernel."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
from helpers import assert_bf16_close
from hypothesis import example, given, settings
from hypothesis import strategies as st
from mamba2_cases import Case, make_inputs, ref_call, with_grad
from tritonrl.kernels.mamba2 import MAMBA2_SCAN, MAMBA2_STEP, mamba2_scan, mamba2_step
from tritonrl.kernels.mamba2.reference import mamba2_scan_ref

# f32 kernels use IEEE products: they differ from the float64 reference by summation order only.
# Errors are measured relative to the largest reference value of each tensor (sums over L and P
# make some gradients, dA and dD, large).
F32_REL = 1e-4
# ...except where a gradient is a near-cancelling sum (terms of order 1 summing to 1e-2): there the
# plain torch reference computing in f32 is itself off by more (2.6e-4 seen for dA, hypothesis case
# L=17, chunk 16, seed 419), and the kernel, summing per chunk in another order, may be F32_K times
# that (3.8x seen). A gradient over F32_REL must stay within F32_K x torch-f32's own error.
F32_K = 8.0
# bf16 kernels: err <= K * err(plain torch computing in bf16) + ATOL_REL * max|ref|. Measured under
# the interpreter, the kernel is 0.3x to 2.3x torch's bf16 error (bf16 rounding of intra-chunk
# operands and of the stored outputs); torch bf16 itself is off by 0.3% to 10% of max|ref|.
BF16_K = 2.5
BF16_ATOL_REL = 4e-3


def _f64(kw: dict) -> dict:
    return {
        k: (v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v) for k, v in kw.items()
    }


def _rel(a: torch.Tensor, ref: torch.Tensor) -> float:
    return (a.double() - ref.double()).abs().max().item() / max(ref.abs().max().item(), 1e-6)


def _run_all(kw: dict, chunk: int, device: str):
    """Kernel forward + backward with random upstream grads, and the float64 reference's."""
    a, names = with_grad(kw)
    MAMBA2_SCAN.reset()
    y, h = mamba2_scan(**a, chunk_size=chunk, return_final_states=True)
    assert MAMBA2_SCAN.last_backend == "triton"
    g = torch.Generator().manual_seed(123)
    gy = torch.randn(y.shape, generator=g).to(device)
    gh = torch.randn(h.shape, generator=g).to(device)
    grads = torch.autograd.grad((y, h), [a[k] for k in names], (gy.to(y.dtype), gh))
    assert MAMBA2_SCAN.counts["triton"] == 2 and MAMBA2_SCAN.last_backend == "triton"  # bwd ran Triton
    r, _ = with_grad(_f64(kw))
    y0, h0 = ref_call(mamba2_scan_ref, r, chunk)
    ref_grads = torch.autograd.grad(
        (y0, h0), [r[k] for k in names], (gy.double(), gh.double()), allow_unused=True
    )
    ref_grads = [torch.zeros_like(r[k]) if gr is None else gr for k, gr in zip(names, ref_grads, strict=True)]
    return (y, h, dict(zip(names, grads, strict=True))), (y0, h0, dict(zip(names, ref_grads, strict=True)))


def _torch_f32_grads(kw: dict, chunk: int) -> dict:
    """The torch reference's gradients computed in f32 (same upstream gradients as :func:`_run_all`)."""
    a, names = with_grad({k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()})
    y, h = ref_call(mamba2_scan_ref, a, chunk)
    g = torch.Generator().manual_seed(123)
    gy, gh = torch.randn(y.shape, generator=g), torch.randn(h.shape, generator=g)
    grads = torch.autograd.grad((y, h), [a[k] for k in names], (gy.to(y.dtype), gh), allow_unused=True)
    return {k: torch.zeros_like(a[k]) if gk is None else gk for k, gk in zip(names, grads, strict=True)}


def _check_f32(kw: dict, chunk: int, device: str) -> None:
    (y, h, gr), (y0, h0, gr0) = _run_all(kw, chunk, device)
    assert y.dtype == kw["x"].dtype and h.dtype == torch.float32
    assert _rel(y, y0) < F32_REL, f"y: rel err {_rel(y, y0):.2e}"
    assert _rel(h, h0) < F32_REL, f"final states: rel err {_rel(h, h0):.2e}"
    torch_f32: dict | None = None  # computed only when a gradient exceeds F32_REL
    for k in gr:
        assert gr[k].dtype == kw[k].dtype and gr[k].shape == kw[k].shape, k
        err = _rel(gr[k], gr0[k])
        if err >= F32_REL:
            torch_f32 = torch_f32 or _torch_f32_grads(kw, chunk)
            bound = F32_K * _rel(torch_f32[k], gr0[k].cpu())
            assert err < bound, f"grad {k}: rel err {err:.2e} (torch f32: {bound / F32_K:.2e})"


SMALL = [
    Case(),  # L=37: 3 chunks of 16 with a partial one; G < H, D [H], gate, bias, h0, resets
    Case(
        batch=1,
        length=16,
        nheads=2,
        headdim=8,
        ngroups=1,
        dstate=8,
        d_mode="hp",
        gate=False,
        bias=False,
        init=False,
        resets="none",
        softplus=False,
        limit=(0.01, 1.5),
        seed=1,
    ),
    Case(batch=2, length=1, nheads=4, headdim=3, ngroups=4, dstate=5, resets="all", seed=2),
    Case(
        batch=1, length=40, nheads=3, headdim=7, ngroups=1, dstate=2, d_mode="none", limit=(0.0, 0.5), seed=3
    ),
    # P = 72: several P-blocks (2 in the forward, 3 in the backward), partial sums reduced
    Case(batch=2, length=20, nheads=2, headdim=72, ngroups=1, dstate=4, d_mode="hp", seed=4),
]


def _case_id(c: Case) -> str:
    return f"L{c.length}-H{c.nheads}G{c.ngroups}P{c.headdim}-{c.resets}"


@pytest.mark.parametrize("case", SMALL, ids=_case_id)
def test_scan_f32_parity(kernel_device: str, case: Case) -> None:
    if kernel_device == "cuda":
        case = Case(
            **{
                **case.__dict__,
                "batch": 2,
                "length": case.length * 9 + 11,
                "headdim": {72: 160, 8: 64}.get(case.headdim, 48),
                "dstate": 64 if case.dstate > 3 else 128,
            }
        )
    _check_f32(
        make_inputs(case, torch.float32, kernel_device), 16 if kernel_device == "cpu" else 64, kernel_device
    )


@pytest.mark.interpret
def test_scan_f32_parity_wide_blocks_interpreted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch configuration of many sequences (BP = 64 forward, two blocks of 32 backward),
    reached with few rows by lowering the program-count threshold (the interpreter is slow)."""
    from tritonrl.kernels.mamba2 import chunk

    monkeypatch.setenv("TRITONRL_BACKEND", "triton")
    monkeypatch.setattr(chunk, "_MIN_PROGRAMS", 1)
    assert chunk._blocks(40, 8, 16, bwd=False, rows=4)[0] == 64
    assert chunk._blocks(40, 8, 16, bwd=True, rows=4)[0] == 32
    case = Case(batch=2, length=20, nheads=2, ngroups=1, headdim=40, dstate=8, d_mode="hp", seed=10)
    _check_f32(make_inputs(case, torch.float32), 16, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("dstate", [64, 128])
def test_scan_f32_parity_many_rows(monkeypatch: pytest.MonkeyPatch, dstate: int) -> None:
    """batch x heads >= 128: the launch keeps the widest P-blocks (32 or 64)."""
    monkeypatch.setenv("TRITONRL_BACKEND", "triton")
    case = Case(batch=16, length=300, nheads=8, ngroups=2, headdim=64, dstate=dstate, d_mode="hp", seed=9)
    _check_f32(make_inputs(case, torch.float32, "cuda"), 64, "cuda")


@pytest.mark.interpret
@settings(max_examples=20)
@given(
    length=st.sampled_from([1, 15, 16, 17, 40]),
    chunk=st.sampled_from([16, 32]),
    heads_groups=st.sampled_from([(2, 1), (4, 2), (2, 2)]),
    d_mode=st.sampled_from(["none", "h", "hp"]),
    gate=st.booleans(),
    init=st.booleans(),
    resets=st.sampled_from(["none", "random"]),
    seed=st.integers(0, 2**16),
)
# a near-cancelling dA (see F32_K), found by hypothesis
@example(
    length=17, chunk=16, heads_groups=(2, 1), d_mode="h", gate=True, init=True, resets="random", seed=419
)
def test_scan_f32_parity_property(
    monkeypatch: pytest.MonkeyPatch,
    length: int,
    chunk: int,
    heads_groups: tuple[int, int],
    d_mode: str,
    gate: bool,
    init: bool,
    resets: str,
    seed: int,
) -> None:
    monkeypatch.setenv("TRITONRL_BACKEND", "triton")  # interpreter only: few, small examples
    case = Case(
        batch=2,
        length=length,
        nheads=heads_groups[0],
        ngroups=heads_groups[1],
        headdim=4,
        dstate=3,
        d_mode=d_mode,
        gate=gate,
        init=init,
        resets=resets,
        seed=seed,
    )
    _check_f32(make_inputs(case, torch.float32), chunk, "cpu")


BF16_CASES = [
    Case(length=40, headdim=8, dstate=8),
    Case(batch=1, length=33, nheads=2, headdim=8, ngroups=1, dstate=8, d_mode="hp", resets="none", seed=5),
]


@pytest.mark.parametrize("case", BF16_CASES, ids=lambda c: f"L{c.length}-{c.resets}")
def test_scan_bf16_parity(kernel_device: str, case: Case) -> None:
    chunk = 16
    if kernel_device == "cuda":
        # a long sequence over few rows (small P-blocks), and many rows (the widest P-blocks)
        batch, length = (4, 1000) if case.resets == "random" else (32, 256)
        case = Case(
            **{
                **case.__dict__,
                "batch": batch,
                "length": length,
                "nheads": 8,
                "ngroups": 2,
                "headdim": 64,
                "dstate": 64,
            }
        )
        chunk = 64
    kw = make_inputs(case, torch.bfloat16, kernel_device)
    (y, h, gr), (y0, h0, gr0) = _run_all(kw, chunk, kernel_device)
    assert y.dtype == torch.bfloat16 and h.dtype == torch.float32
    # plain torch computing the same chunked algorithm in bf16: the yardstick
    b, names = with_grad(kw)
    y1, h1 = ref_call(partial(mamba2_scan_ref, compute_dtype=torch.bfloat16), b, chunk)
    gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(123)).to(kernel_device)
    gh = torch.randn(h.shape, generator=torch.Generator().manual_seed(123)).to(kernel_device)
    gr1 = torch.autograd.grad((y1, h1), [b[k] for k in names], (gy.bfloat16(), gh.bfloat16()))
    for name, out, ref, base in [("y", y, y0, y1), ("final states", h, h0, h1)] + [
        (f"grad {k}", gr[k], gr0[k], g1) for k, g1 in zip(names, gr1, strict=True)
    ]:
        assert out.dtype == (
            torch.float32
            if name in ("final states", "grad initial_states")
            else kw.get(name.removeprefix("grad "), out).dtype
        )
        assert_bf16_close(out, ref, base, k=BF16_K, atol=BF16_ATOL_REL * ref.abs().max().item(), name=name)


def test_scan_backward_is_deterministic(kernel_device: str) -> None:
    case = Case(length=40, headdim=8, dstate=8, seed=7)
    if kernel_device == "cuda":
        case = Case(**{**case.__dict__, "batch": 4, "length": 700, "headdim": 64, "dstate": 128})
    kw = make_inputs(case, torch.float32, kernel_device)
    results = []
    for _ in range(2):
        a, names = with_grad(kw)
        y, h = mamba2_scan(**a, chunk_size=16 if kernel_device == "cpu" else 64, return_final_states=True)
        g = torch.autograd.grad((y, h), [a[k] for k in names], (torch.ones_like(y), torch.ones_like(h)))
        results.append((y, h, *g))
    for first, second in zip(*results, strict=True):
        assert torch.equal(first, second)  # bitwise: no atomics, fixed reduction order


def test_scan_strided_inputs_and_no_grad(kernel_device: str) -> None:
    """Slices of one projection (as in Mamba2Block) and inference without autograd."""
    b, L, H, P, G, N = 2, 21, 2, 8, 1, 8
    if kernel_device == "cuda":
        b, L, H, P, G, N = 3, 500, 8, 64, 2, 64
    g = torch.Generator().manual_seed(0)
    proj = torch.randn(b, L, 2 * H * P + 2 * G * N + H, generator=g).to(kernel_device)
    z, x, Bm, Cm, dt = proj.split([H * P, H * P, G * N, G * N, H], dim=-1)
    args = (
        x.view(b, L, H, P),
        dt,
        -torch.rand(H, generator=g).to(kernel_device),
        Bm.view(b, L, G, N),
        Cm.view(b, L, G, N),
    )
    kw = {"z": z.view(b, L, H, P), "D": torch.ones(H, device=kernel_device), "chunk_size": 16}
    with torch.no_grad():
        y = mamba2_scan(*args, **kw)
    assert MAMBA2_SCAN.last_backend == "triton"
    y0 = mamba2_scan_ref(
        *[t.contiguous().double() for t in args],
        kw["D"].double(),
        kw["z"].double(),
        None,
        True,
        (0.0, math.inf),
        None,
        None,
        16,
        False,
    )
    assert _rel(y, y0) < F32_REL


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "case",
    [
        Case(length=6),
        Case(
            length=5,
            d_mode="hp",
            gate=False,
            bias=False,
            resets="none",
            ngroups=1,
            dstate=16,
            softplus=False,
            limit=(0.01, 1.5),
            seed=4,
        ),
    ],
)
def test_step_parity(kernel_device: str, case: Case, dtype: torch.dtype) -> None:
    if kernel_device == "cuda":
        case = Case(**{**case.__dict__, "batch": 64, "nheads": 8, "ngroups": 2, "headdim": 64, "dstate": 128})
    kw = make_inputs(case, dtype, kernel_device)
    state = kw.get("initial_states")
    state = (
        torch.zeros(case.batch, case.nheads, case.headdim, case.dstate, device=kernel_device)
        if state is None
        else state.clone()
    )
    ref_state = state.double().clone()
    k64 = _f64(kw)
    MAMBA2_STEP.reset()
    for t in range(case.length):
        sl = {
            k: (kw[k][:, t] if kw.get(k) is not None else None) for k in ("x", "dt", "B", "C", "z", "resets")
        }
        y = mamba2_step(
            state,
            sl["x"],
            sl["dt"],
            kw["A"],
            sl["B"],
            sl["C"],
            D=kw.get("D"),
            z=sl["z"],
            dt_bias=kw.get("dt_bias"),
            dt_softplus=case.softplus,
            dt_limit=case.limit,
            reset=sl["resets"],
        )
        assert MAMBA2_STEP.last_backend == "triton" and y.dtype == dtype
        from tritonrl.kernels.mamba2.reference import mamba2_step_ref

        s64 = {k: (k64[k][:, t] if k64.get(k) is not None else None) for k in ("x", "dt", "B", "C", "z")}
        y0 = mamba2_step_ref(
            ref_state,
            s64["x"],
            s64["dt"],
            k64["A"],
            s64["B"],
            s64["C"],
            k64.get("D"),
            s64["z"],
            k64.get("dt_bias"),
            case.softplus,
            case.limit,
            sl["resets"],
        )
        # f32 state and f32 math in both: only the output's rounding differs. bf16: within one bf16
        # ulp (2^-7 relative), as the interpreter converts f32 -> bf16 by truncation, not rounding.
        tol = F32_REL if dtype == torch.float32 else 2.0**-7
        assert _rel(y, y0) < tol, f"step {t}: y rel err {_rel(y, y0):.2e}"
        assert _rel(state, ref_state) < F32_REL, f"step {t}: state rel err {_rel(state, ref_state):.2e}"


def test_backward_fallback_matches_the_triton_backward(kernel_device, monkeypatch) -> None:
    """The guard's fallback (``reference_grads`` through the chunked reference) gives the Triton
    backward's gradients, for every input that takes one (and None for those not asked for)."""
    kw = make_inputs(Case(length=20, seed=3), torch.float32, kernel_device)
    a, names = with_grad(kw)
    MAMBA2_SCAN.reset()
    y, h = mamba2_scan(**a, chunk_size=16, return_final_states=True)
    g = torch.Generator().manual_seed(7)
    gy, gh = (torch.randn(t.shape, generator=g).to(kernel_device) for t in (y, h))
    want = torch.autograd.grad((y, h), [a[k] for k in names], (gy, gh))
    assert MAMBA2_SCAN.counts == {"triton": 2}

    def always_fallback(device, triton_call, fallback):
        return MAMBA2_SCAN._ran("torch", fallback())

    y2, h2 = mamba2_scan(**a, chunk_size=16, return_final_states=True)
    monkeypatch.setattr(MAMBA2_SCAN, "guard", always_fallback)
    got = torch.autograd.grad((y2, h2), [a[k] for k in names], (gy, gh))
    assert MAMBA2_SCAN.last_backend == "torch"
    for k, gw, gg in zip(names, want, got, strict=True):
        assert _rel(gg, gw) < F32_REL, f"{k}: rel err {_rel(gg, gw):.2e}"
    # only x asks for a gradient: the others come back None, not zeros
    x = kw["x"].detach().requires_grad_()
    rest = {k: (v.detach() if isinstance(v, torch.Tensor) else v) for k, v in kw.items() if k != "x"}
    (gx,) = torch.autograd.grad(mamba2_scan(x, **rest, chunk_size=16), [x], gy)
    assert gx.shape == x.shape and torch.isfinite(gx).all()
