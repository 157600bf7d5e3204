"""The command line (``train``, ``fit``, ``export``, ``trade``, ``info``, ``bench``) and the preset registry.

The application layer, the one package that imports both ``tritonrl.toolkit`` and
``tritonrl.agents``: it hands the chosen preset to loops that know only the agent protocol.
"""

from tritonrl.cli.commands import main

__all__ = ["main"]
