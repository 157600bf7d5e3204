"""FinRL's ``PortfolioOptimizationEnv``, unmodified, loaded from the file that
``benchmarks/fetch-finrl.sh`` extracts from the pinned FinRL wheel (its sha256 is checked).

The file is executed as it is; only the modules it imports are provided where they are missing:
``gym`` (the old package) by gymnasium's equivalents, ``stable_baselines3``'s ``DummyVecEnv`` and
``quantstats`` (used only by its terminal step's report) by stand-ins. Standard library only at
the top: this module imports on a bare machine.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["FETCH", "FINRL_FILE", "FINRL_SHA256", "FINRL_VERSION", "load_finrl_env"]

FINRL_VERSION = "0.3.7"
"""The FinRL release whose wheel ``benchmarks/fetch-finrl.sh`` downloads (PyPI, no dependencies)."""
FINRL_SHA256 = "bfc897c1f06dc2a23df6eee71b5bd29bce98a3dd3bcbe6af567bbfd8a146a311"
"""sha256 of ``finrl/meta/env_portfolio_optimization/env_portfolio_optimization.py`` in that wheel
(FinRL's git file at a6bbd642; the GitHub HEAD's differs only by two removed comment lines)."""
FINRL_FILE = Path(__file__).resolve().parent / ".peers" / "finrl" / "env_portfolio_optimization.py"
FETCH = "bash benchmarks/fetch-finrl.sh"


def _module(name: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    return module


def _stand_ins() -> dict[str, types.ModuleType]:
    """The modules the file imports that are not installed here, by import name."""
    out: dict[str, types.ModuleType] = {}
    try:
        importlib.import_module("gym")
    except ImportError:
        # The file imports the old `gym` package (gym.Env, gym.spaces, gym.utils.seeding). The
        # file is not modified: only these import names are provided, by gymnasium's equivalents.
        import gymnasium
        from gymnasium.utils import seeding

        utils = _module("gym.utils", seeding=seeding)
        out["gym"] = _module("gym", Env=gymnasium.Env, spaces=gymnasium.spaces, utils=utils)
        out["gym.spaces"] = gymnasium.spaces
        out["gym.utils"] = utils
        out["gym.utils.seeding"] = seeding
    try:
        importlib.import_module("stable_baselines3.common.vec_env")
    except ImportError:  # used only by get_sb_env, which nothing here calls

        class DummyVecEnv:
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                raise RuntimeError("stable_baselines3 is not installed: DummyVecEnv is a stand-in")

        vec_env = _module("stable_baselines3.common.vec_env", DummyVecEnv=DummyVecEnv)
        common = _module("stable_baselines3.common", vec_env=vec_env)
        out["stable_baselines3"] = _module("stable_baselines3", common=common)
        out["stable_baselines3.common"] = common
        out["stable_baselines3.common.vec_env"] = vec_env
    try:
        importlib.import_module("quantstats")
    except ImportError:  # the terminal step's printed report only: figures of no interest here
        nan = float("nan")
        stats = _module("quantstats.stats", max_drawdown=lambda *a, **k: nan, sharpe=lambda *a, **k: nan)
        plots = _module("quantstats.plots", snapshot=lambda *a, **k: None)
        out["quantstats"] = _module("quantstats", stats=stats, plots=plots)
    return out


@contextlib.contextmanager
def _provided(modules: dict[str, types.ModuleType]) -> Iterator[None]:
    """``modules`` in ``sys.modules`` while the file executes, removed afterwards (the class keeps
    what it bound; nothing else in the process sees a fake ``gym``)."""
    saved = {name: sys.modules.get(name) for name in modules}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old


def load_finrl_env(path: str | Path | None = None) -> type:
    """FinRL's ``PortfolioOptimizationEnv`` class, executed from the unmodified file at ``path``
    (default `FINRL_FILE`). Needs numpy, pandas, matplotlib (Agg) and gymnasium or gym.

    Raises:
        FileNotFoundError: no file there (run `FETCH`).
        ValueError: a file whose sha256 is not `FINRL_SHA256`.
    """
    file = FINRL_FILE if path is None else Path(path)
    if not file.is_file():
        raise FileNotFoundError(
            f"FinRL's env is not at {file}: run `{FETCH}` (downloads FinRL {FINRL_VERSION})"
        )
    source = file.read_bytes()
    digest = hashlib.sha256(source).hexdigest()
    if digest != FINRL_SHA256:
        raise ValueError(
            f"{file} has sha256 {digest}, not FinRL {FINRL_VERSION}'s {FINRL_SHA256}: rerun `{FETCH}`"
        )
    import matplotlib

    matplotlib.use("Agg")
    name = "finrl_env_portfolio_optimization"
    spec = importlib.util.spec_from_loader(name, loader=None, origin=str(file))
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__file__ = str(file)
    with _provided(_stand_ins()):
        exec(
            compile(source, str(file), "exec", dont_inherit=True), module.__dict__
        )  # the pinned, checked file
    return module.PortfolioOptimizationEnv
