"""The Mamba2 selective state-space scan (an op folder: CONTRIBUTING.md, "Adding an op").

- :func:`mamba2_scan`: chunked SSD scan over sequences with episode resets, forward and backward
  (Triton in ``chunk.py`` on CUDA; on CPU the torch chunked scan: without resets ``factored.py``
  where the decays fit its factors, else ``fast.py``; with resets the reference in ``reference.py``);
- :func:`mamba2_step`: the single-step update for acting (Triton in ``step.py``), and
  :func:`mamba2_step_unchecked`, the same without the input checks, for callers that built the
  inputs themselves (the Mamba2 block's ``step``);
- ``naive.py``: the sequential recurrence, used only as the test oracle.

Files (the kernel-folder convention, docs/pages/kernels.md): ``api.py`` (ops, validation, public
functions), ``reference.py`` (the torch chunked specification, the oracle, and the CPU path with resets),
``factored.py`` and ``fast.py`` (the CPU paths without resets), ``chunk.py`` and
``step.py`` (the Triton kernels, imported only when a Triton path runs), ``library.py`` (the ops
as torch custom ops, ``torch.ops.tritonrl.*``, for ``torch.compile``), ``naive.py`` (test only).
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
