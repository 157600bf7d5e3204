"""f32 master weights keep bf16 updates from vanishing."""

from __future__ import annotations

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
