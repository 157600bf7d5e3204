"""The agent registry: presets by name, for the CLI and the loops.

A preset is one :class:`~tritonrl.toolkit.preset.Preset` record: its name, a one-line description, its
config, the agent
class that config builds, the schedule of the shared loop that drives it, and the command line's
defaults (environments, steps, evaluation cadence). Each agent module lists its presets in a
``PRESETS`` tuple; this registry imports those modules explicitly, on first use
(:func:`get_agent`, :func:`list_agents`). This is where the command line imports ``agents``, and
it does so lazily, so ``import tritonrl.cli`` stays light (the forecasters of
``tritonrl fit`` come through here too: :func:`forecasters`). A preset of your
own joins with :func:`register_agent`.

::

    spec = get_agent("ppo-lstm")
    agent = spec.build(env.single_observation_space, env.single_action_space, num_envs=8,
                       overrides={"lr": "1e-3"})        # --set lr=1e-3
    run_training(agent, env, spec.schedule(agent), LoopConfig(total_steps=spec.default_steps))
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
    """Add ``preset`` to the registry (``--agent NAME`` then finds it); a preset of the same name,
    built-in or registered before, is replaced.

    Raises:
        TypeError: ``preset`` is not a :class:`Preset`.
    """
    if not isinstance(preset, Preset):
        raise TypeError(f"register_agent takes a Preset, got {type(preset).__name__}")
    _registry()[preset.name] = preset


def list_agents() -> list[Preset]:
    """Every registered preset, sorted by name."""
    registry = _registry()
    return [registry[k] for k in sorted(registry)]


def get_agent(name: str) -> Preset:
    """The preset called ``name``.

    Raises:
        ValueError: no such preset (the message lists the known ones).
    """
    registry = _registry()
    if name not in registry:
        raise ValueError(f"unknown agent {name!r}; known agents: {', '.join(sorted(registry)) or 'none'}")
    return registry[name]


def forecasters() -> dict[str, type]:
    """The forecaster registry, ``tritonrl.agents.forecast.FORECASTERS`` (``--model NAME`` -> class),
    imported on first use: ``fit`` reaches the forecasters only through here (the trainer,
    :mod:`tritonrl.toolkit.forecast`, is handed the model). The dict itself is returned: a model
    added to it is found by ``fit --model``.
    """
    from tritonrl.agents.forecast import FORECASTERS

    return FORECASTERS
