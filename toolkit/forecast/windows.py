"""Forecasting windows over uploaded market bars (`WindowData`) and `load_windows` for
the three splits.

A window ending at row ``t`` holds the features of rows ``t - W + 1 .. t`` (training dtype, never
cast) and targets rows ``t + 1 .. t + H`` (f32), normalised with the TRAIN split's statistics
only; no input reads a later bar or a warm-up row. See docs/pages/forecasting.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tritonrl.toolkit.bars import FEATURES, compute_features, source_bars, split, upload

__all__ = [
    "CHANGE_TARGETS",
    "TARGET_MODES",
    "Normalizer",
    "WindowData",
    "check_length",
    "load_windows",
    "market_inputs",
    "resolve_target_mode",
    "target_series",
]

CHANGE_TARGETS = frozenset({"log_return", "return"})
"""Targets that are changes: their no-change forecast is 0. Every other target is a level (``close``,
``price_z``, ``volatility``, ...): its no-change forecast is the last observed value."""
TARGET_MODES = ("auto", "level", "change")
"""How a model's output is read (`WindowData.decode`): ``level``: as the normalised target
itself; ``change``: as the change from the window's last target value, in units of the train
split's change scale (level targets only); ``auto``: ``change`` for a level target with a change
scale and a model that does not normalise its inputs, else ``level``
([`resolve_target_mode`][tritonrl.toolkit.forecast.windows.resolve_target_mode])."""


def market_inputs(target: str) -> tuple[int, tuple[int, ...]]:
    """``(F, target_channels)`` of `load_windows`'s market windows for ``target``."""
    if target in FEATURES:
        return len(FEATURES), (FEATURES.index(target),)
    return len(FEATURES) + 1, (len(FEATURES),)


def target_series(data: Any, target: str = "log_return", host_features: Any = None) -> torch.Tensor:
    """The target column of ``data`` (a `MarketData`), ``[T]`` f32; a
    feature comes from the f32 ``host_features`` ``[T, F]`` (before the upload's cast) when given.

    Raises:
        ValueError: an unknown target, or a feature target of bf16 features without ``host_features``.
    """
    if target == "log_return":
        return data.log_return
    if target == "close":
        return data.close
    names = tuple(data.feature_names)
    if target not in names:
        raise ValueError(
            f"unknown target {target!r}; choose log_return, close or a feature: {', '.join(names)}"
        )
    col = names.index(target)
    if host_features is not None:
        host = torch.as_tensor(np.asarray(host_features, dtype=np.float32))
        if host.dim() != 2 or host.shape != (len(data), len(names)):
            raise ValueError(f"host_features must be [{len(data)}, {len(names)}], got {tuple(host.shape)}")
        return host[:, col].contiguous().to(data.device)
    if data.features.dtype != torch.float32:
        raise ValueError(
            f"target {target!r}: the features are {data.features.dtype}; pass host_features (the f32 "
            "compute_features array) so the target is not read from the rounded copy"
        )
    return data.features[:, col]


@dataclass(frozen=True)
class Normalizer:
    """``z = (y - mean) / std`` of a target series, from the training split only; for a level
    target also ``change_scale[h - 1]``, the RMS of ``z[t + h] - z[t]`` over the train windows."""

    mean: float
    std: float
    change_scale: tuple[float, ...] = ()

    @classmethod
    def from_train(
        cls, values: torch.Tensor, window: int, horizon: int, *, first: int = 0, changes: bool = False
    ) -> Normalizer:
        """Mean and std (f64 on the host) of exactly the train rows its windows forecast; with
        ``changes`` the ``change_scale`` of those windows too.

        Raises:
            ValueError: fewer than 2 such rows, or a constant target (std 0).
        """
        host = values.double().cpu()
        rows = host[first + window :]
        if rows.numel() < 2:
            raise ValueError(f"the train split has {rows.numel()} target rows, fewer than 2")
        mean, std = float(rows.mean()), float(rows.std(correction=0))
        if not (math.isfinite(std) and std > 0):
            raise ValueError(f"the target is constant over the train split (std {std}): nothing to forecast")
        scale: tuple[float, ...] = ()
        if changes:
            last = host[first + window - 1 : host.numel() - horizon]  # each train window's last value
            moves = [
                (host[first + window - 1 + h : host.numel() - horizon + h] - last) / std
                for h in range(1, horizon + 1)
            ]
            scale = tuple(max(float(m.square().mean().sqrt()), 1e-12) for m in moves)
        return cls(mean, std, scale)

    def to_dict(self) -> dict[str, Any]:
        """``{"mean", "std"}``, and ``"change_scale"`` (a list) when there is one."""
        out: dict[str, Any] = {"mean": self.mean, "std": self.std}
        if self.change_scale:
            out["change_scale"] = list(self.change_scale)
        return out


class WindowData:
    """The windows of one split: inputs ``[B, W, F]`` in the features' dtype, targets f32 ``[B, H, 1]``.

    Windows end at rows ``S + W - 1 .. T - 1 - H`` with ``S = data.first_defined``.

    Args:
        data: one split ([`MarketData`][tritonrl.toolkit.bars.MarketData], ``T`` rows).
        values: the split's target series, ``[T]`` f32 on ``data``'s device (default
            [`target_series`][tritonrl.toolkit.forecast.windows.target_series] of ``data``).
        normalizer: the train split's [`Normalizer`][tritonrl.toolkit.forecast.windows.Normalizer]; ``None``
            computes it from this split.
        split: a label for messages.
        target_channels: the input channel holding the target's own history (``None``: none).

    Raises:
        ValueError: ``W`` or ``H`` below 1, the split shorter than ``W + H`` rows, a non-finite
            feature or target, ``values`` of the wrong shape.
        TypeError: ``values`` not f32.
    """

    num_targets: int = 1
    """``T``: one target column (a `SeriesWindows` may hold more)."""
    target_channels: tuple[int, ...] | None = None
    """The input channel of each target's own history (``None``: no input holds it)."""
    _change_scale: torch.Tensor | None = None
    """``[H, 1]`` f32, the normaliser's ``change_scale`` (``None``: the output cannot be read as a change)."""

    def __init__(
        self,
        data: Any,
        window: int,
        horizon: int = 1,
        *,
        target: str = "log_return",
        values: torch.Tensor | None = None,
        normalizer: Normalizer | None = None,
        split: str = "train",
        target_channels: Sequence[int] | None = None,
    ) -> None:
        if window < 1 or horizon < 1:
            raise ValueError(f"window={window} and horizon={horizon} must be >= 1")
        n, first = len(data), data.first_defined
        if n - first < window + horizon:
            after = f" after the features' {first}-row warm-up" if first else ""
            raise ValueError(
                f"the {split} split of {data.name!r} has {n - first} rows{after}, fewer than window + "
                f"horizon = {window} + {horizon}: shorten --window or --horizon, or use a longer series"
            )
        values = target_series(data, target) if values is None else values
        if values.dtype != torch.float32:
            raise TypeError(f"target values must be float32, got {values.dtype}")
        if values.shape != (n,) or values.device != data.device:
            raise ValueError(f"target values must be [{n}] on {data.device}, got {tuple(values.shape)}")
        bad = torch.stack([(~torch.isfinite(data.features)).any(), (~torch.isfinite(values)).any()]).tolist()
        if bad[0] or bad[1]:
            what = "features" if bad[0] else f"target {target!r}"
            raise ValueError(f"the {split} split of {data.name!r} holds NaN or infinite {what}")
        self.data, self.window, self.horizon, self.target, self.split = data, window, horizon, target, split
        self.normalizer = normalizer or Normalizer.from_train(
            values, window, horizon, first=first, changes=target not in CHANGE_TARGETS
        )
        names = tuple(data.feature_names)
        if target_channels is None and target in names:
            target_channels = (names.index(target),)
        if target_channels is not None:
            target_channels = tuple(target_channels)
            if len(target_channels) != 1 or not 0 <= target_channels[0] < data.num_features:
                raise ValueError(
                    f"target_channels={target_channels} must be one of the {data.num_features} inputs"
                )
        self.target_channels = target_channels
        if self.normalizer.change_scale and target not in CHANGE_TARGETS:
            if len(self.normalizer.change_scale) != horizon:
                raise ValueError(
                    f"the normalizer's change_scale has {len(self.normalizer.change_scale)} steps, "
                    f"not horizon={horizon}"
                )
            self._change_scale = torch.tensor(self.normalizer.change_scale, device=data.device)[:, None]
        self.values, self.first = values, first
        self.y = (values - self.normalizer.mean) / self.normalizer.std  # [T] f32, normalised
        self.num_windows = n - first - window - horizon + 1
        # [N] last row of each window
        self.ends = torch.arange(first + window - 1, n - horizon, device=data.device)
        self._x = data.features.unfold(0, window, 1).transpose(
            1, 2
        )  # [T - W + 1, W, F] view, row i: i..i+W-1
        self._y = self.y.unfold(0, horizon, 1)  # [T - H + 1, H] view, row i: i..i+H-1

    @property
    def dtype(self) -> torch.dtype:
        """The inputs' dtype (the training dtype the features were uploaded in)."""
        return self.data.features.dtype

    @property
    def device(self) -> torch.device:
        """Where the windows live."""
        return self.data.device

    @property
    def num_features(self) -> int:
        """``F``."""
        return int(self.data.features.shape[1])

    def __len__(self) -> int:
        return self.num_windows

    def batch(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Windows ``idx`` ``[B]`` int64 as ``(x [B, W, F]`` features dtype, ``y [B, H, 1]`` f32)."""
        end = self.ends[idx]
        return self._x[end - (self.window - 1)], self._y[end + 1].unsqueeze(-1)

    def decode(self, idx: torch.Tensor, out: torch.Tensor, mode: str = "level") -> torch.Tensor:
        """A model's f32 output ``out [B, H, T]`` for windows ``idx`` as the normalised forecast:
        ``out`` (``"level"``) or ``naive(idx) + change_scale * out`` (``"change"``).

        Raises:
            ValueError: ``"change"`` without a change scale, or another mode.
        """
        if mode == "level":
            return out
        if mode != "change":
            raise ValueError(f"mode must be 'level' or 'change', got {mode!r}")
        if self._change_scale is None:
            raise ValueError(f"target {self.target!r} has no change scale to read a forecast as a change")
        return self.naive(idx) + out * self._change_scale

    def naive(self, idx: torch.Tensor) -> torch.Tensor:
        """The no-change forecast ``[B, H, 1]`` f32 (normalised): a zero change, or the last value."""
        if self.target in CHANGE_TARGETS:
            zero = -self.normalizer.mean / self.normalizer.std
            return torch.full((idx.shape[0], self.horizon, 1), zero, device=self.device)
        return self.y[self.ends[idx]][:, None, None].expand(-1, self.horizon, 1)

    def seasonal_naive(self, idx: torch.Tensor, season: int) -> torch.Tensor:
        """Each step ``h`` forecast by the value ``season * ceil(h / season)`` rows before it;
        ``[B, H, 1]`` f32 normalised. Raises ``ValueError`` for ``season`` outside ``1 .. W``."""
        if not 1 <= season <= self.window:
            raise ValueError(f"season={season} must lie between 1 and the window {self.window}")
        h = torch.arange(1, self.horizon + 1, device=self.device)
        back = h - season * torch.div(h + season - 1, season, rounding_mode="floor")  # <= 0
        return self.y[self.ends[idx][:, None] + back[None, :]].unsqueeze(-1)

    def train_mean(self, idx: torch.Tensor) -> torch.Tensor:
        """The training mean (0 once normalised), ``[B, H, 1]`` f32."""
        return torch.zeros(idx.shape[0], self.horizon, 1, device=self.device)


def resolve_target_mode(mode: str, data: WindowData, normalizes_input: bool = False) -> str:
    """``mode`` (one of `TARGET_MODES`) as ``"level"`` or ``"change"``.

    Raises:
        ValueError: an unknown mode, or ``"change"`` for data without a change scale.
    """
    if mode not in TARGET_MODES:
        raise ValueError(f"target_mode must be one of {', '.join(TARGET_MODES)}, got {mode!r}")
    can = data._change_scale is not None
    if mode == "change" and not can:
        raise ValueError(
            f"target_mode 'change' reads the forecast as a change of a level target; target "
            f"{data.target!r} of these windows has no change scale (a change target, or series windows)"
        )
    if mode == "auto":
        return "change" if can and not normalizes_input else "level"
    return mode


def check_length(bars: Any, window: int, horizon: int) -> None:
    """Raise ``ValueError`` unless ``bars`` are long enough for these windows (before any upload)."""
    if window < 1 or horizon < 1:
        raise ValueError(f"window={window} and horizon={horizon} must be >= 1")
    if len(bars) < window + horizon + 2:
        raise ValueError(
            f"{bars.name!r} has {len(bars)} bars, too few for window + horizon = {window} + {horizon} "
            "in each of three splits"
        )


def load_windows(
    source: Any,
    window: int,
    horizon: int = 1,
    *,
    target: str = "log_return",
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
    fractions: tuple[float, float, float] = (0.7, 0.15, 0.15),
) -> tuple[WindowData, WindowData, WindowData]:
    """Train, validation and test windows of a bar source (a ``market:`` spec string or
    [`Bars`][tritonrl.toolkit.bars.Bars]): upload once, split by time, normalise on train. A
    target that is not a feature (``close``) adds one input channel, its normalised level.

    Raises:
        ValueError: a bad source, target, sizes, or data.
    """
    bars = source_bars(source) if isinstance(source, str) else source
    check_length(bars, window, horizon)
    data = upload(bars, device, dtype=dtype)
    host = None if target in ("log_return", "close") else compute_features(bars)
    values = target_series(data, target, host)
    parts = split(data, window, fractions)
    norm: Normalizer | None = None
    if target not in data.feature_names:  # a level no feature holds (close): one more input channel
        norm = Normalizer.from_train(
            values[: len(parts[0])], window, horizon, first=parts[0].first_defined, changes=True
        )
        level = ((values - norm.mean) / norm.std).to(data.features.dtype)  # the one cast, at upload
        data = dataclasses.replace(
            data,
            features=torch.cat([data.features, level[:, None]], dim=1),
            feature_names=(*data.feature_names, target),
        )
        parts = split(data, window, fractions)
    out: list[WindowData] = []
    for label, part in zip(("train", "validation", "test"), parts, strict=True):
        vals = values[part.offset : part.offset + len(part)]
        norm = out[0].normalizer if out else norm
        out.append(
            WindowData(part, window, horizon, target=target, values=vals, normalizer=norm, split=label)
        )
    return out[0], out[1], out[2]
