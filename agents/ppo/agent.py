"""The PPO agent: act and remember, observe into the rollout, update on clipped-surrogate epochs.

The algorithm is described in [`tritonrl.agents.ppo`][tritonrl.agents.ppo]; the config, the policy network,
the presets and the checkpoint parts have modules of their own beside this one.
"""

from __future__ import annotations

import copy
import math
import typing
import warnings
from typing import Any

import gymnasium as gym
import torch
from tritonrl.agents.nets.recurrent import subsequence_stats
from tritonrl.agents.ppo.config import AGENT_KIND, PPOConfig
from tritonrl.agents.ppo.network import build_policy
from tritonrl.agents.ppo.policy import ActorCriticPolicy
from tritonrl.agents.ppo.state import PPOCheckpoint
from tritonrl.toolkit import pytree
from tritonrl.toolkit.acting import SnapshotActor, actor_generator
from tritonrl.toolkit.agent import AgentBase
from tritonrl.toolkit.checks import ActionRule, InputGuard, StepShapes, check_image_bytes
from tritonrl.toolkit.compile import Compiled, escape
from tritonrl.toolkit.distributed import DistContext
from tritonrl.toolkit.replay.rollout import RolloutBuffer, RunningMeanStd, compute_gae
from tritonrl.toolkit.spaces import pixel_scale

__all__ = ["LRAnnealedWarning", "PPOAgent"]

_DEFAULT_CONFIG = PPOConfig(policy="discrete", lr=1e-3)
"""The config of an agent built without one: the ``ppo`` preset's (a test keeps them equal)."""

_ACTED = "the action act returned for this obs"
_RESCORE = (
    "pass that action, or observe(..., rescore=True) to store this one with its log-probability "
    "under the current policy (action masks, shields)"
)


class LRAnnealedWarning(UserWarning):
    """A PPO update ran at learning rate 0: ``anneal_lr`` reached ``total_steps`` (training stopped)."""


def _annealed_message(cfg: PPOConfig, updates: int, env_steps: int) -> str:
    return (
        f"PPOAgent.update: the learning rate has annealed to 0 (anneal_lr=True reaches 0 at "
        f"total_steps={cfg.total_steps} environment steps; {env_steps} so far, update {updates + 1}): "
        "this update and every later one learn nothing. Set total_steps to the run's length "
        "(preset(..., total_steps=N)) or anneal_lr=False for a constant learning rate"
    )


class _Pending(typing.NamedTuple):
    """What `PPOAgent.act` computed for ``obs``, kept for `PPOAgent.observe`."""

    obs: Any
    x: torch.Tensor
    raw: torch.Tensor
    logprob: torch.Tensor
    value: torch.Tensor
    starts: torch.Tensor
    action: torch.Tensor  # the env action act returned
    state: Any  # the memory before the step (recurrent policies; None otherwise)


class PPOAgent(PPOCheckpoint, AgentBase):
    """A PPO agent; the algorithm is described in `tritonrl.agents.ppo`.

    Checkpoints and ``check_inputs`` are
    [`tritonrl.toolkit.agent.AgentBase`][tritonrl.toolkit.agent.AgentBase]'s.

    Args:
        observation_space: a flat ``Box`` (``torso="mlp"``) or a uint8 image ``Box`` ``[C, H, W]``
            (a conv ``torso``; bytes scaled by ``1 / high`` once, on entry).
        action_space: ``Discrete`` or ``Box``, as the policy kind can drive.
        config: a [`PPOConfig`][tritonrl.agents.ppo.config.PPOConfig] (default: the ``ppo`` preset).
        num_envs: environments per ``act``/``observe`` call; with ``dist``, this rank's share.
        device: where networks and the rollout live; the dtype is ``training_dtype(device)``.
        seed: seeds the parameters and the agent's generator (per rank:
            [`tritonrl.toolkit.seeding.rank_seed`][tritonrl.toolkit.seeding.rank_seed]).
        dist: the data-parallel context (``None``:
            [`tritonrl.toolkit.distributed.current`][tritonrl.toolkit.distributed.current]); every rank must
            build the agent at the same point.

    Raises:
        ValueError: an action space the policy kind cannot drive, or an observation space that is
            neither flat nor a uint8 image or does not fit the ``torso``.
        TypeError: ``config`` is not a [`PPOConfig`][tritonrl.agents.ppo.config.PPOConfig].
        tritonrl.toolkit.distributed.DistributedError: the ranks' configs, spaces or ``num_envs`` differ.
    """

    kind = AGENT_KIND
    config_class = PPOConfig
    rank_part_keys = ("generator", "rollout", "memory", "obs_rms_rank")
    part_keys = ("policy", "optimizer", "rollout", "obs_rms", "memory", "obs_rms_rank")
    experience_keys = ("rollout",)

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
        cfg = config if config is not None else _DEFAULT_CONFIG
        self._init_agent(
            observation_space, action_space, cfg, num_envs=num_envs, device=device, seed=seed, dist=dist
        )
        self.pixel_scale = pixel_scale(observation_space)
        """Image observations (uint8 ``[C, H, W]``): the factor that maps their bytes to ``[0, 1]``
        (`tritonrl.toolkit.spaces.pixel_scale`); ``None`` for flat observations."""
        self.obs_shape = _check_obs_space(observation_space, cfg, self.pixel_scale is not None)
        self.obs_dim = math.prod(self.obs_shape)
        self.net = self._build_seeded(
            lambda: build_policy(cfg, self.obs_shape, action_space, self.device, self.dtype)
        )  # rank 0's weights; the masters copy them below
        self.optimizer = self._adam(self.net.parameters(), cfg.lr, eps=cfg.adam_eps)
        squashed = cfg.policy == "flow" or cfg.squash
        action_shape: tuple[int, ...]
        if isinstance(action_space, gym.spaces.Discrete):
            action_shape = ()
            rule = ActionRule.discrete(int(action_space.n))
        else:
            assert isinstance(action_space, gym.spaces.Box)  # build_policy accepts Discrete or flat Box only
            action_shape = tuple(action_space.shape)
            rule = ActionRule.box(action_space.low, action_space.high, bounded=squashed)
        self.shapes = StepShapes("PPOAgent", num_envs, self.obs_shape, action_shape)
        """The shape and dtype checks of ``act``/``observe`` arguments (`StepShapes`)."""
        self.inputs = InputGuard("PPOAgent", rule)
        """The checks of ``act``/``observe`` inputs (`tritonrl.toolkit.checks.InputGuard`); its
        ``mode`` (``"auto"``, ``"eager"``, ``"deferred"``) says when inputs on an accelerator are checked.
        Box actions must be finite, and within the bounds for tanh-squashed policies (``squash``,
        ``flow``); an unsquashed Gaussian samples beyond the bounds by design (the env clips)."""
        self.buffer = RolloutBuffer(
            cfg.num_steps,
            num_envs,
            self.obs_shape,
            action_shape,
            torch.int64 if isinstance(action_space, gym.spaces.Discrete) else torch.float32,
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
        self.recurrent = self.net.recurrent
        self.state = self.net.initial_state(num_envs)
        self.starts = torch.ones(num_envs, dtype=torch.bool, device=self.device)
        self.segment_states: list[Any] = [None] * (cfg.num_steps // cfg.sequence_length)
        self._pending: _Pending | None = None
        self._lr_warned = False  # LRAnnealedWarning: once per agent
        # The compiled regions (tritonrl.toolkit.compile): GAE, the minibatch loss (its backward
        # compiled with it), the acting forward. Eager functions for compile="none".
        self._gae = Compiled(compute_gae, cfg.compile, self.device)
        # LSTM/GRU: the sequences' features are computed eagerly, before the compiled loss (the
        # size of the split layout changes with the data; see LSTMCore.sequence)
        self._splits = bool(getattr(self.net.core, "splits_at_starts", False))
        self._learn = Compiled(self._minibatch_loss, cfg.compile, self.device)
        self._act = Compiled(self.net.act, cfg.compile, self.device)

    # ------------------------------------------------------------------ acting

    ingest_rows = "E"

    def _ingest_cast(self, x: torch.Tensor, dtype: torch.dtype, **hook: Any) -> torch.Tensor:
        """`AgentBase._ingest`'s cast: f32, normalised (stats updated if asked), then ``dtype``."""
        x = x.to(self.device, torch.float32)
        if self.obs_rms is not None:
            if hook["update_stats"]:
                self.obs_rms.update(x)
                if self._obs_local is not None:
                    self._obs_local.update(x)
            x = self.obs_rms.normalize(x, self.config.obs_clip)
        return x.to(dtype)

    def _acting_starts(self) -> torch.Tensor:
        """Where the core resets its memory before this step (episode starts; segment starts for
        cores that cannot start a training sequence from a stored state)."""
        starts = self.starts
        t = self.buffer.pos
        if self.recurrent and t % self.config.sequence_length == 0:
            if not self.net.core.supports_initial_state:
                starts = torch.ones_like(starts)
            self.segment_states[t // self.config.sequence_length] = pytree.tree_map(torch.clone, self.state)
        return starts

    @torch.no_grad()
    def act(self, obs: torch.Tensor, explore: bool = True) -> torch.Tensor:
        """Actions for ``obs [E, *obs_shape]``: ``[E]`` int64 (Discrete) or ``[E, D]`` f32 (Box).

        ``explore=False`` acts greedily. The log-prob and value are kept for
        [`observe`][tritonrl.agents.ppo.agent.PPOAgent.observe]; recurrent memories advance.

        Raises:
            ValueError: ``obs`` has the wrong shape or holds NaN/inf (accelerator tensors: raised at the
                next [`update`][tritonrl.agents.ppo.agent.PPOAgent.update] or
                [`check_inputs`][tritonrl.agents.ppo.agent.PPOAgent.check_inputs]).
            TypeError: image observations that are not uint8.
        """
        x = self._ingest(obs, update_stats=explore, call="act")
        starts = self._acting_starts()
        # the sampling noise is drawn here, from the agent's generator, outside the compiled forward
        noise = self.net.head.draw(x.shape[0], self.generator) if explore else None
        self._act.step_begin()
        out = escape(self._act(x, self.state, starts, not explore, None, noise), self._act)
        env_a, raw, logp, value, state = out
        self._pending = _Pending(obs, x, raw, logp, value, starts, env_a, self.state)
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
        *,
        rescore: bool = False,
    ) -> None:
        """Store one vector step (each argument has leading dim ``E``).

        ``next_obs`` is the true next observation, scored by the critic where ``truncated`` and at the
        rollout's last step. ``action`` must be what [`act`][tritonrl.agents.ppo.agent.PPOAgent.act] returned
        for ``obs``; ``rescore=True`` stores another one (a mask or shield replaced it) with its log-prob
        under the current policy.

        Raises:
            RuntimeError: the rollout is full, or a recurrent policy observes an ``obs`` that did not
                come through [`act`][tritonrl.agents.ppo.agent.PPOAgent.act].
            ValueError: a shape that is not ``[num_envs, ...]``, NaN/inf, an out-of-range action, or
                (without ``rescore``) another action than [`act`][tritonrl.agents.ppo.agent.PPOAgent.act]
                returned; accelerator tensors raise at the next
                [`update`][tritonrl.agents.ppo.agent.PPOAgent.update] or
                [`check_inputs`][tritonrl.agents.ppo.agent.PPOAgent.check_inputs].
            TypeError: non-boolean ``terminated``/``truncated``, non-real ``reward``, or non-uint8 images.
        """
        self.shapes.observe(obs, action, reward, next_obs, terminated, truncated)
        self._check_values(obs, action, reward, next_obs)
        p = self._pending
        if p is None or not _same_obs(p.obs, obs):
            if self.recurrent:
                raise RuntimeError("recurrent PPO: call act(obs) and pass that same obs to observe()")
            x = self._ingest(obs, update_stats=False)
            raw = self.net.head.to_raw(torch.as_tensor(action).to(self.device))
            logp, _, value = self.net.evaluate(x, raw, generator=self.generator)
            starts = self.starts
        elif rescore:
            x, value, starts = p.x, p.value, p.starts
            raw = self.net.head.to_raw(torch.as_tensor(action).to(self.device, p.action.dtype))
            fa, fc, _ = self.net.step_features(x, p.state, starts)  # act's features, again
            logp = self.net.evaluate_features(fa, fc, raw, self.generator, entropy_grad=False)[0]
        else:
            self.inputs.same("observe", "action", action, p.action, _ACTED, _RESCORE)
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
            v_next = self.net.value(x_next, self.state, torch.zeros_like(self.starts))
            mask = torch.ones_like(truncated) if last else truncated
            self.buffer.set_next_values(v_next, mask)
        self.starts = terminated | truncated

    def _check_values(self, obs: Any, action: Any, reward: Any, next_obs: Any) -> None:
        """The value checks of `observe` (one step or a block of steps alike)."""
        g = self.inputs
        if self.pixel_scale is None:
            g.obs("observe", "obs", obs)
        else:  # image bytes are finite: their dtype is the check
            check_image_bytes("PPOAgent", "observe", obs, "obs")
            check_image_bytes("PPOAgent", "observe", next_obs, "next_obs")
        g.action("observe", action)
        g.reward("observe", reward)
        if self.pixel_scale is None:
            g.obs("observe", "next_obs", next_obs)

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

        Host reads: the approximate KL once per epoch with ``target_kl``, the deferred input checks with
        ``inputs.check_at_update``, and for LSTM/GRU policies one small layout tensor per update
        (`_minibatch_layouts`). With ``dist``, every rank calls it together.

        Raises:
            RuntimeError: the rollout is not full yet.
            ValueError: with ``inputs.check_at_update``, a deferred input check failed; nothing learned.
        """
        if self.inputs.pending and self.inputs.check_at_update:
            self.inputs.check()
        cfg, b = self.config, self.buffer
        if not b.full:
            raise RuntimeError(f"update() needs a full rollout: {b.pos} of {b.num_steps} steps stored")
        self._pool_obs_stats()
        lr = self.current_lr()
        if lr == 0.0 and not self._lr_warned:
            self._lr_warned = True
            warnings.warn(
                _annealed_message(cfg, self.updates, self.env_steps), LRAnnealedWarning, stacklevel=2
            )
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
        """``(rows, length)`` of the split layout of every minibatch of every epoch, read in one transfer."""
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
        head = self.net.head
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
            features = self.net.features(data["obs"][idx], data["starts"][idx], state, layout)
        loss, metrics = self._learn(data, idx, noise, features, adv_stats)
        loss.backward()
        metrics["losses/grad_norm"] = self.optimizer.clip_and_step(cfg.max_grad_norm)
        return escape(metrics, self._learn)  # summed over minibatches: kept past the next replay

    def _global_adv_stats(self, adv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, std)`` (f32 0-d) of the advantages over every rank, as ``Tensor.std`` (unbiased).

        Two small all-reduces (sum, then squared deviations about the mean), no host read.
        """
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
        """``(loss, metrics)`` of minibatch ``idx`` (the compiled region).

        ``features``: precomputed (LSTM/GRU) or ``None``; ``adv_stats``: the advantage ``(mean, std)``,
        ``None`` for this minibatch's own.
        """
        cfg = self.config
        if features is not None:
            logp, entropy, value = self.net.evaluate_features(
                *features, data["raw"][idx], entropy_grad=cfg.ent_coef != 0, noise=noise
            )
        else:
            state = pytree.tree_map(lambda s: s[idx], data["state"]) if self.recurrent else None
            logp, entropy, value = self.net.evaluate(
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

    # ------------------------------------------------------------------ the policy module

    def policy(self) -> ActorCriticPolicy:
        """The policy module (`tritonrl.agents.ppo.policy.ActorCriticPolicy`): an f32 snapshot."""
        net = copy.deepcopy(self.net).float().requires_grad_(False)
        stats = None if self.obs_rms is None else (self.obs_rms.mean, self.obs_rms.var)
        return ActorCriticPolicy(
            net,
            self.observation_space,
            self.action_space,
            pixel_scale=self.pixel_scale,
            obs_stats=stats,
            obs_clip=self.config.obs_clip,
        ).eval()

    def learner_tensors(self) -> list[torch.Tensor]:
        """The actor-critic's parameters then buffers, then the observation statistics (what a
        policy snapshot mirrors, `ActorCriticPolicy.mirrors`)."""
        stats = [] if self.obs_rms is None else [self.obs_rms.mean, self.obs_rms.var]
        return [*self.net.parameters(), *self.net.buffers(), *stats]

    # ------------------------------------------------------------------ overlapped training

    def check_lagged(self) -> None:
        """Raise ``ValueError`` for a recurrent policy or ``normalize_obs=True``."""
        if self.recurrent:
            raise ValueError(
                f"overlap: the {self.config.policy!r} policy is recurrent (its memory lives on the "
                "acting side); use a feed-forward policy (discrete, continuous, flow) or overlap=False"
            )
        if self.obs_rms is not None:
            raise ValueError(
                "overlap: normalize_obs=True updates the observation statistics on the acting side; "
                "set normalize_obs=False or overlap=False"
            )

    def lagged_actor(self) -> SnapshotActor:
        """An overlapped run's actor: a policy snapshot with its own generator and ``extras()``.

        Raises:
            ValueError: a recurrent policy, or ``normalize_obs=True``.
        """
        self.check_lagged()
        generator = actor_generator(self.generator, self.device)
        stride = self.num_envs * self.dist.world_size
        steps = [self.env_steps]
        last: dict[str, torch.Tensor] = {}

        def act(policy: Any, obs: Any) -> torch.Tensor:
            # checked as act checks it (shape, finite values or image bytes), f32 for the snapshot
            x = self._ingest(obs, update_stats=False, call="act", dtype=torch.float32)
            noise = policy.net.head.draw(x.shape[0], generator)
            env_a, last["raw"], last["logprob"] = policy.sample(x, noise)
            steps[0] += stride
            return env_a

        return SnapshotActor(
            self.policy(), act, generator, steps, check=self.eval_check, extras=lambda: dict(last)
        )

    @torch.no_grad()
    def observe_steps(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        *,
        raw: torch.Tensor | None = None,
        logprob: torch.Tensor | None = None,
    ) -> None:
        """Store ``T`` vector steps (``[T, E, ...]``), scored by this agent's critic in one batch.

        ``raw`` and ``logprob`` (``[T, E]`` f32) are the behaviour policy's; without them the actions
        are scored by this agent's policy.

        Raises:
            ValueError: a recurrent policy or ``normalize_obs``, blocks of different lengths, or a step
                [`observe`][tritonrl.agents.ppo.agent.PPOAgent.observe] would refuse; nothing is stored.
            RuntimeError: the steps do not fit into the rollout.
        """
        self.check_lagged()
        T = int(obs.shape[0])
        block = {"action": action, "reward": reward, "next_obs": next_obs}
        block.update(terminated=terminated, truncated=truncated)
        if logprob is not None:
            block["logprob"] = logprob
        for name, v in block.items():
            if int(v.shape[0]) != T:
                raise ValueError(f"PPOAgent.observe_steps: {name} holds {v.shape[0]} steps, obs {T}")
        if (raw is None) != (logprob is None):
            raise ValueError("PPOAgent.observe_steps: raw and logprob come together")
        b = self.buffer
        if b.pos + T > b.num_steps:
            raise RuntimeError(f"rollout holds {b.pos} of {b.num_steps} steps: {T} more do not fit")
        if not T:
            return
        # every check before anything is stored: the per-step shapes, then the values of the block
        self.shapes.observe(obs[0], action[0], reward[0], next_obs[0], terminated[0], truncated[0])
        self._check_values(obs, action, reward, next_obs)
        E = self.num_envs
        flat = obs.reshape(T * E, *obs.shape[2:])
        x = self._ingest(flat, update_stats=False)
        policy = self.net
        if raw is None:
            raw_all = policy.head.to_raw(torch.as_tensor(action).reshape(T * E, *action.shape[2:]))
            logp, _, values = policy.evaluate(x, raw_all.to(self.device), generator=self.generator)
            raw = raw_all.reshape(T, E, *raw_all.shape[1:])
            logprob = logp.reshape(T, E)
        else:
            values = policy.value(x, None, None)
        values = values.reshape(T, E)
        assert logprob is not None  # given with raw, or scored above
        dev = self.device
        term = torch.as_tensor(terminated).to(dev, torch.bool)
        trunc = torch.as_tensor(truncated).to(dev, torch.bool)
        rew = torch.as_tensor(reward).to(dev, torch.float32)
        if self.config.reward_scale != 1.0:
            rew = rew * self.config.reward_scale
        x = x.reshape(T, E, *x.shape[1:])
        first = b.pos
        # bootstraps: V(next_obs) where truncated, and at the rollout's last step
        need = trunc.clone()
        ends_rollout = first + T == b.num_steps
        if ends_rollout:
            need[-1] = True
        rows = need.any(-1).nonzero().flatten().tolist() if bool(need.any()) else []
        v_next: dict[int, torch.Tensor] = {}
        if rows:
            xn = self._ingest(next_obs[rows].reshape(len(rows) * E, *next_obs.shape[2:]), update_stats=False)
            vn = policy.value(xn, None, None).reshape(len(rows), E)
            v_next = {r: vn[i] for i, r in enumerate(rows)}
        for t in range(T):
            starts = self.starts if t == 0 else (term[t - 1] | trunc[t - 1])
            b.add(x[t], raw[t], logprob[t], values[t], rew[t], term[t], trunc[t], starts)
            if t in v_next:
                b.set_next_values(v_next[t], need[t])
        self.starts = term[-1] | trunc[-1]
        self._pending = None
        self.env_steps += T * E * self.dist.world_size

    # ------------------------------------------------------------------ state (AgentBase hooks)

    def current_lr(self) -> float:
        """The learning rate of the next update: ``lr``, annealed linearly to 0 over ``total_steps``
        (environment steps of every rank); the first update at 0 warns (`LRAnnealedWarning`)."""
        cfg = self.config
        if not cfg.anneal_lr:
            return cfg.lr
        total_updates = max(1, cfg.total_steps // (cfg.num_steps * self.num_envs * self.dist.world_size))
        return cfg.lr * max(0.0, 1.0 - self.updates / total_updates)


def _check_obs_space(space: gym.Space, cfg: PPOConfig, pixels: bool) -> tuple[int, ...]:
    """The shape of one observation: ``(obs_dim,)`` (``mlp`` torso) or ``(C, H, W)`` (conv torso).

    Raises:
        ValueError: another space, or a torso that does not fit it.
    """
    if pixels:
        if cfg.torso == "mlp":
            raise ValueError(
                f"image observations {space} need a conv torso: torso='nature', 'minatar' or 'impala'"
            )
    elif not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
        raise ValueError(f"observation_space must be a flat Box or a uint8 [C, H, W] Box, got {space}")
    elif cfg.torso != "mlp":
        raise ValueError(f"torso={cfg.torso!r} needs uint8 [C, H, W] image observations, got {space}")
    assert isinstance(space, gym.spaces.Box)  # pixel_scale is set for Box spaces only
    return tuple(int(d) for d in space.shape)


def _same_obs(acted: Any, observed: Any) -> bool:
    """``observed`` is the observation ``act`` saw: the same object, or equal values (a sync, only
    when a caller passes a copy)."""
    if acted is observed:
        return True
    a, b = torch.as_tensor(acted), torch.as_tensor(observed)
    return a.shape == b.shape and torch.equal(a.float().cpu(), b.float().cpu())
