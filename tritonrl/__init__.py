"""tritonrl: reinforcement learning for PyTorch whose hot paths are Triton kernels.

Installs `tritonrl.kernels`, `tritonrl.toolkit` and `tritonrl.agents` (the
repository's top-level folders, mapped by ``pyproject.toml``) and the command line,
`tritonrl.cli`, which lives in this folder.
"""

from __future__ import annotations

from importlib import metadata as _metadata
from pathlib import Path as _Path

# Run from a source checkout (``PYTHONPATH=.``, a GPU machine without an install, a second
# worktree): the three folders sit beside this one, so they are this package's subpackages too.
# An installed wheel has them inside this folder and skips this.
_root = _Path(__file__).resolve().parent.parent
if (_root / "pyproject.toml").is_file() and (_root / "toolkit" / "__init__.py").is_file():
    __path__.append(str(_root))  # the package's own __path__

try:
    __version__ = _metadata.version("tritonrl")
except _metadata.PackageNotFoundError:  # a source checkout that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
