"""Attention forecasters: a causal Transformer encoder, and PatchTST (Nie et al., 2023).

Both use `tritonrl.agents.nets.torsos.AttentionBlock`, the package's one self-attention.
See docs/pages/forecasting.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from tritonrl.agents.forecast.base import Forecaster, check_revin_anchor, window_location, window_stats
from tritonrl.agents.nets.torsos import AttentionBlock
from tritonrl.kernels.validate import check_int

__all__ = ["POSITIONS", "PatchTST", "Transformer"]

POSITIONS = ("learned", "sinusoidal")


def _check_heads(width: int, heads: int) -> None:
    check_int("width", width, low=1)
    check_int("heads", heads, low=1)
    if width % heads:
        raise ValueError(f"width={width} must be divisible by heads={heads}")


def _learned_positions(length: int, width: int, factory: dict[str, Any]) -> nn.Parameter:
    """``[length, width]`` drawn N(0, 0.02^2) in f32 and rounded once into the parameter dtype."""
    init = torch.randn(length, width, device=factory["device"], dtype=torch.float32) * 0.02
    return nn.Parameter(init.to(factory["dtype"]))


def _sinusoids(length: int, width: int, factory: dict[str, Any]) -> torch.Tensor:
    """The fixed ``[length, width]`` sin/cos positions, computed in f32, rounded once to ``dtype``."""
    pos = torch.arange(length, device=factory["device"], dtype=torch.float32)[:, None]
    freq = torch.exp(
        torch.arange(0, width, 2, device=factory["device"], dtype=torch.float32)
        * (-math.log(10000.0) / width)
    )
    table = torch.zeros(length, width, device=factory["device"], dtype=torch.float32)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)[:, : width // 2]
    return table.to(factory["dtype"])


class Transformer(Forecaster):
    """Causal Transformer encoder forecaster (forecast from the last step's encoding).

    Args:
        window, num_features, horizon, num_targets, device, dtype, target_channels: see
            [`Forecaster`][tritonrl.agents.forecast.base.Forecaster].
        width: model width (``encoding_dim``); a multiple of ``heads``.
        depth: attention blocks.
        heads: attention heads.
        positions: ``"learned"`` (a parameter ``[W, width]``) or ``"sinusoidal"`` (a fixed buffer).
        revin: RevIN around the forecast
            ([`Forecaster.use_revin`][tritonrl.agents.forecast.base.Forecaster.use_revin]).
        revin_anchor: RevIN's centre, each window's ``"mean"`` or its ``"last"`` step.

    Raises:
        ValueError: a size that is not a positive int, ``width % heads``, unknown ``positions``.
    """

    name = "transformer"
    causal = True

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
        width: int = 32,
        depth: int = 2,
        heads: int = 4,
        positions: str = "learned",
        revin: bool = False,
        revin_anchor: str = "mean",
    ) -> None:
        super().__init__(
            window,
            num_features,
            horizon,
            num_targets,
            device=device,
            dtype=dtype,
            target_channels=target_channels,
        )
        _check_heads(width, heads)
        check_int("depth", depth, low=1)
        if positions not in POSITIONS:
            raise ValueError(f"positions={positions!r} is unknown; choose one of {', '.join(POSITIONS)}")
        fk = self.factory
        self.embed = nn.Linear(num_features, width, **fk)
        self.pos: torch.Tensor
        if positions == "learned":
            self.pos = _learned_positions(window, width, fk)
        else:
            self.register_buffer("pos", _sinusoids(window, width, fk), persistent=False)
        self.blocks = nn.Sequential(
            *[AttentionBlock(width, heads, "rmsnorm", False, fk["device"], fk["dtype"]) for _ in range(depth)]
        )
        self.out_norm = nn.RMSNorm(width, eps=1e-6, **fk)
        self.head = nn.Linear(width, horizon * num_targets, **fk)
        self.encoding_dim = width
        self.use_revin(revin, revin_anchor)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, W, F] -> [B, W, width]``, causal; raises as `Forecaster.check_input`."""
        self.check_input(x)
        return self.out_norm(self.blocks(self.embed(x) + self.pos))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, W, F] -> [B, H, T]`` in the parameter dtype; raises as `Forecaster.check_input`."""
        return self.last_step_forecast(x)


class PatchTST(Forecaster):
    """PatchTST: patches of each channel, a shared Transformer encoder, a flatten head per channel.

    Args:
        window, num_features, horizon, num_targets, device, dtype, target_channels: see
            [`Forecaster`][tritonrl.agents.forecast.base.Forecaster].
        patch_len: steps per patch (<= ``window``).
        stride: steps between patch starts.
        width: model width (a multiple of ``heads``).
        depth: attention blocks.
        heads: attention heads.
        revin: normalise each channel per window before the encoder, undo it on the forecast.
        revin_anchor: RevIN's centre, each window's ``"mean"`` or its ``"last"`` step.
        exogenous: also encode the non-target channels and add a learned mix of every channel's
            head output to each target's (``False``: channel independence).

    Raises:
        ValueError: a size that is not a positive int, ``patch_len > window``, ``width % heads``,
            bad ``target_channels``; a state dict with the old ``channel_proj`` layout.
    """

    name = "patchtst"
    causal = False

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
        patch_len: int = 8,
        stride: int = 4,
        width: int = 32,
        depth: int = 2,
        heads: int = 4,
        revin: bool = True,
        revin_anchor: str = "mean",
        exogenous: bool = False,
    ) -> None:
        super().__init__(
            window,
            num_features,
            horizon,
            num_targets,
            device=device,
            dtype=dtype,
            target_channels=target_channels,
        )
        check_int("patch_len", patch_len, low=1)
        check_int("stride", stride, low=1)
        check_int("depth", depth, low=1)
        _check_heads(width, heads)
        if patch_len > window:
            raise ValueError(f"patch_len={patch_len} must be <= window={window}")
        fk = self.factory
        self.patch_len, self.stride, self.revin, self.exogenous = patch_len, stride, revin, exogenous
        self.normalizes_input = bool(revin)
        self.revin_anchor = check_revin_anchor(revin_anchor)
        self.num_patches = (window - patch_len) // stride + 1
        self.start = window - patch_len - (self.num_patches - 1) * stride  # steps dropped in front
        self.embed = nn.Linear(patch_len, width, **fk)
        self.pos = _learned_positions(self.num_patches, width, fk)
        self.blocks = nn.Sequential(
            *[
                AttentionBlock(width, heads, "rmsnorm", False, fk["device"], fk["dtype"], causal=False)
                for _ in range(depth)
            ]
        )
        self.out_norm = nn.RMSNorm(width, eps=1e-6, **fk)
        self.flatten_head = nn.Linear(self.num_patches * width, horizon, **fk)
        self.channel_mix: nn.Linear | None = None
        if exogenous:  # zero at initialisation: the published channel-independent forecast
            self.channel_mix = nn.Linear(num_features, num_targets, **fk)
            nn.init.zeros_(self.channel_mix.weight)
            nn.init.zeros_(self.channel_mix.bias)
        self.channels: torch.Tensor  # [T] int64: the targets' input channels
        self.register_buffer(
            "channels", torch.tensor(self.target_channels, device=fk["device"]), persistent=False
        )
        self.revin_eps = 1e-5
        self.register_load_state_dict_pre_hook(_refuse_channel_proj)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, W, F] -> [B, H, T]`` in the parameter dtype; raises as `Forecaster.check_input`."""
        self.check_input(x)
        if not self.exogenous:
            x = x.index_select(2, self.channels)  # [B, W, T]: only the targets' own channels
        b, c = x.shape[0], x.shape[2]
        if self.revin:
            mean, std = window_stats(x, self.revin_eps)  # [B, 1, C] each
            mean = window_location(x, mean, self.revin_anchor)  # the centre: the mean or the last step
            x = (x - mean) / std
        series = x[:, self.start :].transpose(1, 2)  # [B, C, W']
        patches = series.unfold(-1, self.patch_len, self.stride)  # [B, C, Np, P]
        h = self.embed(patches.reshape(b * c, self.num_patches, self.patch_len)) + self.pos
        h = self.out_norm(self.blocks(h))  # [B*C, Np, width]
        y = self.flatten_head(h.flatten(1)).view(b, c, self.horizon).transpose(1, 2)  # [B, H, C]
        if self.channel_mix is not None:  # every channel's output mixed in, before the inverse
            y_all = y
            y = y_all.index_select(2, self.channels) + self.channel_mix(y_all)  # [B, H, T]
            if self.revin:
                mean, std = mean.index_select(2, self.channels), std.index_select(2, self.channels)
        if self.revin:
            y = y * std + mean  # each target's own channel statistics, after every learned layer
        return y  # [B, H, T]


def _refuse_channel_proj(
    module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any
) -> None:
    """A state-dict pre-hook: refuse the former PatchTST layout in one line."""
    if f"{prefix}channel_proj.weight" in state_dict:
        raise ValueError(
            "this PatchTST state comes from the former layout (a learned channel projection after "
            "RevIN's inverse, channel_proj), which no longer exists: retrain the model"
        )
