"""tritonrl.agents.nets.heads: NoisyLinear and DuelingHead (init, noise, train/eval, dtypes, wiring,
launches)."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from tritonrl.agents.nets.heads import DuelingHead, NoisyLinear, scaled_noise
from tritonrl.kernels.noisy_head import NOISY_DUELING, NOISY_LINEAR, expected_q
from tritonrl.kernels.noisy_head.reference import noisy_linear_ref


def test_noisy_linear_init_statistics() -> None:
    torch.manual_seed(0)
    i, o, sigma0 = 400, 300, 0.5
    layer = NoisyLinear(i, o, sigma0=sigma0)
    bound = 1 / math.sqrt(i)
    w = layer.weight_mu.detach().double()
    assert w.shape == (o, i) and layer.weight_mu.dtype == torch.float32
    assert w.abs().max() <= bound
    # U[-b, b]: mean 0, variance b^2 / 3; n = 120k samples: 5 standard errors of the mean, and
    # the sample variance within 3% (its relative standard error is ~0.4% here)
    n = w.numel()
    assert abs(w.mean().item()) < 5 * bound / math.sqrt(3 * n)
    assert w.var().item() == pytest.approx(bound**2 / 3, rel=0.03)
    assert layer.bias_mu.abs().max() <= bound
    for p in (layer.weight_sigma, layer.bias_sigma):
        # exact: filled with the constant
        torch.testing.assert_close(p.detach(), torch.full_like(p, sigma0 / math.sqrt(i)), rtol=0, atol=0)
    # the noise is drawn at construction: f(u) = sign(u) sqrt(|u|) of standard normals is not zero
    assert layer.eps_in.abs().min() > 0 and layer.eps_out.abs().min() > 0


def test_scaled_noise_is_signed_sqrt_of_normals() -> None:
    u = torch.randn(1000, generator=torch.Generator().manual_seed(3))
    eps = scaled_noise((1000,), torch.Generator().manual_seed(3))
    torch.testing.assert_close(eps, u.sign() * u.abs().sqrt())


def test_reset_noise_reproducible_with_generator() -> None:
    a, b = NoisyLinear(6, 5), NoisyLinear(6, 5)
    a.reset_noise(torch.Generator().manual_seed(7))
    b.reset_noise(torch.Generator().manual_seed(7))
    assert torch.equal(a.eps_in, b.eps_in) and torch.equal(a.eps_out, b.eps_out)
    before = a.eps_out.clone()
    a.reset_noise(torch.Generator().manual_seed(8))
    assert not torch.equal(a.eps_out, before)
    heads = [DuelingHead(6, 3, atoms=5, hidden=4) for _ in range(2)]
    for h in heads:
        h.reset_noise(torch.Generator().manual_seed(1))
    for (name, x), (_, y) in zip(heads[0].named_buffers(), heads[1].named_buffers(), strict=True):
        assert torch.equal(x, y), name


def test_train_eval_switch_noise() -> None:
    torch.manual_seed(0)
    layer = NoisyLinear(8, 4)
    x = torch.randn(3, 8)
    mu_only = x @ layer.weight_mu.T + layer.bias_mu
    layer.eval()
    torch.testing.assert_close(layer(x), mu_only)
    layer.reset_noise()
    torch.testing.assert_close(layer(x), mu_only)  # eval ignores the noise
    layer.train()
    y1 = layer(x)
    assert (y1 - mu_only).abs().max() > 1e-3
    torch.testing.assert_close(y1, noisy_linear_ref(x, *layer.params()))
    layer.reset_noise()
    assert (layer(x) - y1).abs().max() > 1e-3


def test_eval_gives_no_sigma_gradient() -> None:
    layer = NoisyLinear(5, 3)
    x = torch.randn(4, 5)
    layer(x).square().sum().backward()
    assert all(p.grad is not None for p in layer.parameters())
    layer.zero_grad(set_to_none=True)
    layer.eval()
    layer(x).square().sum().backward()
    assert layer.weight_sigma.grad is None and layer.bias_sigma.grad is None
    assert layer.weight_mu.grad is not None


def test_parameters_in_training_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONRL_DTYPE", "bf16")
    layer = NoisyLinear(8, 4, activation="relu")
    assert {t.dtype for t in (*layer.parameters(), *layer.buffers())} == {torch.bfloat16}
    y = layer(torch.randn(2, 8).bfloat16())
    assert y.dtype == torch.bfloat16 and (y >= 0).all()
    head = DuelingHead(8, 3, atoms=5, hidden=6)
    assert {t.dtype for t in (*head.parameters(), *head.buffers())} == {torch.bfloat16}
    out = head(torch.randn(2, 8).bfloat16())
    assert out.dtype == torch.float32 and out.shape == (2, 3, 5)  # f32 from the op's epilogue
    with pytest.raises(TypeError, match="dtype"):
        head(torch.randn(2, 8))  # data is cast once where it enters, not inside the head
    monkeypatch.setenv("TRITONRL_DTYPE", "f32")
    assert NoisyLinear(8, 4).weight_mu.dtype == torch.float32
    assert NoisyLinear(8, 4, dtype=torch.bfloat16).weight_mu.dtype == torch.bfloat16


def test_forwards_do_not_cast() -> None:
    for fn in (NoisyLinear.forward, DuelingHead.forward):
        assert ".to(" not in inspect.getsource(fn) and ".float()" not in inspect.getsource(fn)


@pytest.mark.parametrize(
    "kw, shape",
    [
        ({}, (4, 3)),
        ({"atoms": 51}, (4, 3, 51)),
        ({"atoms": 8, "log_softmax": False}, (4, 3, 8)),
        ({"dueling": False, "hidden": 16}, (4, 3)),
        ({"noisy": False, "atoms": 5, "hidden": 7}, (4, 3, 5)),
    ],
    ids=["dqn", "c51", "qr", "plain-hidden", "no-noise"],
)
def test_dueling_head_shapes(kw: dict, shape: tuple[int, ...]) -> None:
    head = DuelingHead(10, 3, **kw)
    out = head(torch.randn(4, 10))
    assert out.shape == shape and out.dtype == torch.float32
    if kw.get("atoms", 1) > 1 and kw.get("log_softmax", True):
        torch.testing.assert_close(out.exp().sum(-1), torch.ones(4, 3))
    if not kw.get("noisy", True):
        assert all("sigma" not in n for n, _ in head.named_parameters())
        assert len(list(head.buffers())) == 0


def test_dueling_head_wiring_matches_explicit_composition() -> None:
    """Hidden group 0 feeds the value stream, group 1 the advantage stream; f64 composition."""
    torch.manual_seed(2)
    a, z = 4, 11
    head = DuelingHead(9, a, atoms=z, hidden=6)
    h = torch.randn(5, 9)
    support = torch.linspace(-1, 1, z)
    lp, q = head(h, support)

    def d(t):
        return None if t is None else t.detach().double()

    hp = [d(t) for t in head.hidden.params()]
    hv = noisy_linear_ref(h.double(), *(None if t is None else t[0] for t in hp), relu=True)
    ha = noisy_linear_ref(h.double(), *(None if t is None else t[1] for t in hp), relu=True)
    v = noisy_linear_ref(hv, *map(d, head.value.params())).view(5, 1, z)
    adv = noisy_linear_ref(ha, *map(d, head.advantage.params())).view(5, a, z)
    want = torch.log_softmax(v + adv - adv.mean(1, keepdim=True), -1)
    torch.testing.assert_close(lp.double(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(q, head.expected_q(lp, support))
    torch.testing.assert_close(q, expected_q(lp, support))


class _LaunchCounter:
    def __init__(self, kernel, log: list[str], name: str) -> None:
        self.kernel, self.log, self.name = kernel, log, name

    def __getitem__(self, grid):
        self.log.append(self.name)
        return self.kernel[grid]


@pytest.mark.parametrize("atoms", [1, 51])
def test_dueling_head_triton_two_launches_and_parity(kernel_device, monkeypatch, atoms) -> None:
    """A whole Rainbow head runs in two launches forward, and matches the torch path."""
    from tritonrl.kernels.noisy_head import fused_dueling, fused_linear

    launches: list[str] = []
    for mod in (fused_linear, fused_dueling):
        for name, obj in list(vars(mod).items()):
            if name.endswith("_kernel"):
                monkeypatch.setattr(mod, name, _LaunchCounter(obj, launches, name))
    torch.manual_seed(4)
    head = DuelingHead(12, 5, atoms=atoms, hidden=16, device=kernel_device, dtype=torch.float32)
    h = torch.randn(6, 12, device=kernel_device)
    NOISY_LINEAR.reset()
    NOISY_DUELING.reset()
    out = head(h)
    assert launches == ["_noisy_linear_fwd_kernel", "_noisy_dueling_fwd_kernel"]
    assert NOISY_LINEAR.last_backend == NOISY_DUELING.last_backend == "triton"
    up = torch.randn(out.shape, device=kernel_device)
    grads = torch.autograd.grad(out, list(head.parameters()), up)
    monkeypatch.setenv("TRITONRL_BACKEND", "torch")
    ref = head(h)
    assert NOISY_DUELING.last_backend == "torch"
    ref_grads = torch.autograd.grad(ref, list(head.parameters()), up)
    # both f32: the kernel (IEEE products, f32 accumulation) and torch differ by summation order
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for (name, _), g, r in zip(head.named_parameters(), grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


def test_bad_module_arguments() -> None:
    with pytest.raises(ValueError, match="activation"):
        NoisyLinear(3, 2, activation="gelu")
    with pytest.raises(ValueError, match="in_features"):
        NoisyLinear(0, 2)
    with pytest.raises(ValueError, match="atoms"):
        DuelingHead(3, 2, atoms=0)
    with pytest.raises(ValueError, match="support"):
        DuelingHead(3, 2)(torch.randn(1, 3), torch.zeros(1))  # scalar Q has no support


def test_params_follow_the_module_through_to_and_parametrizations():
    """NoisyLinear.params() reads the parameter/buffer registries directly; it must hand out the
    module's current tensors after .to() (new buffers) and through a parametrization (a subclass
    whose weight is computed), exactly as attribute access does."""
    from torch.nn.utils import parametrize

    layer = NoisyLinear(6, 3, dtype=torch.float32)
    layer.to(torch.float64)
    p = layer.params()
    names = ("weight_mu", "weight_sigma", "bias_mu", "bias_sigma", "eps_in", "eps_out")
    assert all(a is getattr(layer, n) for a, n in zip(p, names, strict=True))
    assert p.eps_in.dtype == torch.float64

    class Double(torch.nn.Module):
        def forward(self, w: torch.Tensor) -> torch.Tensor:
            return 2 * w

    parametrize.register_parametrization(layer, "weight_mu", Double())
    p = layer.params()
    assert torch.equal(p.weight_mu, 2 * layer.parametrizations.weight_mu.original)
