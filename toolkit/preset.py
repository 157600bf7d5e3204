"""The preset record: a named agent configuration, the agent class it builds, the schedule of the
shared loop that drives it and the command line's defaults (and, in :class:`MarketPreset`, what a
market run changes in them).

Each agent module lists its presets in a ``PRESETS`` tuple of :class:`Preset`; the command line's
registry (:mod:`tritonrl.cli.registry`) collects them. The record lives in the core so that
agents import it without importing the command line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tritonrl.toolkit.config import apply_overrides

__all__ = ["KINDS", "MarketPreset", "Preset", "find_preset"]

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
    """What a market run (``--env market:...``) changes in a preset: agent config overrides and
    the command line's defaults. A preset declares its own (:attr:`Preset.market`); one without
    gets this record's defaults and no overrides.

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
class Preset:
    """A named agent preset.

    Attributes:
        name: the name used by ``--agent``.
        description: one line for ``--agent list`` and error messages.
        config: the frozen config (a :class:`tritonrl.toolkit.config.Config`) the preset stands for.
        agent: the agent class, called as ``agent(observation_space, action_space, config, *,
            num_envs, device, seed)`` (and ``dist=`` when :meth:`build` is given one).
        kind: ``"onpolicy"`` or ``"offpolicy"``: which kind of schedule drives it (a label for
            ``--agent list``).
        schedule: ``schedule(agent)`` returns the schedule of the shared loop for a built agent
            (:func:`tritonrl.toolkit.schedule.offpolicy_schedule`,
            :func:`tritonrl.toolkit.schedule.onpolicy_schedule`).
        default_num_envs: environments the CLI uses when ``--num-envs`` is not given.
        default_steps: environment steps the CLI uses when ``--steps`` is not given.
        default_eval_every: greedy evaluation interval the CLI uses when ``--eval-every`` is not
            given (0: at the end only); with it, the run stops once the environment's registered
            ``reward_threshold`` (its "solved" score) is reached, unless ``--target-return`` is given.
        default_env: the environment the CLI uses when ``--env`` is not given (``None``: the
            command line's own default, CartPole-v1).
        steps_field: the config field that follows the run's length (``--steps``), such as PPO's
            ``total_steps`` (the learning-rate annealing horizon); ``None``: none does.
        market: the preset's overrides and defaults on market data (:class:`MarketPreset`, read by
            :func:`tritonrl.toolkit.training.market.market_preset`); ``None``: the generic ones.

    Raises:
        ValueError: an empty name, an unknown ``kind``, a ``steps_field`` or a market override the
            config lacks, or a default below its minimum (1 environment, 1 step, 0 evaluation
            interval).
        TypeError: ``agent`` or ``schedule`` is not callable, ``config`` not a dataclass instance,
            or ``market`` neither a :class:`MarketPreset` nor ``None``.
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

    def configure(
        self,
        overrides: Mapping[str, Any] | None = None,
        *,
        config: Mapping[str, Any] | None = None,
        total_steps: int | None = None,
    ) -> Any:
        """The config to build: the preset's (or ``config``, a saved ``to_dict()`` of a run being
        resumed), with ``total_steps`` in :attr:`steps_field` and ``overrides`` on top
        (:func:`tritonrl.toolkit.config.apply_overrides`: strings from ``--set`` are converted).

        Raises:
            ValueError: an unknown field, or a value that does not convert or that the config rejects.
        """
        base = self.config if config is None else type(self.config).from_dict(config)
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
    ) -> Any:
        """An agent of this preset (see :meth:`configure` for ``overrides``, ``config`` and
        ``total_steps``).

        ``dist`` (a :class:`tritonrl.toolkit.distributed.DistContext`) is passed to the agent as
        ``dist=`` (``num_envs`` is then this rank's share); ``None`` passes nothing, so agent
        classes without a ``dist`` argument keep working (the built-in agents then use
        :func:`tritonrl.toolkit.distributed.current`).

        Raises:
            ValueError: a bad config key or value, or a space the agent cannot drive.
            TypeError: as the agent's constructor.
            tritonrl.toolkit.distributed.DistributedError: as the agent's constructor (the ranks
                disagree, a global size does not split evenly).
        """
        cfg = self.configure(overrides, config=config, total_steps=total_steps)
        extra: dict[str, Any] = {} if dist is None else {"dist": dist}
        return self.agent(
            observation_space, action_space, cfg, num_envs=num_envs, device=device, seed=seed, **extra
        )


def find_preset(presets: Iterable[Preset], name: str, family: str = "agent") -> Preset:
    """The preset called ``name`` among ``presets`` (an agent module's ``PRESETS``).

    Raises:
        ValueError: none is called so (``"unknown DQN preset 'x'; choose one of dqn, double, ..."``).
    """
    presets = tuple(presets)
    for p in presets:
        if p.name == name:
            return p
    raise ValueError(f"unknown {family} preset {name!r}; choose one of {', '.join(p.name for p in presets)}")
