"""Checks every forecaster test file runs on its models: shapes, parameter dtypes, causal encode,
bad input, learning. Each takes a ``make(**kw)`` that builds the model under test."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from forecast_task import make_task, naive_mse, train_and_test_mse
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonrl.agents.forecast import FORECASTERS, Forecaster

Make = Callable[..., Forecaster]


def check_registered(name: str, cls: type[Forecaster]) -> None:
    """``FORECASTERS[name]`` is ``cls`` and its ``name`` is ``name``."""
    assert FORECASTERS[name] is cls and cls.name == name


def check_shapes(make: Make, window: int = 16, features: int = 3) -> None:
    """``[B, W, F] -> [B, H, T]`` for a few batch, horizon and target sizes; ``encode`` of causal
    models is ``[B, W, encoding_dim]``."""
    for batch, horizon, targets in ((1, 1, 1), (5, 3, 2)):
        model = make(window=window, num_features=features, horizon=horizon, num_targets=targets)
        x = torch.randn(batch, window, features)
        assert model(x).shape == (batch, horizon, targets)
        if model.causal:
            assert model.encode(x).shape == (batch, window, model.encoding_dim)
            assert model.encoding_dim > 0


def check_dtypes(make: Make, dtype: torch.dtype) -> None:
    """Every parameter and floating buffer is ``dtype`` right after construction, the default is
    ``training_dtype`` (f32 on a CPU), and the forecast (and encoding) come out in ``dtype``."""
    model = make(window=16, num_features=3, horizon=2, num_targets=2, dtype=dtype)
    assert model.param_dtype == dtype
    for name, p in model.named_parameters():
        assert p.dtype == dtype, f"parameter {name} is {p.dtype}"
    for name, b in model.named_buffers():
        assert not b.is_floating_point() or b.dtype == dtype, f"buffer {name} is {b.dtype}"
    x = torch.randn(2, 16, 3, dtype=dtype)
    assert model(x).dtype == dtype
    if model.causal:
        assert model.encode(x).dtype == dtype
    if dtype == torch.float32:
        assert all(p.dtype == torch.float32 for p in make(window=16, num_features=3).parameters())


def check_causal(make: Make, window: int = 12, examples: int = 15) -> None:
    """Perturbing input steps ``> k`` never changes ``encode`` at steps ``<= k`` (bit for bit), and
    does change the last step (so the check can fail); hypothesis draws ``k`` and the data."""
    torch.manual_seed(0)
    model = make(window=window, num_features=3).eval()

    @settings(max_examples=examples)
    @given(k=st.integers(0, window - 2), seed=st.integers(0, 2**16))
    def prop(k: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(2, window, 3, generator=g)
        x2 = x.clone()
        x2[:, k + 1 :] = 10 * torch.randn(2, window - k - 1, 3, generator=g)
        with torch.no_grad():
            a, b = model.encode(x), model.encode(x2)
        assert torch.equal(a[:, : k + 1], b[:, : k + 1]), f"step <= {k} changed"
        assert not torch.equal(a[:, -1], b[:, -1])

    prop()


def check_bad_input(make: Make) -> None:
    """Wrong rank, window, feature count or dtype raise clear errors; so do bad sizes."""
    model = make(window=16, num_features=3)
    with pytest.raises(ValueError, match=r"input must be \[batch, 16, 3\]"):
        model(torch.randn(2, 15, 3))
    with pytest.raises(ValueError, match=r"input must be \[batch, 16, 3\]"):
        model(torch.randn(2, 16, 4))
    with pytest.raises(ValueError, match=r"input must be \[batch, 16, 3\]"):
        model(torch.randn(16, 3))
    with pytest.raises(TypeError, match="the parameters are torch.float32"):
        model(torch.randn(2, 16, 3, dtype=torch.bfloat16))
    if model.causal:
        with pytest.raises(ValueError, match=r"input must be"):
            model.encode(torch.randn(2, 17, 3))
    else:
        with pytest.raises(NotImplementedError, match="no causal per-step encoding"):
            model.encode(torch.randn(2, 16, 3))
    for bad in ({"window": 0}, {"horizon": -1}, {"num_targets": 1.5}, {"width": 0}):
        with pytest.raises(ValueError, match="must be a positive int"):
            make(**{"window": 16, "num_features": 3, **bad})


def check_learns(make: Make, steps: int, window: int = 32) -> float:
    """Trained ``steps`` AdamW minibatches on the sines + AR(2) task (one torch thread, as every
    CPU test), the test MSE is <= 0.5 x the naive forecast's; returns the MSE."""
    torch.set_num_threads(1)
    task = make_task(window=window)
    torch.manual_seed(0)
    model = make(window=window, num_features=2)
    mse = train_and_test_mse(model, task, steps=steps)
    assert mse <= 0.5 * naive_mse(task), f"test MSE {mse:.4f} vs naive {naive_mse(task):.4f}"
    return mse
