"""Agent configs as stored in checkpoints: strict reading back, and which fields a resume may change.

Every agent config is a frozen dataclass. A field declared with ``resumable()`` may differ between
a checkpoint and the run that continues it (``--resume --set lr=1e-4``): the new value is applied
for real (the agent reads it from its config; optimizer learning rates are set from it after the
optimizer state is loaded). Every other field is *fixed*: network shapes, discount, n-step,
buffer and batch sizes, rollout length, atoms, seeds' effects; changing one on resume is refused
(``--resume cannot change gamma (checkpoint 0.99, now 0.9): start a new run``). ::

    @dataclass(frozen=True)
    class MyConfig:
        hidden: int = 64                       # fixed
        lr: float = resumable(3e-4)            # may change on resume

:func:`check_config_dict` reads a config dict back from a checkpoint strictly: every field
present, no unknown one, each value of its declared type (``int`` is not ``bool``, ``float``
accepts ints, tuples come back as lists or tuples). :func:`config_changes` and
:func:`fixed_changes` compare two configs field by field.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any

__all__ = ["check_config_dict", "config_changes", "fixed_changes", "format_change", "resumable",
           "resumable_fields"]

_RESUMABLE = "resumable"


def resumable(default: Any, **kwargs: Any) -> Any:
    """A dataclass field (default ``default``) that a resumed run may change (see the module doc)."""
    metadata = {**kwargs.pop("metadata", {}), _RESUMABLE: True}
    return dataclasses.field(default=default, metadata=metadata, **kwargs)


def resumable_fields(config_cls: type) -> frozenset[str]:
    """Names of the fields of the config dataclass ``config_cls`` declared with :func:`resumable`."""
    return frozenset(f.name for f in dataclasses.fields(config_cls) if f.metadata.get(_RESUMABLE))


def config_changes(old: Any, new: Any) -> dict[str, tuple[Any, Any]]:
    """``{field: (old value, new value)}`` for every field where two configs of one class differ."""
    if type(old) is not type(new):
        raise TypeError(f"cannot compare a {type(old).__name__} with a {type(new).__name__}")
    return {f.name: (getattr(old, f.name), getattr(new, f.name)) for f in dataclasses.fields(old)
            if getattr(old, f.name) != getattr(new, f.name)}


def fixed_changes(old: Any, new: Any) -> dict[str, tuple[Any, Any]]:
    """The :func:`config_changes` of fields that a resume may not change."""
    allowed = resumable_fields(type(old))
    return {k: v for k, v in config_changes(old, new).items() if k not in allowed}


def format_change(name: str, old: Any, new: Any) -> str:
    """``"gamma (checkpoint 0.99, now 0.9)"``: one changed field for a message."""
    return f"{name} (checkpoint {_short(old)}, now {_short(new)})"


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _type_ok(value: Any, tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, arg) for arg in typing.get_args(tp))
    if origin is typing.Literal:
        return any(type(value) is type(a) and value == a for a in typing.get_args(tp))
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            return False
        args = typing.get_args(tp)
        item = args[0] if args and (len(args) == 2 and args[1] is Ellipsis or len(args) == 1) else None
        if item is None and args:
            return len(value) == len(args) and all(_type_ok(v, a) for v, a in zip(value, args, strict=True))
        return item is None or all(_type_ok(v, item) for v in value)
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    return True  # a type this module does not know: the config's own checks decide


def check_config_dict(config_cls: type, values: Any, *, where: str = "config") -> None:
    """Raise ``ValueError`` unless ``values`` is a complete, well-typed dict of ``config_cls``'s fields.

    Changes nothing and builds nothing (the config's own ``__post_init__`` checks ranges).

    Raises:
        ValueError: not a dict, a missing or unknown field, or a value of the wrong type (the
            message names the field and shows at most 40 characters of the value).
    """
    if not isinstance(values, Mapping):
        raise ValueError(f"{where} is a {type(values).__name__}, not a dict of {config_cls.__name__} fields")
    hints = typing.get_type_hints(config_cls)
    names = [f.name for f in dataclasses.fields(config_cls)]
    missing = [n for n in names if n not in values]
    if missing:
        more = "..." if len(missing) > 4 else ""
        raise ValueError(f"{where} lacks field(s) {', '.join(missing[:4])}{more}")
    unknown = sorted(str(k) for k in values if k not in hints)
    if unknown:
        raise ValueError(f"{where} has unknown field(s) {', '.join(unknown[:4])}")
    for name in names:
        if not _type_ok(values[name], hints[name]):
            raise ValueError(f"{where} field {name}={_short(values[name])} is not a "
                             f"{_type_name(hints[name])}")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")
