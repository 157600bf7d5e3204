"""PPO (clipped surrogate) with discrete, continuous, LSTM, GRU, normalizing-flow and Mamba2 policies.

The algorithm, top to bottom: collect ``num_steps`` vector steps into a :class:`RolloutBuffer`
(``act`` samples and remembers log-prob and value; ``observe`` stores the transition and, where
an episode was truncated, the value of its real final observation); compute GAE in f32 with
terminations and truncations kept apart (:func:`tritonrl.toolkit.replay.rollout.compute_gae`); then
``update_epochs`` passes over shuffled minibatches of the clipped objective::

    ratio  = exp(log pi(a|s) - log pi_old(a|s))
    L_pi   = mean(max(-A * ratio, -A * clip(ratio, 1 - eps, 1 + eps)))       # A normalised per minibatch
    L_v    = 0.5 * mean(max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2))   # or unclipped
    loss   = L_pi - ent_coef * entropy + vf_coef * L_v

with gradient-norm clipping, linear learning-rate annealing and an optional early stop of the
epochs once the approximate KL exceeds ``target_kl``. Recurrent policies (LSTM, GRU, Mamba2) train
on sequence minibatches of ``seq_len`` steps starting from the memory stored when the segment was
collected, with the memory reset where an episode starts (LSTM and GRU: each sequence split at its
episode starts, all pieces run through one fused recurrence; see
:meth:`tritonrl.agents.nets.actor_critic.LSTMCore.sequence`), and act one step at a time, the memory
carried per environment and reset where an episode ended.

The agent is a plain object; :func:`tritonrl.toolkit.training.loop.run_training` drives it with the on-policy
schedule, and you can drive it yourself::

    agent = PPOAgent(env.single_observation_space, env.single_action_space, preset("ppo"), num_envs=8)
    for _ in range(agent.config.num_steps):
        action = agent.act(obs)
        tr = env.step(action)
        agent.observe(obs, action, tr.reward, tr.next_obs, tr.terminated, tr.truncated)
        obs = tr.obs
    metrics = agent.update()        # dict of f32 scalar tensors on the device

Precision: parameters live in ``training_dtype(device)`` and are optimized through f32 master
weights (:class:`tritonrl.toolkit.optim.MasterWeightOptimizer`), so bf16 learns like f32. Observations are
normalised (optionally, running statistics in f32) and cast once, where they enter; log-probs,
values, rewards, advantages, returns and the loss are f32.

Data-parallel (``dist``, a :class:`tritonrl.toolkit.distributed.DistContext` of N ranks, each
stepping ``num_envs`` of the run's ``N * num_envs`` environments): N ranks follow the algorithm of
one process with all the environments. Every rank starts from rank 0's parameters; each
minibatch is the union of one local minibatch per rank (``num_minibatches`` per rank, the same
count everywhere), whose gradients are averaged (:class:`~tritonrl.toolkit.optim.MasterWeightOptimizer`'s
``dist``) and whose advantages are normalised with the global mean and standard deviation; the
``target_kl`` stop reads the mean approximate KL of the ranks (every rank stops in the same
epoch); the observation statistics are pooled across the ranks at each :meth:`PPOAgent.update`
(so that every rank normalises alike afterwards; between updates each rank adds its own
observations); ``env_steps`` and the learning-rate annealing count the environments of every rank.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import gymnasium as gym
import torch
from tritonrl.agents.nets.actor_critic import (
    ActorCritic,
    CategoricalHead,
    FeedForwardCore,
    FlowHead,
    GaussianHead,
    GRUCore,
    LSTMCore,
    Mamba2Core,
    subsequence_stats,
)
from tritonrl.kernels.backend import backend_override
from tritonrl.toolkit import pytree
from tritonrl.toolkit.agent import AgentBase, broadcast_modules_, join_ranks, rank_seed
from tritonrl.toolkit.checkpoint import (
    CheckpointError,
    brief,
    check_module_tensors,
    load_into_module,
    section,
)
from tritonrl.toolkit.checks import ActionRule, InputGuard, check_config
from tritonrl.toolkit.compile import Compiled, CompileMode, escape
from tritonrl.toolkit.config import Config, resumable
from tritonrl.toolkit.distributed import DistContext
from tritonrl.toolkit.optim import MasterWeightOptimizer
from tritonrl.toolkit.precision import training_dtype
from tritonrl.toolkit.preset import MarketPreset, Preset, find_preset
from tritonrl.toolkit.replay.rollout import RolloutBuffer, RunningMeanStd, compute_gae
from tritonrl.toolkit.training.onpolicy import schedule_for

__all__ = ["AGENT_KIND", "POLICIES", "PPOAgent", "PRESETS", "PPOConfig", "preset"]

AGENT_KIND = "ppo"
POLICIES = ("discrete", "continuous", "lstm", "gru", "flow", "mamba")


@dataclass(frozen=True)
class PPOConfig(Config):
    """Every PPO hyperparameter (immutable; copy with ``dataclasses.replace`` or :func:`preset`).

    Fields declared ``resumable(...)`` may change when a run is resumed (``--resume --set lr=...``);
    every other field is fixed for the life of a run (see :mod:`tritonrl.toolkit.config`).
    """

    # ---- policy
    policy: Literal["discrete", "continuous", "lstm", "gru", "flow", "mamba"] = "discrete"
    """Policy kind: ``discrete`` (categorical MLP), ``continuous`` (Gaussian MLP), ``lstm``, ``gru``,
    ``flow`` (normalizing flow over a Gaussian base), ``mamba`` (Mamba2 memory).
    ``lstm``/``gru``/``mamba`` pick a categorical head for ``Discrete`` and a Gaussian head for
    ``Box`` action spaces."""
    hidden: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of the MLPs (actor and critic each; the encoder of recurrent cores)."""
    squash: bool = False
    """Continuous/recurrent Gaussian heads: tanh-squash onto the action bounds (with the log-prob
    correction). Without it, actions are clipped to the bounds by the environment wrapper."""
    log_std_init: float = 0.0
    """Initial log standard deviation of Gaussian heads and of the flow's base."""
    flow_layers: int = 4
    """Affine coupling layers of the flow policy."""
    flow_hidden: int = 64
    """Width of each coupling layer's network."""
    memory_size: int = 64
    """LSTM/GRU hidden size, or the Mamba2 model width ``d_model``."""
    mamba_d_state: int = 16
    """Mamba2 state size per head."""
    mamba_headdim: int = 16
    """Mamba2 head dimension."""
    mamba_expand: int = 2
    """Mamba2 inner expansion factor."""
    seq_len: int = 0
    """Recurrent policies: length of the training sequences (divides ``num_steps``); 0: ``num_steps``."""
    # ---- rollout
    num_steps: int = 128
    """Vector steps per rollout (``T``); a rollout holds ``T * num_envs`` transitions."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    normalize_obs: bool = False
    """Normalise observations with running mean and variance (f32), clipped to ``+-obs_clip``."""
    obs_clip: float = resumable(10.0)
    """Clip of normalised observations."""
    reward_scale: float = 1.0
    """Rewards are multiplied by this before GAE (returns and values live on that scale)."""
    # ---- optimisation
    lr: float = resumable(2.5e-4)
    """Adam learning rate (at the start, if annealed)."""
    anneal_lr: bool = resumable(True)
    """Anneal the learning rate linearly to 0 over ``total_steps``."""
    total_steps: int = resumable(500_000)
    """Environment steps of the whole run (for the annealing schedule)."""
    adam_eps: float = 1e-5
    """Adam epsilon."""
    update_epochs: int = resumable(4)
    """Passes over each rollout."""
    num_minibatches: int = resumable(4)
    """Minibatches per pass (recurrent policies: of whole sequences)."""
    norm_adv: bool = resumable(True)
    """Normalise advantages per minibatch."""
    clip_coef: float = resumable(0.2)
    """Surrogate clipping ``eps`` (and the value clipping range)."""
    clip_vloss: bool = resumable(True)
    """Clip the value loss around the rollout's values."""
    ent_coef: float = resumable(0.01)
    """Entropy bonus coefficient."""
    vf_coef: float = resumable(0.5)
    """Value loss coefficient."""
    max_grad_norm: float = resumable(0.5)
    """Global gradient-norm clip."""
    target_kl: float | None = resumable(None)
    """Stop the epochs of an update once the approximate KL exceeds this. Reading the KL is a host
    sync per epoch: the one sync of an update, and only when this is set (default ``None``)."""
    # ---- speed
    compile: CompileMode = resumable("none")
    """``torch.compile`` of the learner step (GAE, minibatch loss, optimizer step) and the acting
    forward: ``"none"`` (eager), ``"default"`` (TorchInductor) or ``"reduce-overhead"`` (also CUDA
    graphs on CUDA; on a CPU the same as ``"default"``). See :mod:`tritonrl.toolkit.compile`."""

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy={self.policy!r} is not one of {POLICIES}")
        check_config(self, _RANGES)
        if self.seq_len and self.num_steps % self.seq_len:
            raise ValueError(f"seq_len={self.seq_len} must be 0 or divide num_steps={self.num_steps}")
        if self.policy == "mamba" and (self.mamba_expand * self.memory_size) % self.mamba_headdim:
            raise ValueError(
                f"mamba_expand * memory_size = {self.mamba_expand * self.memory_size} must be a "
                f"multiple of mamba_headdim={self.mamba_headdim}"
            )

    @property
    def sequence_length(self) -> int:
        """Training sequence length of recurrent policies."""
        return self.seq_len or self.num_steps

    @property
    def action_kind(self) -> str:
        """``"continuous"`` for the policies that drive a Box action (``continuous``, ``flow``),
        else ``"discrete"``: the action kind an environment built for this config offers (a
        market run's positions, :func:`tritonrl.toolkit.training.market.env_config_for`)."""
        return "continuous" if self.policy in ("continuous", "flow") else "discrete"


# The valid range of every numeric field (tritonrl.toolkit.checks.check_config; NaN and inf never pass).
_RANGES = {
    "hidden": "[1, inf)",
    "log_std_init": "[-20, 20]",
    "flow_layers": "[1, inf)",
    "flow_hidden": "[1, inf)",
    "memory_size": "[1, inf)",
    "mamba_d_state": "[1, inf)",
    "mamba_headdim": "[1, inf)",
    "mamba_expand": "[1, inf)",
    "seq_len": "[0, inf)",
    "num_steps": "[1, inf)",
    "gamma": "[0, 1]",
    "gae_lambda": "[0, 1]",
    "obs_clip": "(0, inf)",
    "reward_scale": "(0, inf)",
    "lr": "(0, inf)",
    "total_steps": "[1, inf)",
    "adam_eps": "[0, inf)",
    "update_epochs": "[1, inf)",
    "num_minibatches": "[1, inf)",
    "clip_coef": "(0, inf)",
    "ent_coef": "[0, inf)",
    "vf_coef": "[0, inf)",
    "max_grad_norm": "(0, inf)",
    "target_kl": "(0, inf)",
}

# ----------------------------------------------------------------------------- helpers


class _Pending(typing.NamedTuple):
    obs: Any
    x: torch.Tensor
    raw: torch.Tensor
    logprob: torch.Tensor
    value: torch.Tensor
    starts: torch.Tensor


# ----------------------------------------------------------------------------- the agent


class PPOAgent(AgentBase):
    """A PPO agent (see the module docstring).

    Checkpoints (``state_dict``, ``load_state_dict``, ``save``, ``load``) and ``check_inputs`` are
    :class:`tritonrl.toolkit.agent.AgentBase`'s; the agent's own parts are the policy, the
    optimizer, the rollout, the observation statistics and the recurrent memories. On load the
    learning rate comes from the config (:meth:`current_lr`).

    Args:
        observation_space: a gymnasium ``Box`` (flat observations).
        action_space: ``Discrete`` (discrete, lstm, gru, mamba) or ``Box`` (continuous, flow, lstm,
            gru, mamba).
        config: a :class:`PPOConfig` (default: the ``ppo`` preset).
        num_envs: environments per ``act``/``observe`` call (the leading dim of every argument);
            with ``dist``, this rank's share of the run's environments.
        device: where networks and the rollout live; the dtype is ``training_dtype(device)``.
        seed: seeds the parameters and the agent's own generator (sampling, minibatch order;
            rank ``r`` of a data-parallel run seeds it with
            :func:`tritonrl.toolkit.agent.rank_seed` ``(seed, r)``).
        dist: the data-parallel context (``None``: :func:`tritonrl.toolkit.distributed.current`,
            a single process unless ``init_distributed`` joined a group); see the module
            docstring. Every rank must build the agent at the same point.

    Raises:
        ValueError: an action space the policy kind cannot drive, or a non-flat observation space.
        TypeError: ``config`` is not a :class:`PPOConfig`.
        tritonrl.toolkit.distributed.DistributedError: the ranks' configs, spaces or ``num_envs``
            differ (on every rank).
    """

    kind = AGENT_KIND
    config_class = PPOConfig
    rank_part_keys = ("generator", "rollout", "memory", "obs_rms_rank")

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: PPOConfig | None = None,
        *,
        num_envs: int = 1,
        device: torch.device | str = "cpu",
        seed: int = 0,
        dist: DistContext | None = None,
    ) -> None:
        cfg = config if config is not None else preset("ppo")
        if not isinstance(cfg, PPOConfig):
            raise TypeError(f"config must be a PPOConfig, got {type(cfg).__name__}")
        if not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        self.dist = join_ranks(
            dist,
            kind=self.kind,
            config=cfg,
            observation_space=observation_space,
            action_space=action_space,
            num_envs=num_envs,
            device=torch.device(device),
        )
        """The data-parallel context (a single process: every collective is a no-op)."""
        if not isinstance(observation_space, gym.spaces.Box) or len(observation_space.shape) != 1:
            raise ValueError(f"observation_space must be a flat Box, got {observation_space}")
        self.config = cfg
        self.observation_space = observation_space
        self.action_space = action_space
        self.num_envs = num_envs
        self.seed = int(seed)
        self.device = torch.device(device)
        self.dtype = training_dtype(self.device)
        self.obs_dim = int(observation_space.shape[0])
        backend_override(self.device)  # a TRITONRL_BACKEND that cannot run here fails now, not mid-run
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(rank_seed(self.seed, self.dist.rank))

        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            torch.manual_seed(self.seed)
            self.policy = self._build_policy()
        broadcast_modules_(self.dist, self.policy)  # rank 0's weights; the masters copy them below
        # fused: the step counter stays a device tensor (the default Adam reads it on the host)
        self.optimizer = MasterWeightOptimizer(
            self.policy.parameters(),
            torch.optim.Adam,
            compile=cfg.compile,
            dist=self.dist,
            lr=cfg.lr,
            eps=cfg.adam_eps,
            fused=True,
        )
        discrete = isinstance(action_space, gym.spaces.Discrete)
        squashed = cfg.policy == "flow" or cfg.squash
        action_shape: tuple[int, ...]
        if isinstance(action_space, gym.spaces.Discrete):
            action_shape = ()
            rule = ActionRule.discrete(int(action_space.n))
        else:
            assert isinstance(action_space, gym.spaces.Box)  # _build_policy accepts Discrete or flat Box only
            action_shape = tuple(action_space.shape)
            rule = ActionRule.box(action_space.low, action_space.high, bounded=squashed)
        self.inputs = InputGuard("PPOAgent", rule)
        """The checks of ``act``/``observe`` inputs (:class:`tritonrl.toolkit.checks.InputGuard`); its
        ``mode``
        (``"auto"``, ``"eager"``, ``"deferred"``) says when inputs on an accelerator are checked.
        Box actions must be finite, and within the bounds for tanh-squashed policies (``squash``,
        ``flow``); an unsquashed Gaussian samples beyond the bounds by design (the env clips)."""
        self.buffer = RolloutBuffer(
            cfg.num_steps,
            num_envs,
            (self.obs_dim,),
            action_shape,
            torch.int64 if discrete else torch.float32,
            self.dtype,
            self.device,
        )
        self.obs_rms = RunningMeanStd((self.obs_dim,), self.device) if cfg.normalize_obs else None
        # Data-parallel observation statistics: the pooled statistics of the last update (shared)
        # and this rank's observations since then; obs_rms is always their merge.
        self._obs_shared: RunningMeanStd | None = None
        self._obs_local: RunningMeanStd | None = None
        if self.obs_rms is not None and self.dist.enabled:
            self._obs_shared = RunningMeanStd((self.obs_dim,), self.device)
            self._obs_local = RunningMeanStd((self.obs_dim,), self.device, epsilon=0.0)
        self.recurrent = self.policy.recurrent
        self.state = self.policy.initial_state(num_envs)
        self.starts = torch.ones(num_envs, dtype=torch.bool, device=self.device)
        self.segment_states: list[Any] = [None] * (cfg.num_steps // cfg.sequence_length)
        self._pending: _Pending | None = None
        self.updates = 0
        self.env_steps = 0
        # The compiled regions (tritonrl.toolkit.compile): GAE, the minibatch loss (its backward
        # compiled with it), the acting forward. Eager functions for compile="none".
        self._gae = Compiled(compute_gae, cfg.compile, self.device)
        # LSTM/GRU: the sequences' features are computed eagerly, before the compiled loss (the
        # size of the split layout changes with the data; see LSTMCore.sequence)
        self._splits = bool(getattr(self.policy.core, "splits_at_starts", False))
        self._learn = Compiled(self._minibatch_loss, cfg.compile, self.device)
        self._act = Compiled(self.policy.act, cfg.compile, self.device)

    # ------------------------------------------------------------------ construction

    def _build_policy(self) -> ActorCritic:
        cfg, space = self.config, self.action_space
        discrete = isinstance(space, gym.spaces.Discrete)
        box = isinstance(space, gym.spaces.Box) and len(space.shape) == 1
        if cfg.policy == "discrete" and not discrete:
            raise ValueError(f"policy 'discrete' needs a Discrete action space, got {space}")
        if cfg.policy in ("continuous", "flow") and not box:
            raise ValueError(f"policy {cfg.policy!r} needs a flat Box action space, got {space}")
        if not (discrete or box):
            raise ValueError(f"PPO supports Discrete and flat Box action spaces, got {space}")
        # Every module is created on the device in the training dtype (DESIGN section 2): no cast.
        fk: dict[str, Any] = {"device": self.device, "dtype": self.dtype}
        core: FeedForwardCore | LSTMCore | GRUCore | Mamba2Core
        if cfg.policy in ("discrete", "continuous", "flow"):
            core = FeedForwardCore(self.obs_dim, cfg.hidden, **fk)
        elif cfg.policy == "lstm":
            core = LSTMCore(self.obs_dim, cfg.hidden, cfg.memory_size, **fk)
        elif cfg.policy == "gru":
            core = GRUCore(self.obs_dim, cfg.hidden, cfg.memory_size, **fk)
        else:
            core = Mamba2Core(
                self.obs_dim,
                cfg.memory_size,
                d_state=cfg.mamba_d_state,
                headdim=cfg.mamba_headdim,
                expand=cfg.mamba_expand,
                **fk,
            )
        feat = core.feature_dim
        head: CategoricalHead | GaussianHead | FlowHead
        if isinstance(space, gym.spaces.Discrete):
            head = CategoricalHead(feat, int(space.n), **fk)
        else:
            assert isinstance(space, gym.spaces.Box)  # refused above unless Discrete or flat Box
            low = torch.as_tensor(space.low, dtype=torch.float32)
            high = torch.as_tensor(space.high, dtype=torch.float32)
            bounded = bool(torch.isfinite(low).all() and torch.isfinite(high).all())
            if (cfg.policy == "flow" or cfg.squash) and not bounded:
                raise ValueError(
                    f"policy {cfg.policy!r} with tanh squashing needs finite action bounds, got {space}"
                )
            if cfg.policy == "flow":
                head = FlowHead(
                    feat,
                    int(space.shape[0]),
                    low,
                    high,
                    layers=cfg.flow_layers,
                    hidden=cfg.flow_hidden,
                    log_std_init=cfg.log_std_init,
                    **fk,
                )
            else:
                head = GaussianHead(
                    feat,
                    int(space.shape[0]),
                    low,
                    high,
                    squash=cfg.squash,
                    log_std_init=cfg.log_std_init,
                    **fk,
                )
        return ActorCritic(core, head, **fk)

    # ------------------------------------------------------------------ acting

    def _ingest(self, obs: Any, update_stats: bool, call: str | None = None) -> torch.Tensor:
        """Observations enter here: checked for NaN/inf (by :attr:`inputs`, named after ``call``;
        ``None``: already checked), f32 on the device, optionally normalised, cast once to the
        training dtype."""
        x = obs if isinstance(obs, torch.Tensor) else torch.as_tensor(obs)
        if x.dim() != 2 or x.shape[1] != self.obs_dim:
            raise ValueError(f"obs has shape {tuple(x.shape)}, expected [E, {self.obs_dim}]")
        if call == "act" and x.shape[0] != self.num_envs:
            raise ValueError(f"obs has {x.shape[0]} rows, this agent was built for num_envs={self.num_envs}")
        if call is not None:
            self.inputs.obs(call, "obs", x)
        x = x.to(self.device, torch.float32)
        if self.obs_rms is not None:
            if update_stats:
                self.obs_rms.update(x)
                if self._obs_local is not None:
                    self._obs_local.update(x)
            x = self.obs_rms.normalize(x, self.config.obs_clip)
        return x.to(self.dtype)

    def _acting_starts(self) -> torch.Tensor:
        """Where the core resets its memory before this step (episode starts; segment starts for
        cores that cannot start a training sequence from a stored state)."""
        starts = self.starts
        t = self.buffer.pos
        if self.recurrent and t % self.config.sequence_length == 0:
            if not self.policy.core.supports_initial_state:
                starts = torch.ones_like(starts)
            self.segment_states[t // self.config.sequence_length] = pytree.tree_map(torch.clone, self.state)
        return starts

    @torch.no_grad()
    def act(self, obs: torch.Tensor, explore: bool = True) -> torch.Tensor:
        """Actions for ``obs [E, obs_dim]`` (f32): ``[E]`` int64 (Discrete) or ``[E, D]`` f32 (Box).

        ``explore=False`` acts greedily (argmax, Gaussian mean, flow of the base mean). The step's
        log-prob and value are kept for :meth:`observe`; recurrent memories advance.

        Raises:
            ValueError: ``obs`` has the wrong shape, or holds NaN/inf (checked at once for host
                inputs, before the observation statistics change; for accelerator tensors at the
                next :meth:`update` or :meth:`check_inputs`, see :attr:`inputs`).
        """
        x = self._ingest(obs, update_stats=explore, call="act")
        starts = self._acting_starts()
        # the sampling noise is drawn here, from the agent's generator, outside the compiled forward
        noise = self.policy.head.draw(x.shape[0], self.generator) if explore else None
        self._act.step_begin()
        out = escape(self._act(x, self.state, starts, not explore, None, noise), self._act)
        env_a, raw, logp, value, state = out
        self._pending = _Pending(obs, x, raw, logp, value, starts)
        self.state = state
        self.starts = torch.zeros_like(self.starts)
        self.inputs.acted(env_a)
        return env_a

    @torch.no_grad()
    def observe(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
    ) -> None:
        """Store one vector step (each argument has leading dim ``E``).

        ``next_obs`` is the true next observation (the final one where an episode ended): it is
        evaluated by the critic where ``truncated`` (and at the rollout's last step) to bootstrap.

        The step is scored with the log-prob and value :meth:`act` computed for ``obs`` (the
        same object, or equal values: a numpy copy is fine). An ``obs`` that did not go through
        :meth:`act` is re-scored by feed-forward policies and refused by recurrent ones.

        Raises:
            RuntimeError: the rollout is full (call :meth:`update`), or a recurrent policy observes
                an ``obs`` that did not come through :meth:`act`.
            ValueError: NaN/inf in ``obs``, ``reward`` or ``next_obs``, or an ``action`` outside the
                action space, named with the first bad entry (host inputs: at once, nothing is
                stored; accelerator tensors: at the next :meth:`update` or :meth:`check_inputs`).
        """
        g = self.inputs
        g.obs("observe", "obs", obs)
        g.action("observe", action)
        g.reward("observe", reward)
        g.obs("observe", "next_obs", next_obs)
        p = self._pending
        if p is None or not _same_obs(p.obs, obs):
            if self.recurrent:
                raise RuntimeError("recurrent PPO: call act(obs) and pass that same obs to observe()")
            x = self._ingest(obs, update_stats=False)
            raw = self.policy.head.to_raw(torch.as_tensor(action).to(self.device))
            logp, _, value = self.policy.evaluate(x, raw, generator=self.generator)
            starts = self.starts
        else:
            x, raw, logp, value, starts = p.x, p.raw, p.logprob, p.value, p.starts
        self._pending = None
        dev = self.device
        truncated_in = torch.as_tensor(truncated)
        terminated = torch.as_tensor(terminated).to(dev, torch.bool)
        truncated = truncated_in.to(dev, torch.bool)
        reward = torch.as_tensor(reward).to(dev, torch.float32)
        if self.config.reward_scale != 1.0:  # (x * 1.0 == x: skipped, not changed)
            reward = reward * self.config.reward_scale
        self.buffer.add(x, raw, logp, value, reward, terminated, truncated, starts)
        self.env_steps += self.num_envs * self.dist.world_size  # global: every rank's environments
        # Bootstrap values: at truncations and at the end of the rollout. Flags that arrive on the
        # CPU (from the environments) are checked for free; flags already on an accelerator are
        # not synced on: the critic then runs every step.
        last = self.buffer.full
        need = last or not truncated_in.is_cpu or bool(truncated_in.numpy().any())
        if need:
            x_next = self._ingest(next_obs, update_stats=False)
            v_next = self.policy.value(x_next, self.state, torch.zeros_like(self.starts))
            mask = torch.ones_like(truncated) if last else truncated
            self.buffer.set_next_values(v_next, mask)
        self.starts = terminated | truncated

    # ------------------------------------------------------------------ learning

    def _batches(self) -> tuple[dict[str, Any], int]:
        """The rollout as training samples: flat transitions, or ``[S, L]`` sequences (recurrent)."""
        b = self.buffer
        fields = {
            "obs": b.obs,
            "raw": b.actions,
            "logprobs": b.logprobs,
            "values": b.values,
            "advantages": b.advantages,
            "returns": b.returns,
            "starts": b.starts,
        }
        if not self.recurrent:
            flat = {k: v.reshape(-1, *v.shape[2:]) for k, v in fields.items()}
            return flat, b.num_steps * b.num_envs
        L = self.config.sequence_length
        C = b.num_steps // L
        # [T, E, ...] -> [C, L, E, ...] -> [C, E, L, ...] -> [C * E, L, ...]
        seqs = {
            k: v.reshape(C, L, *v.shape[1:]).transpose(1, 2).reshape(C * b.num_envs, L, *v.shape[2:])
            for k, v in fields.items()
        }
        seqs["state"] = pytree.zip_map(
            lambda *s: torch.stack(s).reshape(-1, *s[0].shape[1:]), *self.segment_states
        )
        return seqs, C * b.num_envs

    def update(self) -> dict[str, torch.Tensor]:
        """One PPO update on the full rollout; returns f32 scalar metrics on the device.

        Reads no tensor value on the host (no device sync; tested), except the approximate KL once
        per epoch when ``target_kl`` is set, the deferred input checks first when
        ``inputs.check_at_update`` is set (see :meth:`check_inputs`), and, for the LSTM and GRU
        policies, one small integer tensor per update: the sizes of the layouts every minibatch's
        sequences are split into at episode starts (:meth:`_minibatch_layouts`; the epochs'
        permutations are drawn first, all at once, for it). With ``compile`` set, GAE,
        the minibatch loss and the optimizer step run compiled. With ``dist``, every rank calls it
        together (see the module docstring for what is exchanged).

        Raises:
            RuntimeError: the rollout is not full yet.
            ValueError: with ``inputs.check_at_update``, a deferred input check failed (see
                :meth:`check_inputs`); nothing learned.
        """
        if self.inputs.pending and self.inputs.check_at_update:
            self.inputs.check()
        cfg, b = self.config, self.buffer
        if not b.full:
            raise RuntimeError(f"update() needs a full rollout: {b.pos} of {b.num_steps} steps stored")
        self._pool_obs_stats()
        lr = self.current_lr()
        self.optimizer.set_lr(lr)
        learn = self._learn
        learn.step_begin()
        b.compute_advantages(cfg.gamma, cfg.gae_lambda, gae=self._advantages)
        data, n = self._batches()
        mb_size = max(1, math.ceil(n / cfg.num_minibatches))
        perms: list[torch.Tensor] = []
        layouts: list[list[tuple[int, int]]] = []
        if self._splits:  # LSTM/GRU: every permutation first, for the one host read of the layouts
            perms = [
                torch.randperm(n, generator=self.generator, device=self.device)
                for _ in range(cfg.update_epochs)
            ]
            layouts = self._minibatch_layouts(data["starts"], perms, mb_size)
        sums: dict[str, torch.Tensor] = {}
        count = 0
        for _epoch in range(cfg.update_epochs):
            perm = perms[_epoch] if perms else torch.randperm(n, generator=self.generator, device=self.device)
            for i, idx in enumerate(perm.split(mb_size)):
                metrics = self._minibatch_step(data, idx, layouts[_epoch][i] if layouts else None)
                for k, v in metrics.items():
                    sums[k] = sums[k] + v if k in sums else v
                count += 1
            # the one host read of an update, only with target_kl (an early stop needs the value)
            if cfg.target_kl is not None and self._kl_exceeded(metrics["losses/approx_kl"], cfg.target_kl):
                break
        out = {k: v / count for k, v in sums.items()}
        y_true, y_pred = b.returns.reshape(-1), b.values.reshape(-1)
        var_y = y_true.var()
        out["losses/explained_variance"] = torch.where(
            var_y > 0, 1 - (y_true - y_pred).var() / var_y, torch.zeros_like(var_y)
        )
        # filled on the device (torch.tensor(x, device=cuda) would copy from the host)
        out["charts/learning_rate"] = torch.full((), lr, dtype=torch.float32, device=self.device)
        out["losses/epochs"] = torch.full((), float(_epoch + 1), dtype=torch.float32, device=self.device)
        self.updates += 1
        b.reset()
        return out  # computed eagerly from escaped minibatch metrics

    @staticmethod
    def _minibatch_layouts(
        starts: torch.Tensor, perms: list[torch.Tensor], mb_size: int
    ) -> list[list[tuple[int, int]]]:
        """``(rows, length)`` of the split layout (:meth:`LSTMCore.sequence`) of each minibatch
        ``perm.split(mb_size)`` of each epoch's ``perm``, for sequences ``starts [S, L]``: the
        layouts of a whole update read on the host at once (one transfer of ``[2, epochs,
        minibatches]`` integers: a device synchronisation on CUDA, once per update)."""
        count, longest = subsequence_stats(starts)  # [S] each
        n = starts.shape[0]
        m = -(-n // mb_size)  # minibatches per epoch (the last one may be shorter)
        pad = count.new_full((m * mb_size - n,), n)  # index n: a zero appended to the stats
        idx = torch.stack([torch.cat([p, pad]) for p in perms]).view(len(perms), m, mb_size)
        zero = count.new_zeros(1)
        rows = torch.cat([count, zero])[idx].sum(-1)
        length = torch.cat([longest, zero])[idx].amax(-1)
        both = torch.stack([rows, length], -1).tolist()  # the host read
        return [[(int(r), int(t)) for r, t in epoch] for epoch in both]

    def _minibatch_step(
        self, data: dict[str, Any], idx: torch.Tensor, layout: tuple[int, int] | None = None
    ) -> dict[str, torch.Tensor]:
        cfg = self.config
        head = self.policy.head
        # the entropy estimate's noise is drawn here, from the agent's generator, outside the
        # compiled loss (the same draw, in the same order, as a head drawing it itself)
        noise = None
        if head.entropy_noise and cfg.ent_coef != 0:
            # raw actions [N, D] (or [S, L, D] sequences): one draw per minibatch row (and step)
            noise = head.draw((idx.shape[0], *data["raw"].shape[1:-1]), self.generator)
        adv_stats = None
        if cfg.norm_adv and self.dist.enabled:  # the global minibatch's statistics
            adv_stats = self._global_adv_stats(data["advantages"][idx])
        self.optimizer.zero_grad()
        features = None
        if layout is not None:  # LSTM/GRU: the split recurrence, eagerly (see LSTMCore.sequence)
            state = pytree.tree_map(lambda s: s[idx], data["state"])
            features = self.policy.features(data["obs"][idx], data["starts"][idx], state, layout)
        loss, metrics = self._learn(data, idx, noise, features, adv_stats)
        loss.backward()
        metrics["losses/grad_norm"] = self.optimizer.clip_and_step(cfg.max_grad_norm)
        return escape(metrics, self._learn)  # summed over minibatches: kept past the next replay

    def _global_adv_stats(self, adv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, std)`` (f32 0-d) of the advantages of the global minibatch: the union of every
        rank's ``adv`` (any shape), with the same unbiased rule as ``Tensor.std`` in one process.

        Two small all-reduces, outside the compiled loss, no host read: the count and sum give the
        mean, then the sum of squared deviations about it (two passes: no ``E[a^2] - mean^2``
        cancellation)."""
        a = adv.detach().float().reshape(-1)
        sums = torch.stack([a.new_full((), a.numel()), a.sum()])
        self.dist.all_reduce_sum_(sums)
        count = sums[0]
        mean = sums[1] / count
        sq = (a - mean).square().sum().reshape(1)
        self.dist.all_reduce_sum_(sq)
        std = (sq[0] / (count - 1).clamp(min=1)).sqrt()  # unbiased when the minibatch has > 1
        return mean, std

    def _kl_exceeded(self, approx_kl: torch.Tensor, target_kl: float) -> bool:
        """Whether the approximate KL of the epoch's last minibatch (with ``dist``: the mean over
        the ranks, so that every rank stops in the same epoch) exceeds ``target_kl``; a host read."""
        if self.dist.enabled:
            approx_kl = approx_kl.detach().clone()
            self.dist.all_reduce_mean_([approx_kl])
        return float(approx_kl) > target_kl

    def _pool_obs_stats(self) -> None:
        """With ``dist`` and ``normalize_obs``: pool the observations every rank added since the
        last update into the shared statistics, identical on every rank afterwards (no host read)."""
        if self._obs_shared is None or self._obs_local is None:
            return
        self._obs_local.all_reduce_(self.dist)
        self._obs_shared.merge(self._obs_local)
        assert self.obs_rms is not None  # set whenever _obs_shared is
        self.obs_rms.load_state_dict(self._obs_shared.state_dict())
        self._obs_local = RunningMeanStd((self.obs_dim,), self.device, epsilon=0.0)

    def _advantages(self, *args: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The compiled GAE; its outputs live in the rollout for the whole update."""
        return escape(self._gae(*args), self._gae)

    def _minibatch_loss(
        self,
        data: dict[str, Any],
        idx: torch.Tensor,
        noise: torch.Tensor | None,
        features: tuple[torch.Tensor, torch.Tensor] | None = None,
        adv_stats: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(loss, metrics)`` of the minibatch ``idx`` of ``data`` (the compiled region of a
        minibatch step; its backward is compiled with it). ``features``: the policy's features of
        the minibatch, computed before (LSTM/GRU policies); else computed here. ``adv_stats``: the
        ``(mean, std)`` that normalise the advantages (data-parallel: the global minibatch's);
        ``None``: this minibatch's own."""
        cfg = self.config
        if features is not None:
            logp, entropy, value = self.policy.evaluate_features(
                *features, data["raw"][idx], entropy_grad=cfg.ent_coef != 0, noise=noise
            )
        else:
            state = pytree.tree_map(lambda s: s[idx], data["state"]) if self.recurrent else None
            logp, entropy, value = self.policy.evaluate(
                data["obs"][idx],
                data["raw"][idx],
                data["starts"][idx],
                state,
                entropy_grad=cfg.ent_coef != 0,
                noise=noise,
            )
        old_logp, old_v = data["logprobs"][idx], data["values"][idx]
        adv, ret = data["advantages"][idx], data["returns"][idx]
        logratio = logp - old_logp
        ratio = logratio.exp()
        with torch.no_grad():
            old_approx_kl = (-logratio).mean()
            approx_kl = ((ratio - 1) - logratio).mean()
            clipfrac = ((ratio - 1.0).abs() > cfg.clip_coef).float().mean()
        if cfg.norm_adv:
            if adv_stats is None:
                adv = (adv - adv.mean()) / (adv.std(unbiased=adv.numel() > 1) + 1e-8)
            else:
                adv_mean, adv_std = adv_stats
                adv = (adv - adv_mean) / (adv_std + 1e-8)
        pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
        if cfg.clip_vloss:
            v_clipped = old_v + (value - old_v).clamp(-cfg.clip_coef, cfg.clip_coef)
            v_loss = 0.5 * torch.max((value - ret).square(), (v_clipped - ret).square()).mean()
        else:
            v_loss = 0.5 * (value - ret).square().mean()
        ent = entropy.mean()
        loss = pg_loss - cfg.ent_coef * ent + cfg.vf_coef * v_loss
        return loss, {
            "losses/policy_loss": pg_loss.detach(),
            "losses/value_loss": v_loss.detach(),
            "losses/entropy": ent.detach(),
            "losses/old_approx_kl": old_approx_kl,
            "losses/approx_kl": approx_kl,
            "losses/clipfrac": clipfrac,
        }

    # ------------------------------------------------------------------ evaluation

    def eval_policy(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """A greedy policy with its own memory (for :func:`tritonrl.toolkit.envs.vector.evaluate`):
        ``policy(obs)``
        returns actions, ``policy.reset(mask)`` clears the memory of the rows in ``mask``."""
        return _GreedyPolicy(self)

    # ------------------------------------------------------------------ state (AgentBase hooks)

    def current_lr(self) -> float:
        """The learning rate of the next update: ``lr``, annealed linearly to 0 over ``total_steps``
        (environment steps of every rank)."""
        cfg = self.config
        if not cfg.anneal_lr:
            return cfg.lr
        total_updates = max(1, cfg.total_steps // (cfg.num_steps * self.num_envs * self.dist.world_size))
        return cfg.lr * max(0.0, 1.0 - self.updates / total_updates)

    def _state_parts(self) -> dict[str, Any]:
        rms = self._obs_shared if self._obs_shared is not None else self.obs_rms
        parts: dict[str, Any] = {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "rollout": self.buffer.state_dict(),
            "obs_rms": rms.state_dict() if rms is not None else None,  # what every rank shares
            "memory": {
                "state": pytree.leaves(self.state),
                "starts": self.starts,
                "segments": [None if s is None else pytree.leaves(s) for s in self.segment_states],
            },
        }
        if self._obs_shared is not None and self._obs_local is not None and self.obs_rms is not None:
            # data-parallel: this rank's statistics (the shared ones and its own observations since
            # they were pooled) and those own observations alone
            parts["obs_rms_rank"] = {
                "current": self.obs_rms.state_dict(),
                "local": self._obs_local.state_dict(),
            }
        return parts

    def _check_rms(self, rms: Any, what: str) -> None:
        """Raise ``ValueError`` unless ``rms`` is a RunningMeanStd state of this observation size."""
        assert self.obs_rms is not None  # called only with normalize_obs
        if not isinstance(rms, Mapping) or any(
            not isinstance(rms.get(k), torch.Tensor)
            or not rms[k].is_floating_point()
            or rms[k].numel() != v.numel()
            for k, v in self.obs_rms.state_dict().items()
        ):
            raise ValueError(
                f"observation statistics ({what}) are not float tensors "
                "mean, var, count of this observation size"
            )

    def _check_parts(self, state: Mapping[str, Any], where: str, rank_parts: bool) -> dict[str, Any]:
        config = section(state, "config", where, "the agent config")
        saved_policy = config.get("policy") if isinstance(config, Mapping) else None
        if saved_policy != self.config.policy:
            raise CheckpointError(
                f"{where}: a {brief(saved_policy, 20)} policy, this agent has {self.config.policy!r}"
            )
        check_module_tensors(
            self.policy, section(state, "policy", where, "the policy network"), where=f"{where} (policy)"
        )
        self.optimizer.check_state_dict(section(state, "optimizer", where, "the optimizer state"))
        rms = section(state, "obs_rms", where, "the observation statistics")
        if (rms is None) != (self.obs_rms is None):
            raise ValueError("observation normalisation differs (normalize_obs)")
        if self.obs_rms is not None:
            self._check_rms(rms, "obs_rms")
        if not rank_parts:
            return {}
        own = state.get("obs_rms_rank")
        if own is not None:
            if self.obs_rms is None or not isinstance(own, Mapping):
                raise ValueError("obs_rms_rank is not a mapping of 'current' and 'local' statistics")
            for key in ("current", "local"):
                self._check_rms(own.get(key), f"obs_rms_rank {key}")
        self.buffer.check_state_dict(section(state, "rollout", where, "the rollout buffer"))
        memory = section(state, "memory", where, "the recurrent memory")
        leaves = section(memory, "state", where, "the recurrent memory state")
        segments = section(memory, "segments", where, "the sequence segment memories")
        starts = section(memory, "starts", where, "the episode-start flags")
        if (
            not isinstance(starts, torch.Tensor)
            or tuple(starts.shape) != (self.num_envs,)
            or starts.dtype != torch.bool
        ):
            raise ValueError(f"episode-start flags are not a bool tensor [{self.num_envs}]")
        if not isinstance(segments, list) or len(segments) != len(self.segment_states):
            raise ValueError(
                f"{brief(segments, 30)} sequence segments, expected a list of {len(self.segment_states)}"
            )
        if not isinstance(leaves, list):
            raise ValueError("recurrent memory state is not a list of tensors")
        if self.recurrent:
            for s in [leaves, *(s for s in segments if s is not None)]:
                if not isinstance(s, list):
                    raise ValueError("a segment memory is not a list of tensors")
                pytree.from_leaves(self.state, s)
        elif leaves or any(s is not None for s in segments):
            raise ValueError("recurrent memory saved for a policy without memory")
        return {}

    def _load_parts(self, state: Mapping[str, Any], staged: dict[str, Any], rank_parts: bool) -> None:
        load_into_module(self.policy, state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self._load_obs_stats(state, rank_parts)
        if rank_parts:
            self.buffer.load_state_dict(state["rollout"])
            memory = state["memory"]
            if self.recurrent:
                template = self.state
                self.state = pytree.from_leaves(template, memory["state"])
                self.segment_states = [
                    None if s is None else pytree.from_leaves(template, s) for s in memory["segments"]
                ]
            self.starts = memory["starts"].to(self.device, torch.bool).clone()
        else:  # this rank's own parts start fresh: an empty rollout, zero memory, episodes starting
            self.buffer.reset()
            self.state = self.policy.initial_state(self.num_envs)
            self.segment_states = [None] * len(self.segment_states)
            self.starts = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        self.optimizer.set_lr(self.current_lr())  # after the counters: annealed to this update
        self._pending = None

    def _load_obs_stats(self, state: Mapping[str, Any], rank_parts: bool) -> None:
        """Restore the observation statistics: ``obs_rms`` is what every rank shares (a single
        process's statistics; a data-parallel run's pooled at its last update); with
        ``rank_parts``, a data-parallel rank's ``obs_rms_rank`` adds its own observations since."""
        if self.obs_rms is None:
            return
        own = state.get("obs_rms_rank") if rank_parts else None
        self.obs_rms.load_state_dict(own["current"] if own is not None else state["obs_rms"])
        if self._obs_shared is not None and self._obs_local is not None:
            self._obs_shared.load_state_dict(state["obs_rms"])
            self._obs_local = RunningMeanStd((self.obs_dim,), self.device, epsilon=0.0)
            if own is not None:
                self._obs_local.load_state_dict(own["local"])


def _same_obs(acted: Any, observed: Any) -> bool:
    """``observed`` is the observation ``act`` saw: the same object, or equal values (a sync, only
    when a caller passes a copy)."""
    if acted is observed:
        return True
    a, b = torch.as_tensor(acted), torch.as_tensor(observed)
    return a.shape == b.shape and torch.equal(a.float().cpu(), b.float().cpu())


class _GreedyPolicy:
    """Greedy acting with a private memory, for evaluation (see :meth:`PPOAgent.eval_policy`)."""

    def __init__(self, agent: PPOAgent) -> None:
        self.agent = agent
        self.state: Any = None
        self.starts: torch.Tensor | None = None

    def reset(self, mask: torch.Tensor) -> None:
        """Clear the memory of rows in ``mask`` ([N] bool) before their next step."""
        mask = mask.to(self.agent.device, torch.bool)
        if self.state is None or self.starts is None or self.starts.shape != mask.shape:
            self.state = self.agent.policy.initial_state(mask.shape[0])
            self.starts = torch.ones_like(mask)
        else:
            self.starts = self.starts | mask

    @torch.no_grad()
    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        x = self.agent._ingest(obs, update_stats=False, call="eval_policy")
        if self.starts is None or self.starts.shape[0] != x.shape[0]:
            self.reset(torch.ones(x.shape[0], dtype=torch.bool))
        env_a, _, _, _, self.state = self.agent.policy.act(x, self.state, self.starts, True)
        assert self.starts is not None  # set by reset() above when it was None
        self.starts = torch.zeros_like(self.starts)
        return env_a


# ----------------------------------------------------------------------------- presets


def _preset(name: str, description: str, config: PPOConfig, steps: int, market: MarketPreset) -> Preset:
    """A PPO preset: 8 environments and a greedy evaluation every 10k steps by default; the
    learning-rate annealing horizon ``total_steps`` follows the run's ``--steps``; ``market``: its
    overrides and defaults on market data."""
    return Preset(
        name,
        description,
        config,
        agent=PPOAgent,
        kind="onpolicy",
        schedule=schedule_for,
        default_num_envs=8,
        default_steps=steps,
        default_eval_every=10_000,
        steps_field="total_steps",
        market=market,
    )


# PPO on market data (--env market:...): a myopic discount, returns scaled to O(1), no entropy
# bonus. Tuned on synthetic,ar=0.3 (3 seeds, 80k steps: test Sharpe 3.0 to 3.3; gamma 0.9: 2.6 to 3.2).
_MARKET = MarketPreset(
    overrides={
        "gamma": 0.5,
        "gae_lambda": 0.9,
        "num_steps": 64,
        "lr": 3e-4,
        "update_epochs": 4,
        "num_minibatches": 4,
        "ent_coef": 0.0,
        "reward_scale": 10.0,
    },
    default_num_envs=16,
    default_steps=100_000,
    default_eval_every=10_000,
)
# continuous positions (the continuous and flow policies): a narrower initial Gaussian
_MARKET_CONTINUOUS = replace(_MARKET, overrides={**_MARKET.overrides, "log_std_init": -0.5})
# recurrent policies keep their rollout, which their seq_len divides
_MARKET_MEMORY = replace(_MARKET, overrides={k: v for k, v in _MARKET.overrides.items() if k != "num_steps"})


# Partially observed tasks: sequences of 32 steps; values on a small scale so the critic does not
# swamp the shared memory's features.
_MEMORY = PPOConfig(
    policy="lstm",
    hidden=(64,),
    memory_size=64,
    num_steps=128,
    seq_len=32,
    normalize_obs=True,
    lr=5e-4,
    update_epochs=8,
    num_minibatches=8,
    reward_scale=0.1,
    clip_vloss=False,
    total_steps=200_000,
)
"""ppo-lstm's config (ppo-gru's with ``policy="gru"``)."""

PRESETS: tuple[Preset, ...] = (
    # CartPole-style discrete control.
    _preset(
        "ppo",
        "PPO, categorical MLP policy (Discrete actions)",
        PPOConfig(policy="discrete", lr=1e-3),
        100_000,
        _MARKET,
    ),
    # Pendulum-style continuous control: short horizon, rewards scaled to O(1) returns.
    _preset(
        "ppo-continuous",
        "PPO, diagonal Gaussian MLP policy, optional tanh squash (Box actions)",
        PPOConfig(
            policy="continuous",
            num_steps=256,
            gamma=0.95,
            gae_lambda=0.95,
            lr=1e-3,
            update_epochs=10,
            num_minibatches=16,
            ent_coef=0.0,
            reward_scale=0.1,
            clip_vloss=False,
            total_steps=200_000,
        ),
        200_000,
        _MARKET_CONTINUOUS,
    ),
    _preset(
        "ppo-lstm", "PPO with an LSTM memory (partially observed tasks)", _MEMORY, 200_000, _MARKET_MEMORY
    ),
    # The GRU twin of ppo-lstm: the same sizes and schedule.
    _preset(
        "ppo-gru",
        "PPO with a GRU memory (partially observed tasks)",
        replace(_MEMORY, policy="gru"),
        200_000,
        _MARKET_MEMORY,
    ),
    _preset(
        "ppo-flow",
        "PPO, normalizing-flow policy (affine couplings, Box actions)",
        PPOConfig(
            policy="flow",
            flow_layers=2,
            num_steps=256,
            gamma=0.95,
            gae_lambda=0.9,
            lr=1e-3,
            update_epochs=10,
            num_minibatches=16,
            ent_coef=0.0,
            reward_scale=0.1,
            clip_vloss=False,
            total_steps=200_000,
        ),
        200_000,
        _MARKET_CONTINUOUS,
    ),
    _preset(
        "ppo-mamba",
        "PPO with a Mamba2 memory (partially observed tasks)",
        PPOConfig(
            policy="mamba",
            memory_size=32,
            num_steps=128,
            seq_len=32,
            normalize_obs=True,
            lr=5e-4,
            update_epochs=8,
            num_minibatches=8,
            reward_scale=0.1,
            clip_vloss=False,
            total_steps=200_000,
        ),
        200_000,
        _MARKET_MEMORY,
    ),
)
"""The named presets; the command line's registry (:mod:`tritonrl.toolkit.cli.registry`) collects them."""


def preset(name: str, **overrides: Any) -> PPOConfig:
    """The config of a named preset, with field overrides
    (:func:`tritonrl.toolkit.config.apply_overrides`).

    Raises:
        ValueError: unknown preset or field name, or an invalid value.
    """
    return find_preset(PRESETS, name, "PPO").configure(overrides)
