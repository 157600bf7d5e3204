"""The Mamba2 selective state-space scan (an op folder: CONTRIBUTING.md, "Adding an op").

[`mamba2_scan`][tritonrl.kernels.mamba2.mamba2_scan] (chunked, with episode resets, differentiable) and
[`mamba2_step`][tritonrl.kernels.mamba2.mamba2_step] (acting). See docs/pages/mamba2.md.
"""

# torch.ops.tritonrl.mamba2_scan / mamba2_step (+ the backward op): what torch.compile traces
from tritonrl.kernels.mamba2 import library  # noqa: F401  (registers the custom ops)
from tritonrl.kernels.mamba2.api import (
    MAMBA2_SCAN,
    MAMBA2_STEP,
    mamba2_scan,
    mamba2_step,
    mamba2_step_unchecked,
)

__all__ = ["MAMBA2_SCAN", "MAMBA2_STEP", "mamba2_scan", "mamba2_step", "mamba2_step_unchecked"]
