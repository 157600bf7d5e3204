"""Mamba2Block: step-vs-forward equality (with resets), state carry-over, no leakage across
resets, dtypes, gradients, bad input; and the block on the Triton path under the interpreter."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonrl.agents.nets.mamba2 import Mamba2Block, Mamba2State
from tritonrl.kernels.mamba2 import MAMBA2_SCAN, MAMBA2_STEP, mamba2_step

# f32 on CPU: forward (chunked scan, conv by shifted sums) and step (fused step, conv as one
# weighted sum) compute the same numbers in a different order: a few ulps of O(1) values.
TOL = {"rtol": 1e-4, "atol": 1e-5}


def _block(seed: int = 0, **kw) -> Mamba2Block:
    torch.manual_seed(seed)
    cfg = {"d_state": 8, "d_conv": 4, "expand": 2, "headdim": 8, "ngroups": 2, "chunk_size": 16}
    cfg.update(kw)
    return Mamba2Block(16, **cfg)


def _resets(batch: int, length: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    r = torch.rand(batch, length, generator=g) < 0.15
    r[0, 0] = True
    r[-1, -1] = True
    r[0, min(2, length - 1)] = True  # a reset inside the conv window of the first steps
    return r


@pytest.mark.parametrize("with_resets", [False, True])
@pytest.mark.parametrize("length", [1, 15, 37])
def test_step_equals_forward(with_resets: bool, length: int) -> None:
    block = _block()
    x = torch.randn(3, length, 16, generator=torch.Generator().manual_seed(1))
    resets = _resets(3, length, 2) if with_resets else None
    with torch.no_grad():
        y, final = block(x, resets, return_state=True)
        state = block.initial_state(3)
        ys = []
        for t in range(length):
            y_t, state = block.step(x[:, t], state, None if resets is None else resets[:, t])
            ys.append(y_t)
    torch.testing.assert_close(torch.stack(ys, 1), y, **TOL)
    torch.testing.assert_close(state.ssm, final.ssm, **TOL)
    torch.testing.assert_close(state.conv, final.conv, **TOL)
    assert state.ssm.dtype == torch.float32


def _step_checked(
    block: Mamba2Block, x_t: torch.Tensor, state: Mamba2State, reset: torch.Tensor | None
) -> tuple[torch.Tensor, Mamba2State]:
    """``Mamba2Block.step`` as written before its fast path: clones of the state, the reset by
    ``masked_fill_`` on the cloned window, the window shifted by ``cat`` and ``copy_``, and the
    public (checked) single-step op. The oracle of the fast path."""
    b = x_t.shape[0]
    H, P, G, N = block.nheads, block.headdim, block.ngroups, block.d_state
    conv, ssm = state.conv.clone(), state.ssm.clone()
    z, xbc, dt = torch.split(block.in_proj(x_t), [block.d_inner, block.conv_dim, H], dim=-1)
    if reset is not None:
        conv.masked_fill_(reset[:, None, None], 0.0)
    full = torch.cat([conv, xbc[:, None]], dim=1)
    xc = (full * block.conv_weight.t()).sum(dim=1) + block.conv_bias
    conv.copy_(full[:, 1:])
    xs, Bm, Cm = torch.split(F.silu(xc), [block.d_inner, G * N, G * N], dim=-1)
    y = mamba2_step(
        ssm,
        xs.view(b, H, P),
        dt,
        -torch.exp(block.A_log),
        Bm.view(b, G, N),
        Cm.view(b, G, N),
        D=block.D,
        z=z.view(b, H, P),
        dt_bias=block.dt_bias,
        dt_softplus=True,
        reset=reset,
    )
    y = F.rms_norm(y.view(b, block.d_inner), (block.d_inner,), block.norm_weight, block.norm_eps)
    return block.out_proj(y), Mamba2State(conv=conv, ssm=ssm)


@settings(max_examples=30)
@given(
    batch=st.integers(1, 3),
    length=st.integers(1, 10),
    d_conv=st.integers(1, 4),
    ngroups=st.sampled_from([1, 2]),
    inplace=st.booleans(),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_fast_step_matches_the_checked_step(
    batch: int, length: int, d_conv: int, ngroups: int, inplace: bool, seed: int, data: st.DataObject
) -> None:
    """The fast step (block-level checks, unchecked op, window as a view of the new buffer) against
    the step written with the checked op and explicit copies, and against ``forward``, for random
    reset masks (hypothesis), from a random memory."""
    block = _block(seed % 5, d_conv=d_conv, ngroups=ngroups)
    bits = data.draw(
        st.lists(st.booleans(), min_size=batch * length, max_size=batch * length), label="resets"
    )
    resets = torch.tensor(bits, dtype=torch.bool).view(batch, length)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, 16, generator=g)
    start = block.initial_state(batch)
    start.ssm.normal_(generator=g)
    start.conv.normal_(generator=g)
    with torch.no_grad():
        y_fwd, final = block(x, resets, state=start, return_state=True)
        fast, slow = start.clone(), start.clone()
        for t in range(length):
            y_fast, fast_next = block.step(x[:, t], fast, resets[:, t], inplace=inplace)
            y_slow, slow = _step_checked(block, x[:, t], slow, resets[:, t])
            if inplace:
                assert fast_next.ssm is fast.ssm and fast_next.conv is fast.conv
            fast = fast_next
            # the same operations in the same order (the reset applied to the new buffer instead of
            # a clone of the window changes nothing): f32, equal to rounding
            torch.testing.assert_close(y_fast, y_slow, rtol=1e-6, atol=1e-6)
            torch.testing.assert_close(y_fast, y_fwd[:, t], **TOL)
    torch.testing.assert_close(fast.ssm, slow.ssm, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(fast.conv, slow.conv, rtol=0, atol=0)  # exact: raw inputs, copied
    torch.testing.assert_close(fast.ssm, final.ssm, **TOL)
    torch.testing.assert_close(fast.conv, final.conv, **TOL)


@pytest.mark.parametrize("where", ["first", "mid", "last", "all three"])
def test_step_equals_forward_with_resets_at(where: str) -> None:
    """Resets at step 0, in the middle, at the last step (and all three), from a junk memory."""
    length = 9
    steps = {"first": [0], "mid": [4], "last": [length - 1], "all three": [0, 4, length - 1]}[where]
    block = _block(2)
    g = torch.Generator().manual_seed(8)
    x = torch.randn(2, length, 16, generator=g)
    resets = torch.zeros(2, length, dtype=torch.bool)
    resets[0, steps] = True  # row 1 never resets: its memory runs through
    state = block.initial_state(2)
    state.ssm.normal_(generator=g)
    state.conv.normal_(generator=g)
    with torch.no_grad():
        y, final = block(x, resets, state=state, return_state=True)
        ys = []
        for t in range(length):
            y_t, state = block.step(x[:, t], state, resets[:, t])
            ys.append(y_t)
    torch.testing.assert_close(torch.stack(ys, 1), y, **TOL)
    torch.testing.assert_close(state.ssm, final.ssm, **TOL)
    torch.testing.assert_close(state.conv, final.conv, **TOL)


def test_stepped_state_continues_in_forward() -> None:
    """A state from ``step`` (its window a view of the step's buffer) enters ``forward`` and the
    Triton-facing checks like any other: stepping k steps then running the rest equals one run."""
    block = _block(3)
    x = torch.randn(2, 12, 16, generator=torch.Generator().manual_seed(9))
    resets = _resets(2, 12, 10)
    with torch.no_grad():
        y = block(x, resets)
        state = block.initial_state(2)
        for t in range(5):
            _, state = block.step(x[:, t], state, resets[:, t])
        assert not state.conv.is_contiguous()  # the view, nothing copied
        y_rest = block(x[:, 5:], resets[:, 5:], state=state)
        _, again = block.step(x[:, 5], state, resets[:, 5], inplace=True)  # a view updated in place
    torch.testing.assert_close(y_rest, y[:, 5:], **TOL)
    assert again.conv is state.conv


def test_step_returns_no_graph_even_with_grad_enabled() -> None:
    block = _block()
    y, state = block.step(torch.randn(2, 16), block.initial_state(2), torch.tensor([True, False]))
    assert y.requires_grad  # the output projection is differentiable; the memory is not
    assert not state.conv.requires_grad and not state.ssm.requires_grad


def test_step_state_checks() -> None:
    block = _block()
    x = torch.randn(2, 16)
    state = block.initial_state(2)
    with pytest.raises(TypeError, match=r"state.ssm has dtype torch.float64"):
        block.step(x, Mamba2State(state.conv, state.ssm.double()))
    with pytest.raises(TypeError, match="state.conv has dtype"):
        block.step(x, Mamba2State(state.conv.double(), state.ssm))
    strided = Mamba2State(state.conv, state.ssm.transpose(2, 3).contiguous().transpose(2, 3))
    assert not strided.ssm.is_contiguous()
    with pytest.raises(ValueError, match="contiguous to be updated in place"):
        block.step(x, strided, inplace=True)
    with torch.no_grad():  # a copy is made when the state is not updated in place: any layout
        y1, s1 = block.step(x, strided)
        y2, s2 = block.step(x, state)
    assert s1.ssm.is_contiguous()
    torch.testing.assert_close(y1, y2, rtol=0, atol=0)  # exact: the same computation on a contiguous copy
    with pytest.raises(TypeError, match="reset must be a bool tensor"):
        block.step(x, state, torch.zeros(2))
    with pytest.raises(ValueError, match="reset must have shape"):
        block.step(x, state, torch.zeros(3, dtype=torch.bool))
    with pytest.raises(TypeError, match="x has dtype"):
        block.step(x.double(), state)
    with pytest.raises(ValueError, match="on meta"):
        block.step(x, Mamba2State(state.conv, state.ssm.to("meta")))


def test_step_leaves_state_alone_unless_inplace() -> None:
    block = _block()
    x = torch.randn(2, 16)
    with torch.no_grad():
        state = block.initial_state(2)
        state.ssm.normal_()
        state.conv.normal_()
        before = state.clone()
        y1, new = block.step(x, state)
        torch.testing.assert_close(state.ssm, before.ssm, rtol=0, atol=0)  # exact: untouched
        torch.testing.assert_close(state.conv, before.conv, rtol=0, atol=0)  # exact: untouched
        block.step(x, state, torch.tensor([True, False]))  # a reset clears the new state, not this one
        torch.testing.assert_close(state.ssm, before.ssm, rtol=0, atol=0)  # exact: untouched
        torch.testing.assert_close(state.conv, before.conv, rtol=0, atol=0)  # exact: untouched
        y2, same = block.step(x, state, inplace=True)
    assert same.ssm is state.ssm and same.conv is state.conv
    torch.testing.assert_close(y1, y2, rtol=0, atol=0)  # exact: the same ops, written in place
    torch.testing.assert_close(state.ssm, new.ssm, rtol=0, atol=0)  # exact: the same ops, written in place


def test_forward_carries_state_across_segments() -> None:
    block = _block(expand=1, ngroups=1)
    x = torch.randn(2, 40, 16, generator=torch.Generator().manual_seed(3))
    resets = _resets(2, 40, 4)
    with torch.no_grad():
        y, final = block(x, resets, return_state=True)
        y1, s1 = block(x[:, :19], resets[:, :19], return_state=True)
        y2, s2 = block(x[:, 19:], resets[:, 19:], state=s1, return_state=True)
    torch.testing.assert_close(torch.cat([y1, y2], 1), y, **TOL)
    torch.testing.assert_close(s2.ssm, final.ssm, **TOL)
    torch.testing.assert_close(s2.conv, final.conv, **TOL)


def test_reset_forgets_everything_before() -> None:
    """After a reset at t, outputs equal those of a fresh block started at t: no leakage."""
    block = _block()
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 30, 16, generator=g)
    resets = torch.zeros(2, 30, dtype=torch.bool)
    resets[:, 11] = True
    with torch.no_grad():
        y = block(x, resets)
        y_fresh = block(x[:, 11:])
        # a memory full of junk is erased by the reset too
        junk = block.initial_state(2)
        junk.ssm.normal_(generator=g)
        junk.conv.normal_(generator=g)
        y_junk = block(x, resets, state=junk)
    torch.testing.assert_close(y[:, 11:], y_fresh, **TOL)
    torch.testing.assert_close(y_junk[:, 11:], y_fresh, **TOL)
    assert not torch.allclose(y_junk[:, :11], y[:, :11])  # the junk did matter before the reset


def test_params_follow_training_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    assert all(p.dtype == torch.float32 for p in _block().parameters())
    monkeypatch.setenv("TRITONRL_DTYPE", "bf16")
    block = _block()
    assert all(p.dtype == torch.bfloat16 for p in block.parameters())
    state = block.initial_state(2)
    assert state.conv.dtype == torch.bfloat16 and state.ssm.dtype == torch.float32
    x = torch.randn(2, 20, 16).bfloat16()
    with torch.no_grad():
        y, final = block(x, _resets(2, 20, 0), return_state=True)
        y_t, state = block.step(x[:, 0], state)
    assert y.dtype == torch.bfloat16 and final.ssm.dtype == torch.float32 and y_t.dtype == torch.bfloat16
    assert torch.isfinite(y).all()


def test_gradients_reach_every_parameter() -> None:
    block = _block()
    x = torch.randn(2, 21, 16, requires_grad=True)
    y = block(x, _resets(2, 21, 1))
    (y * torch.randn_like(y)).sum().backward()
    for name, p in block.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_bad_input() -> None:
    block = _block()
    with pytest.raises(ValueError, match="x must have shape"):
        block(torch.randn(2, 5, 15))
    with pytest.raises(TypeError, match="x has dtype"):
        block(torch.randn(2, 5, 16).double())
    with pytest.raises(ValueError, match="resets must have shape"):
        block(torch.randn(2, 5, 16), torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="resets must be a bool tensor"):
        block(torch.randn(2, 5, 16), torch.zeros(2, 5))
    with pytest.raises(ValueError, match="state does not fit batch 3"):
        block.step(torch.randn(3, 16), block.initial_state(2))
    with pytest.raises(TypeError, match="state must be a Mamba2State"):
        block.step(torch.randn(2, 16), (torch.zeros(1), torch.zeros(1)))
    with pytest.raises(ValueError, match="x_t must have shape"):
        block.step(torch.randn(2, 3, 16), block.initial_state(2))
    with pytest.raises(ValueError, match="multiple of headdim"):
        Mamba2Block(10, headdim=16)
    with pytest.raises(ValueError, match="divisible by ngroups"):
        Mamba2Block(16, headdim=8, ngroups=3)
    assert isinstance(block.initial_state(1), Mamba2State)


@pytest.mark.interpret
def test_block_on_triton_path_matches_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The block's strided slices through the Triton kernels (interpreter) vs the torch path."""
    block = _block(expand=1, ngroups=1)
    x = torch.randn(2, 20, 16, generator=torch.Generator().manual_seed(6))
    resets = _resets(2, 20, 7)
    results = {}
    for backend in ("torch", "triton"):
        monkeypatch.setenv("TRITONRL_BACKEND", backend)
        MAMBA2_SCAN.reset()
        MAMBA2_STEP.reset()
        block.zero_grad()
        y, final = block(x, resets, return_state=True)
        y.square().sum().backward()
        with torch.no_grad():
            y_t, _ = block.step(x[:, 0], block.initial_state(2))
        # the Triton path counts its backward too; the torch path's backward is plain autograd
        assert MAMBA2_SCAN.counts[backend] == (2 if backend == "triton" else 1)
        assert MAMBA2_STEP.last_backend == backend
        results[backend] = (y, final.ssm, y_t, *[p.grad.clone() for p in block.parameters()])
    for a, b in zip(results["triton"], results["torch"], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)  # f32 IEEE both sides


@settings(max_examples=30)
@given(
    length=st.integers(1, 40),
    d_conv=st.integers(1, 5),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 2**16),
)
def test_conv_without_window_or_resets_equals_the_shifted_sums(
    length: int, d_conv: int, dtype: torch.dtype, seed: int
) -> None:
    """The in-place conv (no window, no resets) against the shifted sums through autograd, which
    the block runs from a given window: an all-zero window is the same input. Values, windows and
    input gradients are the same products summed in the same order; the weight and bias gradients
    sum ``B * L`` products (O(1) each, up to 80 here) in another order: f32 atol 1e-5 (about 10 ulps
    of such sums), f64 1e-12."""
    torch.manual_seed(seed)
    block = Mamba2Block(8, d_state=4, d_conv=d_conv, expand=2, headdim=4, chunk_size=16, dtype=dtype)
    xbc = torch.randn(2, length, block.conv_dim, dtype=dtype, requires_grad=True)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    out, win = block._conv(xbc, None, None)
    zeros = torch.zeros(2, d_conv - 1, block.conv_dim, dtype=dtype)
    ref, ref_win = block._conv(xbc, zeros, None)
    torch.testing.assert_close(out, ref, **tol)
    assert torch.equal(win, ref_win)
    grad = torch.randn_like(out)
    params = (xbc, block.conv_weight, block.conv_bias)
    got = torch.autograd.grad(out, params, grad)
    want = torch.autograd.grad(ref, params, grad)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, **tol)


def test_conv_without_window_passes_gradcheck() -> None:
    from tritonrl.agents.nets.mamba2 import _CausalConv

    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 7, 3, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(_CausalConv.apply, (x, w, b))
