"""Policy heads and cores: log-prob corrections, the flow's exact density, recurrent consistency."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import AffineTransform, Normal, TanhTransform, TransformedDistribution
from tritonrl.agents.nets.policy_heads import CategoricalHead, FlowHead, GaussianHead, squash_log_det
from tritonrl.agents.nets.recurrent import LSTMCore

LOW, HIGH = torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0])


def _squashed_reference(mean: torch.Tensor, std: torch.Tensor, low: torch.Tensor, high: torch.Tensor):
    return TransformedDistribution(
        Normal(mean.double(), std.double()),
        [TanhTransform(), AffineTransform(((high + low) / 2).double(), ((high - low) / 2).double())],
    )


def test_tanh_squash_log_prob_matches_numerical_change_of_variables():
    torch.manual_seed(0)
    head = GaussianHead(4, 2, LOW, HIGH, squash=True, log_std_init=-0.3).double()
    feat = torch.randn(64, 4, dtype=torch.float64)
    env_a, u, logp = head.sample(feat, deterministic=False)
    # The head's distribution math is f32 (its output boundary); the references below are f64.
    u64 = u.double()
    normal = head._normal(feat)
    mean, std = normal.mean.double(), normal.stddev.double()
    # Numerical: log p(a) = log N(u) - log |da/du|, da/du per dimension by central differences.
    h = 1e-6
    center, scale = (HIGH + LOW).double() / 2, (HIGH - LOW).double() / 2
    da = (center + scale * torch.tanh(u64 + h) - (center + scale * torch.tanh(u64 - h))) / (2 * h)
    numerical = Normal(mean, std).log_prob(u64).sum(-1) - da.abs().log().sum(-1)
    # f64 central differences are accurate to ~1e-9 here; the f32 log-density of values of order 1
    # carries ~1e-7 relative error: 2e-6 absolute bounds both with margin.
    torch.testing.assert_close(logp, numerical, rtol=0, atol=2e-6)
    # And the same density as torch.distributions' tanh + affine transformed Gaussian.
    ref = _squashed_reference(mean, std, LOW, HIGH).log_prob(env_a.double()).sum(-1)
    torch.testing.assert_close(logp, ref, rtol=0, atol=2e-6)
    # evaluate() scores the stored raw sample identically.
    logp2, _ = head.evaluate(feat, u)
    torch.testing.assert_close(logp2, logp, rtol=0, atol=0)  # exact: the same ops on the same shapes


def test_squash_log_det_is_stable_for_large_pre_activations():
    u = torch.tensor([[-30.0], [0.0], [30.0]])
    ld = squash_log_det(u, torch.zeros(1))
    assert torch.isfinite(ld).all()  # log(1 - tanh(30)^2) would be log(0) = -inf naively
    assert ld[1].item() == pytest.approx(0.0, abs=1e-7)
    assert ld[0].item() == pytest.approx(2 * (math.log(2) - 30.0), rel=1e-6)


def test_unsquashed_gaussian_matches_normal_and_has_exact_entropy():
    torch.manual_seed(1)
    head = GaussianHead(3, 2, LOW, HIGH, squash=False, log_std_init=0.2)
    feat = torch.randn(10, 3)
    a, raw, logp = head.sample(feat, deterministic=False)
    assert torch.equal(a, raw)
    ref = Normal(head.mean(feat), torch.exp(head.log_std))
    torch.testing.assert_close(logp, ref.log_prob(a).sum(-1))
    _, ent = head.evaluate(feat, raw)
    torch.testing.assert_close(ent, ref.entropy().sum(-1))


def test_categorical_gumbel_sampling_follows_the_probabilities():
    head = CategoricalHead(2, 3)
    with torch.no_grad():
        head.logits.weight.zero_()
        head.logits.bias.copy_(torch.log(torch.tensor([0.2, 0.3, 0.5])))
    g = torch.Generator().manual_seed(0)
    a, _, logp = head.sample(torch.zeros(20_000, 2), deterministic=False, generator=g)
    freq = torch.bincount(a, minlength=3).float() / a.numel()
    # 20k draws: binomial std <= 0.0036; 0.015 is > 4 std.
    torch.testing.assert_close(freq, torch.tensor([0.2, 0.3, 0.5]), rtol=0, atol=0.015)
    torch.testing.assert_close(logp.exp(), torch.tensor([0.2, 0.3, 0.5])[a])
    greedy, _, _ = head.sample(torch.zeros(1, 2), deterministic=True)
    assert greedy.item() == 2


def _randomise(head: torch.nn.Module, seed: int, scale: float = 0.5) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)


def test_flow_at_init_is_the_squashed_gaussian_of_torch_distributions():
    torch.manual_seed(2)
    flow = FlowHead(5, 2, LOW, HIGH, layers=4, hidden=16, log_std_init=-0.5).double()
    feat = torch.randn(32, 5, dtype=torch.float64)
    a, y, logp = flow.sample(feat, deterministic=False)
    base = flow._base(feat)  # zero-initialised couplings: the flow is the identity
    ref = _squashed_reference(base.mean, base.stddev, LOW, HIGH).log_prob(a).sum(-1)
    # f64 throughout; torch's reference inverts the tanh (atanh near +-1 loses digits): relative 1e-7.
    torch.testing.assert_close(logp, ref, rtol=1e-7, atol=1e-8)


def test_one_dimensional_flow_matches_torch_distributions_with_random_weights():
    """D = 1: every coupling is an affine map of the features, so the policy is a squashed Gaussian."""
    low, high = torch.tensor([-2.0]), torch.tensor([2.0])
    flow = FlowHead(3, 1, low, high, layers=3, hidden=8).double()
    _randomise(flow, 3)
    feat = torch.randn(16, 3, dtype=torch.float64)
    a, y, logp = flow.sample(feat, deterministic=False)
    base = flow._base(feat)
    mean, std = base.mean, base.stddev
    for c in flow.couplings:  # compose the affine maps: N(m, s) -> N(m e^k + t, s e^k)
        k, t = c._scale_shift(feat, mean[..., :0])
        mean, std = mean * k.exp() + t, std * k.exp()
    # Before the squash (random weights can push actions to within 1e-9 of the bounds, where a
    # reference that inverts the tanh loses digits) the flow output is exactly N(mean, std).
    torch.testing.assert_close(
        flow.log_prob_raw(feat, y), Normal(mean, std).log_prob(y).sum(-1), rtol=0, atol=1e-10
    )
    torch.testing.assert_close(
        logp, Normal(mean, std).log_prob(y).sum(-1) - flow.bounds.log_det(y), rtol=0, atol=1e-10
    )


def test_flow_log_prob_matches_numerical_jacobian():
    """D = 3, random weights: log pi(a) = log N(z) - log|det da/dz| with the Jacobian by autograd."""
    low, high = torch.tensor([-1.0, -2.0, 0.0]), torch.tensor([1.0, 2.0, 3.0])
    flow = FlowHead(4, 3, low, high, layers=4, hidden=8).double()
    _randomise(flow, 4, scale=0.2)  # moderate weights: actions stay off the bounds (finite Jacobian)
    feat = torch.randn(6, 4, dtype=torch.float64)
    g = torch.Generator().manual_seed(5)
    base = flow._base(feat)
    z = base.mean + base.stddev * torch.randn(6, 3, generator=g, dtype=torch.float64)

    def to_action(zi: torch.Tensor, fi: torch.Tensor) -> torch.Tensor:
        y, _ = flow._forward_flow(fi[None], zi[None])
        return flow.bounds.squash(y)[0]

    y, _ = flow._forward_flow(feat, z)
    a = flow.bounds.squash(y)
    logp = flow.log_prob_raw(feat, y) - flow.bounds.log_det(y)
    for i in range(6):
        jac = torch.autograd.functional.jacobian(lambda zi, i=i: to_action(zi, feat[i]), z[i])
        numerical = base.log_prob(z)[i].sum() - torch.linalg.slogdet(jac)[1]
        # Autograd Jacobian in f64: agreement to rounding.
        torch.testing.assert_close(logp[i], numerical, rtol=0, atol=1e-9)
    # The inverse recovers z exactly (the couplings are invertible by construction).
    x = y
    for c in reversed(flow.couplings):
        x, _ = c.inverse(feat, x)
    torch.testing.assert_close(x, z, rtol=0, atol=1e-10)
    assert ((a > low) & (a < high)).all()


def test_flow_sample_and_evaluate_agree():
    flow = FlowHead(4, 2, LOW, HIGH, layers=2, hidden=8)
    _randomise(flow, 6)
    feat = torch.randn(20, 4)
    _, y, logp = flow.sample(feat, deterministic=False)
    logp2, ent = flow.evaluate(feat, y)
    # f32 forward vs inverse pass: a few ulps of values of order 10.
    torch.testing.assert_close(logp2, logp, rtol=1e-5, atol=1e-4)
    assert ent.shape == (20,) and ent.requires_grad
    _, ent_cheap = flow.evaluate(feat, y, entropy_grad=False)
    assert not ent_cheap.requires_grad


# f32 LSTM outputs are bounded by 1: a few ulps (1.2e-7 each) of rounding between matmuls of
# different row counts (the stepwise reference encodes [B*L, D] at once, `step` [B, D]; BLAS
# kernels round by shape and instruction set: 3e-8 seen on an AVX-512 Xeon) stay far below 1e-6.
STEP_TOL = {"rtol": 1e-6, "atol": 1e-6}


@pytest.mark.parametrize(
    ("B", "L", "D", "hidden"), [(4, 9, 3, 6), (1, 5, 8, 16), (7, 33, 5, 24), (16, 12, 64, 64)]
)
def test_lstm_sequence_equals_stepping_with_resets(B: int, L: int, D: int, hidden: int):
    """Several shapes: BLAS rounds differently by row count on some shapes and machines and not
    others, so one shape that happens to agree bit for bit here could hide an exactness
    assumption that fails elsewhere."""
    torch.manual_seed(7)
    core = LSTMCore(D, (8,), hidden)
    x = torch.randn(B, L, D)
    starts = torch.rand(B, L) < 0.25
    state0 = (torch.randn(B, hidden), torch.randn(B, hidden))
    seq, _ = core.sequence_stepwise(x, starts, state0)
    state = state0
    for t in range(L):
        feat, _, state = core.step(x[:, t], state, starts[:, t])
        torch.testing.assert_close(seq[:, t], feat, **STEP_TOL)
    # the batched sequence: the fused op sums the gates in another order (f32 rounding; the
    # thorough comparison is tests/agents/test_recurrent_batched.py)
    torch.testing.assert_close(core.sequence(x, starts, state0)[0], seq, rtol=1e-5, atol=1e-6)
    # A reset really forgets: the same inputs after a reset give the same output whatever came before.
    s1 = core.step(
        x[:, 0], (torch.randn(B, hidden), torch.randn(B, hidden)), torch.ones(B, dtype=torch.bool)
    )[0]
    s2 = core.step(x[:, 0], state0, torch.ones(B, dtype=torch.bool))[0]
    torch.testing.assert_close(s1, s2, rtol=0, atol=0)  # exact: one call, same shapes, the memory zeroed


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_categorical_head_equals_torch_distributions(dtype):
    """The categorical head writes the distribution out in tensor ops (log_softmax where
    Categorical takes logits - logsumexp: the two round differently in the last bit); log-probs
    and entropy must match torch.distributions.Categorical to a few ulps (rtol 1e-6 f32, 1e-14
    f64; atol for values near 0), the same actions must be drawn, including for logits so peaked
    that some probabilities underflow to 0, where the entropy's 0 * log 0 must count as 0.

    The atol of a row is at least ``4 eps max|logit|``: both formulas round the differences of
    the row's logits, whose ulps scale with the logits, so on the peaked rows (logits ~1e4) the
    log-probs near 0 and the entropies agree to that, not to 1e-6 (over 300 weight draws a fixed
    atol failed the peaked rows for a third of them; the bound held for every draw, the largest
    entropy difference 0.48 ``eps max|logit|``)."""
    from tritonrl.agents.nets.policy_heads import CategoricalHead

    torch.manual_seed(0)  # the head's weights: not whatever the tests before left in the global RNG
    head = CategoricalHead(8, 5, dtype=dtype)
    g = torch.Generator().manual_seed(0)
    feat = torch.randn(64, 8, generator=g, dtype=dtype)
    feat[:4] *= 1e4  # peaked rows: exp underflows
    raw = torch.randint(0, 5, (64,), generator=g)
    logits = head.logits(feat)
    ref = torch.distributions.Categorical(logits=logits if dtype == torch.float64 else logits.float())
    rtol, atol = (1e-6, 1e-6) if dtype == torch.float32 else (1e-14, 1e-14)
    row_atol = (4 * torch.finfo(dtype).eps * logits.detach().abs().amax(-1)).clamp(min=atol)

    def close(got: torch.Tensor, want: torch.Tensor) -> None:
        err = (got - want).abs()
        assert (err <= rtol * want.abs() + row_atol).all(), (err.max(), got, want)

    logp, entropy = head.evaluate(feat, raw)
    close(logp, ref.log_prob(raw))
    close(entropy, ref.entropy())
    assert torch.isfinite(entropy).all()
    a, raw_a, lp = head.sample(feat, False, torch.Generator().manual_seed(1))
    u = torch.rand(ref.logits.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float32)
    want = (ref.logits - torch.log(-torch.log(u.clamp(1e-12, 1.0)))).argmax(-1)  # the same Gumbel draw
    assert torch.equal(a, raw_a) and torch.equal(a, want)
    close(lp, ref.log_prob(a))
    greedy, _, lp_g = head.sample(feat, True)
    assert torch.equal(greedy, ref.logits.argmax(-1))
    close(lp_g, ref.log_prob(greedy))
