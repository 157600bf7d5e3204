"""Convolutional torsos for pixel observations ``[B, C, H, W]``: Nature DQN, MinAtar, IMPALA.

Channels-last weights in the dtype given, no cast in ``forward`` (frames arrive scaled); layer
sizes: docs/pages/pixels.md ("Conv torsos").
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tritonrl.agents.nets.torsos import MLP, init_orthogonal_
from tritonrl.toolkit.precision import dtype_or_default

__all__ = ["CONV_KINDS", "ConvTorso", "conv_default_hidden"]

# kind -> (convolutions as (channels, kernel, stride), the linear layers after them by default)
_NATURE = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
_MINATAR = ((16, 3, 1),)
_IMPALA = (16, 32, 32)
_DEFAULT_HIDDEN = {"nature": (512,), "minatar": (128,), "impala": (256,)}
CONV_KINDS = tuple(_DEFAULT_HIDDEN)


def conv_default_hidden(kind: str) -> tuple[int, ...]:
    """The linear layers after the convolutions of ``kind`` when none are given."""
    return _DEFAULT_HIDDEN[kind]


class _ResBlock(nn.Module):
    """``x + conv(relu(conv(relu(x))))`` with 3x3 convolutions of ``channels``."""

    def __init__(self, channels: int, fk: dict[str, Any]) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1, **fk)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, **fk)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(F.relu(self.conv0(F.relu(x))))


class _ImpalaStage(nn.Module):
    """conv 3x3 -> max-pool 3x3 stride 2 (padding 1) -> two residual blocks."""

    def __init__(self, c_in: int, c_out: int, fk: dict[str, Any]) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1, **fk)
        self.res0 = _ResBlock(c_out, fk)
        self.res1 = _ResBlock(c_out, fk)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(self.conv(x), kernel_size=3, stride=2, padding=1)
        return self.res1(self.res0(x))


def _conv_out(size: int, kernel: int, stride: int, padding: int = 0) -> int:
    return (size + 2 * padding - kernel) // stride + 1


class ConvTorso(nn.Module):
    """Convolutions, flatten, then ``Linear -> ReLU`` layers: ``x [B, C, H, W]`` -> ``[B, out_features]``
    in the parameter dtype.

    Args:
        obs_shape: ``(C, H, W)``, channels first (stacked frames are channels).
        kind: one of `CONV_KINDS`.
        hidden: the linear layers after the convolutions; ``None``: the kind's default;
            ``()``: the flattened convolution features.
        orthogonal_gain: ``None``: PyTorch's default init (DQN); a number: orthogonal weights
            with that gain and zero biases (PPO).

    Raises:
        ValueError: ``obs_shape`` is not 3-D, an unknown ``kind``, a layer size below 1, or an
            image too small for the kind's convolutions.
    """

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        kind: str = "nature",
        *,
        hidden: tuple[int, ...] | None = None,
        orthogonal_gain: float | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if kind not in CONV_KINDS:
            raise ValueError(f"conv torso kind={kind!r} is unknown; choose one of {', '.join(CONV_KINDS)}")
        if len(obs_shape) != 3:
            raise ValueError(
                f"the {kind} torso needs image observations [C, H, W] (channels first), "
                f"got obs_shape={tuple(obs_shape)}"
            )
        c, h, w = (int(s) for s in obs_shape)
        fk: dict[str, Any] = {"device": device, "dtype": dtype_or_default(dtype, device)}
        self.kind = kind
        if kind == "impala":
            stages, c_in = [], c
            for c_out in _IMPALA:
                stages.append(_ImpalaStage(c_in, c_out, fk))
                c_in, h, w = c_out, _conv_out(h, 3, 2, 1), _conv_out(w, 3, 2, 1)
            self.convs = nn.ModuleList(stages)
        else:
            layers, c_in = [], c
            for c_out, k, s in _NATURE if kind == "nature" else _MINATAR:
                h, w = _conv_out(h, k, s), _conv_out(w, k, s)
                if h < 1 or w < 1:
                    raise ValueError(
                        f"obs_shape={tuple(obs_shape)} is too small for the {kind} torso's convolutions"
                    )
                layers.append(nn.Conv2d(c_in, c_out, k, stride=s, **fk))
                c_in = c_out
            self.convs = nn.ModuleList(layers)
        self.conv_features = c_in * h * w
        hidden = conv_default_hidden(kind) if hidden is None else tuple(hidden)
        self.mlp = MLP(self.conv_features, hidden, orthogonal_gain=orthogonal_gain, **fk)
        if orthogonal_gain is not None:
            for m in self.convs.modules():
                if isinstance(m, nn.Conv2d):
                    init_orthogonal_(m.weight, orthogonal_gain)
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)
        # channels-last weights: the layout oneDNN (CPU) and cuDNN (CUDA) run convolutions fastest in
        self.convs.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # torch's stub lacks it
        self.out_features = self.mlp.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "impala":
            for stage in self.convs:
                x = stage(x)
            x = F.relu(x)
        else:
            for conv in self.convs:
                x = F.relu(conv(x))
        return self.mlp(x.flatten(1))

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, conv_features={self.conv_features}, out_features={self.out_features}"
