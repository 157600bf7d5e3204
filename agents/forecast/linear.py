"""Window-level forecasters without recurrence: DLinear (Zeng et al., 2023) and an MLP.

Neither is causal over the window, so neither has ``encode``. See docs/pages/forecasting.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from tritonrl.agents.forecast.base import Forecaster, check_revin_anchor
from tritonrl.kernels.validate import check_int

__all__ = ["MLP", "DLinear"]


class DLinear(Forecaster):
    """Trend/seasonal decomposition, one linear map per part over the window, a channel mix to targets.

    Args:
        window, num_features, horizon, num_targets, device, dtype, target_channels: see
            [`Forecaster`][tritonrl.agents.forecast.base.Forecaster].
        kernel_size: steps of the trend's moving average (odd, >= 1; ends padded by repetition).
        individual: one pair of ``W -> H`` maps per channel (``True``) or one shared pair.
        revin: RevIN around the forecast
            ([`Forecaster.use_revin`][tritonrl.agents.forecast.base.Forecaster.use_revin]).
        revin_anchor: RevIN's centre, each window's ``"mean"`` or its ``"last"`` step (with ``revin`` and
            ``"last"`` the untrained model is the naive forecast).

    Shapes: ``forward(x [B, W, F]) -> [B, H, T]``, both in the parameter dtype.

    Raises:
        ValueError: a size that is not a positive int, or an even ``kernel_size``.
    """

    name = "dlinear"

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
        kernel_size: int = 25,
        individual: bool = True,
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
        self.kernel_size = check_int("kernel_size", kernel_size, low=1)
        if kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd (a centred moving average), got {kernel_size}")
        self.individual = bool(individual)
        channels = num_features if self.individual else 1
        # nn.Linear's default init (uniform in +-1/sqrt(fan_in)), drawn directly in the parameter
        # dtype: a uniform draw has no init math to lose in bf16.
        bound = 1.0 / math.sqrt(window)
        self.seasonal_weight = nn.Parameter(
            torch.empty(channels, horizon, window, **self.factory).uniform_(-bound, bound)
        )
        self.trend_weight = nn.Parameter(
            torch.empty(channels, horizon, window, **self.factory).uniform_(-bound, bound)
        )
        # one bias per (channel, horizon step): the paper's two Linear biases only ever add up
        self.bias = nn.Parameter(torch.empty(channels, horizon, **self.factory).uniform_(-bound, bound))
        self.project = nn.Linear(num_features, num_targets, **self.factory)
        self.revin_anchor = check_revin_anchor(revin_anchor)
        if revin is not False:  # off: no `channels` buffer, the model as it always was
            self.use_revin(revin, revin_anchor)
        if revin and revin_anchor == "last":
            self._start_naive()

    def _start_naive(self) -> None:
        """Zero maps and bias, and a projection that passes each target's own channel: with RevIN
        centred on the last step the untrained model is the naive forecast, which training improves
        (from the random start it lost to naive on short series)."""
        with torch.no_grad():
            for p in (
                self.seasonal_weight,
                self.trend_weight,
                self.bias,
                self.project.weight,
                self.project.bias,
            ):
                p.zero_()
            for k, c in enumerate(self.target_channels):
                self.project.weight[k, c] = 1.0

    def decompose(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [B, W, F]`` -> ``(trend, seasonal)``, each ``[B, W, F]``, summing to ``x`` up to rounding;
        raises as [`check_input`][tritonrl.agents.forecast.base.Forecaster.check_input]."""
        self.check_input(x)
        half = (self.kernel_size - 1) // 2
        series = x.transpose(1, 2)  # [B, F, W]
        padded = torch.cat(
            [series[:, :, :1].expand(-1, -1, half), series, series[:, :, -1:].expand(-1, -1, half)], dim=2
        )  # [B, F, W + kernel_size - 1]
        trend = F.avg_pool1d(padded, self.kernel_size, stride=1).transpose(1, 2)  # [B, W, F]
        return trend, x - trend

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, W, F] -> [B, H, T]`` in the parameter dtype; raises as `Forecaster.check_input`."""
        if self.revin:
            self.check_input(x)
            xn, mean, std = self.revin_in(x)
            return self.revin_out(self._linear(xn), mean, std)
        return self._linear(x)

    def _linear(self, x: torch.Tensor) -> torch.Tensor:
        """The decomposition and its two linear maps, ``[B, W, F] -> [B, H, T]``."""
        trend, seasonal = self.decompose(x)
        # per channel c: out[b, h, c] = sum_w weight[c, h, w] * part[b, w, c] + bias[c, h]
        # (with individual=False the single channel's maps broadcast over every c)
        out = torch.einsum("bwc,chw->bhc", seasonal, self.seasonal_weight.expand(self.num_features, -1, -1))
        out = out + torch.einsum("bwc,chw->bhc", trend, self.trend_weight.expand(self.num_features, -1, -1))
        out = out + self.bias.transpose(0, 1)  # [H, C] over [B, H, F]
        return self.project(out)  # [B, H, F] -> [B, H, T]


class MLP(Forecaster):
    """The flattened window through ``layers`` hidden layers to ``H * T`` outputs.

    Args:
        window, num_features, horizon, num_targets, device, dtype, target_channels: see
            [`Forecaster`][tritonrl.agents.forecast.base.Forecaster].
        hidden: units per hidden layer.
        layers: hidden layers (``Linear`` + GELU + dropout each), >= 1.
        dropout: dropout probability after each hidden layer, in ``[0, 1)``.
        revin: RevIN around the forecast
            ([`Forecaster.use_revin`][tritonrl.agents.forecast.base.Forecaster.use_revin]).
        revin_anchor: RevIN's centre, each window's ``"mean"`` or its ``"last"`` step.

    Raises:
        ValueError: a size that is not a positive int, or ``dropout`` outside ``[0, 1)``.
    """

    name = "mlp"

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
        hidden: int = 128,
        layers: int = 2,
        dropout: float = 0.0,
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
        check_int("hidden", hidden, low=1)
        check_int("layers", layers, low=1)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        blocks: list[nn.Module] = []
        width = window * num_features
        for _ in range(layers):
            blocks += [nn.Linear(width, hidden, **self.factory), nn.GELU(), nn.Dropout(dropout)]
            width = hidden
        blocks.append(nn.Linear(width, horizon * num_targets, **self.factory))
        self.net = nn.Sequential(*blocks)
        self.revin_anchor = check_revin_anchor(revin_anchor)
        if revin is not False:  # off: no `channels` buffer, the model as it always was
            self.use_revin(revin, revin_anchor)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, W, F] -> [B, H, T]`` in the parameter dtype; raises as `Forecaster.check_input`."""
        self.check_input(x)
        if not self.revin:
            return self.to_forecast(self.net(x.flatten(1)))
        xn, mean, std = self.revin_in(x)
        return self.revin_out(self.to_forecast(self.net(xn.flatten(1))), mean, std)
