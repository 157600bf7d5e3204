"""f32 master weights keep bf16 updates from vanishing."""

from __future__ import annotations

import copy

import pytest
import torch
from tritonrl.toolkit.optim import MasterWeightOptimizer


def _steps(opt, param: torch.nn.Parameter, n: int) -> None:
    for _ in range(n):
        opt.zero_grad()
        (param.float().sum()).backward()  # gradient 1 everywhere: SGD moves each weight by -lr
        opt.step()


def test_bf16_updates_accumulate_through_master_weights():
    # lr = 1e-3 on weights of 1.0: each step is far below bf16's half-ulp at 1.0 (2**-8 = 0.0039).
    plain = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    _steps(torch.optim.SGD([plain], lr=1e-3), plain, 100)
    assert torch.equal(plain.detach(), torch.ones(4, dtype=torch.bfloat16))  # every update rounded away

    mixed = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    opt = MasterWeightOptimizer([mixed], torch.optim.SGD, lr=1e-3)
    _steps(opt, mixed, 100)
    assert opt.has_masters
    # The f32 master moved by 100 * 1e-3 (f32 rounding of 100 additions: < 1e-5).
    torch.testing.assert_close(opt.masters[0], torch.full((4,), 0.9), rtol=0, atol=1e-5)
    assert torch.equal(mixed.detach(), torch.full((4,), 0.9).to(torch.bfloat16))


def test_f32_parameters_are_optimized_in_place():
    p = torch.nn.Parameter(torch.ones(3))
    opt = MasterWeightOptimizer([p], torch.optim.Adam, lr=0.1)
    assert not opt.has_masters and opt.masters[0] is p
    _steps(opt, p, 1)
    ref = torch.nn.Parameter(torch.ones(3))
    _steps(torch.optim.Adam([ref], lr=0.1), ref, 1)
    assert torch.equal(p, ref)


def test_clip_grad_norm_uses_f32_master_gradients_and_lr_is_settable():
    p = torch.nn.Parameter(torch.zeros(2, dtype=torch.bfloat16))
    opt = MasterWeightOptimizer([p], torch.optim.SGD, lr=1.0)
    opt.zero_grad()
    (p.float() * torch.tensor([3.0, 4.0])).sum().backward()
    norm = opt.clip_grad_norm_(1.0)
    assert norm.dtype == torch.float32 and norm.item() == pytest.approx(5.0)
    opt.set_lr(0.5)
    opt.step()
    torch.testing.assert_close(opt.masters[0], torch.tensor([-0.3, -0.4]), rtol=0, atol=1e-6)


def test_bad_arguments_and_mismatched_state():
    with pytest.raises(ValueError, match="params is empty"):
        MasterWeightOptimizer([], torch.optim.SGD, lr=1.0)
    with pytest.raises(ValueError, match=r"params\[0\].*does not require grad"):
        MasterWeightOptimizer([torch.zeros(2)], torch.optim.SGD, lr=1.0)
    a = MasterWeightOptimizer([torch.nn.Parameter(torch.zeros(2))], torch.optim.Adam, lr=1.0)
    b_param = torch.nn.Parameter(torch.zeros(3))
    b = MasterWeightOptimizer([b_param], torch.optim.Adam, lr=1.0)
    _steps(a, a.params[0], 1)
    with pytest.raises(ValueError, match=r"shape \(2,\), expected \(3,\)"):
        b.load_state_dict(a.state_dict())
    assert torch.equal(b_param, torch.zeros(3)) and not b.optimizer.state


def _adam_pair(dtype: torch.dtype, **kw):
    torch.manual_seed(0)
    nets = [torch.nn.Linear(3, 2).to(dtype) for _ in range(2)]
    nets[1].load_state_dict(nets[0].state_dict())
    opts = [MasterWeightOptimizer(n.parameters(), torch.optim.Adam, lr=0.01, fused=True, **kw) for n in nets]
    return nets, opts


def _backward(net: torch.nn.Module, x: torch.Tensor) -> None:
    (net(x.to(net.weight.dtype)).float() ** 2).sum().backward()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_clip_and_step_is_clip_grad_norm_then_step_bit_for_bit(dtype: torch.dtype) -> None:
    (a, b), (opt_a, opt_b) = _adam_pair(dtype)
    x = torch.randn(8, 3)
    for _ in range(3):
        for opt, net in ((opt_a, a), (opt_b, b)):
            opt.zero_grad()
            _backward(net, x)
        norm_a = opt_a.clip_grad_norm_(0.5)
        opt_a.step()
        norm_b = opt_b.clip_and_step(0.5)
        assert torch.equal(norm_a, norm_b)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)
    for m, n in zip(opt_a.masters, opt_b.masters, strict=True):
        assert torch.equal(m, n)


def test_clip_and_step_without_a_bound_is_an_unclipped_adam_step() -> None:
    """``max_norm=None`` computes no norm and steps on the raw gradients: the same as a plain
    ``torch.optim.Adam`` (the non-fused reference) within 1e-6 (f32 rounding of two Adam
    implementations over 3 steps); a tiny bound (1e-3) clips and differs from it by 100x that."""
    torch.manual_seed(0)
    ref = torch.nn.Linear(3, 2)
    off, tiny = copy.deepcopy(ref), copy.deepcopy(ref)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    opt_off = MasterWeightOptimizer(off.parameters(), torch.optim.Adam, lr=1e-2, fused=True)
    opt_tiny = MasterWeightOptimizer(tiny.parameters(), torch.optim.Adam, lr=1e-2, fused=True)
    x = torch.randn(8, 3) * 10  # gradients of norm far above 1e-3
    for _ in range(3):
        for opt, net in ((ref_opt, ref), (opt_off, off), (opt_tiny, tiny)):
            opt.zero_grad()
            _backward(net, x)
        ref_opt.step()
        assert opt_off.clip_and_step(None) is None  # no norm computed
        assert float(opt_tiny.clip_and_step(1e-3)) > 1.0
    for p, q, r in zip(ref.parameters(), off.parameters(), tiny.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-6, atol=1e-6)
        # Adam is nearly invariant to a gradient's scale, but not across steps of different
        # scales (clipped to 1e-3 each, the moments weigh every step alike): 1e-4 here, 100x the
        # tolerance above
        assert float((r - p).detach().abs().max()) > 1e-4


def test_clip_and_step_needs_fused_adam() -> None:
    p = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(ValueError, match=r"compile='default' needs torch.optim.Adam with fused=True"):
        MasterWeightOptimizer([p], torch.optim.Adam, compile="default", lr=0.1)
    with pytest.raises(TypeError, match="clip_and_step needs torch.optim.Adam with fused=True"):
        MasterWeightOptimizer([p], torch.optim.SGD, lr=0.1).clip_and_step(1.0)


def test_a_loaded_state_is_not_shared_with_its_source() -> None:
    # torch's load_state_dict keeps tensors that need no cast: a live optimizer's state loaded into
    # another must not leave the two stepping the same moments.
    (a, b), (opt_a, opt_b) = _adam_pair(torch.float32)
    x = torch.randn(8, 3)
    opt_a.zero_grad()
    _backward(a, x)
    opt_a.clip_and_step(1.0)
    opt_b.load_state_dict(opt_a.state_dict())
    before = [s["exp_avg"].clone() for s in opt_a.optimizer.state.values()]
    opt_b.zero_grad()
    _backward(b, x)
    opt_b.clip_and_step(1.0)
    assert all(
        torch.equal(s["exp_avg"], v) for s, v in zip(opt_a.optimizer.state.values(), before, strict=True)
    )


def test_loaded_moments_take_their_parameters_memory_layout() -> None:
    # A channels-last conv weight (the conv torsos') with moments loaded from a checkpoint, which
    # stores them contiguous: the fused Adam kernel walks a parameter and its moments in memory
    # order, so moments of another layout would be combined with the wrong entries (the step
    # differs by far more than rounding). Loaded, they take the parameter's layout: a resumed step
    # is the uninterrupted one.
    def fresh() -> tuple[torch.nn.Parameter, MasterWeightOptimizer]:
        w = torch.randn(8, 4, 3, 3, generator=torch.Generator().manual_seed(0))
        p = torch.nn.Parameter(w.contiguous(memory_format=torch.channels_last))
        return p, MasterWeightOptimizer([p], torch.optim.Adam, lr=0.1, fused=True)

    def grad(seed: int) -> torch.Tensor:
        g = torch.randn(8, 4, 3, 3, generator=torch.Generator().manual_seed(seed))
        return g.contiguous(memory_format=torch.channels_last)

    p, opt = fresh()
    p.grad = grad(1)
    opt.clip_and_step(1e9)
    saved = {k: v for k, v in opt.state_dict().items()}
    saved["optimizer"] = copy.deepcopy(saved["optimizer"])
    for per_param in saved["optimizer"]["state"].values():  # as a checkpoint file gives them back
        for key, value in per_param.items():
            per_param[key] = value.contiguous()
    q, loaded = fresh()
    with torch.no_grad():
        q.copy_(p)
    loaded.load_state_dict(saved)
    assert all(
        v.is_contiguous(memory_format=torch.channels_last)
        for s in loaded.optimizer.state.values()
        for v in s.values()
        if v.dim() == 4
    )
    p.grad, q.grad = grad(2), grad(2)
    opt.clip_and_step(1e9)
    loaded.clip_and_step(1e9)
    assert torch.equal(p, q)  # exact: the same step on the same values in the same layout
