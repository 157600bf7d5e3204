"""TCN forecaster: dilated causal 1-D convolutions in residual blocks (Bai, Kolter and Koltun, 2018).

The encoder is `tritonrl.agents.nets.tcn.TCNEncoder`; receptive field
``1 + 2 (kernel_size - 1) (2**depth - 1)`` steps.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from tritonrl.agents.forecast.base import Forecaster
from tritonrl.agents.nets.tcn import TCNEncoder

__all__ = ["TCN", "TCNEncoder"]


class TCN(Forecaster):
    """Temporal convolutional network forecaster: `TCNEncoder`, then a linear forecast of
    ``H x T`` values from the last step's encoding.

    Args:
        window, num_features, horizon, num_targets, device, dtype, target_channels: see
            [`Forecaster`][tritonrl.agents.forecast.base.Forecaster].
        width: channels of the blocks (``encoding_dim``).
        depth: residual blocks (keep the receptive field >= ``window``).
        kernel_size: taps of every convolution (>= 2).
        revin: RevIN around the forecast
            ([`Forecaster.use_revin`][tritonrl.agents.forecast.base.Forecaster.use_revin]).
        revin_anchor: RevIN's centre, each window's ``"mean"`` or its ``"last"`` step.

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
        target_channels: Sequence[int] | None = None,
        width: int = 32,
        depth: int = 4,
        kernel_size: int = 3,
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
        self.encoder = TCNEncoder(
            num_features, width=width, depth=depth, kernel_size=kernel_size, **self.factory
        )
        self.head = nn.Linear(width, horizon * num_targets, **self.factory)
        self.encoding_dim = width
        self.use_revin(revin, revin_anchor)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, W, F] -> [B, W, width]``, causal; raises as `Forecaster.check_input`."""
        self.check_input(x)
        return self.encoder(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, W, F] -> [B, H, T]`` in the parameter dtype; raises as `Forecaster.check_input`."""
        return self.last_step_forecast(x)
