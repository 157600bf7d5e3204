"""DLinear and MLP forecasters: shapes, parameter dtypes, the decomposition, bad input, learning, bf16.

Learning budget (one torch thread): 300 AdamW steps of 64 windows at lr 3e-3 on ``make_task()``
(W = 32, F = 2, H = T = 1); measured test MSE / naive MSE: DLinear 0.145, MLP 0.151 (bar 0.5),
about 0.2 s and 0.15 s each.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch
from forecast_model_checks import (
    check_bad_input,
    check_bf16_matches_f32,
    check_dtypes,
    check_learns,
    check_registered,
    check_shapes,
)
from tritonrl.agents.forecast.linear import MLP, DLinear

MODELS = [DLinear, MLP]
DTYPES = [torch.float32, torch.bfloat16]
SIZE_ARGS = {DLinear: (), MLP: ("hidden", "layers")}  # 0 for each: "must be a positive int"


def test_registered() -> None:
    check_registered("dlinear", DLinear)
    check_registered("mlp", MLP)
    assert not DLinear.causal and not MLP.causal


@pytest.mark.parametrize("cls", MODELS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_shapes_and_dtype(cls: type, dtype: torch.dtype) -> None:
    check_shapes(cls, sizes=[(1, 1, 1, 1, 1), (5, 17, 3, 4, 2)], dtype=dtype)


@pytest.mark.parametrize("cls", MODELS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_parameters_in_dtype_from_construction(cls: type, dtype: torch.dtype) -> None:
    check_dtypes(cls, dtype)


@pytest.mark.parametrize("cls", MODELS)
def test_bad_input(cls: type) -> None:
    """Bad windows and sizes (the shared check: also that neither model has ``encode``)."""
    check_bad_input(partial(cls, dtype=torch.float32), sizes=SIZE_ARGS[cls])


def test_bad_hyperparameters() -> None:
    with pytest.raises(ValueError, match="kernel_size must be odd"):
        DLinear(16, 2, kernel_size=4)
    with pytest.raises(ValueError, match="kernel_size must be a positive int"):
        DLinear(16, 2, kernel_size=-1)
    with pytest.raises(ValueError, match="dropout must be in"):
        MLP(16, 2, dropout=1.0)


def test_dlinear_decomposition() -> None:
    model = DLinear(32, 2, kernel_size=5, dtype=torch.float32)
    t = torch.arange(32, dtype=torch.float32)
    line = torch.stack([2.0 * t - 3.0, torch.full_like(t, 0.7)], dim=1)[None]  # [1, 32, 2]
    trend, seasonal = model.decompose(line)
    # a centred average of a line is the line, away from the padded ends (2 steps each side);
    # a constant is its own trend everywhere (the padding repeats it). f32 sums of 5 small values:
    # 1e-5 absolute is ~100 ulp at |x| <= 60.
    torch.testing.assert_close(trend[0, 2:-2], line[0, 2:-2], rtol=0, atol=1e-5)
    torch.testing.assert_close(trend[0, :, 1], line[0, :, 1], rtol=0, atol=1e-6)
    # the ends: the first bar's trend averages 3 copies of bar 0 with bars 1 and 2
    first = (3 * line[0, 0, 0] + line[0, 1, 0] + line[0, 2, 0]) / 5
    assert trend[0, 0, 0].item() == pytest.approx(first.item())
    torch.testing.assert_close(trend + seasonal, line, rtol=0, atol=1e-5)


def test_dlinear_kernel_longer_than_window() -> None:
    model = DLinear(4, 1, kernel_size=25, dtype=torch.float32)
    trend, _ = model.decompose(torch.tensor([[[1.0], [2.0], [3.0], [4.0]]]))
    # 12 pads each side; bar 0 averages 12 copies of bar 0, the 4 bars, 9 copies of bar 3
    assert trend[0, 0, 0].item() == pytest.approx((12 * 1 + 1 + 2 + 3 + 4 + 9 * 4) / 25)
    assert trend[0, 3, 0].item() == pytest.approx((9 * 1 + 1 + 2 + 3 + 4 + 12 * 4) / 25)


def test_dlinear_shared_maps() -> None:
    shared = DLinear(16, 3, 2, individual=False, dtype=torch.float32)
    own = DLinear(16, 3, 2, dtype=torch.float32)
    assert shared.seasonal_weight.shape == (1, 2, 16)
    assert own.seasonal_weight.shape == (3, 2, 16)
    # with shared maps, permuting the channels and the projection's columns alike gives the same output
    x = torch.randn(4, 16, 3)
    perm = torch.tensor([2, 0, 1])
    out = shared(x)
    with torch.no_grad():
        shared.project.weight.copy_(shared.project.weight[:, perm])
    torch.testing.assert_close(shared(x[:, :, perm]), out, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls", MODELS)
def test_learns(cls: type) -> None:
    check_learns(partial(cls, dtype=torch.float32), steps=300)


def test_dlinear_bf16_matches_f32() -> None:
    """bf16 parameters trained through f32 masters reach the f32 test MSE within 10%.

    Measured (seeds 0, 1, 2): bf16 / f32 - 1 = +0.1%, +0.4%, +0.5% (f32 MSE ~0.0113).
    """
    check_bf16_matches_f32(DLinear, steps=300)


def test_dlinear_anchored_at_the_last_step_starts_as_the_naive_forecast() -> None:
    """``revin=True, revin_anchor="last"``: zero maps and an identity projection onto each target's
    channel, so the untrained model forecasts each target's last value (exactly: ``0 * std + last``);
    the draws of the other inits are unchanged (the same generator state afterwards)."""
    torch.manual_seed(0)
    model = DLinear(12, 3, 2, 2, target_channels=(2, 0), revin=True, revin_anchor="last")
    after_naive = torch.rand(1)
    torch.manual_seed(0)
    DLinear(12, 3, 2, 2, target_channels=(2, 0))
    assert torch.equal(torch.rand(1), after_naive)
    x = torch.randn(5, 12, 3) * 4.0 + 30.0
    with torch.no_grad():
        assert torch.equal(model(x), x[:, -1:, [2, 0]].expand(-1, 2, -1))
