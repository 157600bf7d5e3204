"""The Transformer and PatchTST forecasters: shapes, dtypes, causal encode (Transformer), channel
independence (PatchTST), bad input, learning."""

from __future__ import annotations

import pytest
import torch
from forecast_model_checks import (
    check_bad_input,
    check_causal,
    check_dtypes,
    check_learns,
    check_registered,
    check_shapes,
)
from tritonrl.agents.forecast.attention import PatchTST, Transformer

SMALL = {"width": 16, "depth": 2, "heads": 2}


def _transformer(positions: str = "learned"):
    def make(**kw) -> Transformer:
        return Transformer(**{**SMALL, "positions": positions, **kw})

    return make


def _patchtst(**kw) -> PatchTST:
    return PatchTST(**{**SMALL, "patch_len": 4, "stride": 2, **kw})


MODELS = {"transformer-learned": _transformer(), "transformer-sinusoidal": _transformer("sinusoidal")}
MODELS["patchtst"] = _patchtst


def test_registered() -> None:
    check_registered("transformer", Transformer)
    check_registered("patchtst", PatchTST)
    assert Transformer.causal and not PatchTST.causal


@pytest.mark.parametrize("model", list(MODELS))
def test_shapes(model: str) -> None:
    check_shapes(MODELS[model])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("model", list(MODELS))
def test_parameter_dtypes_from_construction(model: str, dtype: torch.dtype) -> None:
    check_dtypes(MODELS[model], dtype)


@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
def test_transformer_encode_is_causal(positions: str) -> None:
    check_causal(_transformer(positions))


def test_sinusoidal_positions_are_fixed() -> None:
    model = Transformer(16, 3, positions="sinusoidal", **SMALL)
    assert "pos" not in dict(model.named_parameters()) and "pos" not in model.state_dict()
    assert model.pos.shape == (16, 16) and float(model.pos[0, 1]) == 1.0  # cos(0)


@pytest.mark.parametrize("model", list(MODELS))
def test_bad_input(model: str) -> None:
    check_bad_input(MODELS[model])


def test_bad_sizes() -> None:
    with pytest.raises(ValueError, match="width=30 must be divisible by heads=4"):
        Transformer(16, 3, width=30, heads=4)
    with pytest.raises(ValueError, match="positions='rope' is unknown"):
        Transformer(16, 3, positions="rope")
    with pytest.raises(ValueError, match="patch_len=20 must be <= window=16"):
        PatchTST(16, 3, patch_len=20)
    with pytest.raises(ValueError, match="stride must be a positive int"):
        PatchTST(16, 3, stride=0)


@pytest.mark.parametrize(
    ("window", "patch_len", "stride", "patches", "start"),
    [(32, 8, 4, 7, 0), (30, 8, 4, 6, 2), (9, 9, 3, 1, 0)],
)
def test_patches_end_at_the_last_step(
    window: int, patch_len: int, stride: int, patches: int, start: int
) -> None:
    model = PatchTST(window, 2, patch_len=patch_len, stride=stride, revin=False, **SMALL).eval()
    assert (model.num_patches, model.start) == (patches, start)
    x = torch.randn(3, window, 2)
    x2 = x.clone()
    x2[:, :start] = 100.0  # steps before the first patch are never read (revin off)
    x3 = x.clone()
    x3[:, -1] += 1.0  # the last step is read
    with torch.no_grad():
        assert torch.equal(model(x), model(x2))
        assert not torch.equal(model(x), model(x3))


@pytest.mark.parametrize("revin", [True, False])
def test_patchtst_channels_are_independent(revin: bool) -> None:
    """Target k's forecast reads channel ``target_channels[k]`` only: changing channel 2 changes
    target 0's forecast and leaves target 1's (channel 0) bit for bit; channel 1, no target's,
    is never read."""
    torch.manual_seed(0)
    model = PatchTST(16, 3, horizon=2, num_targets=2, target_channels=(2, 0), revin=revin, **SMALL).eval()
    x = torch.randn(4, 16, 3)
    x1, x2 = x.clone(), x.clone()
    x1[..., 1] = 5 * torch.randn(4, 16)
    x2[..., 2] = 5 * torch.randn(4, 16)
    with torch.no_grad():
        a, b, c = model(x), model(x1), model(x2)  # [B, H, T] each
    assert torch.equal(a, b)  # exact: channel 1 is not read at all
    assert torch.equal(a[..., 1], c[..., 1])  # exact: target 1 reads channel 0 alone
    assert not torch.equal(a[..., 0], c[..., 0])


def test_patchtst_exogenous_mixes_channels_before_the_inverse() -> None:
    """``exogenous=True``: a zero mix at initialisation (the channel-independent forecast, to f32
    rounding: the encoder runs over three channels instead of one, other GEMM shapes); another
    channel does not change it then (bit for bit), and does once the mix is non-zero."""
    torch.manual_seed(0)
    plain = PatchTST(16, 3, horizon=2, target_channels=(1,), **SMALL).eval()
    torch.manual_seed(0)
    mixed = PatchTST(16, 3, horizon=2, target_channels=(1,), exogenous=True, **SMALL).eval()
    x = torch.randn(4, 16, 3)
    x2 = x.clone()
    x2[..., 2] = 5 * torch.randn(4, 16)
    with torch.no_grad():
        torch.testing.assert_close(mixed(x), plain(x), rtol=0, atol=1e-6)
        assert torch.equal(mixed(x), mixed(x2))
        assert mixed.channel_mix is not None
        mixed.channel_mix.weight.fill_(0.5)
        assert not torch.equal(mixed(x), mixed(x2))


def test_an_old_patchtst_state_is_refused() -> None:
    """The former layout's learned channel projection after RevIN's inverse is one clear error."""
    model = PatchTST(16, 3, **SMALL)
    old = {
        **model.state_dict(),
        "channel_proj.weight": torch.zeros(1, 3),
        "channel_proj.bias": torch.zeros(1),
    }
    with pytest.raises(ValueError, match="former layout .*channel_proj.*retrain the model"):
        model.load_state_dict(old)


def test_transformer_learns_within_budget() -> None:
    # 300 steps of batch 64 (defaults: width 32, depth 2, 4 heads, learned positions): about
    # 0.013 test MSE against the naive 0.078 (threshold 0.039), ~2.7 s at one thread.
    check_learns(Transformer, steps=300)


def test_patchtst_learns_within_budget() -> None:
    # 300 steps of batch 64 (defaults: patches of 8 every 4 steps, width 32, depth 2, RevIN):
    # about 0.014 test MSE against the naive 0.078 (threshold 0.039), ~1.5 s at one thread.
    check_learns(PatchTST, steps=300)
