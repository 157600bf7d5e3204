"""Backtests of portfolio strategies: what a finished backtest reports and how it is shown.

The tear sheet of a backtest (`tearsheet`: five figures and one self-contained HTML page). May import
the toolkit's core modules; never ``envs``, ``replay``, ``training``, ``forecast``, ``cli`` or
``agents``. See docs/pages/market.md.
"""
