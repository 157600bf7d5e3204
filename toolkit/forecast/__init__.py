"""Forecasting: windows over uploaded market data, baselines, and the trainer ``fit``.

Forecasters are networks (:mod:`tritonrl.agents.forecast`); this package trains any of them on the
same device-resident data the market environment uses. May import the toolkit's core modules,
``envs`` and ``kernels``; never ``training``, ``cli`` or ``agents``.
"""
