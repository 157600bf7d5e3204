"""TCN: dilated causal 1-D convolutions in residual blocks (Bai, Kolter and Koltun, 2018).

``x [B, W, F] -> Linear(F, C) -> depth x block -> [B, W, C]`` (the causal encoding), and the
forecast ``Linear(C, H * T)`` of the last step. Block ``i`` (dilation ``2**i``) is
``relu(x + conv2(relu(conv1(x))))`` with two causal convolutions of ``kernel_size`` taps: each is
left-padded by ``(kernel_size - 1) * dilation`` zeros, so step ``s`` reads steps ``<= s`` only.
The receptive field is ``1 + 2 (kernel_size - 1) (2**depth - 1)`` steps (61 for the defaults).

The encoder is its own module (:class:`TCNEncoder`): the agents' ``"tcn"`` torso
(:func:`tritonrl.agents.torsos.build_torso`) is this same encoder over an observation window.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tritonrl.agents.forecast.base import Forecaster, _positive
from tritonrl.toolkit.precision import training_dtype

__all__ = ["TCN", "TCNEncoder"]


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
    """The causal TCN encoding: ``x [B, L, F] -> [B, L, width]`` in the parameter dtype.

    Any length ``L`` works (the convolutions are padded); step ``s`` of the output depends on
    input steps ``<= s`` only.

    Args:
        num_features: ``F``.
        width: channels ``C`` of every block (the encoding size).
        depth: residual blocks (dilations ``1, 2, 4, ...``).
        kernel_size: taps of every convolution (>= 2).
        device: where the parameters live.
        dtype: the parameter dtype (default ``training_dtype(device)``).

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
            _positive(name, v)
        if _positive("kernel_size", kernel_size) < 2:
            raise ValueError(f"kernel_size must be >= 2, got {kernel_size}")
        factory: dict[str, Any] = {
            "device": device,
            "dtype": dtype if dtype is not None else training_dtype(device),
        }
        self.proj = nn.Linear(num_features, width, **factory)
        self.blocks = nn.ModuleList(_TCNBlock(width, kernel_size, 2**i, factory) for i in range(depth))
        self.out_features = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x).transpose(1, 2)  # [B, C, L]
        for block in self.blocks:
            h = block(h)
        return h.transpose(1, 2)  # [B, L, C]


class TCN(Forecaster):
    """Temporal convolutional network forecaster: :class:`TCNEncoder`, then a linear forecast of
    ``H x T`` values from the last step's encoding.

    Args:
        window, num_features, horizon, num_targets, device, dtype: see :class:`Forecaster`.
        width: channels of the blocks (``encoding_dim``).
        depth: residual blocks; with ``kernel_size`` they set the receptive field
            ``1 + 2 (kernel_size - 1) (2**depth - 1)`` (keep it >= ``window`` to see all of it).
        kernel_size: taps of every convolution (>= 2).

    Raises:
        ValueError: a size that is not a positive int, ``kernel_size < 2``.
    """

    name = "tcn"
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
        width: int = 32,
        depth: int = 4,
        kernel_size: int = 3,
    ) -> None:
        super().__init__(window, num_features, horizon, num_targets, device=device, dtype=dtype)
        self.encoder = TCNEncoder(
            num_features, width=width, depth=depth, kernel_size=kernel_size, **self.factory
        )
        self.head = nn.Linear(width, horizon * num_targets, **self.factory)
        self.encoding_dim = width

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, W, F] -> [B, W, width]``, causal over the steps.

        Raises:
            ValueError / TypeError: see :meth:`Forecaster.check_input`.
        """
        self.check_input(x)
        return self.encoder(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, W, F] -> [B, H, T]`` in the parameter dtype.

        Raises:
            ValueError / TypeError: see :meth:`Forecaster.check_input`.
        """
        h = self.encode(x)[:, -1]
        return self.to_forecast(self.head(h))
