"""GAE against a plain-Python loop, the rollout buffer's bootstrap bookkeeping, running statistics."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tritonrl.toolkit.replay.rollout import RolloutBuffer, RunningMeanStd, compute_gae


def gae_loop(rewards, values, next_values, terminated, truncated, gamma, lam):
    """The textbook recursion, one environment and one step at a time, in python floats."""
    T, E = len(rewards), len(rewards[0])
    adv = [[0.0] * E for _ in range(T)]
    for e in range(E):
        running = 0.0
        for t in reversed(range(T)):
            bootstrap = 0.0 if terminated[t][e] else next_values[t][e]
            delta = rewards[t][e] + gamma * bootstrap - values[t][e]
            done = terminated[t][e] or truncated[t][e]
            running = delta + (0.0 if done else gamma * lam * running)
            adv[t][e] = running
    returns = [[adv[t][e] + values[t][e] for e in range(E)] for t in range(T)]
    return adv, returns


@given(
    T=st.integers(1, 12),
    E=st.integers(1, 5),
    seed=st.integers(0, 2**16),
    gamma=st.sampled_from([0.0, 0.9, 0.99, 1.0]),
    lam=st.sampled_from([0.0, 0.95, 1.0]),
)
def test_gae_matches_python_loop(T, E, seed, gamma, lam):
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(T, E, generator=g)
    values = torch.randn(T, E, generator=g)
    next_values = torch.randn(T, E, generator=g)
    terminated = torch.rand(T, E, generator=g) < 0.2
    truncated = (torch.rand(T, E, generator=g) < 0.2) & ~terminated
    adv, ret = compute_gae(rewards, values, next_values, terminated, truncated, gamma, lam)
    ref_adv, ref_ret = gae_loop(
        rewards.tolist(),
        values.tolist(),
        next_values.tolist(),
        terminated.tolist(),
        truncated.tolist(),
        gamma,
        lam,
    )
    assert adv.dtype == ret.dtype == torch.float32
    # f32 accumulation over <= 12 steps vs python doubles: a few ulps of the magnitudes involved.
    torch.testing.assert_close(adv, torch.tensor(ref_adv), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ret, torch.tensor(ref_ret), rtol=1e-5, atol=1e-5)


def test_gae_bf16_inputs_are_computed_in_f32():
    values = torch.full((3, 1), 1.0 / 3.0, dtype=torch.bfloat16)
    adv, _ = compute_gae(
        torch.ones(3, 1),
        values,
        values,
        torch.zeros(3, 1, dtype=torch.bool),
        torch.zeros(3, 1, dtype=torch.bool),
        0.99,
        0.95,
    )
    assert adv.dtype == torch.float32


def test_truncation_bootstraps_from_the_final_observation_and_termination_does_not():
    # One env, three steps; the episode is truncated after step 1 and a new one terminates at step 2.
    rewards = torch.tensor([[1.0], [1.0], [1.0]])
    values = torch.tensor([[10.0], [10.0], [10.0]])
    next_values = torch.tensor([[10.0], [7.0], [5.0]])  # 7: V(final obs of the cut episode)
    terminated = torch.tensor([[False], [False], [True]])
    truncated = torch.tensor([[False], [True], [False]])
    adv, _ = compute_gae(rewards, values, next_values, terminated, truncated, gamma=0.5, lam=1.0)
    # step 2: terminal -> delta = 1 - 10; step 1: bootstrap 0.5 * 7, and no flow from step 2.
    assert adv[2, 0].item() == pytest.approx(-9.0)
    assert adv[1, 0].item() == pytest.approx(1 + 0.5 * 7 - 10)
    assert adv[0, 0].item() == pytest.approx((1 + 0.5 * 10 - 10) + 0.5 * adv[1, 0].item())


def test_gae_rejects_bad_arguments():
    z = torch.zeros(4, 2)
    b = torch.zeros(4, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"values has shape \(4, 3\)"):
        compute_gae(z, torch.zeros(4, 3), z, b, b, 0.9, 0.9)
    with pytest.raises(ValueError, match="gamma must be in"):
        compute_gae(z, z, z, b, b, 1.5, 0.9)
    with pytest.raises(ValueError, match=r"rewards must be \[T, E\]"):
        compute_gae(torch.zeros(4), z, z, b, b, 0.9, 0.9)
    with pytest.raises(TypeError, match="rewards must be a tensor"):
        compute_gae(np.zeros((4, 2)), z, z, b, b, 0.9, 0.9)


def test_buffer_uses_stored_bootstrap_values_only_where_set():
    T, E = 4, 3
    buf = RolloutBuffer(T, E, (2,), (), torch.int64, torch.bfloat16, "cpu")
    g = torch.Generator().manual_seed(0)
    rewards = torch.randn(T, E, generator=g)
    values = torch.randn(T, E, generator=g)
    truncated = torch.zeros(T, E, dtype=torch.bool)
    truncated[1, 0] = True
    terminated = torch.zeros(T, E, dtype=torch.bool)
    terminated[2, 2] = True
    final_v = torch.tensor([3.0, 0.0, 0.0])
    last_v = torch.tensor([0.5, -0.5, 2.0])
    for t in range(T):
        buf.add(
            torch.randn(E, 2),
            torch.zeros(E, dtype=torch.long),
            torch.zeros(E),
            values[t],
            rewards[t],
            terminated[t],
            truncated[t],
            torch.zeros(E, dtype=torch.bool),
        )
        if t == 1:
            buf.set_next_values(final_v, truncated[t])
        if t == T - 1:
            buf.set_next_values(last_v, torch.ones(E, dtype=torch.bool))
    assert buf.full and buf.obs.dtype == torch.bfloat16 and buf.values.dtype == torch.float32
    buf.compute_advantages(0.9, 0.8)
    next_values = torch.cat([values[1:], last_v[None]])
    next_values[1, 0] = 3.0
    ref, _ = gae_loop(
        rewards.tolist(),
        values.tolist(),
        next_values.tolist(),
        terminated.tolist(),
        truncated.tolist(),
        0.9,
        0.8,
    )
    torch.testing.assert_close(buf.advantages, torch.tensor(ref), rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="full"):
        buf.add(*[torch.zeros(E)] * 8)


def test_buffer_state_round_trip_and_mismatch():
    buf = RolloutBuffer(3, 2, (4,), (1,), torch.float32, torch.float32, "cpu")
    no = torch.zeros(2, dtype=torch.bool)
    buf.add(torch.ones(2, 4), torch.ones(2, 1), torch.ones(2), torch.ones(2), torch.ones(2), no, no, ~no)
    other = RolloutBuffer(3, 2, (4,), (1,), torch.float32, torch.bfloat16, "cpu")
    other.load_state_dict(buf.state_dict())
    assert other.pos == 1 and other.obs.dtype == torch.bfloat16 and other.obs[0].eq(1).all()
    wrong = RolloutBuffer(3, 2, (5,), (1,), torch.float32, torch.float32, "cpu")
    with pytest.raises(ValueError, match=r"rollout obs has shape \(3, 2, 4\)"):
        wrong.load_state_dict(buf.state_dict())
    assert wrong.pos == 0


def test_running_mean_std_matches_numpy():
    g = torch.Generator().manual_seed(1)
    data = torch.randn(100, 3, generator=g) * torch.tensor([1.0, 5.0, 0.1]) + torch.tensor([0.0, -3.0, 7.0])
    rms = RunningMeanStd((3,), epsilon=0.0 + 1e-12)
    for chunk in data.split(7):
        rms.update(chunk)
    # Chan's parallel merge is exact up to f32 rounding over 100 samples.
    torch.testing.assert_close(rms.mean, data.mean(0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rms.var, data.var(0, unbiased=False), rtol=1e-4, atol=1e-6)
    z = rms.normalize(data, clip=10.0)
    torch.testing.assert_close(z.mean(0), torch.zeros(3), rtol=0, atol=1e-4)
    assert rms.normalize(torch.full((1, 3), 1e6)).max().item() == 10.0


@pytest.mark.parametrize("obs_dtype", [torch.float32, torch.bfloat16])
def test_add_through_numpy_views_equals_tensor_assignment(obs_dtype):
    """On the CPU, add() writes through numpy views of the storage (f32 storage) or by tensor
    assignment (bf16 storage, or an argument numpy cannot read): the rows must be the same bit for bit,
    including inputs that need casting (f64 values, int32 actions) and one that requires grad."""
    g = torch.Generator().manual_seed(0)
    T, E = 5, 3
    fast = RolloutBuffer(T, E, (2,), (), torch.int64, obs_dtype, "cpu")
    slow = RolloutBuffer(T, E, (2,), (), torch.int64, obs_dtype, "cpu")
    slow._cpu = False  # the tensor-assignment path
    for t in range(T):
        args = [
            torch.randn(E, 2, generator=g, dtype=torch.float64),
            torch.randint(0, 4, (E,), generator=g, dtype=torch.int32),
            torch.randn(E, generator=g),
            torch.randn(E, generator=g, dtype=torch.float64).requires_grad_(t == 2),
            torch.randn(E, generator=g),
            torch.rand(E, generator=g) < 0.3,
            torch.rand(E, generator=g) < 0.3,
            torch.rand(E, generator=g) < 0.3,
        ]
        fast.add(*args)
        slow.add(*args)
    assert (fast._views is not None) == (obs_dtype == torch.float32)
    for name in RolloutBuffer.FIELDS:
        assert torch.equal(getattr(fast, name), getattr(slow, name)), name
    assert fast.pos == slow.pos == T
