"""Noisy linear layers and the dueling / distributional Q head (Rainbow), as fused ops.

- :func:`noisy_linear`: ``y = x @ W_mu.T + b_mu + ((x * eps_in) @ W_sigma.T + b_sigma) * eps_out``
  with factorised Gaussian noise, optional fused ReLU, grouped weights for parallel streams.
- :func:`noisy_dueling`: the last layer of both streams plus ``Q = V + A - mean_a A``,
  log-softmax over atoms and expected Q-values, emitting f32.
- :func:`expected_q`: ``sum_z exp(log_p) * support`` for a distributional head's output.

Torch references live in :mod:`tritonrl.kernels.noisy_head.reference`; the Triton kernels in
:mod:`tritonrl.kernels.noisy_head.fused_linear` and
:mod:`tritonrl.kernels.noisy_head.fused_dueling` (imported only when a Triton path runs).
"""

from tritonrl.kernels.noisy_head.dueling import NOISY_DUELING, expected_q, noisy_dueling
from tritonrl.kernels.noisy_head.linear import NOISY_LINEAR, noisy_linear
from tritonrl.kernels.noisy_head.reference import NoisyParams

__all__ = ["NOISY_DUELING", "NOISY_LINEAR", "NoisyParams", "expected_q", "noisy_dueling", "noisy_linear"]
