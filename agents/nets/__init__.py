"""The network blocks every agent and forecaster builds from.

Torsos (MLP, residual, attention, sequence/TCN), the value heads (noisy, dueling, distributional),
the factored action head, the actor-critic heads and recurrent cores, the Mamba2 block and the
TCN encoder. May import ``toolkit``'s core modules and ``kernels``; never an algorithm module
(``dqn``, ``ppo``, ``icm``, ``td``) or the forecasters.
"""
