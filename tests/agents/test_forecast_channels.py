"""Target channels and RevIN's equivariance, for every registered forecaster.

Every model takes ``target_channels`` (the input channel of each target's own history) and checks
it; every model that normalises its input windows (``normalizes_input``: PatchTST with RevIN) must
forecast ``s * f + a`` from the window ``s * x + a`` (``s > 0``) on each target's channel, so a
level shift of the input reaches the forecast in full, not at some learned gain.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonrl.agents.forecast import FORECASTERS, PatchTST

SMALL: dict[str, dict[str, Any]] = {
    "dlinear": {"kernel_size": 5},
    "mlp": {"hidden": 8},
    "lstm": {"hidden": 8},
    "gru": {"hidden": 8},
    "tcn": {"width": 8, "depth": 2},
    "transformer": {"width": 8, "depth": 1, "heads": 2},
    "patchtst": {"width": 8, "depth": 1, "heads": 2},
    "mamba2": {"width": 8, "depth": 1, "d_state": 4, "headdim": 8},
}
"""Small hyperparameters per registered model (every name of ``FORECASTERS`` must be here)."""

NORMALISING = [
    ("patchtst", {}),
    ("patchtst", {"exogenous": True}),
    ("lstm", {"revin": True}),
    ("gru", {"revin": True}),
    ("tcn", {"revin": True}),
    ("transformer", {"revin": True}),
    ("mamba2", {"revin": True}),
    ("mlp", {"revin": True}),
    ("dlinear", {"revin": True}),
    ("patchtst", {"revin_anchor": "last"}),
    ("lstm", {"revin": True, "revin_anchor": "last"}),
    ("tcn", {"revin": True, "revin_anchor": "last"}),
    ("mlp", {"revin": True, "revin_anchor": "last"}),
    ("dlinear", {"revin": True, "revin_anchor": "last"}),
]
"""The models that normalise their inputs (PatchTST by default, every other model with
``revin=True``), with the variants tested."""


def test_every_model_is_listed() -> None:
    assert sorted(SMALL) == sorted(FORECASTERS)


def test_normalising_models_are_the_ones_tested() -> None:
    """Whoever can set ``normalizes_input`` is in :data:`NORMALISING` (so it gets the property
    test): PatchTST by default, and every model that takes ``revin``."""
    by_default = {n for n in FORECASTERS if FORECASTERS[n](16, 3, 2, 2, **SMALL[n]).normalizes_input}
    assert by_default == {"patchtst"}
    takes_revin = {n for n in FORECASTERS if "revin" in inspect.signature(FORECASTERS[n]).parameters}
    assert takes_revin | by_default == {n for n, _ in NORMALISING}
    for name, extra in NORMALISING:
        assert FORECASTERS[name](16, 3, 2, 2, **SMALL[name], **extra).normalizes_input
    assert not PatchTST(16, 3, revin=False, **SMALL["patchtst"]).normalizes_input


@pytest.mark.parametrize("name", ["lstm", "gru", "tcn", "transformer", "mamba2"])
def test_revin_leaves_the_causal_encoding_alone(name: str) -> None:
    """``revin=True`` changes the forecast only: the same weights give the same ``encode`` (bit
    for bit: it never normalises, so it stays causal for an agent's torso), and the forecast is
    the ``revin=False`` model's on the normalised window, de-normalised with the target channel's
    statistics (tolerance: f32 rounding of the two affine maps, 1e-5)."""
    torch.manual_seed(0)
    plain = FORECASTERS[name](16, 3, 2, 2, target_channels=(2, 0), **SMALL[name]).eval()
    torch.manual_seed(0)
    rev = FORECASTERS[name](16, 3, 2, 2, target_channels=(2, 0), revin=True, **SMALL[name]).eval()
    x = torch.randn(4, 16, 3) * 3.0 + 5.0
    with torch.no_grad():
        assert torch.equal(rev.encode(x), plain.encode(x))
        mean, std = x.mean(1, keepdim=True), (x.var(1, keepdim=True, unbiased=False) + 1e-5).sqrt()
        want = plain((x - mean) / std) * std[..., [2, 0]] + mean[..., [2, 0]]
        torch.testing.assert_close(rev(x), want, rtol=0, atol=1e-5)
    with pytest.raises(TypeError, match="revin must be a bool"):
        FORECASTERS[name](16, 3, revin=1, **SMALL[name])


def test_mamba2_step_refuses_revin() -> None:
    """Bar-by-bar stepping has no window to normalise: refused in one line."""
    model = FORECASTERS["mamba2"](16, 3, revin=True, **SMALL["mamba2"])
    with pytest.raises(ValueError, match="revin=False"):
        model.step(torch.randn(2, 3), model.initial_state(2))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_target_channels_are_checked(name: str) -> None:
    cls, kw = FORECASTERS[name], SMALL[name]
    assert cls(16, 3, 2, 2, **kw).target_channels == (0, 1)  # the default: the first T channels
    model = cls(16, 3, 2, 2, target_channels=[2, 0], **kw)
    assert model.target_channels == (2, 0)
    assert model(torch.randn(2, 16, 3)).shape == (2, 2, 2)
    for bad in ((0,), (1, 1), (0, 3), (-1, 0)):
        with pytest.raises(
            ValueError, match=r"target_channels=.* must be 2 distinct input channels in 0 .. 2"
        ):
            cls(16, 3, 2, 2, target_channels=bad, **kw)
    with pytest.raises(TypeError, match="target_channels must be ints"):
        cls(16, 3, 2, 2, target_channels=(0.0, 1), **kw)


@pytest.mark.parametrize(("name", "extra"), NORMALISING)
def test_forecast_shifts_and_scales_with_the_input(name: str, extra: dict[str, Any]) -> None:
    """``forecast(s * x + a) == s * forecast(x) + a`` on each target's channel, for the target
    channels alone and for every channel at once (hypothesis over ``a``, ``s``, the data).

    Tolerance: f32 rounding (a few ulps of ``|a| + s |x|`` through the mean and the inverse) and
    RevIN's ``eps = 1e-5`` inside the std, which the scale does not scale: a relative error of at
    most ``eps / (2 var) * |1 - 1 / s^2|`` on ``s * (f - mean)`` (<= 2e-4 for ``s >= 1/4`` and a
    window variance near 1): ``atol = 1e-4 * (1 + s * |f| + |a|)``, ``rtol = 0``.
    """
    torch.manual_seed(0)
    model = FORECASTERS[name](16, 4, 3, 2, target_channels=(3, 1), **SMALL[name], **extra).eval()
    if extra.get("exogenous"):  # a mix that does something (it starts at zero)
        with torch.no_grad():
            assert model.channel_mix is not None
            model.channel_mix.weight.normal_()
            model.channel_mix.bias.normal_()

    @settings(max_examples=25, deadline=None)
    @given(a=st.floats(-50.0, 50.0), s=st.floats(0.25, 8.0), seed=st.integers(0, 2**16), every=st.booleans())
    def prop(a: float, s: float, seed: int, every: bool) -> None:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(3, 16, 4, generator=g)
        moved = x.clone()
        chans = list(range(4)) if every else [3, 1]
        moved[..., chans] = s * x[..., chans] + a
        with torch.no_grad():
            f, got = model(x), model(moved)
        want = s * f + a
        tol = 1e-4 * (1 + s * f.abs() + abs(a))
        assert bool(((got - want).abs() <= tol).all()), float((got - want).abs().max())

    prop()


def test_a_level_shift_moves_the_patchtst_forecast_by_the_shift() -> None:
    """The issue's case: +2.0 on channel 0 of a fresh ``PatchTST(96, 3, 1, 1)`` moves the forecast
    by 2.0 (to f32 rounding of the shifted mean, ~1e-6), not by a learned gain."""
    torch.manual_seed(1)
    model = FORECASTERS["patchtst"](96, 3, 1, 1).eval()
    x = torch.randn(8, 96, 3)
    moved = x.clone()
    moved[..., 0] += 2.0
    with torch.no_grad():
        delta = model(moved) - model(x)
    torch.testing.assert_close(delta, torch.full_like(delta, 2.0), rtol=0, atol=1e-5)
    other = x.clone()
    other[..., 1] += 2.0  # a channel that is not the target's: channel independence ignores it
    with torch.no_grad():
        assert torch.equal(model(other), model(x))  # exact: channel 1 is never read (exogenous=False)


@pytest.mark.parametrize("name", ["mlp", "dlinear", "lstm", "patchtst"])
def test_revin_anchored_at_the_last_step_starts_from_the_naive_forecast(name: str) -> None:
    """``revin_anchor="last"`` centres each window on its last step, so a model whose normalised
    output is zero forecasts the last value of each target's channel (the naive forecast), however
    far the level has moved; ``"mean"`` would forecast the window's mean. The output layers are
    zeroed; tolerance: f32 rounding of ``0 * std + last`` (exact) plus the layers' zero bias."""
    extra = {} if name == "patchtst" else {"revin": True}
    model = FORECASTERS[name](
        16, 3, 2, 2, target_channels=(2, 0), revin_anchor="last", **extra, **SMALL[name]
    )
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        x = torch.randn(4, 16, 3) + torch.arange(16.0)[None, :, None] * 10.0  # a level far out of range
        want = x[:, -1:, [2, 0]].expand(-1, 2, -1)
        torch.testing.assert_close(model.eval()(x), want, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="revin_anchor must be one of mean, last"):
        FORECASTERS[name](16, 3, revin_anchor="median", **extra, **SMALL[name])
