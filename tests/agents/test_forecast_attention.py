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
    """Before the channel projection, channel f's forecast reads channel f only: changing channel 1
    leaves channel 0's (bit for bit) and changes channel 1's."""
    torch.manual_seed(0)
    model = PatchTST(16, 3, horizon=2, revin=revin, **{**SMALL, "heads": 2}).eval()
    seen: list[torch.Tensor] = []
    model.channel_proj.register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
    x = torch.randn(4, 16, 3)
    x2 = x.clone()
    x2[..., 1] = 5 * torch.randn(4, 16)
    with torch.no_grad():
        model(x)
        model(x2)
    a, b = seen  # [B, H, F] each
    assert torch.equal(a[..., 0], b[..., 0]) and torch.equal(a[..., 2], b[..., 2])
    assert not torch.equal(a[..., 1], b[..., 1])


def test_transformer_learns_within_budget() -> None:
    # 300 steps of batch 64 (defaults: width 32, depth 2, 4 heads, learned positions): about
    # 0.013 test MSE against the naive 0.078 (threshold 0.039), ~2.7 s at one thread.
    check_learns(Transformer, steps=300)


def test_patchtst_learns_within_budget() -> None:
    # 300 steps of batch 64 (defaults: patches of 8 every 4 steps, width 32, depth 2, RevIN):
    # about 0.014 test MSE against the naive 0.078 (threshold 0.039), ~1.5 s at one thread.
    check_learns(PatchTST, steps=300)
