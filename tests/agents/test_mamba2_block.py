"""Mamba2Block: step-vs-forward equality (with resets), state carry-over, no leakage across
resets, dtypes, gradients, bad input; and the block on the Triton path under the interpreter."""

from __future__ import annotations

import pytest
import torch
from tritonrl.agents.mamba2 import Mamba2Block, Mamba2State
from tritonrl.kernels.mamba2 import MAMBA2_SCAN, MAMBA2_STEP

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


def test_step_leaves_state_alone_unless_inplace() -> None:
    block = _block()
    x = torch.randn(2, 16)
    with torch.no_grad():
        state = block.initial_state(2)
        state.ssm.normal_()
        state.conv.normal_()
        before = state.clone()
        y1, new = block.step(x, state)
        torch.testing.assert_close(state.ssm, before.ssm, rtol=0, atol=0)
        torch.testing.assert_close(state.conv, before.conv, rtol=0, atol=0)
        y2, same = block.step(x, state, inplace=True)
    assert same.ssm is state.ssm and same.conv is state.conv
    torch.testing.assert_close(y1, y2, rtol=0, atol=0)
    torch.testing.assert_close(state.ssm, new.ssm, rtol=0, atol=0)


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
