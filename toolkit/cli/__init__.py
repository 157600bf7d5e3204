"""The command line: ``tritonrl train``, ``fit``, ``info`` and ``bench``, and the preset registry.

The only code in ``toolkit`` that imports ``agents``: the registry collects the presets the agent
modules declare and hands the chosen one to the loops, which know only the agent protocol.
"""

from tritonrl.toolkit.cli.commands import main

__all__ = ["main"]
