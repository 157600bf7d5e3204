"""Replay and rollout storage on the training device: uniform and prioritized replay with n-step
returns, frame replay for pixels, on-policy rollouts with GAE.

Imports the toolkit core and kernels only. See docs/pages/replay.md.
"""

from tritonrl.toolkit.replay.buffer import ReplayBatch, ReplayBuffer
from tritonrl.toolkit.replay.frames import FrameReplayBuffer, PrioritizedFrameReplayBuffer
from tritonrl.toolkit.replay.prioritized import PrioritizedReplayBuffer

__all__ = [
    "FrameReplayBuffer",
    "PrioritizedFrameReplayBuffer",
    "PrioritizedReplayBuffer",
    "ReplayBatch",
    "ReplayBuffer",
]
