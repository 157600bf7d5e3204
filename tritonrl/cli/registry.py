"""The agent registry: `Preset` records by name, for the CLI and the loops.

Each agent module lists its presets in a ``PRESETS`` tuple; this registry imports those modules
lazily on first use, so ``import tritonrl.cli`` stays light. It is where the command line imports
``agents`` (the forecasters of ``fit`` too). See docs/pages/training.md, "Registering an agent".
"""

from __future__ import annotations

from tritonrl.toolkit.preset import KINDS, Preset, find_preset

__all__ = ["KINDS", "Preset", "find_preset", "forecasters", "get_agent", "list_agents", "register_agent"]


_REGISTRY: dict[str, Preset] = {}
_LOADED = False


def _registry() -> dict[str, Preset]:
    """Every preset by name; the agent modules' ``PRESETS`` are imported on the first call."""
    global _LOADED
    if not _LOADED:
        # the command line's import of the agent modules: lazy, explicit, one line per agent module
        from tritonrl.agents import dqn, ppo, sac

        builtin: dict[str, Preset] = {}
        for preset in (*dqn.PRESETS, *ppo.PRESETS, *sac.PRESETS):
            if preset.name in builtin:
                raise ValueError(f"two presets are called {preset.name!r}")
            builtin[preset.name] = preset
        _REGISTRY.update(builtin)
        _LOADED = True
    return _REGISTRY


def register_agent(preset: Preset) -> None:
    """Add ``preset`` to the registry, replacing one of the same name.

    Raises:
        TypeError: ``preset`` is not a [`Preset`][tritonrl.cli.registry.Preset].
    """
    if not isinstance(preset, Preset):
        raise TypeError(f"register_agent takes a Preset, got {type(preset).__name__}")
    _registry()[preset.name] = preset


def list_agents() -> list[Preset]:
    """Every registered preset, sorted by name."""
    registry = _registry()
    return [registry[k] for k in sorted(registry)]


def get_agent(name: str) -> Preset:
    """The preset called ``name``; ``ValueError`` (listing the known ones) if there is none."""
    registry = _registry()
    if name not in registry:
        raise ValueError(f"unknown agent {name!r}; known agents: {', '.join(sorted(registry)) or 'none'}")
    return registry[name]


def forecasters() -> dict[str, type]:
    """The forecaster registry ``tritonrl.agents.forecast.FORECASTERS`` (name -> class), imported on
    first use; a model added to the returned dict is found by ``fit --model``."""
    from tritonrl.agents.forecast import FORECASTERS

    return FORECASTERS
