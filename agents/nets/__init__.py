"""The network blocks every agent and forecaster builds from: torsos, Q heads, actor-critic heads
and cores, the Mamba2 block, the TCN encoder.

May import ``toolkit``'s core modules and ``kernels``; never an algorithm module (``dqn``, ``ppo``,
``icm``, ``td``) or the forecasters.
"""
