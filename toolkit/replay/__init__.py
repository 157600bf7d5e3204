"""Device-resident replay buffers: uniform and prioritized, with n-step returns.

See :class:`ReplayBuffer`, :class:`PrioritizedReplayBuffer` and the guide ``docs/pages/replay.md``.
"""

from tritonrl.toolkit.replay.buffer import ReplayBatch, ReplayBuffer
from tritonrl.toolkit.replay.prioritized import PrioritizedReplayBuffer

__all__ = ["PrioritizedReplayBuffer", "ReplayBatch", "ReplayBuffer"]
