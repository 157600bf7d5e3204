"""Recurrent forecasters: an LSTM or a GRU over the window's steps, a linear head on the last state.

``encode(x [B, W, F]) -> [B, W, D]`` is the top layer's hidden state after each step (``D =
hidden``), started from zero state at the window's first bar: step ``s`` depends on bars ``<= s``
only (causal), so an agent can use it as a torso over an observation window. ``forward`` maps the
last step's state through one ``Linear(hidden, H * T)`` to the forecast ``[B, H, T]``.

The layers are ``torch.nn.LSTM`` / ``torch.nn.GRU`` built with ``device=`` and ``dtype=``: their
weights are allocated in the parameter dtype and filled in place by a uniform draw
(``reset_parameters``), so no parameter exists in another dtype first.
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
            :class:`~tritonrl.agents.forecast.base.Forecaster`.
        hidden: ``D``, the hidden state size (also :attr:`encoding_dim`).
        layers: stacked recurrent layers.
        dropout: dropout between stacked layers (needs ``layers > 1`` to act), in ``[0, 1)``.
        revin: normalise each channel of each window by its mean and standard deviation before
            the forecast and undo it on each target with its channel's (RevIN without affine,
            :meth:`~tritonrl.agents.forecast.base.Forecaster.use_revin`); :meth:`encode` stays
            unnormalised (causal).

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
        self.use_revin(revin)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """The top layer's hidden state after each step, from zero state: ``[B, W, hidden]``.

        Args:
            x: ``[B, W, F]`` in the parameter dtype.

        Returns:
            ``[B, W, hidden]`` in the parameter dtype; step ``s`` depends on ``x[:, :s + 1]`` only.

        Raises:
            ValueError: ``x`` is not ``[B, W, F]``.
            TypeError: ``x`` is not in the parameter dtype.
        """
        self.check_input(x)
        out, _ = self.rnn(x)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Forecast ``[B, H, T]`` (parameter dtype) from a window ``x [B, W, F]`` (parameter dtype).

        Raises:
            ValueError: ``x`` is not ``[B, W, F]``.
            TypeError: ``x`` is not in the parameter dtype.
        """
        return self.last_step_forecast(x)


class LSTM(_Recurrent):
    """An LSTM forecaster (see :class:`_Recurrent` for the arguments)."""

    name = "lstm"
    rnn_class = nn.LSTM


class GRU(_Recurrent):
    """A GRU forecaster (see :class:`_Recurrent` for the arguments)."""

    name = "gru"
    rnn_class = nn.GRU
