"""The agent registry: presets by name, for the CLI and the loops.

Each module under ``agents/`` registers its presets when imported::

    register_agent("ppo", make_ppo, kind="onpolicy", description="PPO, categorical policy")

A factory is called as ``factory(observation_space, action_space, *, num_envs, device, seed,
total_steps, overrides)`` (and, resuming a run, ``config=``: the saved config dict to start from
instead of the preset) and returns an agent (``act``, ``observe``, ``update``,
``state_dict``, ``load_state_dict``, ``save``, ``config``). ``overrides`` maps config field names
to strings from the command line (``--set lr=1e-3``); :func:`apply_overrides` turns them into a
new frozen config, converting each value to its field's type.

:func:`get_agent` imports the ``agents`` package's modules on first use (``toolkit`` never
imports ``agents`` at module import time).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import pkgutil
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["AgentSpec", "apply_overrides", "get_agent", "list_agents", "load_agents", "register_agent"]

KINDS = ("offpolicy", "onpolicy")


@dataclass(frozen=True)
class AgentSpec:
    """A registered preset.

    Attributes:
        name: the name used by ``--agent``.
        factory: builds the agent (see the module docstring for its signature).
        kind: ``"onpolicy"`` or ``"offpolicy"``: which schedule of the shared loop drives it.
        description: one line for ``--help`` and error messages.
        default_num_envs: environments the CLI uses when ``--num-envs`` is not given.
        default_steps: environment steps the CLI uses when ``--steps`` is not given.
        default_eval_every: greedy evaluation interval the CLI uses when ``--eval-every`` is not
            given (0: at the end only); with it, the run stops once the environment's registered
            ``reward_threshold`` (its "solved" score) is reached, unless ``--target-return`` is given.
    """

    name: str
    factory: Callable[..., Any]
    kind: str
    description: str
    default_num_envs: int = 1
    default_steps: int = 100_000
    default_eval_every: int = 0


_REGISTRY: dict[str, AgentSpec] = {}
_IMPORT_ERRORS: dict[str, str] = {}
_LOADED = False


def register_agent(name: str, factory: Callable[..., Any], *, kind: str, description: str,
                   default_num_envs: int = 1, default_steps: int = 100_000, default_eval_every: int = 0
                   ) -> None:
    """Register ``factory`` under ``name``; registering the same name again replaces it (module reloads).

    Raises:
        ValueError: empty name or unknown ``kind``.
        TypeError: ``factory`` is not callable.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"agent name must be a non-empty string, got {name!r}")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if not callable(factory):
        raise TypeError(f"factory for {name!r} must be callable, got {type(factory).__name__}")
    _REGISTRY[name] = AgentSpec(name, factory, kind, description, int(default_num_envs), int(default_steps),
                                int(default_eval_every))


def load_agents() -> dict[str, str]:
    """Import every module of the ``agents`` package once so their presets register.

    Returns:
        modules that failed to import, with the error line (they are skipped, and named when an
        agent is not found).
    """
    global _LOADED
    if not _LOADED:
        _LOADED = True
        package = importlib.import_module("tritonrl.agents")
        for info in pkgutil.iter_modules(package.__path__, prefix="tritonrl.agents."):
            try:
                importlib.import_module(info.name)
            except Exception as exc:  # one broken module must not hide every other agent
                _IMPORT_ERRORS[info.name] = f"{type(exc).__name__}: {exc}"
    return dict(_IMPORT_ERRORS)


def list_agents() -> list[AgentSpec]:
    """Every registered preset (after :func:`load_agents`), sorted by name."""
    load_agents()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def get_agent(name: str) -> AgentSpec:
    """The preset called ``name``.

    Raises:
        ValueError: no such preset (the message lists the known ones, and modules that failed
            to import).
    """
    errors = load_agents()
    if name not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        msg = f"unknown agent {name!r}; known agents: {known}"
        if errors:
            msg += "; modules that failed to import: " + "; ".join(f"{k} ({v})" for k, v in errors.items())
        raise ValueError(msg)
    return _REGISTRY[name]


# ----------------------------------------------------------------------------- config overrides


def _convert(raw: Any, tp: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if type(None) in args and isinstance(raw, str) and raw.lower() in ("none", "null", ""):
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(raw, arg, key)
            except ValueError as exc:
                errors.append(str(exc))
        raise ValueError("; ".join(errors))
    if origin is typing.Literal:
        allowed = typing.get_args(tp)
        for a in allowed:
            if str(a) == str(raw):
                return a
        raise ValueError(f"{key}={raw!r} is not one of {allowed}")
    if origin is tuple:
        args = typing.get_args(tp)
        items = raw if isinstance(raw, (list, tuple)) else [
            s for s in str(raw).strip("()[] ").split(",") if s]
        item_tp = args[0] if args else str
        return tuple(_convert(s.strip() if isinstance(s, str) else s, item_tp, key) for s in items)
    if tp is bool:
        if isinstance(raw, bool):
            return raw
        s = str(raw).lower()
        if s in ("1", "true", "yes", "on"):
            return True
        if s in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{key}={raw!r} is not a bool (true/false)")
    if tp is int and isinstance(raw, str):
        # "100000" exactly; an integral float string ("1e11", "5e4", "2000.0") is accepted too, as
        # people write large counts that way; "1.5", "inf", "nan" and "true" are refused.
        try:
            return int(raw.strip())
        except ValueError:
            pass
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not value.is_integer():
            raise ValueError(f"{key}={raw!r} is not a valid int")
        return int(value)
    if tp in (int, float, str):
        try:
            return tp(raw)
        except (TypeError, ValueError):
            raise ValueError(f"{key}={raw!r} is not a valid {tp.__name__}") from None
    return raw


def apply_overrides(config: Any, overrides: Mapping[str, Any]) -> Any:
    """A copy of the frozen dataclass ``config`` with ``overrides`` applied (strings converted).

    Int fields take integral float strings too (``--set buffer_size=1e6``); the config's own
    checks (``__post_init__``) then judge the range.

    Raises:
        ValueError: an unknown field (the message lists the known ones), a value that does not
            convert to the field's type, or one the config rejects.
    """
    if not overrides:
        return config
    hints = typing.get_type_hints(type(config))
    names = {f.name for f in dataclasses.fields(config)}
    changes = {}
    for key, raw in overrides.items():
        if key not in names:
            raise ValueError(f"unknown config key {key!r} for {type(config).__name__}; known keys: "
                             f"{', '.join(sorted(names))}")
        changes[key] = _convert(raw, hints[key], key)
    return dataclasses.replace(config, **changes)
