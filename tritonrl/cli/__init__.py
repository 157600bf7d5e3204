"""The command line: ``tritonrl train``, ``fit``, ``export``, ``trade``, ``info`` and ``bench``, and
the preset registry.

The application layer above ``tritonrl.toolkit`` and ``tritonrl.agents``, and the one package that
imports both: the registry collects the presets the agent modules declare and hands the chosen one
to the loops, which know only the agent protocol.
"""

from tritonrl.cli.commands import main

__all__ = ["main"]
