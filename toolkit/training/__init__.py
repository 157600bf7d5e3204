"""Training: the shared RL loop, its on- and off-policy schedules, the device collector and the
market training glue.

The loop drives any agent through the agent protocol (:mod:`tritonrl.toolkit.agent`): it never
asks which algorithm it runs. May import the toolkit's core modules, ``envs``, ``replay`` and
``kernels``; never ``forecast``, ``cli`` or ``agents``.
"""
