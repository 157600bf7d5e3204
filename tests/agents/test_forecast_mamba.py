"""The Mamba2 forecaster: shapes, dtypes, causal encode, bad input, learning (the chunked scan:
the torch reference on CPU, so sizes stay small), and rolling forward bar by bar with
``Mamba2Block.step`` equal to the scan over the window."""

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
from tritonrl.agents.forecast.mamba import Mamba2Forecaster

SMALL = {"width": 16, "depth": 2, "d_state": 8, "headdim": 8}
# f32 on CPU: the scan (chunked, conv by shifted sums) and the step (fused step, conv as one
# weighted sum) compute the same numbers in another order (a few ulps of O(1) values per block,
# as in tests/agents/test_mamba2_block.py). Measured through two residual blocks, the norms and
# the head: at most 2.4e-7 on forecasts of size ~1 (W = 7, 20, 64); 1e-5 leaves a 40x margin.
STEP_TOL = {"rtol": 1e-5, "atol": 1e-5}


def _make(**kw) -> Mamba2Forecaster:
    return Mamba2Forecaster(**{**SMALL, **kw})


def test_registered() -> None:
    check_registered("mamba2", Mamba2Forecaster)


def test_shapes() -> None:
    check_shapes(_make)


def test_default_chunk_fits_the_device() -> None:
    """On a CPU (the torch chunked scan) the default chunk is 16 at any window; elsewhere (the
    Triton scan; "meta" stands for a GPU here, no parameter is allocated) the power of two that
    fits the window, within [16, 64]; an explicit chunk wins everywhere."""
    windows = (4, 16, 17, 32, 100)
    assert [Mamba2Forecaster(w, 2).blocks[0].chunk_size for w in windows] == [16] * 5
    on_gpu = [Mamba2Forecaster(w, 2, device="meta").blocks[0].chunk_size for w in windows]
    assert on_gpu == [16, 16, 32, 32, 64]
    assert Mamba2Forecaster(32, 2, chunk_size=128).blocks[0].chunk_size == 128


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_parameter_dtypes_from_construction(dtype: torch.dtype) -> None:
    check_dtypes(_make, dtype)


def test_encode_is_causal() -> None:
    # a window of 20 over chunks of 16: steps on both sides of a chunk boundary
    check_causal(_make, window=20)


def test_bad_input() -> None:
    check_bad_input(_make)
    with pytest.raises(ValueError, match="multiple of headdim"):
        Mamba2Forecaster(16, 3, width=12, headdim=16)


@pytest.mark.parametrize("window", [7, 20])
def test_step_rolls_forward_to_the_scan(window: int) -> None:
    """W steps from the initial state give forward's forecast of that window (and each step t the
    forecast of the window's first t + 1 bars), within STEP_TOL."""
    torch.manual_seed(0)
    model = _make(window=window, num_features=3, horizon=2, num_targets=2).eval()
    x = torch.randn(4, window, 3)
    with torch.no_grad():
        full = model(x)
        enc = model.encode(x)
        state = model.initial_state(4)
        for t in range(window):
            y, state = model.step(x[:, t], state)
            want = model.head(enc[:, t]).view(4, 2, 2)
            torch.testing.assert_close(y, want, **STEP_TOL)
    torch.testing.assert_close(y, full, **STEP_TOL)
    assert all(s.ssm.dtype == torch.float32 for s in state)


def test_step_leaves_state_alone_unless_inplace() -> None:
    model = _make(window=8, num_features=3).eval()
    x = torch.randn(2, 3)
    with torch.no_grad():
        state = model.initial_state(2)
        y, new = model.step(x, state)
        assert all(torch.count_nonzero(s.ssm) == 0 for s in state)
        y2, same = model.step(x, state, inplace=True)
    assert torch.equal(y, y2) and same[0].ssm is state[0].ssm
    assert torch.equal(same[0].ssm, new[0].ssm)


def test_step_bad_input() -> None:
    model = _make(window=8, num_features=3)
    state = model.initial_state(2)
    with pytest.raises(ValueError, match=r"x_t must be \[batch, 3\]"):
        model.step(torch.randn(2, 4), state)
    with pytest.raises(TypeError, match="the parameters are torch.float32"):
        model.step(torch.randn(2, 3, dtype=torch.bfloat16), state)
    with pytest.raises(ValueError, match="list of 2 Mamba2State"):
        model.step(torch.randn(2, 3), state[:1])
    with pytest.raises(ValueError, match="state does not fit batch 3"):
        model.step(torch.randn(3, 3), state)


def test_learns_within_budget() -> None:
    # 100 steps of batch 64 (defaults: width 32, depth 2, chunk 16 on a CPU, W = 32), against the
    # naive forecast's 0.078 test MSE (threshold 0.039); the torch chunked scan at one thread.
    check_learns(Mamba2Forecaster, steps=100)
