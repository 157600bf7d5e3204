"""Noisy linear layers and the dueling / distributional Q head (Rainbow), as fused ops.

- :func:`noisy_linear`: ``y = x @ W_mu.T + b_mu + ((x * eps_in) @ W_sigma.T + b_sigma) * eps_out``
  with factorised Gaussian noise, optional fused ReLU, grouped weights for parallel streams.
- :func:`noisy_dueling`: the last layer of both streams plus ``Q = V + A - mean_a A``,
  log-softmax over atoms and expected Q-values, emitting f32.
- :func:`expected_q`: ``sum_z exp(log_p) * support`` for a distributional head's output.

Files (the kernel-folder convention, docs/pages/kernels.md): ``api.py`` (ops, validation, public
functions), ``reference.py`` (torch specification and CPU path), ``fused_linear.py`` and
``fused_dueling.py`` (the Triton kernels, imported only when a Triton path runs), ``library.py``
(the ops as torch custom ops, ``torch.ops.tritonrl.*``, for ``torch.compile``).
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
