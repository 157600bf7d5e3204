"""Supervised sequence forecasters: a window of bars ``[B, W, F]`` -> a forecast ``[B, H, T]``.

:data:`FORECASTERS` maps each ``--model`` name to its class; every class takes
``(window, num_features, horizon, num_targets, *, device, dtype, **hyperparameters)``.
"""

from tritonrl.agents.forecast.base import Forecaster
from tritonrl.agents.forecast.linear import MLP, DLinear
from tritonrl.agents.forecast.recurrent import GRU, LSTM

FORECASTERS: dict[str, type[Forecaster]] = {}
"""Every forecaster by name (filled by the model modules below)."""
FORECASTERS[DLinear.name] = DLinear
FORECASTERS[MLP.name] = MLP
FORECASTERS[LSTM.name] = LSTM
FORECASTERS[GRU.name] = GRU

__all__ = ["FORECASTERS", "Forecaster"]
