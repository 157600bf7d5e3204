"""Run import-linter's contracts (``[tool.importlinter]`` in pyproject.toml) over the source tree.

The repository keeps ``kernels/``, ``toolkit/`` and ``agents/`` at its root and installs them as
``tritonrl.kernels`` and so on; import-linter's graph builder reads one package directory, so this
copies the Python files into a temporary ``tritonrl/`` package of that shape and runs
``lint-imports`` there. Exit status: lint-imports' own (0: every contract kept).

    python tools/lint_imports.py          # make lint and CI run it
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "tritonrl": "tritonrl",
    "kernels": "tritonrl/kernels",
    "toolkit": "tritonrl/toolkit",
    "agents": "tritonrl/agents",
}


def stage(dest: Path) -> None:
    """Copy every ``.py`` file of the four source folders to ``dest`` in the installed layout."""
    for src, target in PACKAGES.items():
        for path in (ROOT / src).rglob("*.py"):
            out = dest / target / path.relative_to(ROOT / src)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out)


def lint(staged: Path, *, quiet: bool = False) -> int:
    """Run ``lint-imports`` with the repository's contracts over a tree made by :func:`stage`."""
    exe = Path(sys.executable).with_name("lint-imports")
    if not exe.exists():
        print("error: lint-imports is not installed (pip install -e '.[dev]')", file=sys.stderr)
        return 2
    env = {**os.environ, "PYTHONPATH": str(staged)}
    cmd = [str(exe), "--no-cache", str(ROOT / "pyproject.toml")]
    out = subprocess.DEVNULL if quiet else None
    return subprocess.run(cmd, cwd=staged, env=env, stdout=out, stderr=out, check=False).returncode


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="tritonrl-imports-") as tmp:
        stage(Path(tmp))
        return lint(Path(tmp))


if __name__ == "__main__":
    sys.exit(main())
