"""Training: the shared RL loop, its schedules, the device collector and the market training glue.

The loop drives any agent through the agent protocol. May import the toolkit's core modules,
``envs``, ``replay`` and ``kernels``; never ``forecast``, ``cli`` or ``agents``. Guide:
docs/pages/training.md.
"""
