"""The agent protocol, and the checkpoint plumbing every agent family shares.

[`Agent`][tritonrl.toolkit.agent.Agent] is what
[`tritonrl.toolkit.training.loop.run_training`][tritonrl.toolkit.training.loop.run_training] drives; any
object with its methods works. [`AgentBase`][tritonrl.toolkit.agent.AgentBase] holds the plumbing around an
algorithm: the checkpoint header, check-then-apply loading through three hooks, the deferred input checks and
the data-parallel helpers. See docs/pages/checkpoints.md ("The plumbing an agent inherits").
"""

from __future__ import annotations

import abc
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

import gymnasium as gym
import torch
from tritonrl.kernels.backend import backend_override
from tritonrl.kernels.validate import check_int
from tritonrl.toolkit import distributed
from tritonrl.toolkit.acting import ActingPolicy, LearnerPolicy
from tritonrl.toolkit.checkpoint import CheckpointError, brief, cut, load_checkpoint, save_checkpoint
from tritonrl.toolkit.checks import InputGuard, StepShapes, check_image_bytes
from tritonrl.toolkit.config import Config, check_config_dict, fixed_changes, format_change
from tritonrl.toolkit.distributed import DistContext, DistributedError
from tritonrl.toolkit.optim import MasterWeightOptimizer
from tritonrl.toolkit.policy import GreedyActor
from tritonrl.toolkit.precision import training_dtype
from tritonrl.toolkit.runstate import agent_state, generator_state_fits, nonfinite_entry, section
from tritonrl.toolkit.seeding import rank_seed, reseed
from tritonrl.toolkit.spaces import space_from_json, space_to_json

__all__ = [
    "LaggedActor",
    "OverlapAgent",
    "Agent",
    "AgentBase",
    "broadcast_modules_",
    "check_header",
    "checkpoint_header",
    "join_ranks",
    "read_header",
]

_Built = TypeVar("_Built")


@runtime_checkable
class Agent(Protocol):
    """What the shared loop and the collector (through `acting_policy`) drive.

    Optional extras the loop uses when present: ``eval_policy()``, ``check_inputs()``,
    ``check_state_dict(state)``, ``parameters()`` and ``experience_keys`` (entries not scanned for NaN).
    """

    config: Any
    """The agent's frozen config (its ``lr``, if any, is named in divergence messages)."""

    def act(self, obs: Any, explore: bool = True) -> torch.Tensor:
        """Actions for a batch of observations ``[E, *obs_shape]``."""
        ...

    def observe(
        self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any, truncated: Any
    ) -> None:
        """Store one vector step (leading dim ``E`` everywhere)."""
        ...

    def update(self) -> Mapping[str, torch.Tensor]:
        """Learn; return f32 scalar metrics on the device."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore `state_dict` output (checked before anything changes)."""
        ...

    def acting_policy(self, sync_every: int = 1) -> ActingPolicy:
        """The policy a collector acts with (`tritonrl.toolkit.acting`): an f32 snapshot
        refreshed every ``sync_every`` learner updates, or the learner itself."""
        ...


# ----------------------------------------------------------------------------- the header


@runtime_checkable
class LaggedActor(Protocol):
    """Acts for an overlapped run from its own copy of the learner's tensors."""

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        """Exploring actions ``[E, ...]`` for ``obs [E, *obs_shape]`` (own steps and generator)."""
        ...

    def load(self, tensors: Sequence[torch.Tensor]) -> None:
        """Refresh the acting copy from ``tensors`` (in the order of ``learner_tensors()``)."""
        ...

    def eval_policy(self) -> Callable[[Any], torch.Tensor]:
        """Greedy actions of the acting copy for any number of observations (evaluations)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint holds of the actor (its copy, generator, steps)."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what `state_dict` returned."""
        ...


@runtime_checkable
class OverlapAgent(Protocol):
    """What an agent gives an overlapped run (``LoopConfig(overlap=True)``), beyond `Agent`.

    Optional too: ``check_lagged()`` (raise ``ValueError`` for what it cannot do lagged) and
    ``observe_steps(obs, action, ..., **extras)`` (a block of ``[T, E, ...]`` steps at once, with what
    the actor staged beside them). See docs/pages/training.md, "Overlapped acting and learning".
    """

    def learner_tensors(self) -> list[torch.Tensor]:
        """The learner's tensors the actor acts from, in a fixed order."""
        ...

    def lagged_actor(self) -> LaggedActor:
        """A fresh actor whose copy holds the learner's tensors now."""
        ...


def checkpoint_header(
    kind: str, config: Any, observation_space: gym.Space, action_space: gym.Space, num_envs: int, seed: int
) -> dict[str, Any]:
    """The first entries of every agent state: ``agent`` (the kind), ``config``, the two spaces,
    ``num_envs`` and ``seed``."""
    return {
        "agent": kind,
        "config": config.to_dict(),
        "observation_space": space_to_json(observation_space),
        "action_space": space_to_json(action_space),
        "num_envs": int(num_envs),
        "seed": int(seed),
    }


def _space_mismatch(words: str, saved: Any, own: dict[str, Any]) -> str | None:
    """``None`` if ``saved`` equals ``own`` (both `space_to_json` descriptions), else the words."""
    if saved == own:
        return None
    box = isinstance(saved, Mapping) and saved.get("type") == own["type"] == "Box"
    if box and saved.get("shape") != own["shape"]:
        return f"{words} shape {brief(saved.get('shape'), 40)} does not match this agent's {own['shape']}"
    return f"{words} space {brief(saved, 80)} does not match this agent's {brief(own, 80)}"


def check_header(
    state: Any,
    *,
    kind: str,
    observation_space: gym.Space,
    action_space: gym.Space,
    num_envs: int | None,
    where: str,
) -> None:
    """Raise `tritonrl.toolkit.checkpoint.CheckpointError` (message from ``where``) unless
    ``state``'s header has this agent's kind, spaces and ``num_envs`` (``None``: not compared)."""
    if not isinstance(state, Mapping) or state.get("agent") != kind:
        got = state.get("agent") if isinstance(state, Mapping) else type(state).__name__
        raise CheckpointError(f"{where}: holds a {brief(got, 40)} agent, not a {kind!r} agent")
    for key, words, space in (
        ("observation_space", "observation", observation_space),
        ("action_space", "action", action_space),
    ):
        wrong = _space_mismatch(words, section(state, key, where, f"the {words} space"), space_to_json(space))
        if wrong:
            raise CheckpointError(f"{where}: {wrong}")
    if num_envs is None:
        return
    saved_envs = section(state, "num_envs", where, "the number of environments")
    if type(saved_envs) is not int or saved_envs != num_envs:
        raise CheckpointError(
            f"{where}: saved with num_envs={brief(saved_envs, 20)}, this agent has {num_envs}"
        )


def read_header(
    state: Mapping[str, Any], config_class: type[Config], where: str
) -> tuple[Any, gym.Space, gym.Space, int, int]:
    """``(config, observation_space, action_space, num_envs, seed)`` of a saved agent state.

    Raises:
        CheckpointError, ValueError, TypeError, KeyError: an entry is missing or malformed.
    """
    config = section(state, "config", where, "the agent config")
    check_config_dict(config_class, config, where="config")
    obs_space = space_from_json(section(state, "observation_space", where, "the observation space"))
    act_space = space_from_json(section(state, "action_space", where, "the action space"))
    num_envs, seed = section(state, "num_envs", where), section(state, "seed", where)
    if type(num_envs) is not int or type(seed) is not int:
        raise ValueError(f"num_envs={brief(num_envs, 20)} and seed={brief(seed, 20)} must be ints")
    return config_class.from_dict(config), obs_space, act_space, num_envs, seed


def join_ranks(
    dist: DistContext | None,
    *,
    kind: str,
    config: Any,
    observation_space: gym.Space,
    action_space: gym.Space,
    num_envs: int,
    device: torch.device,
) -> DistContext:
    """The agent's data-parallel context (``dist``, or the current one), after checking that every rank
    builds the same agent (config, kind, spaces, ``num_envs``). Every rank must call it.

    Raises:
        DistributedError: on every rank, naming what differs and where; or an NCCL context for an
            agent not on a CUDA device.
    """
    ctx = dist if dist is not None else distributed.current()
    if not ctx.enabled:
        return ctx
    if ctx.backend == "nccl" and device.type != "cuda":
        raise DistributedError(
            f"the process group runs NCCL, which needs the agent on a CUDA device, not {device}"
        )
    ctx.check_same("agent config", config.to_dict())
    ctx.check_same(
        "agent environments",
        {
            "agent": kind,
            "num_envs": int(num_envs),
            "observation_space": space_to_json(observation_space),
            "action_space": space_to_json(action_space),
        },
    )
    return ctx


def broadcast_modules_(dist: DistContext, *modules: torch.nn.Module | None) -> None:
    """Overwrite every parameter and buffer of ``modules`` with rank 0's, in place (``None``
    entries are skipped; no-op in a single process). Every rank must pass the same modules."""
    if not dist.enabled:
        return
    tensors: list[torch.Tensor] = []
    for m in modules:
        if m is not None:
            tensors.extend(m.parameters())
            tensors.extend(m.buffers())
    dist.broadcast_tensors_(tensors)


# ----------------------------------------------------------------------------- the base class

_STATE_KEYS = frozenset(
    ("agent", "config", "observation_space", "action_space", "num_envs", "seed", "counters", "generator")
)
"""The entries `AgentBase.state_dict` writes around an agent's own parts."""


class AgentBase(abc.ABC):
    """The constructor prologue, save, load, check-then-apply ``load_state_dict`` and ``check_inputs``
    shared by the agent families.

    A subclass sets [`kind`][tritonrl.toolkit.agent.AgentBase.kind] and
    [`config_class`][tritonrl.toolkit.agent.AgentBase.config_class], starts its constructor with
    `_init_agent`, builds networks with `_build_seeded` and optimizers with `_adam`, and
    implements ``_state_parts``, ``_check_parts`` and ``_load_parts`` (docs/pages/checkpoints.md).
    """

    kind: ClassVar[str]
    """The ``agent`` entry of the state (``"dqn"``, ``"ppo"``)."""
    config_class: ClassVar[type[Config]]
    """The config dataclass (with ``to_dict`` / ``from_dict``)."""
    rank_part_keys: ClassVar[tuple[str, ...]] = ("generator",)
    """The top-level entries of `state_dict` that are this rank's own in a data-parallel run
    (present or not; every other entry is shared by the ranks): what a checkpoint keeps per rank,
    and what ``load_state_dict(..., rank_parts=False)`` neither needs nor reads."""
    part_keys: ClassVar[tuple[str, ...] | None] = None
    """Every top-level entry `_state_parts` may write (``None``: the ones it writes now); a
    state with any other entry is refused at load (a damaged file, or another program's state)."""
    experience_keys: ClassVar[tuple[str, ...]] = ()
    """The entries that hold stored experience (replay, rollout): the one part of a state not
    scanned for NaN or infinite values at load and save (every other floating tensor must be
    finite: weights, optimizer moments, masters, statistics, memories)."""

    config: Any
    observation_space: gym.Space
    action_space: gym.Space
    num_envs: int
    seed: int
    device: torch.device
    dtype: torch.dtype
    generator: torch.Generator
    env_steps: int
    updates: int
    inputs: InputGuard
    dist: DistContext

    # ---- construction

    def _init_agent(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: Any,
        *,
        num_envs: int,
        device: torch.device | str,
        seed: int,
        dist: DistContext | None,
    ) -> None:
        """The prologue of every agent constructor: check the arguments, join the ranks, set the common
        attributes, check the backend override, seed the generator
        ([`rank_seed`][tritonrl.toolkit.agent.rank_seed]), zero the counters.

        Raises:
            TypeError: ``config`` is not a [`config_class`][tritonrl.toolkit.agent.AgentBase.config_class].
            ValueError: ``num_envs`` is not a positive int, or the backend override cannot run here.
            tritonrl.toolkit.distributed.DistributedError: the ranks' agents differ (on every rank).
        """
        if not isinstance(config, self.config_class):
            raise TypeError(f"config must be a {self.config_class.__name__}, got {type(config).__name__}")
        check_int("num_envs", num_envs, low=1)
        self.device = torch.device(device)
        self.dist = join_ranks(
            dist,
            kind=self.kind,
            config=config,
            observation_space=observation_space,
            action_space=action_space,
            num_envs=num_envs,
            device=self.device,
        )
        """The data-parallel context (a single process: every collective is a no-op)."""
        self.config = config
        self.observation_space, self.action_space = observation_space, action_space
        self.num_envs = num_envs
        self.seed = int(seed)
        self.dtype = training_dtype(self.device)
        backend_override(self.device)  # a TRITONRL_BACKEND that cannot run here fails now, not mid-run
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(rank_seed(self.seed, self.dist.rank))
        self.env_steps = 0
        self.updates = 0

    def _build_seeded(self, build: Callable[[], _Built]) -> _Built:
        """``build()`` under torch's global generator seeded with ``seed`` (then restored); every rank then
        gets rank 0's parameters and buffers."""
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            torch.manual_seed(self.seed)
            built = build()
        broadcast_modules_(self.dist, *(built if isinstance(built, tuple) else (built,)))
        return built

    def _adam(self, params: Iterable[torch.nn.Parameter], lr: float, **kwargs: Any) -> MasterWeightOptimizer:
        """Fused Adam with f32 master weights, compiled as ``config.compile``, gradients averaged over
        ``dist``; ``kwargs`` go to Adam."""
        return MasterWeightOptimizer(
            params, torch.optim.Adam, compile=self.config.compile, dist=self.dist, lr=lr, fused=True, **kwargs
        )

    # ---- hooks

    @abc.abstractmethod
    def _state_parts(self) -> dict[str, Any]:
        """The agent's own entries of `state_dict` (networks, optimizers, buffers, ...)."""

    @abc.abstractmethod
    def _check_parts(self, state: Mapping[str, Any], where: str, rank_parts: bool) -> dict[str, Any]:
        """Validate the agent's own entries of ``state`` and return what `_load_parts` needs; changes
        nothing. Raises ``CheckpointError``, ``ValueError``, ``TypeError`` or ``KeyError``.
        ``rank_parts=False``: only the entries every rank shares are read."""

    @abc.abstractmethod
    def _load_parts(self, state: Mapping[str, Any], staged: dict[str, Any], rank_parts: bool) -> None:
        """Apply the agent's own entries (already checked; counters already restored);
        ``rank_parts=False``: the shared ones, and this rank's own parts start fresh."""

    # ---- shared

    def check_inputs(self) -> None:
        """Raise the ``ValueError`` of a failed deferred input check now (one host sync when pending)."""
        self.inputs.check()

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly: the header (`checkpoint_header`), counters,
        the agent's generator, and the agent's own parts."""
        return {
            **checkpoint_header(
                self.kind, self.config, self.observation_space, self.action_space, self.num_envs, self.seed
            ),
            "counters": {"env_steps": self.env_steps, "updates": self.updates},
            "generator": self.generator.get_state(),
            **self._state_parts(),
        }

    def check_state_dict(
        self, state: Mapping[str, Any], *, where: str = "agent state", rank_parts: bool = True
    ) -> None:
        """Raise `tritonrl.toolkit.checkpoint.CheckpointError` (from ``where``) unless ``state`` fits
        this agent in every entry `load_state_dict` reads (``rank_parts=False``: the shared ones)."""
        self._check_state(state, where, rank_parts)

    def _check_state(
        self, state: Mapping[str, Any], where: str, rank_parts: bool = True
    ) -> tuple[dict[str, Any], bool]:
        """`check_state_dict`, returning the staged parts and whether the generator state fits."""
        check_header(
            state,
            kind=self.kind,
            observation_space=self.observation_space,
            action_space=self.action_space,
            num_envs=self.num_envs if rank_parts else None,
            where=where,
        )
        parts = self.part_keys if self.part_keys is not None else tuple(self._state_parts())
        unknown = sorted(str(k) for k in set(state) - _STATE_KEYS - set(parts))
        if unknown:
            raise CheckpointError(
                f"{where}: unknown agent entry {brief(unknown[0], 40)} (a {self.kind!r} state has no such "
                "entry: a damaged file, or another program's state)"
            )
        bad = nonfinite_entry(state, skip=self.experience_keys)
        if bad is not None:
            raise CheckpointError(
                f"{where}: agent tensor {brief(bad, 100)} holds NaN or infinite values (the state of a "
                "diverged run cannot be resumed)"
            )
        try:
            staged = self._check_parts(state, where, rank_parts)
            counters = section(state, "counters", where, "the step counters")
            for key in ("env_steps", "updates"):
                value = section(counters, key, where, f"the {key} counter")
                if type(value) is not int or value < 0:
                    raise ValueError(f"counter {key}={brief(value, 20)} is not a non-negative int")
            seed = section(state, "seed", where, "the seed")
            if type(seed) is not int:
                raise ValueError(f"seed={brief(seed, 20)} is not an int")
            fits = False
            if rank_parts:
                generator = section(state, "generator", where, "the generator state")
                fits = generator_state_fits(generator, self.device)
            config = section(state, "config", where, "the agent config")
            check_config_dict(self.config_class, config, where="config")
            fixed = fixed_changes(self.config_class.from_dict(config), self.config)
            if fixed:
                changes = ", ".join(format_change(k, *v) for k, v in list(fixed.items())[:3])
                raise ValueError(f"saved with another config: {changes} (fields a resume cannot change)")
        except CheckpointError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{where}: {cut(str(exc), 240)}") from None
        return staged, fits

    def load_state_dict(
        self, state: Mapping[str, Any], *, where: str = "agent state", rank_parts: bool = True
    ) -> None:
        """Restore a `state_dict`, possibly saved in another dtype or on another device.

        Learning rates come from this agent's config. A generator saved on another device type is
        reseeded deterministically ([`reseed`][tritonrl.toolkit.agent.reseed]). ``rank_parts=False`` loads
        only the state every rank shares and starts this rank's own parts fresh: how N ranks resume on M.

        Raises:
            tritonrl.toolkit.checkpoint.CheckpointError: any mismatch, all checked before anything changes.
        """
        staged, generator_fits = self._check_state(state, where, rank_parts)
        counters = state["counters"]
        if generator_fits:
            self.generator.set_state(state["generator"].cpu())
        else:
            reseed(self.generator, rank_seed(self.seed, self.dist.rank), counters["updates"])
        self.env_steps = counters["env_steps"]
        self.updates = counters["updates"]
        self._load_parts(state, staged, rank_parts)

    def save(self, path: str | os.PathLike) -> None:
        """Write `state_dict` atomically (`tritonrl.toolkit.checkpoint.save_checkpoint`)."""
        save_checkpoint(path, self.state_dict())

    @classmethod
    def load(cls, path: str | os.PathLike, device: torch.device | str | None = None) -> Any:
        """Rebuild an agent saved with `save`, or from a run's checkpoint, on ``device`` (default CPU).

        Raises:
            tritonrl.toolkit.checkpoint.CheckpointError: unreadable, foreign or not fitting.
        """
        where = str(path)
        state = agent_state(load_checkpoint(path), cls.kind, where)
        try:
            config, obs_space, act_space, num_envs, seed = read_header(state, cls.config_class, where)
            agent = cls(
                obs_space,
                act_space,
                config,
                num_envs=num_envs,  # type: ignore[call-arg]
                device=device if device is not None else "cpu",
                seed=seed,
            )
        except CheckpointError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(
                f"{where}: not a usable {cls.kind.upper()} checkpoint ({cut(str(exc), 160)})"
            ) from None
        agent.load_state_dict(state, where=where)
        return agent

    def eval_check(self, obs: torch.Tensor) -> None:
        """The checks of `eval_policy`'s observations ``[N, *obs_shape]``: shape, uint8 images, NaN/inf.

        Raises:
            ValueError: a wrong shape, NaN or infinite values.
            TypeError: image observations that are not uint8.
        """
        owner = f"{type(self).__name__}.eval_policy"
        shape = getattr(self, "obs_shape", None)
        if shape is not None and tuple(obs.shape[1:]) != tuple(shape):
            raise ValueError(
                f"{owner}: obs has shape {tuple(obs.shape)}, expected [N, *{tuple(shape)}] or one "
                f"observation {tuple(shape)}"
            )
        if getattr(self, "pixel_scale", None) is not None:
            check_image_bytes(type(self).__name__, "eval_policy", obs)
            return
        self.inputs.obs("eval_policy", "obs", obs)

    # ---- observations entering the agent (act, observe): one check-and-cast for every family

    obs_shape: tuple[int, ...]
    shapes: StepShapes
    ingest_rows: ClassVar[str] = "batch"
    """How `_ingest`'s shape error names the leading dim (``"E"``: one row per env)."""

    def _ingest(
        self, obs: Any, call: str | None = None, dtype: torch.dtype | None = None, **hook: Any
    ) -> torch.Tensor:
        """The one cast of observations ``[B, *obs_shape]`` entering the agent, after checking the shape and
        uint8 images (cast and scaled) or NaN/inf; ``dtype`` ``None`` is the training dtype.

        Raises:
            ValueError: a wrong shape; NaN/inf (host inputs at once, see `inputs`).
            TypeError: image observations that are not uint8.
        """
        dtype = self.dtype if dtype is None else dtype
        x = obs if isinstance(obs, torch.Tensor) else torch.as_tensor(obs)
        owner = self.shapes.owner  # how the agent's messages name it ("DQNAgent")
        where = f"{owner}.{call or 'observe'}"
        if tuple(x.shape[1:]) != self.obs_shape:
            raise ValueError(
                f"{where}: obs has shape {tuple(x.shape)}, expected [{self.ingest_rows}, *{self.obs_shape}]"
            )
        if call == "act":  # one row per environment (eval_policy and q_values take any batch)
            self.shapes.act(x)
        scale = getattr(self, "pixel_scale", None)
        if scale is not None:
            check_image_bytes(owner, call or "observe", x)
            return x.to(device=self.device, dtype=dtype).mul_(scale)
        if call is not None:
            self.inputs.obs(call, "obs", x)
        return self._ingest_cast(x, dtype, **hook)

    def _ingest_cast(self, x: torch.Tensor, dtype: torch.dtype, **hook: Any) -> torch.Tensor:
        """`_ingest`'s last step for checked floating observations ``x``: by default ``dtype``
        on the device (a family that normalises or reshapes overrides it)."""
        return x.to(device=self.device, dtype=dtype)

    def eval_policy(self) -> GreedyActor:
        """Greedy acting for evaluation: a `tritonrl.toolkit.policy.GreedyActor` snapshot of
        ``policy()`` behind `eval_check`; a recurrent one keeps its own memory. Changes no counter."""
        make = getattr(self, "policy", None)
        if make is None:
            raise TypeError(f"{type(self).__name__} has no policy(): it cannot evaluate greedily")
        return GreedyActor(make(), self.eval_check)

    def acting_policy(self, sync_every: int = 1) -> ActingPolicy:
        """The policy a collector acts with: the learner itself by default; ``sync_every`` is unused."""
        return LearnerPolicy(self)
