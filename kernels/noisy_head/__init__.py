"""Noisy linear layers and the dueling / distributional Q head (Rainbow), as fused ops.

[`noisy_linear`][tritonrl.kernels.noisy_head.noisy_linear],
[`noisy_dueling`][tritonrl.kernels.noisy_head.noisy_dueling] and
[`expected_q`][tritonrl.kernels.noisy_head.expected_q]; see docs/pages/noisy-head.md.
"""

# torch.ops.tritonrl.noisy_linear / noisy_dueling (+ backward ops): what torch.compile traces
from tritonrl.kernels.noisy_head import library  # noqa: F401  (registers the custom ops)
from tritonrl.kernels.noisy_head.api import (
    NOISY_DUELING,
    NOISY_LINEAR,
    expected_q,
    linear_q,
    noisy_dueling,
    noisy_linear,
)
from tritonrl.kernels.noisy_head.reference import NoisyParams

__all__ = [
    "NOISY_DUELING",
    "NOISY_LINEAR",
    "NoisyParams",
    "expected_q",
    "linear_q",
    "noisy_dueling",
    "noisy_linear",
]
