"""The preset record: a named agent config, the agent class it builds, the schedule that drives it
and the command line's defaults ([`MarketPreset`][tritonrl.toolkit.preset.MarketPreset]: what a market run
changes; [`Tuned`][tritonrl.toolkit.preset.Tuned]: settings tuned for one environment).

Agent modules list theirs in a ``PRESETS`` tuple for [`tritonrl.cli.registry`][tritonrl.cli.registry]; the
record lives in the core so that agents need not import the command line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tritonrl.toolkit.config import apply_overrides

__all__ = ["KINDS", "MarketPreset", "Preset", "Tuned", "find_preset"]

KINDS = ("offpolicy", "onpolicy")


def _check_defaults(owner: str, record: Any) -> None:
    """Raise ``ValueError`` unless ``record``'s CLI defaults are ints of at least 1 environment, 1
    step and a 0 evaluation interval."""
    for what, lo in (("default_num_envs", 1), ("default_steps", 1), ("default_eval_every", 0)):
        value = getattr(record, what)
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise ValueError(f"{owner}: {what} must be an int >= {lo}, got {value!r}")


@dataclass(frozen=True)
class MarketPreset:
    """What a market run (``--env market:...``) changes in a preset: config overrides and CLI defaults.

    Raises:
        ValueError: a default below its minimum (1 environment, 1 step, 0 evaluation interval).
    """

    overrides: Mapping[str, Any] = field(default_factory=dict)
    """Agent config fields set before the user's ``--set``."""
    default_num_envs: int = 16
    """Environments when ``--num-envs`` is not given."""
    default_steps: int = 100_000
    """Environment steps when ``--steps`` is not given."""
    default_eval_every: int = 10_000
    """Validation-period evaluation interval when ``--eval-every`` is not given."""

    def __post_init__(self) -> None:
        _check_defaults("market preset", self)


@dataclass(frozen=True)
class Tuned:
    """Config overrides tuned for one environment, with where they came from.

    Raises:
        ValueError: an empty ``source`` or a ``steps`` below 1.
        TypeError: ``overrides`` not a mapping.
    """

    overrides: Mapping[str, Any]
    """Agent config fields set on top of the preset's config, before the user's ``--set``."""
    source: str
    """Where the settings came from (a published table, a measurement here)."""
    steps: int | None = None
    """The environment steps the source trained for (``None``: not stated)."""
    note: str = ""
    """Anything else a reader needs (a caveat, what was translated)."""
    budget: int | None = None
    """``tritonrl train``'s default ``--steps`` with these settings: the budget measured here
    (``None``: the preset's)."""
    num_envs: int | None = None
    """``tritonrl train``'s default ``--num-envs`` with these settings (``None``: the preset's)."""

    def __post_init__(self) -> None:
        if not isinstance(self.overrides, Mapping):
            raise TypeError(f"tuned overrides must be a mapping, got {type(self.overrides).__name__}")
        if not isinstance(self.source, str) or not self.source:
            raise ValueError(f"tuned settings need a non-empty source, got {self.source!r}")
        for name in ("steps", "budget", "num_envs"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"tuned {name} must be an int >= 1 or None, got {value!r}")


@dataclass(frozen=True)
class Preset:
    """A named agent preset.

    Attributes:
        description: one line for ``--agent list`` and error messages.
        agent: the agent class, called as ``agent(observation_space, action_space, config, *,
            num_envs, device, seed)`` (and ``dist=`` when [`build`][tritonrl.toolkit.preset.Preset.build] is
            given one).
        kind: ``"onpolicy"`` or ``"offpolicy"`` (a label for ``--agent list``).
        schedule: ``schedule(agent)`` returns the shared loop's schedule for a built agent.
        default_eval_every: evaluation interval (0: at the end only); with one, the run stops at the
            env's ``reward_threshold`` unless ``--target-return`` is given.
        default_env: ``None``: the command line's default, CartPole-v1.
        steps_field: the config field set to the run's length (``--steps``), or ``None``.
        market: the overrides and defaults on market data; ``None``: the generic ones.
        tuned: settings tuned per gymnasium env id ([`Tuned`][tritonrl.toolkit.preset.Tuned]),
            applied by `configure` given that ``env``.

    Raises:
        ValueError: an empty name, an unknown ``kind``, a field or override the config lacks (tuned
            ones and their values included), or a default below its minimum.
        TypeError: ``agent`` or ``schedule`` not callable, ``config`` not a dataclass instance,
            ``market`` neither a [`MarketPreset`][tritonrl.toolkit.preset.MarketPreset] nor ``None``,
            or a ``tuned`` value not a [`Tuned`][tritonrl.toolkit.preset.Tuned].
    """

    name: str
    description: str
    config: Any
    agent: Callable[..., Any]
    kind: str
    schedule: Callable[[Any], Any]
    default_num_envs: int = 1
    default_steps: int = 100_000
    default_eval_every: int = 0
    default_env: str | None = None
    steps_field: str | None = None
    market: MarketPreset | None = None
    tuned: Mapping[str, Tuned] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"preset name must be a non-empty string, got {self.name!r}")
        if self.kind not in KINDS:
            raise ValueError(f"preset {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")
        for what in ("agent", "schedule"):
            if not callable(getattr(self, what)):
                raise TypeError(
                    f"preset {self.name!r}: {what} must be callable, got {type(getattr(self, what)).__name__}"
                )
        if not dataclasses.is_dataclass(self.config) or isinstance(self.config, type):
            raise TypeError(
                f"preset {self.name!r}: config must be a config dataclass instance, got "
                f"{type(self.config).__name__}"
            )
        names = {f.name for f in dataclasses.fields(self.config)}
        if self.steps_field is not None and self.steps_field not in names:
            raise ValueError(
                f"preset {self.name!r}: steps_field={self.steps_field!r} is not a field of "
                f"{type(self.config).__name__}"
            )
        _check_defaults(f"preset {self.name!r}", self)
        if self.default_env is not None and (not isinstance(self.default_env, str) or not self.default_env):
            raise ValueError(f"preset {self.name!r}: default_env must be a non-empty string or None")
        if self.market is not None:
            if not isinstance(self.market, MarketPreset):
                raise TypeError(
                    f"preset {self.name!r}: market must be a MarketPreset or None, got "
                    f"{type(self.market).__name__}"
                )
            unknown = sorted(k for k in self.market.overrides if k not in names)
            if unknown:
                raise ValueError(
                    f"preset {self.name!r}: market overrides {unknown} are not fields of "
                    f"{type(self.config).__name__}"
                )
        self._check_tuned(names)

    def _check_tuned(self, names: set[str]) -> None:
        """Raise unless every ``tuned`` entry is a `Tuned` of known fields and accepted values."""
        for env, tuned in self.tuned.items():
            if not isinstance(env, str) or not env:
                raise ValueError(f"preset {self.name!r}: tuned keys must be non-empty env ids, got {env!r}")
            if not isinstance(tuned, Tuned):
                raise TypeError(
                    f"preset {self.name!r}: tuned[{env!r}] must be a Tuned, got {type(tuned).__name__}"
                )
            unknown = sorted(k for k in tuned.overrides if k not in names)
            if unknown:
                raise ValueError(
                    f"preset {self.name!r}: tuned overrides {unknown} for {env} are not fields of "
                    f"{type(self.config).__name__}"
                )
            try:
                apply_overrides(self.config, tuned.overrides)
            except ValueError as exc:
                raise ValueError(f"preset {self.name!r}: tuned settings for {env}: {exc}") from None

    def configure(
        self,
        overrides: Mapping[str, Any] | None = None,
        *,
        config: Mapping[str, Any] | None = None,
        total_steps: int | None = None,
        env: str | None = None,
    ) -> Any:
        """The config to build: the preset's with the `tuned` settings of ``env`` if any (or the saved
        ``config`` of a resumed run, ``env`` then ignored), with ``total_steps`` in `steps_field` and
        the ``--set`` ``overrides`` on top.

        Raises:
            ValueError: an unknown field, or a value that does not convert or that the config rejects.
        """
        if config is not None:
            base = type(self.config).from_dict(config)
        else:
            tuned = self.tuned.get(env) if env is not None else None
            base = self.config if tuned is None else apply_overrides(self.config, tuned.overrides)
        if total_steps is not None and self.steps_field is not None:
            base = dataclasses.replace(base, **{self.steps_field: int(total_steps)})
        return apply_overrides(base, overrides or {})

    def build(
        self,
        observation_space: Any,
        action_space: Any,
        *,
        num_envs: int = 1,
        device: Any = "cpu",
        seed: int = 0,
        total_steps: int | None = None,
        overrides: Mapping[str, Any] | None = None,
        config: Mapping[str, Any] | None = None,
        dist: Any = None,
        env: str | None = None,
    ) -> Any:
        """An agent of this preset (arguments as `configure`); ``dist``, when given, is passed as
        ``dist=`` (``num_envs`` then this rank's share).

        Raises:
            ValueError: a bad config key or value, or a space the agent cannot drive.
            TypeError, tritonrl.toolkit.distributed.DistributedError: as the agent's constructor.
        """
        cfg = self.configure(overrides, config=config, total_steps=total_steps, env=env)
        extra: dict[str, Any] = {} if dist is None else {"dist": dist}
        return self.agent(
            observation_space, action_space, cfg, num_envs=num_envs, device=device, seed=seed, **extra
        )


def find_preset(presets: Iterable[Preset], name: str, family: str = "agent") -> Preset:
    """The preset called ``name`` among ``presets``; ``ValueError`` listing them if there is none."""
    presets = tuple(presets)
    for p in presets:
        if p.name == name:
            return p
    raise ValueError(f"unknown {family} preset {name!r}; choose one of {', '.join(p.name for p in presets)}")
