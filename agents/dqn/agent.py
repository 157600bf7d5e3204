"""The DQN agent: act epsilon-greedily (or with noisy weights), observe into a replay, update.

What the config switches on is in `tritonrl.agents.dqn`; the config, the network, the
presets, the spaces, the replays and the checkpoint parts have modules of their own beside this one.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import torch
from tritonrl.agents.dqn import replay, spaces
from tritonrl.agents.dqn.config import AGENT_KIND, DQNConfig
from tritonrl.agents.dqn.network import QNetwork, build_icm, build_q_network
from tritonrl.agents.dqn.policy import QPolicy, epsilon_greedy, expected_q
from tritonrl.agents.dqn.state import DQNCheckpoint
from tritonrl.agents.nets.factored import branching_q
from tritonrl.agents.td import (
    branching_td_target,
    c51_loss,
    c51_project,
    greedy_actions,
    huber,
    quantile_huber_loss,
    quantile_midpoints,
    scalar_td_target,
)
from tritonrl.toolkit.acting import SnapshotActor, SnapshotPolicy, actor_generator
from tritonrl.toolkit.agent import AgentBase
from tritonrl.toolkit.checks import ActionRule, InputGuard, StepShapes, check_image_bytes
from tritonrl.toolkit.compile import Compiled, escape
from tritonrl.toolkit.distributed import DistContext
from tritonrl.toolkit.optim import polyak_
from tritonrl.toolkit.replay import (
    FrameReplayBuffer,
    PrioritizedFrameReplayBuffer,
    PrioritizedReplayBuffer,
    ReplayBatch,
    ReplayBuffer,
)
from tritonrl.toolkit.spaces import pixel_scale

__all__ = ["DQNAgent"]

_DEFAULT_CONFIG = DQNConfig(tags=("dqn",))
HOST_EXPLORE_ENVS = 32
"""Up to this many environments a CPU agent draws its exploration on the host (``act``)."""
"""The config of an agent built without one: the ``dqn`` preset's (a test keeps them equal)."""


class DQNAgent(DQNCheckpoint, AgentBase):
    """A DQN-family agent; the config's switches are listed in `tritonrl.agents.dqn`.

    Checkpoints and ``check_inputs`` are
    [`tritonrl.toolkit.agent.AgentBase`][tritonrl.toolkit.agent.AgentBase]'s.

    Args:
        observation_space: a gymnasium ``Box``.
        action_space: ``Discrete`` (Q head) or ``MultiDiscrete`` (branching head).
        config: a [`DQNConfig`][tritonrl.agents.dqn.config.DQNConfig] (default: the ``dqn`` preset).
        device: where networks and replay live; the dtype is ``training_dtype(device)``.
        num_envs: environments per ``observe`` call; with ``dist``, this rank's share.
        seed: seeds the parameters and the agent's generator (per rank:
            [`tritonrl.toolkit.seeding.rank_seed`][tritonrl.toolkit.seeding.rank_seed]).
        dist: the data-parallel context (``None``:
            [`tritonrl.toolkit.distributed.current`][tritonrl.toolkit.distributed.current]); every rank must
            build the agent at the same point.

    Raises:
        ValueError: an unsupported space, a distributional config with a MultiDiscrete space, a
            replay that does not fit in the device's free memory, or a ``TRITONRL_BACKEND`` that
            cannot run on ``device``.
        tritonrl.toolkit.distributed.DistributedError: the ranks' configs, spaces or ``num_envs``
            differ, or ``buffer_size`` or ``batch_size`` is not divisible by the world size.
    """

    kind = AGENT_KIND
    config_class = DQNConfig
    rank_part_keys = ("generator", "replay", "icm_replay")
    part_keys = (
        "online",
        "target",
        "optimizer",
        "replay",
        "target_master",
        "icm",
        "icm_optimizer",
        "icm_replay",
    )
    experience_keys = ("replay", "icm_replay")

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: DQNConfig | None = None,
        *,
        device: torch.device | str = "cpu",
        num_envs: int = 1,
        seed: int = 0,
        dist: DistContext | None = None,
    ) -> None:
        cfg = config if config is not None else _DEFAULT_CONFIG
        self._init_agent(
            observation_space, action_space, cfg, num_envs=num_envs, device=device, seed=seed, dist=dist
        )
        self.batch_size = self.dist.shard(cfg.batch_size, "batch_size")
        """Transitions this rank samples per update: ``batch_size / world_size``."""
        self.buffer_size = self.dist.shard(cfg.buffer_size, "buffer_size")
        """This rank's replay capacity: ``buffer_size / world_size``."""
        self.obs_shape = spaces.obs_shape(observation_space)
        self.pixel_scale = pixel_scale(observation_space)
        """Image observations (uint8 ``[C, H, W]``): the factor that maps their bytes to ``[0, 1]``
        when they enter (``act``, the frame replay's sample); ``None`` for float observations."""
        spaces.check_pixels(cfg, self.obs_shape, self.pixel_scale)
        self.action = spaces.action_spec(action_space)
        self.factored = self.action["type"] == "multidiscrete"
        if self.factored and cfg.distribution != "none":
            raise ValueError(
                f"distribution={cfg.distribution!r} with action_space={action_space}: the factored "
                "(MultiDiscrete) head supports expected-value Q only; use distribution='none'"
            )
        self._action_shape = spaces.action_shape(self.action)
        self.replay_staging = replay.resolve_staging(cfg.replay_staging, self.device)
        """The resolved ``config.replay_staging``: ``"host"`` or ``"device"``."""
        self._check_replay_memory()
        self.shapes = StepShapes("DQNAgent", self.num_envs, self.obs_shape, self._action_shape)
        """The shape and dtype checks of ``act``/``observe`` arguments (`StepShapes`)."""
        self.inputs = InputGuard(
            "DQNAgent",
            ActionRule.discrete(self.action["n"])
            if not self.factored
            else ActionRule.multidiscrete(self.action["nvec"]),
        )
        """The checks of ``act``/``observe`` inputs (`tritonrl.toolkit.checks.InputGuard`); its
        ``mode`` (``"auto"``, ``"eager"``, ``"deferred"``) says when inputs on an accelerator are
        checked."""
        self._build_networks()
        self.buffer = self._build_buffer()
        self.icm_buffer: ReplayBuffer | None = None  # set exactly when icm_module is
        if self.icm_module is not None:
            self.icm_optimizer = self._adam(self.icm_module.parameters(), cfg.icm_lr)
            self.icm_buffer = self._build_icm_buffer()
        self.support: torch.Tensor | None = None
        """C51's ``[atoms]`` f32 support (``None`` for the other heads)."""
        if cfg.distribution == "c51":
            self.support = torch.linspace(cfg.v_min, cfg.v_max, cfg.atoms, device=self.device)
        if cfg.distribution == "qr":
            self.taus = quantile_midpoints(cfg.quantiles, device=self.device)
        self._init_compiled()
        self._init_exploration()

    def _check_replay_memory(self) -> None:
        """Refuse a replay of this rank's ``buffer_size`` share that cannot fit on the device,
        before anything is allocated (`tritonrl.agents.dqn.replay.check_replay_memory`)."""
        replay.check_replay_memory(
            self.config,
            self.buffer_size,
            self.obs_shape,
            self._action_shape,
            num_envs=self.num_envs,
            device=self.device,
            dtype=self.dtype,
            staging=self.replay_staging,
            pixels=self.pixel_scale is not None,
        )

    def _build_networks(self) -> None:
        """The online network and the ICM module (rank 0's weights), the target network copied
        from the online one, the optimizer, and the f32 target masters of a bf16 Polyak average."""
        cfg = self.config
        self.online, self.icm_module = self._build_seeded(
            lambda: (
                build_q_network(self.obs_shape, self.action, cfg, self.device, self.dtype),
                build_icm(self.obs_shape, self.action, cfg, self.device, self.dtype) if cfg.icm else None,
            )
        )
        self.target = copy.deepcopy(self.online)
        self.target.requires_grad_(False)
        self.optimizer = self._adam(self.online.parameters(), cfg.lr, eps=cfg.adam_eps)
        # Polyak averaging in bf16 would round small steps away: average f32 copies instead.
        self._target_master: list[torch.Tensor] | None = None
        if cfg.tau < 1.0 and self.dtype != torch.float32:
            self._target_master = [p.detach().float().clone() for p in self.target.parameters()]

    def _init_compiled(self) -> None:
        """The compiled regions (`tritonrl.toolkit.compile`); the acting forward on CUDA only."""
        cfg = self.config
        self._learn = Compiled(self._loss, cfg.compile, self.device)
        self._learn_icm = Compiled(self._icm_loss, cfg.compile, self.device)
        act_mode = cfg.compile if self.device.type == "cuda" else "none"
        self._act_q = Compiled(self._online_q, act_mode, self.device)

    def _init_exploration(self) -> None:
        """What `_explore` draws from, and whether a CPU agent draws on the host.

        On a CPU with few environments the draws are read on the host, so exploring environments skip
        the greedy forward; the draws, and so the actions, are the same either way.
        """
        host = self.device.type == "cpu" and not self.factored
        self._host_explore = host and self.num_envs <= HOST_EXPLORE_ENVS
        self._num_actions: int | None = None if self.factored else self.action["n"]
        self._nvec = self.online.head.mask.sum(-1) if self.factored else None

    def _build_buffer(self) -> ReplayBuffer | FrameReplayBuffer:
        """An empty replay of this rank's ``buffer_size`` share
        (`tritonrl.agents.dqn.replay.build_replay`)."""
        return replay.build_replay(
            self.config,
            self.buffer_size,
            self.obs_shape,
            self.action,
            num_envs=self.num_envs,
            device=self.device,
            staging=self.replay_staging,
            pixel_scale=self.pixel_scale,
        )

    def _build_icm_buffer(self) -> ReplayBuffer:
        """An empty ICM replay (one-step transitions; `tritonrl.agents.dqn.replay.build_icm_replay`)."""
        return replay.build_icm_replay(
            self.config,
            self.buffer_size,
            self.obs_shape,
            self.action,
            num_envs=self.num_envs,
            device=self.device,
            staging=self.replay_staging,
        )

    # ------------------------------------------------------------------ values

    def _q_of(self, net: QNetwork, x: torch.Tensor) -> torch.Tensor:
        """Expected Q of ``net`` in f32 (`tritonrl.agents.dqn.policy.expected_q`)."""
        return expected_q(net, x, self.config.distribution, self.support, self.factored)

    def q_values(self, obs: torch.Tensor, *, explore: bool = False) -> torch.Tensor:
        """Expected Q values (f32) for ``obs [B, *obs_shape]``; ``explore=False``: noise-free weights."""
        return escape(self._q(self._ingest(obs, "q_values"), explore), self._act_q)

    def _online_q(self, x: torch.Tensor) -> torch.Tensor:
        """Expected Q of the online network (the compiled acting forward)."""
        return self._q_of(self.online, x)

    @torch.no_grad()
    def _q(self, x: torch.Tensor, explore: bool) -> torch.Tensor:
        self._act_q.step_begin()
        if not explore:
            self.online.eval()
            try:
                return self._act_q(x)
            finally:
                self.online.train()
        return self._act_q(x)

    # ------------------------------------------------------------------ acting

    def epsilon(self) -> float:
        """Epsilon now: linear from ``eps_start`` to ``eps_end`` over ``eps_decay_steps``; 0 when noisy."""
        return self.epsilon_at(self.env_steps)

    def epsilon_at(self, env_steps: int) -> float:
        """`epsilon` after ``env_steps`` environment steps (the lagged actor counts its own)."""
        cfg = self.config
        if cfg.noisy:
            return 0.0
        frac = min(1.0, env_steps / max(1, cfg.eps_decay_steps))
        return cfg.eps_start + frac * (cfg.eps_end - cfg.eps_start)

    def _explore(
        self,
        q: Callable[[torch.Tensor], torch.Tensor],
        x: torch.Tensor,
        eps: float,
        generator: torch.Generator,
        host: bool | None = None,
        noise: QNetwork | None = None,
    ) -> torch.Tensor:
        """The family's one exploration of ``q`` (`tritonrl.agents.dqn.policy.epsilon_greedy`).

        ``noise``: the noisy network behind ``q``, whose noise is drawn anew from ``generator`` for
        every exploring action (NoisyNet); ``None`` when greedy or not noisy.
        """
        if noise is not None and self.config.noisy:
            noise.reset_noise(generator)
        host = self._host_explore if host is None else host
        return epsilon_greedy(q, x, eps, generator, num_actions=self._num_actions, nvec=self._nvec, host=host)

    def act(self, obs: Any, explore: bool = True) -> torch.Tensor:
        """Actions for ``obs [E, *obs_shape]``: int64 ``[E]`` (``[E, D]`` for MultiDiscrete) on the device.

        ``explore=True``: epsilon-greedy (or the noisy network's noise); ``False``: greedy, noise-free.

        Raises:
            ValueError: ``obs`` has the wrong shape or holds NaN/inf (accelerator tensors: raised at the
                next [`update`][tritonrl.agents.dqn.agent.DQNAgent.update] or
                [`check_inputs`][tritonrl.agents.dqn.agent.DQNAgent.check_inputs]).
        """
        x = self._ingest(obs, "act")
        eps = self.epsilon() if explore else 0.0
        noise = self.online if explore else None
        action = self._explore(lambda x: self._q(x, explore), x, eps, self.generator, noise=noise)
        self.inputs.acted(action)
        return action

    def observe(
        self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any, truncated: Any
    ) -> None:
        """Store one vector-env step (leading dim ``num_envs``); with ICM, add the intrinsic reward.

        ``next_obs`` is the true next observation. With host staging pass rewards and flags on the host;
        with device staging, device tensors (nothing is read on the host).

        Raises:
            ValueError: a shape that is not ``[num_envs, ...]``, or NaN/inf or an out-of-range action,
                named with the first bad entry (accelerator tensors: raised later, see
                [`act`][tritonrl.agents.dqn.agent.DQNAgent.act]).
            TypeError: ``terminated``/``truncated`` not boolean, or another wrong dtype.
        """
        self.shapes.observe(obs, action, reward, next_obs, terminated, truncated)
        self._check_values(obs, action, reward, next_obs)
        if self.icm_module is not None:
            x, x_next = self._ingest(obs, "observe"), self._ingest(next_obs, "observe")
            a = torch.as_tensor(action, device=self.device, dtype=torch.int64)
            r_int = self.icm_module.intrinsic_reward(x, a, x_next)
            if self.replay_staging == "host":  # the buffer reads rewards on the host
                r_int = r_int.cpu()
            r_ext = torch.as_tensor(reward, dtype=torch.float32).to(r_int.device)
            reward = self.config.extrinsic_coef * r_ext + r_int
            obs, next_obs, action = x, x_next, a
            assert self.icm_buffer is not None  # created with icm_module
            self.icm_buffer.add(obs, action, reward, next_obs, terminated, truncated, check=False)
        self.buffer.add(obs, action, reward, next_obs, terminated, truncated, check=False)  # checked above
        self.env_steps += self.num_envs * self.dist.world_size  # global: every rank's environments

    def _check_values(self, obs: Any, action: Any, reward: Any, next_obs: Any) -> None:
        """The value checks of `observe` (one step or a block of steps alike)."""
        g = self.inputs
        if self.pixel_scale is None:
            g.obs("observe", "obs", obs)
            g.obs("observe", "next_obs", next_obs)
        else:  # image bytes are finite: their dtype is the check
            check_image_bytes("DQNAgent", "observe", obs, "obs")
            check_image_bytes("DQNAgent", "observe", next_obs, "next_obs")
        g.action("observe", action)
        g.reward("observe", reward)

    def observe_steps(
        self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any, truncated: Any
    ) -> None:
        """Store ``T`` steps ``[T, num_envs, ...]`` (CPU) as ``T`` `observe` calls (errors too)."""
        steps = obs.shape[0]
        if self.icm_module is not None or not steps:
            for i in range(steps):
                self.observe(obs[i], action[i], reward[i], next_obs[i], terminated[i], truncated[i])
            return
        block = (obs, action, reward, next_obs, terminated, truncated)
        names = ("obs", "action", "reward", "next_obs", "terminated", "truncated")
        for name, x in zip(names, block, strict=True):
            if x.shape[0] != steps:
                raise ValueError(
                    f"{type(self).__name__}.observe_steps: {name} holds {x.shape[0]} steps, obs {steps}"
                )
        self.shapes.observe(*(x[0] for x in block))  # the per-step shapes and dtypes
        self._check_values(obs, action, reward, next_obs)
        extend = getattr(self.buffer, "extend", None)
        if extend is not None:  # T adds in one call (checked above)
            extend(obs, action, reward, next_obs, terminated, truncated, check=False)
        else:
            for i in range(steps):
                self.buffer.add(
                    obs[i], action[i], reward[i], next_obs[i], terminated[i], truncated[i], check=False
                )
        self.env_steps += steps * self.num_envs * self.dist.world_size

    # ------------------------------------------------------------------ learning

    def _per_sample_loss(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """``(loss [B], priority [B], metrics)`` in f32 for one sampled batch."""
        cfg = self.config
        obs, action, next_obs = batch.obs, batch.action, batch.next_obs
        reward, discount = batch.reward, batch.discount
        out = self.online(obs)
        with torch.no_grad():
            out_next_t = self.target(next_obs)
            out_next_o = self.online(next_obs) if cfg.double else None
        b = torch.arange(action.shape[0], device=self.device)

        if self.factored:
            q = branching_q(out[0], out[1], self.online.head.mask)  # [B, D, n]
            q_sa = q.gather(-1, action.unsqueeze(-1)).squeeze(-1)  # [B, D]
            q_next_t = branching_q(out_next_t[0], out_next_t[1], self.target.head.mask)
            q_next_o = (
                None
                if out_next_o is None
                else branching_q(out_next_o[0], out_next_o[1], self.online.head.mask)
            )
            y = branching_td_target(reward, discount, q_next_t, q_next_o)
            td = y.unsqueeze(-1) - q_sa
            loss = (huber(td) if cfg.loss == "huber" else 0.5 * td.square()).mean(-1)
            return loss, td.detach().abs().mean(-1), {"values/q": q_sa.detach().mean()}

        if cfg.distribution == "none":
            q_sa = out[b, action]
            y = scalar_td_target(reward, discount, out_next_t, out_next_o)
            td = y - q_sa
            loss = huber(td) if cfg.loss == "huber" else 0.5 * td.square()
            return loss, td.detach().abs(), {"values/q": q_sa.detach().mean()}

        if cfg.distribution == "c51":
            assert self.support is not None  # built with a C51 head
            with torch.no_grad():
                q_next_t = self.target.head.expected_q(out_next_t, self.support)
                q_next_o = (
                    None if out_next_o is None else self.online.head.expected_q(out_next_o, self.support)
                )
                a_star = greedy_actions(q_next_t, q_next_o)
                m = c51_project(out_next_t[b, a_star].exp(), reward, discount, self.support)
            log_p = out[b, action]  # [B, Z]
            loss = c51_loss(log_p, m)
            q_sa = (log_p.detach().exp() * self.support).sum(-1)
            return loss, loss.detach(), {"values/q": q_sa.mean()}

        # quantile regression
        with torch.no_grad():
            q_next_t = out_next_t.mean(-1)
            q_next_o = None if out_next_o is None else out_next_o.mean(-1)
            a_star = greedy_actions(q_next_t, q_next_o)
            target = reward.unsqueeze(-1) + discount.unsqueeze(-1) * out_next_t[b, a_star]  # [B, N]
        theta = out[b, action]  # [B, N]
        loss = quantile_huber_loss(theta, target, self.taus, cfg.kappa)
        return loss, loss.detach(), {"values/q": theta.detach().mean()}

    def _loss(self, batch: ReplayBatch) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """``(loss, priority [B], metrics)``: the importance-weighted mean loss of one batch; the
        compiled region of an update (its backward is compiled with it)."""
        per_sample, priority, metrics = self._per_sample_loss(batch)
        return (batch.weights * per_sample).mean(), priority, metrics

    def update(self) -> dict[str, torch.Tensor]:
        """One gradient step on a replay batch (plus the target and ICM updates when due).

        Returns f32 scalar metrics on the device (``losses/td_loss``, ``losses/grad_norm``, ``values/q``,
        ``losses/icm_*``) without a host read unless ``inputs.check_at_update``. With ``dist``, every rank
        calls it together and the gradients are averaged.

        Raises:
            RuntimeError: the buffer holds fewer than
                [`batch_size`][tritonrl.agents.dqn.agent.DQNAgent.batch_size] transitions.
            ValueError: with ``inputs.check_at_update``, a deferred input check failed; nothing learned.
        """
        cfg = self.config
        if self.inputs.pending and self.inputs.check_at_update:
            self.inputs.check()
        if len(self.buffer) < self.batch_size:
            share = f" (this rank's share of {cfg.batch_size})" if self.dist.enabled else ""
            raise RuntimeError(
                f"the replay buffer holds {len(self.buffer)} transitions, fewer than "
                f"batch_size={self.batch_size}{share}: call update() after learning_starts"
            )
        learn = self._learn
        learn.step_begin()
        # random draws from the agent's generator stay out of the compiled region
        batch = self.buffer.sample(self.batch_size, generator=self.generator)
        if cfg.noisy:
            self.online.reset_noise(self.generator)
            self.target.reset_noise(self.generator)
        self.optimizer.zero_grad()
        loss, priority, metrics = learn(batch)
        loss.backward()
        if cfg.lr_final is not None:
            self.optimizer.set_lr(self.current_lr())  # a device fill from host counters: no sync
        grad_norm = self.optimizer.clip_and_step(cfg.max_grad_norm)
        if cfg.prioritized:
            self.buffer.update_priorities(batch.indices, priority)
        self.updates += 1
        if self.updates % cfg.target_update_every == 0:
            self.update_target()
        metrics["losses/td_loss"] = loss.detach()
        if grad_norm is not None:
            metrics["losses/grad_norm"] = grad_norm
        if self.icm_module is not None:
            metrics.update(self._update_icm())
        return escape(metrics, learn)

    def _icm_loss(self, batch: ReplayBatch) -> dict[str, torch.Tensor]:
        """The ICM losses of one batch and its mean reward (compiled like `_loss`)."""
        assert self.icm_module is not None  # called only with ICM on
        parts = self.icm_module.loss(batch.obs, batch.action, batch.next_obs)
        return {**parts, "reward": batch.reward.mean()}

    def _update_icm(self) -> dict[str, torch.Tensor]:
        assert self.icm_module is not None and self.icm_buffer is not None  # called only with ICM on
        batch = self.icm_buffer.sample(self.batch_size, generator=self.generator)
        self.icm_optimizer.zero_grad()
        parts = self._learn_icm(batch)
        parts["loss"].backward()
        self.icm_optimizer.clip_and_step(self.config.max_grad_norm)
        return {
            "losses/icm_inverse": parts["inverse"].detach(),
            "losses/icm_forward": parts["forward"].detach(),
            "charts/intrinsic_reward": parts["reward"],
        }

    @torch.no_grad()
    def check_inputs(self) -> None:
        """Raise if a deferred input check failed or a priority update was rejected since the last check.

        Raises:
            ValueError: NaN/inf or an out-of-range action in an earlier ``act``/``observe``, or rejected
                priorities (the buffer kept the old ones).
        """
        super().check_inputs()
        if isinstance(self.buffer, (PrioritizedReplayBuffer, PrioritizedFrameReplayBuffer)):
            self.buffer.check()

    def current_lr(self) -> float:
        """The learning rate of the next update: ``lr``, or with ``lr_final`` the linear
        interpolation to it over ``lr_decay_steps`` environment steps (held after)."""
        cfg = self.config
        if cfg.lr_final is None:
            return cfg.lr
        frac = min(1.0, self.env_steps / cfg.lr_decay_steps)
        return cfg.lr + frac * (cfg.lr_final - cfg.lr)

    def update_target(self) -> None:
        """Copy (``tau == 1``) or Polyak-average (``tau < 1``) the online weights into the target."""
        tau = self.config.tau
        online: list[torch.Tensor] = list(self.online.parameters())
        target: list[torch.Tensor] = list(self.target.parameters())
        if tau >= 1.0 or self._target_master is None:
            polyak_(target, online, tau)
        else:  # bf16: average f32 copies (the optimizer's masters), round once into the target
            polyak_(self._target_master, self.optimizer.masters, tau, round_into=target)
        for bt, bo in zip(self.target.buffers(), self.online.buffers(), strict=True):
            bt.copy_(bo)

    # ------------------------------------------------------------------ the policy module

    def _snapshot(self) -> QPolicy:
        """A `QPolicy` of an f32 copy of the online network (the export cast), in the
        online network's mode (train: noisy layers with the noise drawn last)."""
        net = copy.deepcopy(self.online).float().requires_grad_(False)
        return QPolicy(
            net,
            self.observation_space,
            self.action_space,
            distribution=self.config.distribution,
            support=self.support,
            pixel_scale=self.pixel_scale,
            frame_stack=self.config.frame_stack,
        )

    def policy(self) -> QPolicy:
        """The policy module (`tritonrl.agents.dqn.policy.QPolicy`): an f32 greedy snapshot."""
        return self._snapshot().eval()

    def learner_tensors(self) -> list[torch.Tensor]:
        """The online network's parameters then buffers (what a policy snapshot mirrors)."""
        return [*self.online.parameters(), *self.online.buffers()]

    def acting_policy(self, sync_every: int = 1) -> SnapshotPolicy:
        """The collector's `tritonrl.toolkit.acting.SnapshotPolicy`, exploring as `act`.

        Refreshed every ``sync_every`` updates; reads nothing on the host on an accelerator.

        Raises:
            ValueError: ``sync_every`` is not a positive int.
        """
        mode = self.config.compile if self.device.type == "cuda" else "none"  # as act's forward
        snapshot = self._snapshot()
        forward = Compiled(snapshot.q, mode, self.device)  # a function of the observations alone

        def act(policy: QPolicy, obs: torch.Tensor) -> torch.Tensor:
            forward.step_begin()
            x = policy.ingest(obs)
            action = self._explore(forward, x, self.epsilon(), self.generator, host=False, noise=policy.net)
            self.inputs.acted(action)  # passed back to observe unchanged: not checked again
            return action

        updates = lambda: self.updates  # noqa: E731
        return SnapshotPolicy(
            snapshot, act, self.learner_tensors, updates, sync_every=sync_every, check=self.eval_check
        )

    def lagged_actor(self) -> SnapshotActor:
        """An overlapped run's actor: a policy snapshot exploring as `act` on its own step count."""
        generator = actor_generator(self.generator, self.device)
        stride = self.num_envs * self.dist.world_size
        steps = [self.env_steps]

        def act(policy: QPolicy, obs: Any) -> torch.Tensor:
            eps = self.epsilon_at(steps[0])
            steps[0] += stride
            x = policy.ingest(torch.as_tensor(obs, device=self.device))
            return self._explore(policy.q, x, eps, generator, noise=policy.net)

        return SnapshotActor(self._snapshot(), act, generator, steps, check=self.eval_check)
