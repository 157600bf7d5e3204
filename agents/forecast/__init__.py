"""Supervised sequence forecasters: a window of bars ``[B, W, F]`` -> a forecast ``[B, H, T]``.

[`FORECASTERS`][tritonrl.agents.forecast.FORECASTERS] maps each ``--model`` name to its class. See
docs/pages/forecasting.md.
"""

from tritonrl.agents.forecast.attention import PatchTST, Transformer
from tritonrl.agents.forecast.base import Forecaster
from tritonrl.agents.forecast.conv import TCN
from tritonrl.agents.forecast.linear import MLP, DLinear
from tritonrl.agents.forecast.mamba import Mamba2Forecaster
from tritonrl.agents.forecast.recurrent import GRU, LSTM

FORECASTERS: dict[str, type[Forecaster]] = {
    cls.name: cls for cls in (DLinear, MLP, LSTM, GRU, TCN, Transformer, PatchTST, Mamba2Forecaster)
}
"""Every forecaster by its ``--model`` name."""

__all__ = [
    "FORECASTERS",
    "GRU",
    "LSTM",
    "MLP",
    "TCN",
    "DLinear",
    "Forecaster",
    "Mamba2Forecaster",
    "PatchTST",
    "Transformer",
]
