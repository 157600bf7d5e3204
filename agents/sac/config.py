"""The configs of the continuous off-policy family: `SACConfig` and `TD3Config`.

Field names and defaults follow CleanRL's SAC and TD3; presets: `tritonrl.agents.sac.presets`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritonrl.toolkit.checks import check_config
from tritonrl.toolkit.compile import CompileMode
from tritonrl.toolkit.config import Config, resumable

__all__ = ["SAC_KIND", "TD3_KIND", "SACConfig", "TD3Config"]

SAC_KIND = "sac"
TD3_KIND = "td3"


@dataclass(frozen=True)
class _OffPolicyConfig(Config):
    """What SAC and TD3 share: the networks, the replay, the targets and the schedule."""

    # ---- networks
    hidden: tuple[int, ...] = (256, 256)
    """Hidden sizes of the actor and of each critic (ReLU MLPs)."""
    # ---- targets
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak averaging coefficient of the target networks (1: hard copy)."""
    # ---- replay
    buffer_size: int = 1_000_000
    """Replay capacity in transitions (all environments together)."""
    batch_size: int = 256
    """Transitions per gradient step."""
    # ---- schedule (read by tritonrl.toolkit.training.offpolicy or by your loop)
    learning_starts: int = 5_000
    """Environment steps (all envs) before the first update; exploring acts are uniform until then."""
    train_freq: int = 1
    """Environment steps (all envs) between two rounds of updates."""
    gradient_steps: int = 1
    """Updates per round."""
    policy_frequency: int = 2
    """Critic updates between two rounds of actor updates (the delayed policy update)."""
    # ---- speed
    compile: CompileMode = resumable("none")
    """``torch.compile`` of the losses and optimizer steps: ``"none"``, ``"default"`` or
    ``"reduce-overhead"`` (see `tritonrl.toolkit.compile`)."""
    # ---- metadata
    tags: tuple[str, ...] = resumable(())
    """Free-form labels (a preset records its name here)."""

    @property
    def action_kind(self) -> str:
        """``"continuous"``: the action kind of an environment built for this config."""
        return "continuous"

    def _check(self, ranges: dict[str, str]) -> None:
        check_config(self, {**_RANGES, **ranges})
        if self.buffer_size < self.batch_size:
            raise ValueError(f"buffer_size={self.buffer_size} must be >= batch_size={self.batch_size}")
        if not self.hidden:
            raise ValueError("hidden=() leaves the networks without a hidden layer; give at least one size")


@dataclass(frozen=True)
class SACConfig(_OffPolicyConfig):
    """Soft actor-critic (SAC v2: twin soft Q critics, squashed Gaussian actor, automatic entropy
    tuning). Immutable; fields declared ``resumable(...)`` may change on ``--resume``."""

    policy_lr: float = resumable(3e-4)
    """Adam learning rate of the actor."""
    q_lr: float = resumable(1e-3)
    """Adam learning rate of the critics and of the entropy coefficient."""
    target_network_frequency: int = 1
    """Critic updates between two Polyak updates of the target critics."""
    alpha: float = 0.2
    """The entropy coefficient when ``autotune`` is off."""
    autotune: bool = True
    """Tune the entropy coefficient towards the target entropy ``-dim(A)`` (``log_alpha`` starts at 0)."""
    log_std_min: float = -5.0
    """Lowest log standard deviation of the actor (its output is squashed into ``[min, max]``)."""
    log_std_max: float = 2.0
    """Highest log standard deviation of the actor."""

    def __post_init__(self) -> None:
        self._check(
            {
                "policy_lr": "(0, inf)",
                "q_lr": "(0, inf)",
                "target_network_frequency": "[1, inf)",
                "alpha": "(0, inf)",
                "log_std_min": "(-inf, inf)",
                "log_std_max": "(-inf, inf)",
            }
        )
        if self.log_std_max <= self.log_std_min:
            raise ValueError(f"log_std_max={self.log_std_max} must exceed log_std_min={self.log_std_min}")


@dataclass(frozen=True)
class TD3Config(_OffPolicyConfig):
    """Twin delayed DDPG. Noise scales are fractions of each action dimension's half-range (the
    actor acts in ``[-1, 1]``)."""

    lr: float = resumable(3e-4)
    """Adam learning rate of the actor and the critics."""
    learning_starts: int = 25_000
    """Environment steps (all envs) before the first update (uniform random actions until then)."""
    exploration_noise: float = resumable(0.1)
    """Standard deviation of the Gaussian exploration noise added to the actor's action."""
    policy_noise: float = 0.2
    """Standard deviation of the target policy smoothing noise."""
    noise_clip: float = 0.5
    """The smoothing noise is clipped to ``[-noise_clip, noise_clip]``."""

    def __post_init__(self) -> None:
        self._check(
            {
                "lr": "(0, inf)",
                "exploration_noise": "[0, inf)",
                "policy_noise": "[0, inf)",
                "noise_clip": "[0, inf)",
            }
        )


# The valid range of every shared numeric field (tritonrl.toolkit.checks.check_config; NaN, inf never pass).
_RANGES = {
    "hidden": "[1, inf)",
    "gamma": "(0, 1]",
    "tau": "(0, 1]",
    "buffer_size": "[1, inf)",
    "batch_size": "[1, inf)",
    "learning_starts": "[0, inf)",
    "train_freq": "[1, inf)",
    "gradient_steps": "[1, inf)",
    "policy_frequency": "[1, inf)",
}
