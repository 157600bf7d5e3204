"""The TCN encoder: dilated causal 1-D convolutions in residual blocks (Bai, Kolter and Koltun, 2018).

``x [B, L, F] -> Linear(F, C) -> depth x block -> [B, L, C]``; block ``i`` has dilation ``2**i``.
Run by the TCN forecaster and the agents' ``"tcn"`` torso.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tritonrl.kernels.validate import check_int
from tritonrl.toolkit.precision import dtype_or_default

__all__ = ["TCNEncoder"]


class _CausalConv(nn.Conv1d):
    """A 1-D convolution over ``[B, C, L]`` left-padded so output ``s`` sees inputs ``<= s``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pad = (self.kernel_size[0] - 1) * self.dilation[0]
        return super().forward(F.pad(x, (pad, 0)))


class _TCNBlock(nn.Module):
    """``relu(x + conv2(relu(conv1(x))))`` over ``[B, C, L]``, both convolutions causal."""

    def __init__(self, width: int, kernel_size: int, dilation: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.conv1 = _CausalConv(width, width, kernel_size, dilation=dilation, **factory)
        self.conv2 = _CausalConv(width, width, kernel_size, dilation=dilation, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.conv2(F.relu(self.conv1(x))))


class TCNEncoder(nn.Module):
    """The causal TCN encoding: ``x [B, L, F] -> [B, L, width]`` in the parameter dtype; any ``L``.

    Args:
        num_features: ``F``.
        width: channels ``C`` of every block (the encoding size).
        depth: residual blocks (dilations ``1, 2, 4, ...``).
        kernel_size: taps of every convolution (>= 2).

    Raises:
        ValueError: a size that is not a positive int, ``kernel_size < 2``.
    """

    def __init__(
        self,
        num_features: int,
        *,
        width: int = 32,
        depth: int = 4,
        kernel_size: int = 3,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        for name, v in (("num_features", num_features), ("width", width), ("depth", depth)):
            check_int(name, v, low=1)
        if check_int("kernel_size", kernel_size, low=1) < 2:
            raise ValueError(f"kernel_size must be >= 2, got {kernel_size}")
        factory: dict[str, Any] = {
            "device": device,
            "dtype": dtype_or_default(dtype, device),
        }
        self.proj = nn.Linear(num_features, width, **factory)
        self.blocks = nn.ModuleList(_TCNBlock(width, kernel_size, 2**i, factory) for i in range(depth))
        self.out_features = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x).transpose(1, 2)  # [B, C, L]
        for block in self.blocks:
            h = block(h)
        return h.transpose(1, 2)  # [B, L, C]
