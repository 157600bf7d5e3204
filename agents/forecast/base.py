"""What every forecaster is: a window of bars ``[B, W, F]`` in, a forecast ``[B, H, T]`` out.

Parameters in the dtype given, no cast in ``forward``; causal models also ``encode`` per step
(usable as an agent's torso). See docs/pages/forecasting.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
from torch import nn
from tritonrl.kernels.validate import check_int
from tritonrl.toolkit.precision import dtype_or_default

__all__ = [
    "REVIN_ANCHORS",
    "Forecaster",
    "check_revin_anchor",
    "check_target_channels",
    "window_location",
    "window_stats",
]

REVIN_EPS = 1e-5
"""Added to each window's variance before its square root (RevIN's epsilon)."""


REVIN_ANCHORS = ("mean", "last")
"""Where RevIN centres a window: its ``mean`` (the published RevIN) or its ``last`` step, so that a
zero normalised forecast is the naive (last value) forecast; a level that trends stays in reach."""


def check_revin_anchor(anchor: str) -> str:
    """``anchor`` if it is one of `REVIN_ANCHORS`; ``ValueError`` otherwise."""
    if anchor not in REVIN_ANCHORS:
        raise ValueError(f"revin_anchor must be one of {', '.join(REVIN_ANCHORS)}, got {anchor!r}")
    return anchor


def window_location(x: torch.Tensor, mean: torch.Tensor, anchor: str) -> torch.Tensor:
    """The centre RevIN subtracts from ``x [B, W, C]``: ``mean`` ``[B, 1, C]`` or the last step."""
    return mean if anchor == "mean" else x[:, -1:, :]


def window_stats(x: torch.Tensor, eps: float = REVIN_EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """RevIN's per-window, per-channel ``(mean, std)`` of ``x [B, W, C]``, each ``[B, 1, C]`` in
    ``x``'s dtype (``std = sqrt(var + eps)``, biased variance)."""
    mean = x.mean(dim=1, keepdim=True)
    return mean, torch.sqrt(x.var(dim=1, keepdim=True, unbiased=False) + eps)


def check_target_channels(
    target_channels: Sequence[int] | None, num_targets: int, num_features: int
) -> tuple[int, ...]:
    """``target_channels`` as a tuple of ``num_targets`` distinct channels in ``0 .. F - 1``
    (``None``: ``0 .. T - 1``).

    Raises:
        ValueError: another length, a repeated channel or one out of range.
        TypeError: not a sequence of ints.
    """
    if target_channels is None:
        target_channels = range(num_targets)
    if isinstance(target_channels, str | bytes) or not isinstance(target_channels, Sequence | range):
        raise TypeError(f"target_channels must be a sequence of ints, got {type(target_channels).__name__}")
    out = tuple(target_channels)
    if any(not isinstance(c, int) or isinstance(c, bool) for c in out):
        raise TypeError(f"target_channels must be ints, got {out!r}")
    if len(out) != num_targets or len(set(out)) != len(out) or any(not 0 <= c < num_features for c in out):
        raise ValueError(
            f"target_channels={out} must be {num_targets} distinct input channels in 0 .. {num_features - 1}"
        )
    return out


class Forecaster(nn.Module):
    """Base of the forecasters: sizes, dtype, device and the input check.

    Subclasses build layers with ``**self.factory`` and implement ``forward``; causal models set
    ``causal = True`` and implement ``encode(x) -> [B, W, D]`` (``D = self.encoding_dim``).

    Args:
        window: ``W``, bars per input window.
        num_features: ``F``, features per bar.
        horizon: ``H``, bars forecast ahead.
        num_targets: ``T``, target columns forecast per bar ahead.
        device: where the parameters live (default CPU).
        dtype: the parameter dtype (default ``training_dtype(device)``).
        target_channels: the input channel of each target's own history (default ``0 .. T - 1``).

    Raises:
        ValueError: a size that is not a positive int, bad ``target_channels``.
    """

    name: str = "forecaster"
    """The registry name (``--model``)."""
    causal: bool = False
    """``True``: `encode` is causal over the window's steps."""
    normalizes_input: bool = False
    """``True``: windows are RevIN-normalised, so target ``k``'s forecast shifts and scales with
    channel ``target_channels[k]``."""

    def __init__(
        self,
        window: int,
        num_features: int,
        horizon: int = 1,
        num_targets: int = 1,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        target_channels: Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        self.window = check_int("window", window, low=1)
        self.num_features = check_int("num_features", num_features, low=1)
        self.horizon = check_int("horizon", horizon, low=1)
        self.num_targets = check_int("num_targets", num_targets, low=1)
        self.target_channels = check_target_channels(target_channels, self.num_targets, self.num_features)
        dev = torch.device(device) if device is not None else torch.device("cpu")
        self.param_dtype = dtype_or_default(dtype, dev)
        self.factory: dict[str, Any] = {"device": dev, "dtype": self.param_dtype}
        self.encoding_dim = 0
        self.revin = False
        self.revin_anchor = "mean"

    def use_revin(self, revin: bool, anchor: str = "mean") -> None:
        """Turn RevIN on in `forward` (`revin_in`, `revin_out`), centred on each window's ``anchor``
        (`REVIN_ANCHORS`).

        Raises:
            TypeError: ``revin`` is not a bool.
            ValueError: an unknown ``anchor``.
        """
        if not isinstance(revin, bool):
            raise TypeError(f"revin must be a bool, got {revin!r}")
        self.revin_anchor = check_revin_anchor(anchor)
        self.revin = revin
        self.normalizes_input = revin
        if "channels" not in self._buffers:
            self.channels: torch.Tensor  # [T] int64: the targets' input channels
            chans = torch.tensor(self.target_channels, device=self.factory["device"])
            self.register_buffer("channels", chans, persistent=False)

    def revin_in(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``((x - loc) / std, loc, std)`` of a window ``x [B, W, F]``: ``loc`` its mean or its last
        step (``revin_anchor``), ``std`` as `window_stats`."""
        mean, std = window_stats(x)
        loc = window_location(x, mean, self.revin_anchor)
        return (x - loc) / std, loc, std

    def revin_out(self, y: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        """A normalised forecast ``y [B, H, T]`` in the window's units, target ``k`` with channel
        ``target_channels[k]``'s ``mean``/``std`` ``[B, 1, F]``."""
        return y * std.index_select(2, self.channels) + mean.index_select(2, self.channels)

    def last_step_forecast(self, x: torch.Tensor) -> torch.Tensor:
        """``self.head`` on the last step of `encode`, inside RevIN when on: ``x [B, W, F] ->
        [B, H, T]``; raises as [`check_input`][tritonrl.agents.forecast.base.Forecaster.check_input]."""
        head = cast("nn.Module", self.head)  # every sequence model names its head `head`
        if not self.revin:
            return self.to_forecast(head(self.encode(x)[:, -1]))
        self.check_input(x)
        xn, mean, std = self.revin_in(x)
        return self.revin_out(self.to_forecast(head(self.encode(xn)[:, -1])), mean, std)

    def check_input(self, x: torch.Tensor) -> None:
        """Raise unless ``x`` is ``[B, W, F]`` in the parameter dtype (no data read).

        Raises:
            ValueError: wrong rank or sizes.
            TypeError: another dtype than the parameters'.
        """
        if x.dim() != 3 or x.shape[1] != self.window or x.shape[2] != self.num_features:
            want = f"[batch, {self.window}, {self.num_features}]"
            raise ValueError(f"{self.name}: input must be {want}, got {tuple(x.shape)}")
        if x.dtype != self.param_dtype:
            raise TypeError(f"{self.name}: input is {x.dtype}, the parameters are {self.param_dtype}")

    def to_forecast(self, flat: torch.Tensor) -> torch.Tensor:
        """``flat [B, H * T]`` (a head's output) as the forecast ``[B, H, T]`` (a view, no copy)."""
        return flat.view(flat.shape[0], self.horizon, self.num_targets)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Per-step causal features ``[B, W, D]`` (sequence models only).

        Raises:
            NotImplementedError: this model has no causal per-step encoding.
        """
        raise NotImplementedError(f"{self.name} has no causal per-step encoding")
