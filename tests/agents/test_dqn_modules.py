"""Torsos, ICM and the branching head: shapes, dtypes, and the properties each one promises."""

from __future__ import annotations

import pytest
import torch
from tritonrl.agents.icm import ICM
from tritonrl.agents.nets.factored import BranchingHead, branching_q
from tritonrl.agents.nets.torsos import AttentionTorso, SpectralLinear, build_torso

DTYPES = [torch.float32, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16"])
@pytest.mark.parametrize(
    "kind,obs_shape,norm,spectral",
    [
        ("mlp", (4,), "none", False),
        ("mlp", (2, 3), "rmsnorm", True),
        ("resmlp", (4,), "rmsnorm", False),
        ("resmlp", (5,), "none", True),
        ("attention", (4, 3), "rmsnorm", False),
        ("attention", (3, 2), "none", True),
    ],
)
def test_torso_shapes_dtypes_and_gradients(kind, obs_shape, norm, spectral, dtype) -> None:
    torch.manual_seed(0)
    torso = build_torso(obs_shape, kind, width=16, depth=2, norm=norm, spectral_norm=spectral, dtype=dtype)
    assert all(p.dtype == dtype for p in torso.parameters())
    x = torch.randn(5, *obs_shape).to(dtype)
    h = torso(x)
    assert h.shape == (5, torso.out_features) and h.dtype == dtype
    assert torch.isfinite(h.float()).all()
    h.float().square().sum().backward()
    grads = [p.grad for p in torso.parameters()]
    assert all(g is not None and torch.isfinite(g.float()).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)


def test_torso_bad_input() -> None:
    with pytest.raises(ValueError, match="kind='cnn'"):
        build_torso((4,), "cnn")
    with pytest.raises(ValueError, match="norm='layer'"):
        build_torso((4,), "mlp", norm="layer")
    with pytest.raises(ValueError, match=r"obs_shape=\(4,\)"):
        build_torso((4,), "attention")
    with pytest.raises(ValueError, match="heads=3"):
        AttentionTorso(4, 3, width=16, heads=3)


def test_attention_torso_is_causal_and_uses_history() -> None:
    torch.manual_seed(0)
    torso = build_torso((4, 3), "attention", width=16, depth=1)
    x = torch.randn(2, 4, 3)
    y = x.clone()
    y[:, 0] += 1.0  # change the oldest observation: the newest step's features must change
    assert not torch.allclose(torso(x), torso(y))
    # the block is causal: an earlier position's features ignore later steps
    block = torso.blocks[0]
    h = torso.embed(x) + torso.pos
    h2 = h.clone()
    h2[:, -1] += 1.0
    torch.testing.assert_close(block(h)[:, :-1], block(h2)[:, :-1])


def test_spectral_linear_normalises_the_largest_singular_value() -> None:
    torch.manual_seed(0)
    layer = SpectralLinear(20, 30)
    with torch.no_grad():
        layer.weight.mul_(5.0)
    for _ in range(50):  # power iteration converges across training calls
        layer(torch.randn(2, 20))
    w = layer.weight / layer.sigma()
    # 50 power iterations on a random 30x20 matrix: the top singular value is within 1%
    assert torch.linalg.matrix_norm(w, ord=2).item() == pytest.approx(1.0, rel=1e-2)
    layer.eval()
    u = layer.u.clone()
    layer(torch.randn(2, 20))
    assert torch.equal(u, layer.u)  # eval does not update the estimate
    layer.train()
    with torch.no_grad():
        layer(torch.randn(2, 20))
    assert torch.equal(u, layer.u)  # nor does a no_grad call (acting, target values)
    assert "u" in layer.state_dict()


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16"])
def test_icm_shapes_and_reward(dtype) -> None:
    torch.manual_seed(0)
    icm = ICM((6,), [3], embed_dim=8, hidden=16, eta=2.0, beta=0.2, dtype=dtype)
    obs, nxt = torch.randn(5, 6).to(dtype), torch.randn(5, 6).to(dtype)
    a = torch.randint(3, (5,))
    inv, fwd = icm.losses(obs, a, nxt)
    assert inv.shape == fwd.shape == (5,) and inv.dtype == fwd.dtype == torch.float32
    r = icm.intrinsic_reward(obs, a, nxt)
    assert r.dtype == torch.float32
    torch.testing.assert_close(r, 2.0 * fwd.detach())  # eta * forward error
    parts = icm.loss(obs, a, nxt)
    torch.testing.assert_close(parts["loss"], 0.8 * inv.mean() + 0.2 * fwd.mean())
    # the forward target phi(s') is detached: the forward loss sends no gradient through s'
    obs_g = obs.detach().requires_grad_(True)
    nxt_g = nxt.detach().requires_grad_(True)
    _, fwd2 = icm.losses(obs_g, a, nxt_g)
    fwd2.sum().backward()
    assert nxt_g.grad is None and obs_g.grad is not None and obs_g.grad.abs().sum() > 0


def test_icm_learns_a_deterministic_world() -> None:
    # A world where s' = s + 0.5 * onehot(a): after training, the curiosity on the seen transitions
    # falls far below its initial value (measured 0.095 -> 0.002: bound 10x), the inverse model
    # recovers the actions, and transitions from unseen (3x wider) states stay surprising (measured
    # 30x the seen ones: bound 5x), which is what drives exploration.
    torch.manual_seed(0)
    icm = ICM((4,), [4], embed_dim=16, hidden=64, eta=1.0, beta=0.5)
    opt = torch.optim.Adam(icm.parameters(), lr=3e-3)
    obs = torch.randn(256, 4)
    a = torch.randint(4, (256,))
    step = 0.5 * torch.nn.functional.one_hot(a, 4).float()
    r0 = icm.intrinsic_reward(obs, a, obs + step).mean().item()
    for _ in range(400):
        opt.zero_grad()
        icm.loss(obs, a, obs + step)["loss"].backward()
        opt.step()
    _, _, logits = icm(obs, a, obs + step)
    assert (logits.argmax(-1) == a).float().mean().item() > 0.95
    seen = icm.intrinsic_reward(obs, a, obs + step).mean().item()
    assert seen < 0.1 * r0
    novel = torch.randn(256, 4) * 3
    assert icm.intrinsic_reward(novel, a, novel + step).mean().item() > 5 * seen


def test_icm_multidiscrete_and_bad_input() -> None:
    icm = ICM((3,), [2, 4, 3], embed_dim=8, hidden=16)
    a = torch.stack([torch.randint(n, (7,)) for n in (2, 4, 3)], -1)
    inv, fwd = icm.losses(torch.randn(7, 3), a, torch.randn(7, 3))
    assert inv.shape == (7,)
    # three classifiers: the loss at init is about the sum of log(n_d) (uniform predictions)
    uniform = torch.tensor([2.0, 4.0, 3.0]).log().sum().item()
    assert inv.mean().item() == pytest.approx(uniform, rel=0.3)
    with pytest.raises(ValueError, match="beta"):
        ICM((3,), [2], beta=1.5)
    with pytest.raises(ValueError, match="action_dims"):
        ICM((3,), [1])


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16"])
def test_branching_head_q_values(dtype) -> None:
    torch.manual_seed(0)
    head = BranchingHead(8, [2, 3, 5], dtype=dtype)
    v, adv = head(torch.randn(4, 8).to(dtype))
    assert v.shape == (4, 1) and adv.shape == (4, 3, 5) and v.dtype == adv.dtype == dtype
    q = branching_q(v, adv, head.mask)
    assert q.dtype == torch.float32 and q.shape == (4, 3, 5)
    assert torch.isinf(q[:, 0, 2:]).all() and torch.isinf(q[:, 1, 3:]).all() and torch.isfinite(q[:, 2]).all()
    # per branch, the mean over real sub-actions of Q is V (the advantages are centred)
    for d, n in enumerate([2, 3, 5]):
        torch.testing.assert_close(q[:, d, :n].mean(-1), v.float()[:, 0], atol=1e-5, rtol=1e-5)
    assert (q.argmax(-1) < torch.tensor([2, 3, 5])).all()
    with pytest.raises(ValueError, match="nvec"):
        BranchingHead(8, [3, 1])


@pytest.mark.parametrize(
    "backend", ["torch", pytest.param("triton", marks=pytest.mark.interpret)], ids=["torch", "interpret"]
)
@pytest.mark.parametrize("explore", [False, True])
def test_c51_q_values_come_from_the_fused_epilogue(monkeypatch, backend: str, explore: bool) -> None:
    """The agent's C51 Q-values (the head's fused expected-value epilogue) equal the expected
    values of the head's log-probabilities, ``sum_z exp(log_p) * support``, in eval and explore mode."""
    gym = pytest.importorskip("gymnasium")
    import numpy as np
    from tritonrl.agents.dqn import DQNAgent, preset
    from tritonrl.kernels.noisy_head import NOISY_DUELING, expected_q

    monkeypatch.setenv("TRITONRL_BACKEND", backend)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    cfg = preset("c51", torso_width=16, batch_size=8, buffer_size=64, learning_starts=8)
    agent = DQNAgent(obs_space, gym.spaces.Discrete(3), cfg, num_envs=2, seed=0)
    obs = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
    NOISY_DUELING.reset()

    def second_pass(*args, **kwargs):
        raise AssertionError("the agent computed expected Q in a second pass")

    from tritonrl.agents.nets import heads

    with monkeypatch.context() as m:
        m.setattr(heads, "expected_q", second_pass)
        q = agent.q_values(obs, explore=explore)
    assert NOISY_DUELING.last_backend == backend and NOISY_DUELING.counts[backend] == 1  # one launch
    assert q.shape == (5, 3) and q.dtype == torch.float32
    x = agent._ingest(obs, "q_values")
    agent.online.train(explore)
    with torch.no_grad():
        log_p = agent.online(x)
    agent.online.train()
    torch.testing.assert_close(q, expected_q(log_p, agent.support), rtol=1e-5, atol=1e-5)
