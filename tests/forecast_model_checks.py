"""Checks every forecaster test file runs on its models: shapes, parameter dtypes, causal encode,
bad input, learning, bf16 against f32. Each takes a ``make(**kw)`` that builds the model under test
(a class, or a ``functools.partial`` of one with its small sizes)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from forecast_task import make_task, naive_mse, train_and_test_mse
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonrl.agents.forecast import FORECASTERS, Forecaster
from tritonrl.toolkit.precision import training_dtype

Make = Callable[..., Forecaster]

SIZES = ((1, 16, 3, 1, 1), (5, 16, 3, 3, 2))
"""``(batch, window, features, horizon, targets)`` :func:`check_shapes` tries by default."""


@contextmanager
def one_thread() -> Iterator[None]:
    """One torch thread inside (how the learning budgets were measured: the conftest sets it for
    every CPU test already), the previous count after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _dtype_kw(dtype: torch.dtype | None) -> dict[str, Any]:
    return {} if dtype is None else {"dtype": dtype}


def check_registered(name: str, cls: type[Forecaster]) -> None:
    """``FORECASTERS[name]`` is ``cls`` and its ``name`` is ``name``."""
    assert FORECASTERS[name] is cls and cls.name == name


def check_shapes(
    make: Make,
    sizes: Sequence[tuple[int, int, int, int, int]] = SIZES,
    dtype: torch.dtype | None = None,
    encoding_dim: int | None = None,
) -> None:
    """``[B, W, F] -> [B, H, T]`` (finite, in the parameter dtype) for each ``(B, W, F, H, T)`` of
    ``sizes``, parameters in ``dtype`` (``None``: the default). Causal models: ``encode`` is
    ``[B, W, encoding_dim]`` (``encoding_dim``: the expected value, else any positive one) in the
    parameter dtype, and the forecast is ``head`` on the last step's encoding, bit for bit."""
    for batch, window, features, horizon, targets in sizes:
        model = make(
            window=window, num_features=features, horizon=horizon, num_targets=targets, **_dtype_kw(dtype)
        )
        x = torch.randn(batch, window, features).to(model.param_dtype)
        out = model(x)
        assert out.shape == (batch, horizon, targets)
        assert out.dtype == model.param_dtype
        assert torch.isfinite(out.float()).all()
        if model.causal:
            assert model.encoding_dim > 0
            if encoding_dim is not None:
                assert model.encoding_dim == encoding_dim
            enc = model.encode(x)
            assert enc.shape == (batch, window, model.encoding_dim)
            assert enc.dtype == model.param_dtype
            last = model.head(enc[:, -1]).view(batch, horizon, targets)
            torch.testing.assert_close(out, last, rtol=0, atol=0)  # exact: forward is head(encode(x)[:, -1])


def check_dtypes(make: Make, dtype: torch.dtype) -> None:
    """Every parameter and floating buffer is ``dtype`` right after construction, the default is
    ``training_dtype`` (f32 on a CPU), and the forecast (and encoding) come out in ``dtype``."""
    model = make(window=16, num_features=3, horizon=2, num_targets=2, dtype=dtype)
    assert model.param_dtype == dtype
    params = dict(model.named_parameters())
    assert params, "no parameters"
    for name, p in params.items():
        assert p.dtype == dtype, f"parameter {name} is {p.dtype}"
    for name, b in model.named_buffers():
        assert not b.is_floating_point() or b.dtype == dtype, f"buffer {name} is {b.dtype}"
    x = torch.randn(2, 16, 3, dtype=dtype)
    assert model(x).dtype == dtype
    if model.causal:
        assert model.encode(x).dtype == dtype
    default = make(window=16, num_features=3)
    assert {p.dtype for p in default.parameters()} == {training_dtype(torch.device("cpu"))}


def check_causal(make: Make, window: int = 12, examples: int = 15, dtype: torch.dtype | None = None) -> None:
    """Perturbing input steps ``> k`` never changes ``encode`` at steps ``<= k`` (bit for bit), and
    does change the last step (so the check can fail); hypothesis draws ``k`` and the data
    (``examples`` of them), parameters in ``dtype`` (``None``: the default)."""
    torch.manual_seed(0)
    model = make(window=window, num_features=3, **_dtype_kw(dtype)).eval()

    @settings(max_examples=examples)
    @given(k=st.integers(0, window - 2), seed=st.integers(0, 2**16))
    def prop(k: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(2, window, 3, generator=g).to(model.param_dtype)
        x2 = x.clone()
        x2[:, k + 1 :] = (10 * torch.randn(2, window - k - 1, 3, generator=g)).to(model.param_dtype)
        with torch.no_grad():
            a, b = model.encode(x), model.encode(x2)
        assert torch.equal(a[:, : k + 1], b[:, : k + 1]), f"step <= {k} changed"
        assert not torch.equal(a[:, -1], b[:, -1])

    prop()


def check_bad_input(make: Make, sizes: Sequence[str] = ("width",)) -> None:
    """Wrong rank, window, feature count or dtype raise clear errors (from ``forward``, and from
    ``encode`` of a causal model; a model that is not causal has no ``encode``); so do a window,
    horizon or target count that is not a positive int, and 0 for each size argument in ``sizes``."""
    model = make(window=16, num_features=3)
    calls = (model, model.encode) if model.causal else (model,)
    if not model.causal:  # no per-step encoding: encode says so instead of returning something
        with pytest.raises(NotImplementedError, match="has no causal per-step encoding"):
            model.encode(torch.randn(2, 16, 3))
    for call in calls:
        with pytest.raises(ValueError, match=r"input must be \[batch, 16, 3\], got \(2, 15, 3\)"):
            call(torch.randn(2, 15, 3))  # wrong window
        with pytest.raises(ValueError, match=r"input must be \[batch, 16, 3\], got \(2, 16, 4\)"):
            call(torch.randn(2, 16, 4))  # wrong feature count
        with pytest.raises(ValueError, match=r"input must be \[batch, 16, 3\], got \(16, 3\)"):
            call(torch.randn(16, 3))  # no batch dim (nn.LSTM alone would take it as unbatched)
        with pytest.raises(TypeError, match="input is torch.bfloat16, the parameters are torch.float32"):
            call(torch.randn(2, 16, 3, dtype=torch.bfloat16))
    if model.causal:
        with pytest.raises(ValueError, match=r"input must be"):
            model.encode(torch.randn(2, 17, 3))
    else:
        assert model.causal is False
        with pytest.raises(NotImplementedError, match="no causal per-step encoding"):
            model.encode(torch.randn(2, 16, 3))
    bad: list[dict[str, Any]] = [{"window": 0}, {"horizon": -1}, {"horizon": 0}, {"num_targets": 1.5}]
    for kw in [*bad, *({name: 0} for name in sizes)]:
        (name,) = kw
        with pytest.raises(ValueError, match=f"{name} must be a positive int"):
            make(**{"window": 16, "num_features": 3, **kw})


def check_learns(make: Make, steps: int, window: int = 32) -> float:
    """Trained ``steps`` AdamW minibatches on the sines + AR(2) task (one torch thread, as every
    CPU test), the test MSE is <= 0.5 x the naive forecast's; returns the MSE."""
    with one_thread():
        task = make_task(window=window)
        torch.manual_seed(0)
        model = make(window=window, num_features=2)
        mse = train_and_test_mse(model, task, steps=steps)
    assert mse <= 0.5 * naive_mse(task), f"test MSE {mse:.4f} vs naive {naive_mse(task):.4f}"
    return mse


def check_bf16_matches_f32(make: Make, steps: int, window: int = 32) -> tuple[float, float]:
    """bf16 parameters trained through f32 masters reach the f32 test MSE within 10% on the task of
    :func:`check_learns` (same seed and steps for both; f32 itself <= 0.5 x naive); returns
    ``(f32, bf16)`` test MSEs."""
    mses = {}
    with one_thread():
        task = make_task(window=window)
        for dtype in (torch.float32, torch.bfloat16):
            torch.manual_seed(0)
            mses[dtype] = train_and_test_mse(
                make(window=window, num_features=2, dtype=dtype), task, steps=steps
            )
    f32, bf16 = mses[torch.float32], mses[torch.bfloat16]
    assert f32 <= 0.5 * naive_mse(task)
    assert abs(bf16 - f32) <= 0.10 * f32, (f32, bf16)
    return f32, bf16
