"""Agent configs: one (de)serialiser, command-line overrides, strict reading back from checkpoints,
and which fields a resume may change.

Every agent config is a frozen dataclass deriving from `Config`. A field declared with `resumable`
may change on ``--resume --set``; every other field is fixed (a change is refused), and
`backfilled` marks a fixed field added after checkpoints were written. Imports nothing from
tritonrl. Guide: docs/pages/training.md ("--resume and --set").
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

__all__ = [
    "Config",
    "apply_overrides",
    "backfilled",
    "backfilled_fields",
    "check_config_dict",
    "config_changes",
    "fixed_changes",
    "format_change",
    "resumable",
    "resumable_fields",
]

C = TypeVar("C", bound="Config")

_RESUMABLE = "resumable"
_BACKFILLED = "backfilled"


def resumable(default: Any, **kwargs: Any) -> Any:
    """A dataclass field (default ``default``) that a resumed run may change."""
    metadata = {**kwargs.pop("metadata", {}), _RESUMABLE: True}
    return dataclasses.field(default=default, metadata=metadata, **kwargs)


def backfilled(default: Any, **kwargs: Any) -> Any:
    """A fixed field older checkpoints lack: they read as ``default``, what those runs did."""
    metadata = {**kwargs.pop("metadata", {}), _BACKFILLED: True}
    return dataclasses.field(default=default, metadata=metadata, **kwargs)


def backfilled_fields(config_cls: type) -> frozenset[str]:
    """Names of the fields of the config dataclass ``config_cls`` declared with `backfilled`."""
    return frozenset(f.name for f in dataclasses.fields(config_cls) if f.metadata.get(_BACKFILLED))


def resumable_fields(config_cls: type) -> frozenset[str]:
    """Names of the fields of the config dataclass ``config_cls`` declared with `resumable`."""
    return frozenset(f.name for f in dataclasses.fields(config_cls) if f.metadata.get(_RESUMABLE))


def config_changes(old: Any, new: Any) -> dict[str, tuple[Any, Any]]:
    """``{field: (old value, new value)}`` for every field where two configs of one class differ."""
    if type(old) is not type(new):
        raise TypeError(f"cannot compare a {type(old).__name__} with a {type(new).__name__}")
    return {
        f.name: (getattr(old, f.name), getattr(new, f.name))
        for f in dataclasses.fields(old)
        if getattr(old, f.name) != getattr(new, f.name)
    }


def fixed_changes(old: Any, new: Any) -> dict[str, tuple[Any, Any]]:
    """The `config_changes` of fields that a resume may not change."""
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
    """Raise ``ValueError`` unless ``values`` is a well-typed dict of ``config_cls``'s fields; changes
    nothing.

    Resumable and [`backfilled`][tritonrl.toolkit.config.backfilled] fields may be missing. The message names
    the field and at most 40 characters of the value.
    """
    if not isinstance(values, Mapping):
        raise ValueError(f"{where} is a {type(values).__name__}, not a dict of {config_cls.__name__} fields")
    hints = typing.get_type_hints(config_cls)
    names = [f.name for f in dataclasses.fields(config_cls)]
    # A resumable field missing from a checkpoint (one saved before the field existed) takes its
    # default, as a resume could set it to anything anyway; so does a backfilled one (its default
    # is what the runs saved before it existed did); any other fixed one cannot be guessed.
    optional = resumable_fields(config_cls) | backfilled_fields(config_cls)
    missing = [n for n in names if n not in values and n not in optional]
    if missing:
        more = "..." if len(missing) > 4 else ""
        raise ValueError(f"{where} lacks field(s) {', '.join(missing[:4])}{more}")
    unknown = sorted(str(k) for k in values if k not in hints)
    if unknown:
        raise ValueError(f"{where} has unknown field(s) {', '.join(unknown[:4])}")
    for name in names:
        if name in values and not _type_ok(values[name], hints[name]):
            raise ValueError(
                f"{where} field {name}={_short(values[name])} is not a {_type_name(hints[name])}"
            )


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


# ----------------------------------------------------------------------------- (de)serialiser


class Config:
    """Base of the frozen config dataclasses: the one ``to_dict`` / ``from_dict`` pair.

    ``MyConfig.from_dict(MyConfig().to_dict()) == MyConfig()``.
    """

    def to_dict(self) -> dict[str, Any]:
        """``{field: value}`` for every field, values as they are (JSON scalars and tuples)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls: type[C], values: Mapping[str, Any]) -> C:
        """Inverse of `to_dict` (lists become tuples where the type says; missing fields take defaults).

        Raises:
            ValueError: not a dict, an unknown field, or a value the config's own checks reject.
        """
        if not isinstance(values, Mapping):
            raise ValueError(f"{cls.__name__} values must be a dict, got {type(values).__name__}")
        hints = typing.get_type_hints(cls)
        names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        unknown = sorted(str(k) for k in values if k not in names)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} field(s) {unknown}; known: {sorted(names)}")
        return cls(**{k: _tuples(v, hints[k]) for k, v in values.items()})


def _tuples(value: Any, tp: Any) -> Any:
    """``value`` with lists turned into tuples wherever the type ``tp`` says tuple."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        tuple_args = [a for a in typing.get_args(tp) if typing.get_origin(a) is tuple]
        return _tuples(value, tuple_args[0]) if tuple_args and isinstance(value, (list, tuple)) else value
    if origin is not tuple or not isinstance(value, (list, tuple)):
        return value
    args = typing.get_args(tp)
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_tuples(v, args[0]) for v in value)
    if args and len(args) == len(value):
        return tuple(_tuples(v, a) for v, a in zip(value, args, strict=True))
    return tuple(value)


# ----------------------------------------------------------------------------- overrides


def _convert(raw: Any, tp: Any, key: str) -> Any:
    """``raw`` as a value of type ``tp``: strings parsed, other values passed through."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        none = raw is None or isinstance(raw, str) and raw.lower() in ("none", "null", "")
        if type(None) in args and none:
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
    if origin is tuple:
        args = typing.get_args(tp)
        items = (
            raw if isinstance(raw, (list, tuple)) else [s for s in str(raw).strip("()[] ").split(",") if s]
        )
        item_tp = args[0] if args else str
        return tuple(_convert(s.strip() if isinstance(s, str) else s, item_tp, key) for s in items)
    if not isinstance(raw, str):
        return raw
    if origin is typing.Literal:
        allowed = typing.get_args(tp)
        for a in allowed:
            if str(a) == raw:
                return a
        raise ValueError(f"{key}={raw!r} is not one of {allowed}")
    if tp is bool:
        s = raw.lower()
        if s in ("1", "true", "yes", "on"):
            return True
        if s in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{key}={raw!r} is not a bool (true/false)")
    if tp is int:
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
    if tp in (float, str):
        try:
            return tp(raw)
        except (TypeError, ValueError):
            raise ValueError(f"{key}={raw!r} is not a valid {tp.__name__}") from None
    return raw


def apply_overrides(config: Any, overrides: Mapping[str, Any]) -> Any:
    """A copy of ``config`` with ``overrides`` applied: the one way to change fields by name (``--set``).

    Strings convert to the field's type (``buffer_size=1e6``, ``hidden=64,64``); ``__post_init__`` judges the
    values.

    Raises:
        ValueError: an unknown field (the known ones listed), an unconvertible string, or a rejected value.
    """
    if not overrides:
        return config
    hints = typing.get_type_hints(type(config))
    names = {f.name for f in dataclasses.fields(config)}
    changes = {}
    for key, raw in overrides.items():
        if key not in names:
            raise ValueError(
                f"unknown config key {key!r} for {type(config).__name__}; known keys: "
                f"{', '.join(sorted(names))}"
            )
        changes[key] = _convert(raw, hints[key], key)
    return dataclasses.replace(config, **changes)
