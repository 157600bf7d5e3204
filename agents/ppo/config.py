"""The PPO config: every hyperparameter, and their valid ranges.

The algorithm: docs/pages/ppo.md; the named configs: `tritonrl.agents.ppo.presets`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tritonrl.toolkit.checks import check_config
from tritonrl.toolkit.compile import CompileMode
from tritonrl.toolkit.config import Config, backfilled, resumable

__all__ = ["AGENT_KIND", "POLICIES", "PPOConfig", "TORSOS"]

AGENT_KIND = "ppo"
POLICIES = ("discrete", "continuous", "lstm", "gru", "flow", "mamba")
TORSOS = ("mlp", "nature", "minatar", "impala")
"""``mlp`` (flat observations), then the conv torsos of `tritonrl.agents.nets.conv.CONV_KINDS`."""
_FEED_FORWARD = ("discrete", "continuous", "flow")


@dataclass(frozen=True)
class PPOConfig(Config):
    """Every PPO hyperparameter (immutable; copy with ``dataclasses.replace`` or `preset`).
    Fields declared ``resumable(...)`` may change on ``--resume``; the others are fixed for a run."""

    # ---- policy
    policy: Literal["discrete", "continuous", "lstm", "gru", "flow", "mamba"] = "discrete"
    """``discrete``, ``continuous`` (Gaussian), ``lstm``, ``gru``, ``flow`` or ``mamba``; the recurrent
    kinds use a categorical head for ``Discrete`` and a Gaussian one for ``Box``."""
    hidden: tuple[int, ...] = (64, 64)
    """MLP hidden sizes (actor and critic each; the recurrent cores' encoder); unused by a conv torso."""
    torso: Literal["mlp", "nature", "minatar", "impala"] = "mlp"
    """``mlp`` (separate tanh MLPs) or a conv kind for uint8 ``[C, H, W]`` images (``nature``,
    ``minatar``, ``impala``; one torso shared by actor and critic; feed-forward policies only)."""
    torso_hidden: tuple[int, ...] | None = backfilled(None)
    """A conv torso's linear layers (``None``: the kind's default; ``()``: the flattened features);
    ``torso="mlp"`` takes none."""
    squash: bool = False
    """Gaussian heads: tanh-squash onto the action bounds; without it the environment clips actions."""
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
    """Anneal the learning rate linearly to 0 over ``total_steps`` (updates past that warn once)."""
    total_steps: int = resumable(500_000)
    """Environment steps of the whole run, all environments (where the annealed rate reaches 0)."""
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
    """Stop an update's epochs once the approximate KL exceeds this (``None``; else a sync per epoch)."""
    # ---- speed
    compile: CompileMode = resumable("none")
    """``torch.compile`` of the learner step and the acting forward: ``"none"``, ``"default"`` or
    ``"reduce-overhead"`` (CUDA graphs on CUDA). See `tritonrl.toolkit.compile`."""

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy={self.policy!r} is not one of {POLICIES}")
        if self.torso not in TORSOS:
            raise ValueError(f"torso={self.torso!r} is not one of {TORSOS}")
        if self.torso != "mlp" and self.policy not in _FEED_FORWARD:
            raise ValueError(
                f"torso={self.torso!r} (image observations) needs a feed-forward policy "
                f"({', '.join(_FEED_FORWARD)}), got policy={self.policy!r}"
            )
        if self.torso != "mlp" and self.normalize_obs:
            raise ValueError(
                f"normalize_obs=True is not available with torso={self.torso!r}: image bytes are "
                "scaled to [0, 1] where they enter"
            )
        if self.torso_hidden is not None and self.torso == "mlp":
            raise ValueError(
                f"torso_hidden={self.torso_hidden} is for a conv torso; the mlp torso's sizes are hidden"
            )
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
        """``"continuous"`` for the policies that drive a Box action, else ``"discrete"``: the action
        kind of an environment built for this config."""
        return "continuous" if self.policy in ("continuous", "flow") else "discrete"


# The valid range of every numeric field (tritonrl.toolkit.checks.check_config; NaN and inf never pass).
_RANGES = {
    "hidden": "[1, inf)",
    "torso_hidden": "[1, inf)",
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
