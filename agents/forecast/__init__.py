"""Supervised sequence forecasters: a window of bars ``[B, W, F]`` -> a forecast ``[B, H, T]``.

:data:`FORECASTERS` maps each ``--model`` name to its class; every class takes
``(window, num_features, horizon, num_targets, *, device, dtype, **hyperparameters)``.
"""

from tritonrl.agents.forecast.base import Forecaster

FORECASTERS: dict[str, type[Forecaster]] = {}
"""Every forecaster by name (filled by the model modules below)."""

__all__ = ["FORECASTERS", "Forecaster"]
