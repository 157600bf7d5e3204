"""The conv torsos (tritonrl.agents.nets.conv) against plain torch models of the published
architectures, with the same weights: shapes, values, dtypes, init and the errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tritonrl.agents.nets.conv import CONV_KINDS, ConvTorso, conv_default_hidden


def _nature_model(t: ConvTorso, x: torch.Tensor) -> torch.Tensor:
    """Mnih et al. (2015) written out: three ReLU convolutions, flatten, the linear layers."""
    c0, c1, c2 = t.convs
    h = F.relu(F.conv2d(x, c0.weight, c0.bias, stride=4))
    h = F.relu(F.conv2d(h, c1.weight, c1.bias, stride=2))
    h = F.relu(F.conv2d(h, c2.weight, c2.bias, stride=1)).reshape(x.shape[0], -1)
    for lin in t.mlp.layers:
        h = F.relu(h @ lin.weight.T + lin.bias)
    return h


def _impala_model(t: ConvTorso, x: torch.Tensor) -> torch.Tensor:
    """Espeholt et al. (2018) written out: per stage conv, max-pool 3/2, two residual blocks."""
    h = x
    for stage in t.convs:
        h = F.max_pool2d(F.conv2d(h, stage.conv.weight, stage.conv.bias, padding=1), 3, 2, padding=1)
        for block in (stage.res0, stage.res1):
            r = F.conv2d(F.relu(h), block.conv0.weight, block.conv0.bias, padding=1)
            h = h + F.conv2d(F.relu(r), block.conv1.weight, block.conv1.bias, padding=1)
    h = F.relu(h).reshape(x.shape[0], -1)
    for lin in t.mlp.layers:
        h = F.relu(h @ lin.weight.T + lin.bias)
    return h


@pytest.mark.parametrize(
    ("kind", "shape", "features", "out"),
    [
        ("nature", (4, 84, 84), 64 * 7 * 7, 512),  # the Atari network: 3,136 conv features
        ("minatar", (4, 10, 10), 16 * 8 * 8, 128),  # MinAtar Breakout: 1,024 conv features
        ("minatar", (10, 10, 10), 16 * 8 * 8, 128),  # Seaquest's 10 channels
        ("impala", (3, 64, 64), 32 * 8 * 8, 256),  # Procgen frames
    ],
)
def test_published_sizes(kind: str, shape: tuple[int, int, int], features: int, out: int) -> None:
    t = ConvTorso(shape, kind)
    assert t.conv_features == features and t.out_features == out == conv_default_hidden(kind)[-1]
    y = t(torch.rand(2, *shape))
    assert y.shape == (2, out) and y.dtype == torch.float32


@pytest.mark.parametrize("kind", CONV_KINDS)
def test_values_match_the_written_out_architecture(kind: str) -> None:
    shape = {"nature": (4, 40, 44), "minatar": (6, 10, 10), "impala": (3, 13, 16)}[kind]
    torch.manual_seed(0)
    t = ConvTorso(shape, kind, hidden=(24, 16))
    x = torch.rand(3, *shape)
    if kind == "minatar":
        c = t.convs[0]
        h = F.relu(F.conv2d(x, c.weight, c.bias)).reshape(3, -1)
        for lin in t.mlp.layers:
            h = F.relu(h @ lin.weight.T + lin.bias)
        want = h
    else:
        want = (_nature_model if kind == "nature" else _impala_model)(t, x)
    # f32: the same ops in the same order except matmul vs F.linear (different kernels): 1e-5
    torch.testing.assert_close(t(x), want, rtol=1e-5, atol=1e-5)


def test_no_hidden_layer_gives_the_convolution_features() -> None:
    t = ConvTorso((4, 84, 84), "nature", hidden=())
    assert t.out_features == 3136
    assert t(torch.rand(1, 4, 84, 84)).shape == (1, 3136)


def test_parameters_in_the_given_dtype_and_bf16_forward() -> None:
    t = ConvTorso((2, 10, 10), "minatar", dtype=torch.bfloat16)
    assert {p.dtype for p in t.parameters()} == {torch.bfloat16}
    y = t(torch.rand(2, 2, 10, 10, dtype=torch.bfloat16))
    assert y.dtype == torch.bfloat16 and torch.isfinite(y.float()).all()


def test_orthogonal_init_has_the_gain_and_zero_biases() -> None:
    t = ConvTorso((3, 16, 16), "impala", hidden=(8,), orthogonal_gain=2.0)
    conv = t.convs[0].conv
    w = conv.weight.reshape(conv.out_channels, -1)  # 16 x 27: orthonormal rows times the gain
    torch.testing.assert_close(w @ w.T, 4.0 * torch.eye(16), rtol=0, atol=1e-4)  # f32 QR rounding
    assert all(torch.count_nonzero(m.bias) == 0 for m in t.modules() if getattr(m, "bias", None) is not None)


def test_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match="unknown"):
        ConvTorso((4, 84, 84), "alexnet")
    with pytest.raises(ValueError, match=r"image observations \[C, H, W\]"):
        ConvTorso((84, 84), "nature")
    with pytest.raises(ValueError, match="too small for the nature torso"):
        ConvTorso((4, 20, 20), "nature")
    with pytest.raises(ValueError, match="layer sizes must be >= 1"):
        ConvTorso((4, 10, 10), "minatar", hidden=(0,))


def test_channels_last_weights() -> None:
    t = ConvTorso((4, 36, 36), "nature", hidden=(8,))
    assert all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in t.convs)


@pytest.mark.gpu
def test_channels_last_weights_on_cuda() -> None:
    t = ConvTorso((4, 84, 84), "nature", device="cuda", dtype=torch.bfloat16)
    assert all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in t.convs)
    x = torch.rand(32, 4, 84, 84, device="cuda", dtype=torch.bfloat16)
    ref = ConvTorso((4, 84, 84), "nature", dtype=torch.float32)
    ref.load_state_dict({k: v.float().cpu() for k, v in t.state_dict().items()})
    # bf16 convolutions against the f32 network on the same (rounded) weights: bf16's 8-bit mantissa
    torch.testing.assert_close(t(x).float().cpu(), ref(x.float().cpu()), rtol=0.05, atol=0.05)
