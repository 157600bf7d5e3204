"""What SAC and TD3 share: Box spaces rescaled onto ``[-1, 1]``, the replay, acting, observing,
Polyak targets and the checkpoint parts (the
[`tritonrl.toolkit.agent.AgentBase`][tritonrl.toolkit.agent.AgentBase] hooks).

Actors act in ``[-1, 1]``; ``act`` maps onto the bounds and ``observe`` maps back before storing,
so the critics see ``[-1, 1]``. Before ``learning_starts`` steps, exploring actions are uniform
(as CleanRL). See docs/pages/sac.md.
"""

from __future__ import annotations

import abc
import copy
import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from tritonrl.agents.sac.policy import ContinuousPolicy
from tritonrl.toolkit.acting import SnapshotActor, actor_generator
from tritonrl.toolkit.agent import AgentBase
from tritonrl.toolkit.checkpoint import CheckpointError
from tritonrl.toolkit.checks import ActionRule, InputGuard, StepShapes
from tritonrl.toolkit.compile import Compiled, escape
from tritonrl.toolkit.distributed import DistContext
from tritonrl.toolkit.optim import MasterWeightOptimizer, polyak_
from tritonrl.toolkit.replay import ReplayBatch, ReplayBuffer
from tritonrl.toolkit.runstate import check_module_tensors, load_into_module, section

__all__ = ["ContinuousAgent", "NO_CLIP"]

NO_CLIP = math.inf
"""The gradient-norm bound of every step: none (as CleanRL; ``clip_and_step`` then only steps)."""


def _box(space: gym.Space, what: str, owner: str) -> gym.spaces.Box:
    if not isinstance(space, gym.spaces.Box):
        more = " (Discrete actions: the DQN family or PPO)" if what == "action" else ""
        raise ValueError(f"{what}_space={space}: {owner} needs a Box {what} space{more}")
    return space


class ContinuousAgent(AgentBase):
    """The shared part of `tritonrl.agents.sac.SACAgent` and `tritonrl.agents.sac.TD3Agent`.

    A subclass names `default_config`, builds its networks in `_build`, lists them in
    `_nets`, `_optimizers` and `_targets`, and implements `_explore`,
    `_greedy`, ``_critic_loss(...) -> (loss, metrics)`` and ``_actor_loss(...)``.
    """

    rank_part_keys = ("generator", "replay")
    experience_keys = ("replay",)

    default_config: ClassVar[Any]
    """The config of an agent built without one (the family's preset's)."""
    policy_class: ClassVar[type[ContinuousPolicy]]
    """The family's policy module (`policy`)."""

    actor: nn.Module
    critic: nn.Module
    actor_optimizer: MasterWeightOptimizer
    critic_optimizer: MasterWeightOptimizer
    center: torch.Tensor
    scale: torch.Tensor
    _critic_loss: Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]
    """The subclass's critic loss (a method): ``(l1 + l2, metrics)``, compiled as ``_learn_q``."""
    _actor_loss: Callable[..., torch.Tensor]
    """The subclass's actor loss (a method): an f32 scalar, compiled as ``_learn_pi``."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: Any = None,
        *,
        num_envs: int = 1,
        device: torch.device | str = "cpu",
        seed: int = 0,
        dist: DistContext | None = None,
    ) -> None:
        cfg = config if config is not None else self.default_config
        self._init_continuous(
            observation_space, action_space, cfg, num_envs=num_envs, device=device, seed=seed, dist=dist
        )
        self._build(cfg)
        self._actor_params = list(self.actor.parameters())
        # The compiled regions (tritonrl.toolkit.compile): each loss with its backward; the noise
        # is drawn from the agent's generator outside them.
        self._learn_q = Compiled(self._critic_loss, cfg.compile, self.device)
        self._learn_pi = Compiled(self._actor_loss, cfg.compile, self.device)

    def _init_continuous(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        cfg: Any,
        *,
        num_envs: int,
        device: torch.device | str,
        seed: int,
        dist: DistContext | None,
    ) -> None:
        """`_init_agent`, then the spaces, bounds, input checks and replay.

        Raises:
            ValueError: a space that is not a ``Box``, or infinite or empty action bounds.
        """
        owner = type(self).__name__
        obs_box = _box(observation_space, "observation", owner)
        act_box = _box(action_space, "action", owner)
        low = np.asarray(act_box.low, dtype=np.float64).reshape(-1)
        high = np.asarray(act_box.high, dtype=np.float64).reshape(-1)
        if not (np.isfinite(low).all() and np.isfinite(high).all()) or not (high > low).all():
            raise ValueError(
                f"action_space={action_space}: {owner} needs finite bounds with low < high (its actor "
                "is squashed into them)"
            )
        self._init_agent(
            observation_space, action_space, cfg, num_envs=num_envs, device=device, seed=seed, dist=dist
        )
        self.obs_shape = tuple(int(s) for s in obs_box.shape)
        self.obs_dim = math.prod(self.obs_shape)
        self.action_shape = tuple(int(s) for s in act_box.shape)
        self.action_dim = math.prod(self.action_shape)
        f32: dict[str, Any] = {"dtype": torch.float32, "device": self.device}
        self.center = torch.tensor((high + low) / 2, **f32)
        """``[D]`` f32: the middle of each action dimension's bounds."""
        self.scale = torch.tensor((high - low) / 2, **f32)
        """``[D]`` f32: the half-range of each action dimension (``a_env = center + scale * a``)."""
        self.batch_size = self.dist.shard(cfg.batch_size, "batch_size")
        """Transitions this rank samples per update."""
        self.buffer_size = self.dist.shard(cfg.buffer_size, "buffer_size")
        """This rank's replay capacity."""
        self.shapes = StepShapes(owner, num_envs, self.obs_shape, self.action_shape)
        """The shape and dtype checks of ``act``/``observe`` arguments."""
        self.inputs = InputGuard(owner, ActionRule.box(low, high, bounded=True))
        """The checks of ``act``/``observe`` inputs (NaN/inf observations and rewards, actions
        outside the bounds); its ``mode`` says when inputs on an accelerator are checked."""
        self.replay_staging = "host" if self.device.type == "cpu" else "device"
        self.buffer = self._build_buffer()

    def _build_buffer(self) -> ReplayBuffer:
        """An empty one-step replay of this rank's share: observations in the training dtype,
        actions f32 in ``[-1, 1]`` (checked by the agent before they are stored)."""
        return ReplayBuffer(
            self.buffer_size,
            self.obs_shape,
            device=self.device,
            num_envs=self.num_envs,
            n_step=1,
            gamma=self.config.gamma,
            action_shape=self.action_shape,
            action_dtype=torch.float32,
            staging=self.replay_staging,
        )

    def _target_masters(self, target: nn.Module) -> list[torch.Tensor] | None:
        """f32 copies of ``target``'s parameters when they are not f32 (Polyak averaging in bf16
        would round ``tau``-sized steps away), else ``None``."""
        if self.dtype == torch.float32:
            return None
        return [p.detach().float().clone() for p in target.parameters()]

    # ------------------------------------------------------------------ subclass hooks

    @abc.abstractmethod
    def _build(self, cfg: Any) -> None:
        """Build the networks, their targets and the optimizers of config ``cfg`` (after
        `_init_continuous`: spaces, bounds, checks and replay are set)."""

    @abc.abstractmethod
    def _nets(self) -> dict[str, nn.Module]:
        """Every module of the agent's state, by entry name."""

    @abc.abstractmethod
    def _optimizers(self) -> dict[str, tuple[MasterWeightOptimizer, float]]:
        """Every optimizer by entry name, with the learning rate the config gives it."""

    @abc.abstractmethod
    def _targets(
        self,
    ) -> dict[str, tuple[nn.Module, nn.Module, list[torch.Tensor] | None, MasterWeightOptimizer]]:
        """``{master entry: (target, online, f32 target masters or None, online's optimizer)}``."""

    @abc.abstractmethod
    def _explore(self, actor: Any, x: torch.Tensor, randn: Callable[[int], torch.Tensor]) -> torch.Tensor:
        """Exploring actions ``[B, D]`` f32 in ``[-1, 1]`` of ``actor`` for ``x [B, O]``."""

    @abc.abstractmethod
    def _greedy(self, actor: Any, x: torch.Tensor) -> torch.Tensor:
        """Deterministic actions ``[B, D]`` f32 in ``[-1, 1]`` of ``actor``."""

    # ------------------------------------------------------------------ acting

    def _ingest_cast(self, x: torch.Tensor, dtype: torch.dtype, **hook: Any) -> torch.Tensor:
        """`AgentBase._ingest`'s cast (f32 or numpy -> training dtype on the device),
        flattened to ``[B, O]``."""
        return x.to(device=self.device, dtype=dtype).reshape(x.shape[0], self.obs_dim)

    def _uniform(self, rows: int, generator: torch.Generator) -> torch.Tensor:
        """Uniform random actions ``[rows, D]`` f32 in ``[-1, 1]`` from ``generator`` (the
        exploration before ``learning_starts``)."""
        a = torch.rand((rows, self.action_dim), generator=generator, device=self.device)
        return 2.0 * a - 1.0

    def _to_env(self, a: torch.Tensor) -> torch.Tensor:
        """``[B, D]`` in ``[-1, 1]`` -> ``[B, *action_shape]`` within the bounds (f32)."""
        return (self.center + self.scale * a).reshape(a.shape[0], *self.action_shape)

    @torch.no_grad()
    def act(self, obs: Any, explore: bool = True) -> torch.Tensor:
        """Actions ``[E, *action_shape]`` f32 within the bounds for ``obs [E, *obs_shape]``; no host read.

        ``explore=True``: uniform before ``learning_starts``, then the exploring policy; ``False``:
        the deterministic policy.

        Raises:
            ValueError: ``obs`` has the wrong shape or holds NaN/inf (accelerator tensors: raised at
                the next [`check_inputs`][tritonrl.toolkit.agent.AgentBase.check_inputs]).
        """
        x = self._ingest(obs, "act")
        if not explore:
            a = self._greedy(self.actor, x)
        elif self.env_steps < self.config.learning_starts:
            a = self._uniform(x.shape[0], self.generator)
        else:
            a = self._explore(self.actor, x, self._randn)
        action = self._to_env(a)
        self.inputs.acted(action)
        return action

    # ------------------------------------------------------------------ the policy module

    def _snapshot(self) -> ContinuousPolicy:
        """A `policy_class` of an f32 copy of the actor (the export cast)."""
        actor = copy.deepcopy(self.actor).float().requires_grad_(False)
        return self.policy_class(
            actor, self.observation_space, self.action_space, center=self.center, scale=self.scale
        )

    def policy(self) -> ContinuousPolicy:
        """The policy module (SAC: ``SquashedPolicy``, TD3: ``DeterministicPolicy``): an f32 snapshot."""
        return self._snapshot().eval()

    def learner_tensors(self) -> list[torch.Tensor]:
        """The actor's parameters then buffers (what a policy snapshot mirrors)."""
        return [*self.actor.parameters(), *self.actor.buffers()]

    def lagged_actor(self) -> SnapshotActor:
        """An overlapped run's actor: a policy snapshot exploring as ``act`` on its own step count."""
        generator = actor_generator(self.generator, self.device)
        stride = self.num_envs * self.dist.world_size
        steps = [self.env_steps]
        D, dev = self.action_dim, self.device

        def randn(rows: int) -> torch.Tensor:
            return torch.randn((rows, D), generator=generator, device=dev)

        def act(policy: ContinuousPolicy, obs: Any) -> torch.Tensor:
            x = policy.ingest(torch.as_tensor(obs, device=dev))
            if steps[0] < self.config.learning_starts:
                a = self._uniform(x.shape[0], generator)
            else:
                a = self._explore(policy.actor, x, randn)
            steps[0] += stride
            return policy.to_env(a)

        return SnapshotActor(self._snapshot(), act, generator, steps, check=self.eval_check)

    def observe(
        self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any, truncated: Any
    ) -> None:
        """Store one vector-env step (leading dim ``num_envs``), ``action`` within the bounds.

        Raises:
            ValueError: a shape that is not ``[num_envs, ...]``, NaN/inf, or an action outside the
                bounds, named with the first bad entry (accelerator tensors: raised later).
            TypeError: ``terminated``/``truncated`` not boolean, or ``reward`` not real numbers.
        """
        self.shapes.observe(obs, action, reward, next_obs, terminated, truncated)
        g = self.inputs
        g.obs("observe", "obs", obs)
        g.action("observe", action)
        g.reward("observe", reward)
        g.obs("observe", "next_obs", next_obs)
        a = (
            torch.as_tensor(action, dtype=torch.float32)
            .to(self.device)
            .reshape(self.num_envs, self.action_dim)
        )
        a = ((a - self.center) / self.scale).reshape(self.num_envs, *self.action_shape)
        self.buffer.add(obs, a, reward, next_obs, terminated, truncated, check=False)  # checked above
        self.env_steps += self.num_envs * self.dist.world_size  # global: every rank's environments

    # ------------------------------------------------------------------ learning helpers

    def _sample(self) -> Any:
        """A replay batch of `batch_size`, actions ``[B, D]``; ``RuntimeError`` if too few stored."""
        if self.inputs.pending and self.inputs.check_at_update:
            self.inputs.check()
        if len(self.buffer) < self.batch_size:
            raise RuntimeError(
                f"the replay buffer holds {len(self.buffer)} transitions, fewer than "
                f"batch_size={self.batch_size}: call update() after learning_starts"
            )
        batch = self.buffer.sample(self.batch_size, generator=self.generator)
        B = batch.obs.shape[0]
        return batch._replace(
            obs=batch.obs.reshape(B, -1),
            next_obs=batch.next_obs.reshape(B, -1),
            action=batch.action.reshape(B, -1),
        )

    def _twin_td_loss(
        self, batch: ReplayBatch, y: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(l1 + l2, metrics)``: the squared TD errors of both critics against the targets
        ``y [B]`` f32 (inside a compiled critic loss)."""
        q1, q2 = self.critic(batch.obs, batch.action.to(self.dtype))  # the action's ingestion cast
        l1 = (q1 - y).square().mean()
        l2 = (q2 - y).square().mean()
        metrics = {
            "losses/qf1_values": q1.detach().mean(),
            "losses/qf2_values": q2.detach().mean(),
            "losses/qf1_loss": l1.detach(),
            "losses/qf2_loss": l2.detach(),
        }
        return l1 + l2, metrics

    def _critic_step(self, *args: Any) -> dict[str, torch.Tensor]:
        """One step of the critics on the compiled critic loss of ``args``; its metrics, with
        ``losses/qf_loss`` (the mean of the two, as CleanRL logs it)."""
        self._learn_q.step_begin()
        self.critic_optimizer.zero_grad()
        qf_loss, metrics = self._learn_q(*args)
        qf_loss.backward()
        self.critic_optimizer.clip_and_step(NO_CLIP)
        metrics["losses/qf_loss"] = qf_loss.detach() / 2.0
        out: dict[str, torch.Tensor] = escape(metrics, self._learn_q)
        return out

    def _actor_step(self, *args: Any) -> torch.Tensor:
        """One step of the actor on the compiled actor loss of ``args`` (the critics' weights get
        no gradient); the loss, detached and escaped from the compiled region."""
        self._learn_pi.step_begin()
        self.actor_optimizer.zero_grad()
        loss = self._learn_pi(*args)
        loss.backward(inputs=self._actor_params)
        self.actor_optimizer.clip_and_step(NO_CLIP)
        out: torch.Tensor = escape(loss.detach(), self._learn_pi)
        return out

    def _randn(self, rows: int) -> torch.Tensor:
        """Standard normals ``[rows, D]`` f32 from the agent's generator (outside compiled regions)."""
        return torch.randn((rows, self.action_dim), generator=self.generator, device=self.device)

    @torch.no_grad()
    def _soft_update(self, name: str) -> None:
        """Polyak-average (``tau < 1``) or copy (``tau == 1``) the online weights of target
        ``name`` into it; in bf16 through f32 masters (averaged from the optimizer's masters)."""
        cache = self.__dict__.setdefault("_polyak_lists", {})
        if name not in cache:  # the parameter lists, gathered once (module walks cost per update)
            target, online, masters, optimizer = self._targets()[name]
            cache[name] = (list(target.parameters()), list(online.parameters()), masters, optimizer.masters)
        t_params, o_params, masters, o_masters = cache[name]
        tau = self.config.tau
        if masters is None:
            polyak_(t_params, o_params, tau)
        else:
            polyak_(masters, o_masters, tau, round_into=t_params)

    # ------------------------------------------------------------------ checkpoint parts

    def _state_parts(self) -> dict[str, Any]:
        state: dict[str, Any] = {name: m.state_dict() for name, m in self._nets().items()}
        state.update({name: opt.state_dict() for name, (opt, _) in self._optimizers().items()})
        state["replay"] = self.buffer.state_dict()
        for name, (_, _, masters, _) in self._targets().items():
            if masters is not None:
                state[name] = [m.clone() for m in masters]
        return state

    def _check_parts(self, state: Mapping[str, Any], where: str, rank_parts: bool) -> dict[str, Any]:
        for name, module in self._nets().items():
            check_module_tensors(
                module, section(state, name, where, f"the {name} network"), where=f"{where} ({name})"
            )
        for name, (opt, _) in self._optimizers().items():
            opt.check_state_dict(section(state, name, where, f"the {name} state"))
        for name, (target, _, _, _) in self._targets().items():
            saved = state.get(name)
            if saved is None:
                continue
            shapes = [tuple(p.shape) for p in target.parameters()]
            got = (
                [
                    tuple(m.shape) if isinstance(m, torch.Tensor) and m.is_floating_point() else None
                    for m in saved
                ]
                if isinstance(saved, list)
                else None
            )
            if got != shapes:
                raise CheckpointError(f"{where}: {name} does not hold a float tensor per target parameter")
        staged: dict[str, Any] = {}
        if rank_parts:
            staged["replay"] = self.buffer.parse_state(section(state, "replay", where, "the replay buffer"))
        return staged

    def _load_parts(self, state: Mapping[str, Any], staged: dict[str, Any], rank_parts: bool) -> None:
        for name, module in self._nets().items():
            load_into_module(module, state[name])
        for name, (opt, lr) in self._optimizers().items():
            opt.load_state_dict(state[name])
            opt.set_lr(lr)
        if rank_parts:
            self.buffer.apply_state(staged["replay"])
        elif self.buffer.steps:
            self.buffer = None  # type: ignore[assignment]  # release the storage first
            self.buffer = self._build_buffer()
        for name, (target, _, masters, _) in self._targets().items():
            if masters is not None:
                saved = state.get(name)
                src = saved if saved is not None else list(target.parameters())
                for m, s in zip(masters, src, strict=True):
                    m.copy_(s.to(device=m.device, dtype=m.dtype))
