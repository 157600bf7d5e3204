"""The noisy linear and noisy dueling head ops: reference, Triton parity, gradients, bad input.

Oracles:
- the torch reference against a float64 ground truth that builds the noisy weight
  ``W_mu + W_sigma * outer(eps_out, eps_in)`` explicitly (the textbook NoisyNet layer; built
  here, in the test only, as an independent formula);
- the Triton kernels (CPU interpreter; CUDA with ``--gpu``) against the reference evaluated in
  float64 on the same (rounded) inputs. f32 kernels use IEEE products: tight tolerances. bf16
  kernels are bounded by torch-bf16's own error (``assert_bf16_close``).
Every gradient uses a random upstream gradient.
"""

from __future__ import annotations

import pytest
import torch
from helpers import assert_bf16_close, make_layer
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonrl.kernels.noisy_head import (
    NOISY_DUELING,
    NOISY_LINEAR,
    NoisyParams,
    expected_q,
    linear_q,
    noisy_dueling,
    noisy_linear,
)
from tritonrl.kernels.noisy_head.reference import noisy_dueling_ref, noisy_linear_ref

# ----------------------------------------------------------------------------- cases


def leaves(x: torch.Tensor, *layers: NoisyParams | None) -> list[torch.Tensor]:
    """x and every weight / bias that requires grad (noise takes none)."""
    out = [x]
    for p in layers:
        if p is not None:
            out += [t for t in p[:4] if t is not None]
    return out


def as64(p: NoisyParams | None) -> NoisyParams | None:
    """Detached float64 copies (same device) of a layer, requiring grad like the original."""
    if p is None:
        return None
    return NoisyParams(
        *(None if t is None else t.detach().double().requires_grad_(t.requires_grad) for t in p)
    )


def x64(x: torch.Tensor) -> torch.Tensor:
    return x.detach().double().requires_grad_(x.requires_grad)


def grads_with(outs, inputs: list[torch.Tensor], ups: list[torch.Tensor]) -> list[torch.Tensor]:
    """Gradients of ``outs`` w.r.t. ``inputs`` for upstream gradients ``ups`` (cast to each output)."""
    outs = outs if isinstance(outs, tuple) else (outs,)
    gouts = [u.to(o.device, o.dtype) for u, o in zip(ups, outs, strict=True)]
    return list(torch.autograd.grad(outs, inputs, gouts, allow_unused=True))


def grads_of(outs, inputs: list[torch.Tensor], gen: torch.Generator) -> tuple[list, list[torch.Tensor]]:
    """Random upstream gradients (on CPU, f32) and the gradients they give ``inputs``."""
    outs = outs if isinstance(outs, tuple) else (outs,)
    ups = [torch.randn(o.shape, generator=gen) for o in outs]
    return ups, grads_with(outs, inputs, ups)


def ground_truth_linear(x: torch.Tensor, p: NoisyParams, noise: bool, relu: bool = False) -> torch.Tensor:
    """The NoisyNet layer with its noisy weight built explicitly (f64 test oracle)."""
    w, b = p.weight_mu, p.bias_mu
    if noise:
        w = w + p.weight_sigma * (p.eps_out[..., :, None] * p.eps_in[..., None, :])
        b = None if b is None else b + p.bias_sigma * p.eps_out
    y = torch.einsum("bi,goi->bgo", x, w) if w.dim() == 3 else x @ w.T
    y = y if b is None else y + b
    return y.clamp_min(0) if relu else y


def relu_like(pre: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """ReLU of a reference's pre-activation ``pre`` with the activation pattern of the output ``y``.

    Where ``|pre|`` is within rounding of zero, two computations may land on different sides of the
    kink (bf16 rounds ``x * eps_in`` before the product, as torch-bf16 does) and the gradient jumps
    by a whole ``g * W`` there. Checking under the tested output's own pattern keeps the comparison
    about arithmetic; the forward values differ only by that rounding either way.
    """
    return pre * (y.detach() > 0).to(device=pre.device, dtype=pre.dtype)


def ground_truth_dueling(x, adv, val, a, z, noise, log_softmax, support=None):
    b = x.shape[0]
    xv, xa = (x[:, 0], x[:, 1]) if x.dim() == 3 else (x, x)
    q = ground_truth_linear(xa, adv, noise).view(b, a, z)
    if val is not None:
        q = ground_truth_linear(xv, val, noise).view(b, 1, z) + q - q.sum(1, keepdim=True) / a
    if log_softmax and z > 1:
        m = q.max(-1, keepdim=True).values
        q = q - (m + (q - m).exp().sum(-1, keepdim=True).log())
    if support is None:
        return q
    return q, (q.exp() * support.double()).sum(-1)


def assert_f32_close(got, ref, name: str, rel: float = 1e-5) -> None:
    """f32 (IEEE products, f32 accumulation) vs f64: a few ulps of sums of at most a few hundred
    terms; the absolute part scales with the largest magnitude of the reference."""
    assert (got is None) == (ref is None), f"{name}: one side has no gradient"
    if got is None:
        return
    assert not torch.isnan(got).any(), f"{name}: NaN (an output element was never written)"
    scale = max(1.0, ref.abs().max().item())
    torch.testing.assert_close(
        got.detach().double(),
        ref.detach().double().to(got.device),
        rtol=rel,
        atol=rel * scale,
        msg=lambda m: f"{name}: {m}",
    )


def assert_bf16_ok(got, ref, torch_bf16, name: str) -> None:
    """bf16 kernel error <= 2 x torch-bf16 error + a floor relative to the output's scale.

    Compiled kernels round once, to nearest, at the store (torch rounds after every op): floor
    1e-3. The Triton interpreter truncates f32 -> bf16 instead of rounding, which costs up to one
    bf16 ulp (2**-7 relative at the top of a binade): floor 2**-7 there.
    """
    assert (got is None) == (ref is None), f"{name}: one side has no gradient"
    if got is None:
        return
    assert not torch.isnan(got).any(), f"{name}: NaN (an output element was never written)"
    scale = max(1.0, ref.abs().max().item())
    floor = 2.0**-7 if got.device.type == "cpu" else 1e-3
    assert_bf16_close(
        got.detach().cpu(),
        ref.detach().cpu(),
        torch_bf16.detach().cpu(),
        k=2.0,
        atol=floor * scale,
        name=name,
    )


@pytest.fixture
def fresh_ops():
    """Both ops forget earlier selections and counters (fresh outputs are NaN: tests/conftest.py)."""
    NOISY_LINEAR.reset()
    NOISY_DUELING.reset()


# ----------------------------------------------------------------------------- reference (torch path)


@settings(max_examples=25)
@given(
    b=st.integers(1, 512),
    i=st.sampled_from([1, 2, 17, 63, 64, 257]),
    o=st.integers(1, 40),
    groups=st.sampled_from([None, 2]),
    noise=st.booleans(),
    relu=st.booleans(),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_linear_reference_vs_ground_truth(b, i, o, groups, noise, relu, bias, seed) -> None:
    gen = torch.Generator().manual_seed(seed)
    p = make_layer(o, i, gen, lead=(groups,) if groups else (), bias=bias)
    x = torch.randn(b, i, generator=gen).requires_grad_()
    NOISY_LINEAR.reset()
    y = noisy_linear(x, *p, noise=noise, activation="relu" if relu else None)
    assert NOISY_LINEAR.last_backend == "torch"
    assert y.shape == ((b, groups, o) if groups else (b, o)) and y.dtype == torch.float32
    xd, pd = x64(x), as64(p)
    ref = ground_truth_linear(xd, pd, noise)
    ref = relu_like(ref, y) if relu else ref
    assert_f32_close(y, ref, "y")
    ups, gs = grads_of(y, leaves(x, p), gen)
    gr = grads_with(ref, leaves(xd, pd), ups)
    for name, g, r in zip(["x", "w_mu", "w_sigma", "b_mu", "b_sigma"], gs, gr, strict=False):
        assert_f32_close(g, r, f"grad {name}")


@settings(max_examples=25)
@given(
    b=st.integers(1, 512),
    i=st.sampled_from([1, 63, 257]),
    a=st.integers(1, 18),
    z=st.sampled_from([1, 51]),
    noise=st.booleans(),
    dueling=st.booleans(),
    two_inputs=st.booleans(),
    log_softmax=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_dueling_reference_vs_ground_truth(b, i, a, z, noise, dueling, two_inputs, log_softmax, seed) -> None:
    gen = torch.Generator().manual_seed(seed)
    two_inputs = two_inputs and dueling
    adv = make_layer(a * z, i, gen)
    val = make_layer(z, i, gen) if dueling else None
    x = torch.randn(b, 2, i, generator=gen) if two_inputs else torch.randn(b, i, generator=gen)
    x.requires_grad_()
    support = torch.linspace(-5, 5, z) if (z > 1 and log_softmax) else None
    NOISY_DUELING.reset()
    out = noisy_dueling(
        x, adv, val, num_actions=a, atoms=z, noise=noise, log_softmax=log_softmax, support=support
    )
    assert NOISY_DUELING.last_backend == "torch"
    outs = out if isinstance(out, tuple) else (out,)
    assert outs[0].shape == (b, a, z) and outs[0].dtype == torch.float32
    ref = ground_truth_dueling(x64(x), as64(adv), as64(val), a, z, noise, log_softmax, support)
    refs = ref if isinstance(ref, tuple) else (ref,)
    for name, got, r in zip(["out", "q"][: len(outs)], outs, refs, strict=True):
        assert_f32_close(got, r, name)
    if z > 1 and log_softmax:  # probabilities over atoms sum to one
        torch.testing.assert_close(outs[0].exp().sum(-1), torch.ones(b, a), rtol=0, atol=1e-5)
    if dueling and (z == 1 or not log_softmax):  # identifiability: mean_a Q = V
        v = noisy_linear_ref(x[:, 0] if two_inputs else x, *val, noise=noise).view(b, z)
        torch.testing.assert_close(outs[0].mean(1), v, rtol=1e-5, atol=1e-5)
    xd, ad, vd = x64(x), as64(adv), as64(val)
    ref = ground_truth_dueling(xd, ad, vd, a, z, noise, log_softmax, support)
    ups, gs = grads_of(out, leaves(x, adv, val), gen)
    gr = grads_with(ref, leaves(xd, ad, vd), ups)
    for k, (g, r) in enumerate(zip(gs, gr, strict=True)):
        assert_f32_close(g, r, f"grad #{k}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_reference_builds_the_noisy_weight_only_in_f32(monkeypatch: pytest.MonkeyPatch, dtype) -> None:
    """16-bit dtypes: no [O, I]-shaped product of sigma and noise, only x-sized and y-sized
    elementwise work (the kernels' two-product form); f32: the noisy weight is built once (one
    [O, I] addcmul) and multiplied once."""
    gen = torch.Generator().manual_seed(0)
    p = NoisyParams(*(None if t is None else t.to(dtype) for t in make_layer(7, 5, gen)))
    x = torch.randn(3, 5, generator=gen).to(dtype)
    seen: list[tuple[int, ...]] = []
    real_mul, real_addcmul, real_linear = torch.Tensor.__mul__, torch.addcmul, torch.nn.functional.linear
    linears: list[tuple[int, ...]] = []

    def spy(a, b):
        r = real_mul(a, b)
        seen.append(tuple(r.shape))
        return r

    def spy_addcmul(*args, **kwargs):
        r = real_addcmul(*args, **kwargs)
        seen.append(tuple(r.shape))
        return r

    def spy_linear(inp, w, b=None):
        linears.append(tuple(w.shape))
        return real_linear(inp, w, b)

    monkeypatch.setattr(torch.Tensor, "__mul__", spy)
    monkeypatch.setattr(torch, "addcmul", spy_addcmul)
    monkeypatch.setattr(torch.nn.functional, "linear", spy_linear)
    noisy_linear_ref(x, *p, noise=True)
    monkeypatch.undo()
    if dtype == torch.float32:
        assert seen.count((7, 5)) == 1 and linears == [(7, 5)], (seen, linears)
    else:
        assert seen and (7, 5) not in seen and len(linears) == 2, (seen, linears)


def test_expected_q_matches_support_average() -> None:
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(4, 3, 51, generator=gen)
    support = torch.linspace(-10, 10, 51)
    lp = torch.log_softmax(logits, -1)
    q = expected_q(lp, support)
    torch.testing.assert_close(q, (lp.exp() * support).sum(-1))
    assert q.shape == (4, 3) and q.dtype == torch.float32


# ----------------------------------------------------------------------------- bad input


def _bad_linear_cases():
    gen = torch.Generator().manual_seed(0)
    p = make_layer(4, 3, gen)
    x = torch.randn(2, 3)
    w, ws, bm, bs, ei, eo = (t.detach() for t in p)
    return [
        ("x", (x.view(2, 3, 1), w, ws, bm, bs, ei, eo), {}, ValueError),
        ("x", (x.double(), w, ws, bm, bs, ei, eo), {}, TypeError),
        ("x", (x.numpy(), w, ws, bm, bs, ei, eo), {}, TypeError),
        ("x", (x[:0], w, ws, bm, bs, ei, eo), {}, ValueError),
        ("weight_mu", (x, w[:, :2], ws, bm, bs, ei, eo), {}, ValueError),
        ("weight_sigma", (x, w, ws.T.contiguous(), bm, bs, ei, eo), {}, ValueError),
        ("weight_sigma", (x, w, ws.bfloat16(), bm, bs, ei, eo), {}, TypeError),
        ("weight_sigma", (x, w, None, bm, bs, ei, eo), {}, ValueError),
        ("weight_mu", (x, torch.randn(3, 4).T, ws, bm, bs, ei, eo), {}, ValueError),
        ("bias_mu", (x, w, ws, bm[:3], bs, ei, eo), {}, ValueError),
        ("bias_sigma", (x, w, ws, bm, None, ei, eo), {}, ValueError),
        ("eps_in", (x, w, ws, bm, bs, eo, eo), {}, ValueError),
        ("eps_out", (x, w, ws, bm, bs, ei, torch.randn(8)[::2]), {}, ValueError),
        ("eps_out", (x, w, ws, bm, bs, ei, eo.to("meta")), {}, ValueError),
        ("activation", (x, w, ws, bm, bs, ei, eo), {"activation": "tanh"}, ValueError),
    ]


@pytest.mark.parametrize("case", range(len(_bad_linear_cases())))
def test_noisy_linear_bad_input(case: int) -> None:
    name, args, kw, exc = _bad_linear_cases()[case]
    with pytest.raises(exc, match=f"^{name}"):
        noisy_linear(*args, **kw)


def test_validation_cache_still_rejects_changed_inputs() -> None:
    # A call with a validated signature skips the checks; anything that changes a tensor's
    # shape, dtype, device or contiguity must be checked again, even in the same tensor object.
    gen = torch.Generator().manual_seed(0)
    w, ws, bm, bs, ei, eo = (t.detach().clone() for t in make_layer(4, 3, gen))
    x = torch.randn(2, 3)
    noisy_linear(x, w, ws, bm, bs, ei, eo)  # validated, now cached
    for case in range(len(_bad_linear_cases())):
        name, args, kw, exc = _bad_linear_cases()[case]
        with pytest.raises(exc, match=f"^{name}"):
            noisy_linear(*args, **kw)
    ws.data = ws.data.double()  # same object, new dtype
    with pytest.raises(TypeError, match="^weight_sigma"):
        noisy_linear(x, w, ws, bm, bs, ei, eo)
    ws.data = ws.data.float().T.contiguous().T  # same object, transposed strides
    with pytest.raises(ValueError, match="^weight_sigma must be contiguous"):
        noisy_linear(x, w, ws, bm, bs, ei, eo)
    adv, val = make_layer(6, 5, gen), make_layer(2, 5, gen)
    xd = torch.randn(4, 5)
    noisy_dueling(xd, adv, val, num_actions=3, atoms=2)  # cached
    with pytest.raises(ValueError, match="advantage.weight_mu must have 3 rows"):
        noisy_dueling(xd, adv, val, num_actions=3, atoms=1)
    with pytest.raises(ValueError, match="num_actions"):
        noisy_dueling(xd, adv, val, num_actions=0, atoms=2)
    val.eps_in.data = val.eps_in.data.double()
    with pytest.raises(TypeError, match="value.eps_in"):
        noisy_dueling(xd, adv, val, num_actions=3, atoms=2)


def test_noisy_dueling_bad_input() -> None:
    gen = torch.Generator().manual_seed(0)
    adv, val = make_layer(6, 5, gen), make_layer(2, 5, gen)
    x = torch.randn(4, 5)
    kw = {"num_actions": 3, "atoms": 2}
    with pytest.raises(ValueError, match="advantage.weight_mu"):
        noisy_dueling(x, adv, val, num_actions=4, atoms=2)
    with pytest.raises(ValueError, match="value.weight_mu"):
        noisy_dueling(x, adv, make_layer(3, 5, gen), **kw)
    with pytest.raises(ValueError, match="x"):
        noisy_dueling(torch.randn(4, 3, 5), adv, val, **kw)
    with pytest.raises(ValueError, match="x"):
        noisy_dueling(torch.randn(4, 2, 5), adv, None, **kw)
    with pytest.raises(TypeError, match="advantage"):
        noisy_dueling(x, "weights", val, **kw)
    with pytest.raises(TypeError, match="value.eps_in"):
        noisy_dueling(x, adv, val._replace(eps_in=val.eps_in.double()), **kw)
    with pytest.raises(ValueError, match="num_actions"):
        noisy_dueling(x, adv, val, num_actions=0, atoms=2)
    with pytest.raises(ValueError, match="support"):
        noisy_dueling(x, adv, val, **kw, support=torch.zeros(3))
    with pytest.raises(TypeError, match="support"):
        noisy_dueling(x, adv, val, **kw, support=torch.zeros(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="support"):
        noisy_dueling(x, adv, val, **kw, log_softmax=False, support=torch.zeros(2))
    with pytest.raises(ValueError, match="bias_mu"):
        noisy_dueling(x, adv, val._replace(bias_mu=None, bias_sigma=None), **kw)
    with pytest.raises(ValueError, match="support"):
        expected_q(torch.zeros(4, 3, 2), torch.zeros(5))


# ----------------------------------------------------------------------------- Triton parity


LINEAR_SHAPES = [  # (B, I, O, groups)
    (1, 1, 1, None),
    (5, 63, 7, None),
    (19, 40, 33, 2),
]


@pytest.mark.parametrize("shape", LINEAR_SHAPES, ids=str)
@pytest.mark.parametrize("noise", [True, False], ids=["noise", "eval"])
@pytest.mark.parametrize("relu", [False, True], ids=["linear", "relu"])
def test_linear_triton_f32(kernel_device, fresh_ops, shape, noise, relu) -> None:
    b, i, o, groups = shape
    gen = torch.Generator().manual_seed(b + i + o)
    p = make_layer(o, i, gen, lead=(groups,) if groups else (), bias=o != 1, device=kernel_device)
    # a non-contiguous x (every other column) exercises the strided loads
    x = torch.randn(b, 2 * i, generator=gen)[:, ::2].to(kernel_device).requires_grad_()
    y = noisy_linear(x, *p, noise=noise, activation="relu" if relu else None)
    assert NOISY_LINEAR.last_backend == "triton" and y.dtype == torch.float32
    xd, pd = x64(x), as64(p)
    ref = noisy_linear_ref(xd, *pd, noise=noise)
    ref = relu_like(ref, y) if relu else ref
    assert_f32_close(y, ref, "y")
    NOISY_LINEAR.reset()
    ups, gs = grads_of(y, leaves(x, p), gen)
    assert NOISY_LINEAR.last_backend == "triton"  # the backward ran the Triton kernels
    gr = grads_with(ref, leaves(xd, pd), ups)
    for k, (g, r) in enumerate(zip(gs, gr, strict=True)):
        assert_f32_close(g, r, f"grad #{k}")


@pytest.mark.parametrize("shape", LINEAR_SHAPES[1:], ids=str)
@pytest.mark.parametrize("relu", [False, True], ids=["linear", "relu"])
def test_linear_triton_bf16(kernel_device, fresh_ops, shape, relu) -> None:
    b, i, o, groups = shape
    gen = torch.Generator().manual_seed(b * i + o)
    p = make_layer(o, i, gen, lead=(groups,) if groups else (), dtype=torch.bfloat16, device=kernel_device)
    x = torch.randn(b, i, generator=gen).to(kernel_device, torch.bfloat16).requires_grad_()
    act = "relu" if relu else None
    y = noisy_linear(x, *p, activation=act)
    assert NOISY_LINEAR.last_backend == "triton" and y.dtype == torch.bfloat16
    y_bf = noisy_linear_ref(x, *p, noise=True)  # torch computing in bf16
    xd, pd = x64(x), as64(p)
    ref = noisy_linear_ref(xd, *pd, noise=True)
    if relu:
        y_bf, ref = relu_like(y_bf, y), relu_like(ref, y)
    assert_bf16_ok(y, ref, y_bf, "y")
    ups, gs = grads_of(y, leaves(x, p), gen)
    assert NOISY_LINEAR.last_backend == "triton"
    gb = grads_with(y_bf, leaves(x, p), ups)
    gr = grads_with(ref, leaves(xd, pd), ups)
    for k, (g, r, t) in enumerate(zip(gs, gr, gb, strict=True)):
        assert g.dtype == torch.bfloat16
        assert_bf16_ok(g, r, t, f"grad #{k}")


@pytest.mark.parametrize("groups", [None, 2])
def test_linear_triton_split_weight_grads(kernel_device, fresh_ops, groups) -> None:
    """The weight gradient split over batch chunks (f32 partials + a reduction kernel)."""
    from tritonrl.kernels.noisy_head.fused_linear import noisy_linear_bwd

    gen = torch.Generator().manual_seed(11)
    b, i, o = 70, 20, 9
    p = make_layer(o, i, gen, lead=(groups,) if groups else (), device=kernel_device)
    x = torch.randn(b, i, generator=gen).to(kernel_device)
    y = noisy_linear_ref(x, *(t.detach() for t in p), noise=True, relu=True)
    g = torch.randn(y.shape, generator=gen).to(kernel_device)
    got = noisy_linear_bwd(
        g,
        x,
        y,
        p.weight_mu.detach(),
        p.weight_sigma.detach(),
        p.eps_in,
        p.eps_out,
        noise=True,
        relu=True,
        has_bias=True,
        split=3,
    )
    xd, pd = x.double().requires_grad_(), as64(p)
    ref = relu_like(noisy_linear_ref(xd, *pd, noise=True), y)
    want = torch.autograd.grad(ref, leaves(xd, pd), g.cpu().double())
    for k, (a, r) in enumerate(zip(got, want, strict=True)):
        assert_f32_close(a, r, f"grad #{k}")


DUELING_CASES = [  # (B, I, A, Z, dueling, two_inputs, log_softmax, support)
    (5, 7, 3, 1, True, False, True, False),  # scalar Q, both streams read x
    (20, 33, 18, 1, True, True, True, False),  # Atari-size action set, hidden streams [B, 2, I]
    (4, 10, 3, 3, False, False, True, True),  # non-dueling C51, tiny atom count
    (3, 16, 2, 51, True, True, True, True),  # C51, one action tile
    (9, 17, 5, 51, True, False, True, True),  # C51, two action tiles (parked raw tiles)
    (6, 12, 5, 51, True, False, False, False),  # QR-DQN quantiles: no softmax
]


def _dueling_run(case, kernel_device, dtype, gen, noise=True):
    b, i, a, z, dueling, two, ls, sup = case
    adv = make_layer(a * z, i, gen, dtype=dtype, device=kernel_device)
    val = make_layer(z, i, gen, dtype=dtype, device=kernel_device) if dueling else None
    x = torch.randn(b, 2, i, generator=gen) if two else torch.randn(b, i, generator=gen)
    x = x.to(kernel_device, dtype).requires_grad_()
    support = torch.linspace(-10, 10, z, device=kernel_device) if sup else None
    out = noisy_dueling(x, adv, val, num_actions=a, atoms=z, noise=noise, log_softmax=ls, support=support)
    return x, adv, val, support, out


@pytest.mark.parametrize("case", DUELING_CASES, ids=str)
def test_dueling_triton_f32(kernel_device, fresh_ops, case) -> None:
    gen = torch.Generator().manual_seed(sum(case[:4]))
    noise = case[0] % 2 == 1  # odd batches noisy, even ones in evaluation mode
    x, adv, val, support, out = _dueling_run(case, kernel_device, torch.float32, gen, noise)
    assert NOISY_DUELING.last_backend == "triton"
    b, i, a, z, dueling, two, ls, sup = case
    xd, ad, vd = x64(x), as64(adv), as64(val)
    ref = noisy_dueling_ref(xd, ad, vd, a, z, noise, ls, None if support is None else support.double())
    outs, refs = (out, ref) if sup else ((out,), (ref,))
    for name, o, r in zip(["out", "q"][: len(outs)], outs, refs, strict=True):
        assert o.dtype == torch.float32
        assert_f32_close(o, r, name)
    NOISY_DUELING.reset()
    ups, gs = grads_of(out, leaves(x, adv, val), gen)
    assert NOISY_DUELING.last_backend == "triton"
    gr = grads_with(ref, leaves(xd, ad, vd), ups)
    for k, (g, r) in enumerate(zip(gs, gr, strict=True)):
        assert_f32_close(g, r, f"grad #{k}")


@pytest.mark.parametrize("case", [DUELING_CASES[k] for k in (1, 3, 4)], ids=str)
def test_dueling_triton_bf16(kernel_device, fresh_ops, case) -> None:
    gen = torch.Generator().manual_seed(sum(case[:4]) + 1)
    x, adv, val, support, out = _dueling_run(case, kernel_device, torch.bfloat16, gen)
    assert NOISY_DUELING.last_backend == "triton"
    b, i, a, z, dueling, two, ls, sup = case
    out_bf = noisy_dueling_ref(x, adv, val, a, z, True, ls, support)  # torch in bf16, f32 combine
    xd, ad, vd = x64(x), as64(adv), as64(val)
    ref = noisy_dueling_ref(xd, ad, vd, a, z, True, ls, None if support is None else support.double())
    outs, refs, bfs = (out, ref, out_bf) if sup else ((out,), (ref,), (out_bf,))
    for name, o, r, t in zip(["out", "q"][: len(outs)], outs, refs, bfs, strict=True):
        assert o.dtype == torch.float32  # the epilogue emits f32
        assert_bf16_ok(o, r, t, name)
    ups, gs = grads_of(out, leaves(x, adv, val), gen)
    assert NOISY_DUELING.last_backend == "triton"
    gb = grads_with(out_bf, leaves(x, adv, val), ups)
    gr = grads_with(ref, leaves(xd, ad, vd), ups)
    for k, (g, r, t) in enumerate(zip(gs, gr, gb, strict=True)):
        assert g.dtype == torch.bfloat16
        assert_bf16_ok(g, r, t, f"grad #{k}")


@pytest.mark.interpret
@settings(max_examples=8)
@given(
    b=st.integers(1, 24),
    i=st.sampled_from([1, 17, 63]),
    a=st.integers(1, 18),
    z=st.sampled_from([1, 51]),
    noise=st.booleans(),
    dueling=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_dueling_triton_hypothesis(monkeypatch, fresh_ops, b, i, a, z, noise, dueling, seed) -> None:
    """Random shapes under the interpreter (small batches), forward and gradients, f32."""
    monkeypatch.setenv("TRITONRL_BACKEND", "triton")
    gen = torch.Generator().manual_seed(seed)
    case = (b, i, a, z, dueling, dueling and b % 2 == 0, True, z > 1)
    x, adv, val, support, out = _dueling_run(case, "cpu", torch.float32, gen, noise)
    assert NOISY_DUELING.last_backend == "triton"
    xd, ad, vd = x64(x), as64(adv), as64(val)
    ref = ground_truth_dueling(xd, ad, vd, a, z, noise, True, support)
    outs, refs = (out, ref) if z > 1 else ((out,), (ref,))
    for name, o, r in zip(["out", "q"][: len(outs)], outs, refs, strict=True):
        assert_f32_close(o, r, name)
    ups, gs = grads_of(out, leaves(x, adv, val), gen)
    gr = grads_with(ref, leaves(xd, ad, vd), ups)
    for k, (g, r) in enumerate(zip(gs, gr, strict=True)):
        assert_f32_close(g, r, f"grad #{k}")


def test_backward_fallback_through_reference(kernel_device, fresh_ops, monkeypatch) -> None:
    """The guard's fallback (the reference's autograd) gives the same gradients as the kernels."""
    gen = torch.Generator().manual_seed(5)
    case = DUELING_CASES[4]
    x, adv, val, support, out = _dueling_run(case, kernel_device, torch.float32, gen)
    ups, want = grads_of(out, leaves(x, adv, val), gen)

    def always_fallback(device, triton_call, fallback):
        return NOISY_DUELING._ran("torch", fallback())

    monkeypatch.setattr(NOISY_DUELING, "guard", always_fallback)
    out2 = noisy_dueling(x, adv, val, num_actions=5, atoms=51, support=support)
    got = grads_with(out2, leaves(x, adv, val), ups)
    assert NOISY_DUELING.last_backend == "torch"
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert_f32_close(g, w.double(), f"grad #{k}")


# ----------------------------------------------------------------------------- GPU, realistic sizes


def _gpu_layers(i, a, z, dtype, gen, hidden=None):
    adv = make_layer(a * z, hidden or i, gen, dtype=dtype, device="cuda")
    val = make_layer(z, hidden or i, gen, dtype=dtype, device="cuda")
    return adv, val


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("b", [32, 4096])
def test_gpu_linear_grouped_hidden(monkeypatch, fresh_ops, dtype, b) -> None:
    monkeypatch.setenv("TRITONRL_BACKEND", "triton")
    gen = torch.Generator().manual_seed(b)
    p = make_layer(512, 512, gen, lead=(2,), dtype=dtype, device="cuda")
    x = torch.randn(b, 512, generator=gen).to("cuda", dtype).requires_grad_()
    y = noisy_linear(x, *p, activation="relu")
    assert NOISY_LINEAR.last_backend == "triton"
    xd, pd = x64(x), as64(p)
    ref = relu_like(noisy_linear_ref(xd, *pd, noise=True), y)
    ups, gs = grads_of(y, leaves(x, p), gen)
    assert NOISY_LINEAR.last_backend == "triton"
    gr = grads_with(ref, leaves(xd, pd), ups)
    if dtype == torch.float32:
        assert_f32_close(y, ref, "y", rel=1e-4)  # sums of up to 4096 terms
        for k, (g, r) in enumerate(zip(gs, gr, strict=True)):
            assert_f32_close(g, r, f"grad #{k}", rel=1e-4)
    else:
        y_bf = relu_like(noisy_linear_ref(x, *p, noise=True), y)
        assert_bf16_ok(y, ref, y_bf, "y")
        gb = grads_with(y_bf, leaves(x, p), ups)
        for k, (g, r, t) in enumerate(zip(gs, gr, gb, strict=True)):
            assert_bf16_ok(g, r, t, f"grad #{k}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("b", [32, 4096])
@pytest.mark.parametrize("az", [(18, 1), (18, 51), (4, 51)], ids=str)
def test_gpu_dueling(monkeypatch, fresh_ops, dtype, b, az) -> None:
    monkeypatch.setenv("TRITONRL_BACKEND", "triton")
    a, z = az
    gen = torch.Generator().manual_seed(b + a + z)
    adv, val = _gpu_layers(512, a, z, dtype, gen)
    x = torch.randn(b, 2, 512, generator=gen).to("cuda", dtype).requires_grad_()
    support = torch.linspace(-10, 10, z, device="cuda") if z > 1 else None
    out = noisy_dueling(x, adv, val, num_actions=a, atoms=z, support=support)
    assert NOISY_DUELING.last_backend == "triton"
    xd, ad, vd = x64(x), as64(adv), as64(val)
    ref = noisy_dueling_ref(xd, ad, vd, a, z, True, True, None if support is None else support.double())
    outs, refs = (out, ref) if z > 1 else ((out,), (ref,))
    ups, gs = grads_of(out, leaves(x, adv, val), gen)
    assert NOISY_DUELING.last_backend == "triton"
    gr = grads_with(ref, leaves(xd, ad, vd), ups)
    if dtype == torch.float32:
        for name, o, r in zip(["out", "q"][: len(outs)], outs, refs, strict=True):
            assert_f32_close(o, r, name, rel=1e-4)
        for k, (g, r) in enumerate(zip(gs, gr, strict=True)):
            assert_f32_close(g, r, f"grad #{k}", rel=1e-4)
    else:
        out_bf = noisy_dueling_ref(x, adv, val, a, z, True, True, support)
        bfs = out_bf if z > 1 else (out_bf,)
        for name, o, r, t in zip(["out", "q"][: len(outs)], outs, refs, bfs, strict=True):
            assert_bf16_ok(o, r, t, name)
        gb = grads_with(out_bf, leaves(x, adv, val), ups)
        for k, (g, r, t) in enumerate(zip(gs, gr, gb, strict=True)):
            assert_bf16_ok(g, r, t, f"grad #{k}")


@pytest.mark.gpu
def test_gpu_backward_failure_falls_back(monkeypatch) -> None:
    """A Triton backward that fails on CUDA (auto mode) warns and runs the reference's autograd."""
    from tritonrl.kernels.backend import KernelFallbackWarning
    from tritonrl.kernels.noisy_head import fused_linear

    monkeypatch.delenv("TRITONRL_BACKEND", raising=False)
    NOISY_LINEAR.reset()
    gen = torch.Generator().manual_seed(0)
    p = make_layer(64, 32, gen, device="cuda")
    x = torch.randn(16, 32, generator=gen).cuda().requires_grad_()
    y = noisy_linear(x, *p)
    assert NOISY_LINEAR.last_backend == "triton"

    def broken(*args, **kwargs):  # a resource error, as a too-large tile on a small GPU raises
        from triton.runtime.errors import OutOfResources

        raise OutOfResources(262144, 232448, "shared memory (simulated backward failure)")

    monkeypatch.setattr(fused_linear, "noisy_linear_bwd", broken)
    try:
        with pytest.warns(KernelFallbackWarning):
            ups, gs = grads_of(y, leaves(x, p), gen)
        assert NOISY_LINEAR.last_backend == "torch"
        assert "simulated backward failure" in NOISY_LINEAR.failed[str(x.device)]
    finally:
        NOISY_LINEAR.reset()  # later tests on this GPU take the Triton path again
    xd, pd = x64(x), as64(p)
    gr = grads_with(noisy_linear_ref(xd, *pd), leaves(xd, pd), ups)
    for k, (g, r) in enumerate(zip(gs, gr, strict=True)):
        assert_f32_close(g, r, f"grad #{k}", rel=1e-4)


def test_linear_q_is_the_plain_dueling_op(monkeypatch) -> None:
    """``linear_q`` returns exactly what ``noisy_dueling`` returns for one stream, no noise and one
    atom (viewed ``[B, A]``; the same torch reference, so equal bits), with the same gradients,
    counted as a torch call; ``None`` where the general op must run (Triton selected, inputs it
    does not vouch for), so that the op's own errors are raised."""
    gen = torch.Generator().manual_seed(0)
    p = make_layer(3, 5, gen)
    x = torch.randn(4, 5, generator=gen, requires_grad=True)
    NOISY_DUELING.reset()
    q = linear_q(x, p.weight_mu, p.bias_mu)
    assert q is not None and NOISY_DUELING.counts == {"torch": 1}
    ref = noisy_dueling(x, p, num_actions=3, noise=False)
    assert torch.equal(q, ref.view(4, 3)) and q.dtype == torch.float32
    up = torch.randn(4, 3, generator=gen)
    got = torch.autograd.grad(q, [x, p.weight_mu, p.bias_mu], up)
    want = torch.autograd.grad(ref.view(4, 3), [x, p.weight_mu, p.bias_mu], up)
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)
    assert linear_q(x.detach(), p.weight_mu, None) is not None  # no bias
    for bad in (x.detach()[:, :4], x.detach()[:0], x.detach().double(), x.detach()[None]):
        assert linear_q(bad, p.weight_mu, p.bias_mu) is None
    assert linear_q(x.detach(), p.weight_mu, p.bias_mu.double()) is None
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("TRITONRL_BACKEND", "triton")  # CPU tensors under the Triton interpreter
    assert NOISY_DUELING.select(x.device).backend == "triton"
    assert linear_q(x.detach(), p.weight_mu, p.bias_mu) is None
