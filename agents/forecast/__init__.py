"""Supervised sequence forecasters: a window of bars ``[B, W, F]`` -> a forecast ``[B, H, T]``.

:data:`FORECASTERS` maps each ``--model`` name to its class; every class takes
``(window, num_features, horizon, num_targets, *, device, dtype, **hyperparameters)``.
"""

from tritonrl.agents.forecast.attention import PatchTST, Transformer
from tritonrl.agents.forecast.base import Forecaster
from tritonrl.agents.forecast.conv import TCN
from tritonrl.agents.forecast.linear import MLP, DLinear
from tritonrl.agents.forecast.mamba import Mamba2Forecaster
from tritonrl.agents.forecast.recurrent import GRU, LSTM

FORECASTERS: dict[str, type[Forecaster]] = {}
"""Every forecaster by name (filled by the model modules below)."""
FORECASTERS[DLinear.name] = DLinear
FORECASTERS[MLP.name] = MLP
FORECASTERS[LSTM.name] = LSTM
FORECASTERS[GRU.name] = GRU
FORECASTERS[TCN.name] = TCN
FORECASTERS[Transformer.name] = Transformer
FORECASTERS[PatchTST.name] = PatchTST
FORECASTERS[Mamba2Forecaster.name] = Mamba2Forecaster

__all__ = ["FORECASTERS", "Forecaster"]
