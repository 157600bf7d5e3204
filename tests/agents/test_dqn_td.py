"""TD targets and losses of the DQN family (agents/td.py) against slow, obviously correct references."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st
from tritonrl.agents.td import (
    branching_td_target,
    c51_loss,
    c51_project,
    greedy_actions,
    huber,
    quantile_huber_loss,
    quantile_midpoints,
    scalar_td_target,
)


def test_scalar_target_plain_and_double() -> None:
    reward = torch.tensor([1.0, 0.5])
    discount = torch.tensor([0.9, 0.0])  # the second transition terminated
    q_t = torch.tensor([[1.0, 3.0], [7.0, -1.0]])
    q_o = torch.tensor([[2.0, 0.0], [0.0, 5.0]])
    # plain: max of the target network
    plain = scalar_td_target(reward, discount, q_t)
    torch.testing.assert_close(plain, torch.tensor([1.0 + 0.9 * 3.0, 0.5]))
    # double: the online network picks action 0 in row 0, the target evaluates it (1.0)
    double = scalar_td_target(reward, discount, q_t, q_o)
    torch.testing.assert_close(double, torch.tensor([1.0 + 0.9 * 1.0, 0.5]))


def test_scalar_target_n_step_discount_is_used_as_given() -> None:
    # n-step: reward is the discounted sum, discount = gamma**n; the target is r + gamma**n * max Q
    gamma, n = 0.99, 3
    rewards = [1.0, 2.0, 3.0]
    ret = sum(gamma**i * r for i, r in enumerate(rewards))
    q = torch.tensor([[4.0, 2.0]])
    y = scalar_td_target(torch.tensor([ret]), torch.tensor([gamma**n]), q)
    assert y.item() == pytest.approx(ret + gamma**n * 4.0, rel=1e-6)


def _c51_reference(p: torch.Tensor, r: float, d: float, support: torch.Tensor) -> torch.Tensor:
    """The classic floor/ceil projection with the l == u fix, one atom at a time."""
    z = support.numel()
    v_min, v_max = support[0].item(), support[-1].item()
    dz = (v_max - v_min) / (z - 1)
    m = torch.zeros(z, dtype=torch.float64)
    for j in range(z):
        tz = min(max(r + d * support[j].item(), v_min), v_max)
        b = (tz - v_min) / dz
        lo, hi = math.floor(b), math.ceil(b)
        if lo == hi:
            m[lo] += p[j].item()
        else:
            m[lo] += p[j].item() * (hi - b)
            m[hi] += p[j].item() * (b - lo)
    return m


@given(
    atoms=st.integers(2, 21),
    reward=st.floats(-30, 30, allow_nan=False),
    discount=st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0]),
    seed=st.integers(0, 2**31 - 1),
)
@example(atoms=15, reward=9.980668319623028, discount=0.0, seed=0)  # b = 13.99: 1.4e-6 off at 1e-6
def test_c51_projection_matches_reference(atoms: int, reward: float, discount: float, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    support = torch.linspace(-10.0, 10.0, atoms)
    p = torch.softmax(torch.randn(atoms, generator=g) * 2, 0)
    r = torch.tensor([reward])  # f32, as the function receives it; the reference gets the same value
    out = c51_project(p[None], r, torch.tensor([discount]), support)[0]
    ref = _c51_reference(p, r.item(), discount, support)
    # f32 against an f64 loop: a mass (<= 1) times the distance to a neighbouring atom, which f32 holds
    # to a few ulps of the atom position b <= atoms - 1
    atol = 4 * atoms * torch.finfo(torch.float32).eps
    torch.testing.assert_close(out.double(), ref, atol=atol, rtol=1e-5)
    assert out.sum().item() == pytest.approx(1.0, abs=1e-5)  # no mass lost (the l == u case included)
    assert (out >= 0).all()


def test_c51_projection_on_grid_is_exact_and_keeps_the_mean() -> None:
    support = torch.linspace(0.0, 10.0, 11)  # dz = 1
    p = torch.softmax(torch.randn(11), 0)
    # reward 1, discount 1: every atom moves exactly one atom up, the top one is clamped
    out = c51_project(p[None], torch.tensor([1.0]), torch.tensor([1.0]), support)[0]
    expected = torch.cat([torch.zeros(1), p[:-2], (p[-2] + p[-1])[None]])
    torch.testing.assert_close(out, expected, atol=1e-7, rtol=0)
    # away from the edges the linear split keeps the mean: E[m] = r + d * E[p]
    q = torch.zeros(11)
    q[3:7] = torch.tensor([0.1, 0.4, 0.3, 0.2])
    out = c51_project(q[None], torch.tensor([0.37]), torch.tensor([0.8]), support)[0]
    mean_in = (q * support).sum()
    assert (out * support).sum().item() == pytest.approx(0.37 + 0.8 * mean_in.item(), abs=1e-5)


def test_c51_terminal_transition_is_a_point_mass_at_the_reward() -> None:
    support = torch.linspace(-10.0, 10.0, 51)  # dz = 0.4
    p = torch.softmax(torch.randn(3, 51), -1)
    out = c51_project(p, torch.tensor([2.0, 2.2, 50.0]), torch.zeros(3), support)
    assert out[0, 30].item() == pytest.approx(1.0, abs=1e-6)  # 2.0 is atom 30
    assert out[1, 30].item() == pytest.approx(0.5, abs=1e-5)
    assert out[1, 31].item() == pytest.approx(0.5, abs=1e-5)
    assert out[2, 50].item() == pytest.approx(1.0, abs=1e-6)  # clamped to v_max


def test_c51_loss_is_cross_entropy() -> None:
    logits = torch.randn(4, 7, requires_grad=True)
    target = torch.softmax(torch.randn(4, 7), -1)
    loss = c51_loss(torch.log_softmax(logits, -1), target)
    ref = torch.nn.functional.cross_entropy(logits, target, reduction="none")
    torch.testing.assert_close(loss, ref)
    # its minimum over logits is at the target: gradient zero there
    at_target = torch.log(target).requires_grad_(True)
    c51_loss(torch.log_softmax(at_target, -1), target).sum().backward()
    assert at_target.grad.abs().max().item() < 1e-6


def _qr_reference(
    theta: torch.Tensor, target: torch.Tensor, taus: torch.Tensor, kappa: float
) -> torch.Tensor:
    b, n = theta.shape
    out = torch.zeros(b, dtype=torch.float64)
    for k in range(b):
        for i in range(n):
            acc = 0.0
            for j in range(target.shape[1]):
                u = target[k, j].item() - theta[k, i].item()
                if kappa == 0:
                    h = abs(u)
                elif abs(u) <= kappa:
                    h = 0.5 * u * u / kappa
                else:
                    h = abs(u) - 0.5 * kappa
                acc += abs(taus[i].item() - (1.0 if u < 0 else 0.0)) * h
            out[k] += acc / target.shape[1]
    return out


@pytest.mark.parametrize("kappa", [0.0, 0.5, 1.0, 3.0])
def test_quantile_huber_loss_matches_reference(kappa: float) -> None:
    g = torch.Generator().manual_seed(1)
    theta = torch.randn(3, 5, generator=g) * 2
    target = torch.randn(3, 6, generator=g) * 2
    taus = quantile_midpoints(5)
    out = quantile_huber_loss(theta, target, taus, kappa)
    torch.testing.assert_close(out.double(), _qr_reference(theta, target, taus, kappa), atol=1e-5, rtol=1e-5)


def test_quantile_regression_recovers_quantiles() -> None:
    # Minimising the quantile loss over samples of an exponential(1) distribution must give its
    # quantiles -log(1 - tau). 4096 samples: the sample quantiles are within ~0.06 of the truth at
    # these taus; the fit converges to the sample quantiles (kappa small), tolerance 0.1.
    torch.manual_seed(0)
    samples = torch.empty(1, 4096).exponential_()
    taus = quantile_midpoints(8)
    theta = torch.zeros(1, 8, requires_grad=True)
    opt = torch.optim.Adam([theta], lr=0.05)
    for _ in range(600):
        opt.zero_grad()
        quantile_huber_loss(theta, samples, taus, kappa=0.01).sum().backward()
        opt.step()
    truth = -torch.log1p(-taus)
    torch.testing.assert_close(theta.detach()[0], truth, atol=0.1, rtol=0)
    assert (theta.detach().diff() > 0).all()
    with pytest.raises(ValueError, match="kappa"):
        quantile_huber_loss(theta, samples, taus, kappa=-1.0)


def test_huber() -> None:
    u = torch.tensor([-3.0, -1.0, -0.5, 0.0, 0.5, 2.0])
    torch.testing.assert_close(huber(u), torch.tensor([2.5, 0.5, 0.125, 0.0, 0.125, 1.5]))
    torch.testing.assert_close(huber(u, 2.0), torch.tensor([4.0, 0.5, 0.125, 0.0, 0.125, 2.0]))


def test_branching_target_mean_operator() -> None:
    ninf = float("-inf")
    q_t = torch.tensor([[[1.0, 2.0, ninf], [0.0, 4.0, 3.0]]])  # D=2, n=(2, 3)
    q_o = torch.tensor([[[5.0, 0.0, ninf], [0.0, 1.0, 9.0]]])
    y = branching_td_target(torch.tensor([1.0]), torch.tensor([0.5]), q_t)
    assert y.item() == pytest.approx(1.0 + 0.5 * (2.0 + 4.0) / 2)
    y = branching_td_target(torch.tensor([1.0]), torch.tensor([0.5]), q_t, q_o)  # online picks (0, 2)
    assert y.item() == pytest.approx(1.0 + 0.5 * (1.0 + 3.0) / 2)
    assert torch.equal(greedy_actions(q_t), torch.tensor([[1, 1]]))
