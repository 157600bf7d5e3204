"""Recurrent forecasters: an LSTM or a GRU over the window's steps, a linear head on the last state.

``encode`` is the top layer's hidden state per step from a zero state (causal, usable as a
torso). The ``torch.nn`` layers are built in the parameter dtype directly.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from tritonrl.agents.forecast.base import Forecaster
from tritonrl.kernels.validate import check_int

__all__ = ["GRU", "LSTM"]


class _Recurrent(Forecaster):
    """The shared LSTM/GRU forecaster; subclasses name the ``torch.nn`` layer class.

    Args:
        window, num_features, horizon, num_targets, device, dtype, target_channels: see
            [`Forecaster`][tritonrl.agents.forecast.base.Forecaster].
        hidden: ``D``, the hidden state size (also `encoding_dim`).
        layers: stacked recurrent layers.
        dropout: dropout between stacked layers, in ``[0, 1)``.
        revin: RevIN around the forecast
            ([`Forecaster.use_revin`][tritonrl.agents.forecast.base.Forecaster.use_revin]).
        revin_anchor: RevIN's centre, each window's ``"mean"`` or its ``"last"`` step.

    Raises:
        ValueError: a size that is not a positive int, or ``dropout`` outside ``[0, 1)``.
    """

    causal = True
    rnn_class: type[nn.LSTM] | type[nn.GRU]

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
        hidden: int = 64,
        layers: int = 1,
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
        self.rnn = self.rnn_class(
            num_features,
            hidden,
            num_layers=layers,
            batch_first=True,
            dropout=dropout if layers > 1 else 0.0,  # torch warns on dropout with one layer
            **self.factory,
        )
        self.head = nn.Linear(hidden, horizon * num_targets, **self.factory)
        self.encoding_dim = hidden
        self.use_revin(revin, revin_anchor)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, W, F] -> [B, W, hidden]`` from zero state, causal; raises as `check_input`."""
        self.check_input(x)
        out, _ = self.rnn(x)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, W, F] -> [B, H, T]`` in the parameter dtype; raises as `Forecaster.check_input`."""
        return self.last_step_forecast(x)


class LSTM(_Recurrent):
    """An LSTM forecaster (see `_Recurrent` for the arguments)."""

    name = "lstm"
    rnn_class = nn.LSTM


class GRU(_Recurrent):
    """A GRU forecaster (see `_Recurrent` for the arguments)."""

    name = "gru"
    rnn_class = nn.GRU
