"""DLinear and MLP forecasters: shapes, parameter dtypes, the decomposition, bad input, learning, bf16.

Learning budget (one torch thread): 300 AdamW steps of 64 windows at lr 3e-3 on ``make_task()``
(W = 32, F = 2, H = T = 1); measured test MSE / naive MSE: DLinear 0.145, MLP 0.151 (bar 0.5),
about 0.2 s and 0.15 s each.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from forecast_task import ForecastTask, make_task, naive_mse, train_and_test_mse
from tritonrl.agents.forecast import FORECASTERS
from tritonrl.agents.forecast.linear import MLP, DLinear
from tritonrl.toolkit.precision import training_dtype

MODELS = [DLinear, MLP]
DTYPES = [torch.float32, torch.bfloat16]


@pytest.fixture
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def task() -> ForecastTask:
    return make_task()


def test_registered() -> None:
    assert FORECASTERS["dlinear"] is DLinear
    assert FORECASTERS["mlp"] is MLP


@pytest.mark.parametrize("cls", MODELS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("batch", "window", "features", "horizon", "targets"), [(1, 1, 1, 1, 1), (5, 17, 3, 4, 2)]
)
def test_shapes_and_dtype(
    cls: type, dtype: torch.dtype, batch: int, window: int, features: int, horizon: int, targets: int
) -> None:
    model = cls(window, features, horizon, targets, dtype=dtype)
    out = model(torch.randn(batch, window, features).to(dtype))
    assert out.shape == (batch, horizon, targets)
    assert out.dtype == dtype
    assert torch.isfinite(out.float()).all()


@pytest.mark.parametrize("cls", MODELS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_parameters_in_dtype_from_construction(cls: type, dtype: torch.dtype) -> None:
    model = cls(16, 3, 2, 2, dtype=dtype)
    params = dict(model.named_parameters())
    assert params, "no parameters"
    assert {name: p.dtype for name, p in params.items()} == dict.fromkeys(params, dtype)
    default = cls(16, 3, 2, 2)
    assert {p.dtype for p in default.parameters()} == {training_dtype(torch.device("cpu"))}


@pytest.mark.parametrize("cls", MODELS)
def test_not_causal_no_encode(cls: type) -> None:
    model = cls(8, 2)
    assert model.causal is False
    with pytest.raises(NotImplementedError, match="no causal per-step encoding"):
        model.encode(torch.randn(1, 8, 2))


@pytest.mark.parametrize("cls", MODELS)
def test_bad_input(cls: type) -> None:
    model = cls(8, 2, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"input must be \[batch, 8, 2\], got \(3, 7, 2\)"):
        model(torch.randn(3, 7, 2))  # wrong window
    with pytest.raises(ValueError, match="got \\(3, 8, 3\\)"):
        model(torch.randn(3, 8, 3))  # wrong feature count
    with pytest.raises(ValueError, match="got \\(8, 2\\)"):
        model(torch.randn(8, 2))  # no batch dim
    with pytest.raises(TypeError, match="input is torch.bfloat16, the parameters are torch.float32"):
        model(torch.randn(3, 8, 2, dtype=torch.bfloat16))


def test_bad_hyperparameters() -> None:
    with pytest.raises(ValueError, match="window must be a positive int"):
        DLinear(0, 2)
    with pytest.raises(ValueError, match="kernel_size must be odd"):
        DLinear(16, 2, kernel_size=4)
    with pytest.raises(ValueError, match="kernel_size must be a positive int"):
        DLinear(16, 2, kernel_size=-1)
    with pytest.raises(ValueError, match="hidden must be a positive int"):
        MLP(16, 2, hidden=0)
    with pytest.raises(ValueError, match="layers must be a positive int"):
        MLP(16, 2, layers=0)
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
def test_learns(cls: type, task: ForecastTask, one_thread: None) -> None:
    torch.manual_seed(0)
    model = cls(32, 2, dtype=torch.float32)
    mse = train_and_test_mse(model, task, steps=300)
    assert mse <= 0.5 * naive_mse(task), (cls.name, mse, naive_mse(task))


def test_dlinear_bf16_matches_f32(task: ForecastTask, one_thread: None) -> None:
    """bf16 parameters trained through f32 masters reach the f32 test MSE within 10%.

    Measured (seeds 0, 1, 2): bf16 / f32 - 1 = +0.1%, +0.4%, +0.5% (f32 MSE ~0.0113).
    """
    mses = {}
    for dtype in DTYPES:
        torch.manual_seed(0)
        mses[dtype] = train_and_test_mse(DLinear(32, 2, dtype=dtype), task, steps=300)
    f32, bf16 = mses[torch.float32], mses[torch.bfloat16]
    assert f32 <= 0.5 * naive_mse(task)
    assert abs(bf16 - f32) <= 0.10 * f32, (f32, bf16)
