"""Replay and rollout storage on the training device: uniform and prioritized replay with n-step
returns, on-policy rollouts with GAE.

``buffer`` (:class:`ReplayBuffer`, :class:`ReplayBatch`) holds the ring and samples it;
``staging`` holds the two strategies that close the n-step windows (host and device staging);
``nstep`` is the host staging's bookkeeping; ``state`` checks saved states and writes the
safetensors file; ``inputs`` checks the fields ``add``/``extend`` take; ``prioritized`` adds the
sum tree (:class:`PrioritizedReplayBuffer`; ``priorities`` is what both prioritized buffers share);
``rollout`` is the on-policy storage; ``frames`` stores pixel frames once, as uint8
(:class:`FrameReplayBuffer`, a :class:`ReplayBuffer` with another storage, and
:class:`PrioritizedFrameReplayBuffer`), ``frame_cursor`` is its per-env ring bookkeeping. This
folder imports the toolkit core and kernels only.
Guide: ``docs/pages/replay.md``.
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
