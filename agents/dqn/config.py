"""The DQN family's config: every switch and hyperparameter, and their valid ranges.

What the switches combine into: docs/pages/dqn.md; the named configs: `tritonrl.agents.dqn.presets`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritonrl.agents.nets.conv import CONV_KINDS
from tritonrl.agents.nets.torsos import NORMS, TORSO_KINDS
from tritonrl.toolkit.checks import check_config
from tritonrl.toolkit.compile import CompileMode
from tritonrl.toolkit.config import Config, backfilled, resumable
from tritonrl.toolkit.replay.buffer import STAGINGS

__all__ = ["AGENT_KIND", "DISTRIBUTIONS", "REPLAY_STAGINGS", "DQNConfig"]

AGENT_KIND = "dqn"
DISTRIBUTIONS = ("none", "c51", "qr")
REPLAY_STAGINGS = ("auto", *STAGINGS)


@dataclass(frozen=True)
class DQNConfig(Config):
    """Every switch and hyperparameter of the DQN family (immutable; copy with ``dataclasses.replace``).
    Fields declared ``resumable(...)`` may change on ``--resume``; the others are fixed for a run."""

    # ---- network
    torso: str = "mlp"
    """``"mlp"``, ``"resmlp"``, ``"attention"``, ``"tcn"`` (the last two over a history ``[K, D]``),
    or a conv torso over ``[C, H, W]`` images: ``"nature"``, ``"minatar"``, ``"impala"``."""
    torso_width: int = 128
    """Hidden width of the torso."""
    torso_depth: int = 2
    """Layers (mlp), residual blocks (resmlp) or attention blocks (attention)."""
    torso_hidden: tuple[int, ...] | None = backfilled(None)
    """The mlp torso's layer sizes (``None``: ``torso_depth`` x ``torso_width``), or a conv torso's
    linear layers (``None``: the kind's default; ``()``: the flattened features)."""
    frame_stack: int = backfilled(1)
    """Frames stacked in each image observation (``[frame_stack * C, H, W]``, newest last); the frame
    replay stores each frame once."""
    torso_norm: str = "none"
    """``"none"`` or ``"rmsnorm"`` inside the torso."""
    spectral_norm: bool = False
    """Spectral-normalised linear layers in the torso."""
    attention_heads: int = 2
    """Heads of the attention torso."""
    head_hidden: int | None = None
    """Hidden width inside the head's streams (``None``: the head is linear on the torso features)."""
    dueling: bool = False
    """Dueling head: ``Q = V + A - mean(A)``."""
    noisy: bool = False
    """Noisy linear layers in the head (exploration by parameter noise; epsilon is then 0)."""
    noisy_sigma0: float = 0.5
    """Initial noise scale of the noisy layers (factorised Gaussian noise, Fortunato et al.)."""
    # ---- return distribution
    distribution: str = "none"
    """``"none"`` (expected Q), ``"c51"`` (categorical) or ``"qr"`` (quantile regression)."""
    atoms: int = 51
    """C51: number of atoms of the support (the head's output and cost grow with it)."""
    v_min: float = -100.0
    """C51: lowest atom (lower returns are clamped onto it); set it to your task's return range."""
    v_max: float = 100.0
    """C51: highest atom."""
    quantiles: int = 32
    """QR-DQN: number of quantile estimates."""
    kappa: float = 1.0
    """QR-DQN: Huber threshold of the quantile Huber loss (0: plain quantile loss)."""
    # ---- targets
    double: bool = False
    """Double Q: the online network selects the bootstrap action, the target network evaluates it."""
    gamma: float = 0.99
    """Discount factor."""
    n_step: int = 1
    """Multi-step returns: the replay buffer sums ``n_step`` discounted rewards."""
    loss: str = "huber"
    """Scalar Q loss on the TD error: ``"huber"`` or ``"mse"``."""
    # ---- replay
    buffer_size: int = 50_000
    """Replay capacity in transitions (all environments together)."""
    batch_size: int = 64
    """Transitions per gradient step."""
    prioritized: bool = False
    """Prioritized replay (Schaul et al., 2016)."""
    per_alpha: float = 0.6
    """PER: priority exponent."""
    per_beta: float = 0.4
    """PER: initial importance-sampling exponent."""
    per_beta_final: float = 1.0
    """PER: importance-sampling exponent after ``per_beta_steps`` samples."""
    per_beta_steps: int = 10_000
    """PER: number of sampled batches over which beta is annealed."""
    per_eps: float = 1e-6
    """PER: added to every priority."""
    # ---- optimisation
    lr: float = resumable(2.3e-3)
    """Adam learning rate (at the start, with ``lr_final``)."""
    lr_final: float | None = backfilled(None)
    """Anneal the learning rate linearly from ``lr`` to this over ``lr_decay_steps`` environment
    steps, then hold it (``None``: a constant ``lr``)."""
    lr_decay_steps: int = backfilled(50_000)
    """Environment steps (all envs) over which the learning rate reaches ``lr_final``."""
    adam_eps: float = 1e-8
    """Adam epsilon (Rainbow uses ``1.5e-4`` on Atari)."""
    max_grad_norm: float | None = resumable(10.0)
    """Global gradient-norm clip (in f32). ``None``: no clip, no norm computed, no ``losses/grad_norm``."""
    # ---- schedule (read by tritonrl.toolkit.training.offpolicy or by your loop)
    learning_starts: int = 1_000
    """Environment steps (all envs) before the first update."""
    train_freq: int = 256
    """Environment steps (all envs) between two rounds of updates."""
    gradient_steps: int = 128
    """Updates per round."""
    target_update_every: int = resumable(128)
    """Learner updates between two target-network updates."""
    tau: float = 1.0
    """Target update: 1 copies the online weights (hard); below 1 is Polyak averaging."""
    # ---- exploration (ignored when noisy)
    eps_start: float = resumable(1.0)
    """Initial epsilon of epsilon-greedy."""
    eps_end: float = resumable(0.04)
    """Final epsilon."""
    eps_decay_steps: int = resumable(8_000)
    """Environment steps over which epsilon decays linearly."""
    # ---- curiosity
    icm: bool = False
    """Attach the Intrinsic Curiosity Module: intrinsic reward added at ingestion."""
    icm_eta: float = resumable(1.0)
    """ICM: intrinsic reward scale."""
    icm_beta: float = resumable(0.2)
    """ICM: forward-loss weight against the inverse loss, in [0, 1]."""
    icm_lr: float = resumable(1e-3)
    """ICM: Adam learning rate of the curiosity module."""
    icm_embed: int = 32
    """ICM: embedding size."""
    icm_hidden: int = 128
    """ICM: hidden width of encoder, forward and inverse models."""
    extrinsic_coef: float = resumable(1.0)
    """Weight of the environment's reward (0 explores on curiosity alone)."""
    replay_staging: str = resumable("auto")
    """Where replay closes its n-step windows: ``"host"`` (a sync per step on an accelerator),
    ``"device"`` (fixed shapes) or ``"auto"`` (host on a CPU); a resume may switch it."""
    # ---- speed
    compile: CompileMode = resumable("none")
    """``torch.compile`` of the learner step and the acting forward: ``"none"``, ``"default"`` or
    ``"reduce-overhead"`` (CUDA graphs on CUDA). See `tritonrl.toolkit.compile`."""
    # ---- metadata
    tags: tuple[str, ...] = resumable(())
    """Free-form labels (a preset records its name here)."""

    def __post_init__(self) -> None:
        check_config(self, _RANGES)
        checks = [
            (
                self.torso in TORSO_KINDS + CONV_KINDS,
                f"torso={self.torso!r} is not one of {TORSO_KINDS + CONV_KINDS}",
            ),
            (self.torso_norm in NORMS, f"torso_norm={self.torso_norm!r} is not one of {NORMS}"),
            (
                self.distribution in DISTRIBUTIONS,
                f"distribution={self.distribution!r} is not one of {DISTRIBUTIONS}",
            ),
            (self.loss in ("huber", "mse"), f"loss={self.loss!r} is not 'huber' or 'mse'"),
            (
                self.replay_staging in REPLAY_STAGINGS,
                f"replay_staging={self.replay_staging!r} is not one of {REPLAY_STAGINGS}",
            ),
            (self.v_max > self.v_min, f"v_max={self.v_max} must exceed v_min={self.v_min}"),
            (
                self.buffer_size >= self.batch_size,
                f"buffer_size={self.buffer_size} must be >= batch_size={self.batch_size}",
            ),
            (
                self.torso_hidden != () or self.torso in CONV_KINDS,
                "torso_hidden=() has no layer: give at least one size, or None for torso_width x torso_depth",
            ),
            (
                self.torso_hidden is None or self.torso in ("mlp", *CONV_KINDS),
                f"torso_hidden={self.torso_hidden} is for the mlp or a conv torso, not torso={self.torso!r}",
            ),
            (
                self.torso != "tcn" or not self.spectral_norm,
                "spectral_norm is not available with torso='tcn' (its layers are convolutions)",
            ),
            (
                self.torso != "attention" or self.torso_width % self.attention_heads == 0,
                f"torso_width={self.torso_width} must be divisible by attention_heads={self.attention_heads}",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


# The valid range of every numeric field (tritonrl.toolkit.checks.check_config; NaN and inf never pass).
_RANGES = {
    "torso_width": "[1, inf)",
    "torso_depth": "[1, inf)",
    "torso_hidden": "[1, inf)",
    "frame_stack": "[1, inf)",
    "attention_heads": "[1, inf)",
    "head_hidden": "[1, inf)",
    "noisy_sigma0": "[0, inf)",
    "atoms": "[2, inf)",
    "v_min": "(-inf, inf)",
    "v_max": "(-inf, inf)",
    "quantiles": "[1, inf)",
    "kappa": "[0, inf)",
    "gamma": "(0, 1]",
    "n_step": "[1, inf)",
    "buffer_size": "[1, inf)",
    "batch_size": "[1, inf)",
    "per_alpha": "[0, 1]",
    "per_beta": "[0, 1]",
    "per_beta_final": "[0, 1]",
    "per_beta_steps": "[1, inf)",
    "per_eps": "(0, 1]",
    "lr": "(0, inf)",
    "lr_final": "[0, inf)",
    "lr_decay_steps": "[1, inf)",
    "adam_eps": "[0, inf)",
    "max_grad_norm": "(0, inf)",
    "learning_starts": "[0, inf)",
    "train_freq": "[1, inf)",
    "gradient_steps": "[1, inf)",
    "target_update_every": "[1, inf)",
    "tau": "(0, 1]",
    "eps_start": "[0, 1]",
    "eps_end": "[0, 1]",
    "eps_decay_steps": "[0, inf)",
    "icm_eta": "[0, inf)",
    "icm_beta": "[0, 1]",
    "icm_lr": "(0, inf)",
    "icm_embed": "[1, inf)",
    "icm_hidden": "[1, inf)",
    "extrinsic_coef": "(-inf, inf)",
}
