"""The noisy dueling / distributional head op: last noisy layer(s), dueling combine, log-softmax.

One launch computes, for a block of batch rows, the value stream ``V [B, Z]`` and the advantage
stream ``A [B, A, Z]`` (two noisy linear layers, f32 accumulators), then in the epilogue
``Q = V + A - mean_a A``, the log-softmax over the atoms (C51) and optionally the expected
Q-values over a support. The output is f32: the epilogue is the loss-boundary cast.
"""

from __future__ import annotations

import torch
from tritonrl.kernels.backend import KernelOp
from tritonrl.kernels.noisy_head.linear import check_input, check_noisy_params, remember, tensor_signature
from tritonrl.kernels.noisy_head.reference import NoisyParams, noisy_dueling_ref

__all__ = ["NOISY_DUELING", "expected_q", "noisy_dueling"]

NOISY_DUELING = KernelOp(
    "noisy_dueling",
    torch_impl=noisy_dueling_ref,
    triton_impl="tritonrl.kernels.noisy_head.fused_dueling:noisy_dueling_triton",
)


def _as_params(name: str, p: object) -> NoisyParams:
    if isinstance(p, NoisyParams):
        return p
    if isinstance(p, tuple) and 1 <= len(p) <= 6:
        return NoisyParams(*p)
    raise TypeError(f"{name} must be a NoisyParams (or a tuple of its fields), got {type(p).__name__}")


_validated: dict[object, bool] = {}  # signatures validated before (see tritonrl.kernels.noisy_head.linear)


def noisy_dueling(
    x: torch.Tensor,
    advantage: NoisyParams,
    value: NoisyParams | None = None,
    *,
    num_actions: int,
    atoms: int = 1,
    noise: bool = True,
    log_softmax: bool = True,
    support: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Dueling / distributional Q head on top of noisy layers, with its f32 epilogue.

    ``A = noisy(x_a; advantage)`` viewed ``[B, A, Z]``; with ``value``:
    ``Q[b, a, z] = V[b, z] + A[b, a, z] - mean_a A[b, a, z]``, ``V = noisy(x_v; value)``;
    without ``value``: ``Q = A``. With ``Z > 1`` and ``log_softmax``, the output is
    ``log_softmax(Q, dim=-1)`` (C51); without it, the raw values (QR-DQN quantiles).

    Args:
        x: ``[B, I]`` read by both streams, or ``[B, 2, I]``: ``x[:, 0]`` feeds the value stream,
            ``x[:, 1]`` the advantage stream (the output of a grouped hidden layer).
        advantage: the advantage layer, ``weight_mu [A * Z, I]`` (row ``a * Z + z``).
        value: the value layer, ``weight_mu [Z, I]``; ``None`` for a plain (non-dueling) head.
        num_actions: A.
        atoms: Z.
        noise: add the sigma terms of both layers (``False``: evaluation, mu terms only).
        log_softmax: log-probabilities over the atoms (only when ``atoms > 1``).
        support: ``[Z]`` atom values (f32, same device); also return the expected Q-values
            ``q[b, a] = sum_z exp(log_p[b, a, z]) * support[z]``. Needs ``log_softmax`` and
            ``atoms > 1``. The support takes no gradient.

    Returns:
        ``[B, A, Z]`` f32, or ``([B, A, Z], [B, A])`` f32 with ``support``. Differentiable in x
        and every weight and bias.

    Raises:
        TypeError: non-tensor arguments, unsupported or mixed dtypes.
        ValueError: shapes, devices or contiguity that do not fit, inconsistent options.
    """
    if not isinstance(num_actions, int) or num_actions < 1:
        raise ValueError(f"num_actions must be a positive int, got {num_actions!r}")
    if not isinstance(atoms, int) or atoms < 1:
        raise ValueError(f"atoms must be a positive int, got {atoms!r}")
    key = None
    layers_ok = type(advantage) is NoisyParams and (value is None or type(value) is NoisyParams)
    if type(x) is torch.Tensor and layers_ok:
        sig = tensor_signature((x, support, *advantage, *(value if value is not None else (None,) * 6)))
        if sig is not None:
            key = (sig, num_actions, atoms, bool(noise), bool(log_softmax), value is None)
    if key is None or key not in _validated:
        advantage, value = _check(x, advantage, value, num_actions, atoms, noise, log_softmax, support)
        if key is not None:
            remember(_validated, key)

    def strip(p: NoisyParams) -> NoisyParams:
        return p if noise else NoisyParams(p.weight_mu, None, p.bias_mu, None, None, None)

    return NOISY_DUELING(
        x.device, x, strip(advantage), None if value is None else strip(value), num_actions, atoms,
        bool(noise), bool(log_softmax), support,
    )


def _check(
    x: object, advantage: object, value: object, num_actions: int, atoms: int, noise: bool, log_softmax: bool,
    support: object,
) -> tuple[NoisyParams, NoisyParams | None]:
    """Every input check of :func:`noisy_dueling`; returns the layers as :class:`NoisyParams`."""
    x = check_input("x", x, (2, 3))
    advantage = _as_params("advantage", advantage)
    value = None if value is None else _as_params("value", value)
    if x.dim() == 3 and (x.shape[1] != 2 or value is None):
        raise ValueError(
            f"x of shape {tuple(x.shape)}: a 3-D x must be [B, 2, I] (value rows, advantage rows) "
            "and needs a value layer"
        )
    in_features = x.shape[-1]
    check_noisy_params(
        "advantage.", advantage, x=x, in_features=in_features, out_features=num_actions * atoms,
        noise=noise,
    )
    if advantage.weight_mu.dim() != 2:
        raise ValueError(f"advantage.weight_mu must be 2-D, got shape {tuple(advantage.weight_mu.shape)}")
    if value is not None:
        check_noisy_params("value.", value, x=x, in_features=in_features, out_features=atoms, noise=noise)
        if value.weight_mu.dim() != 2:
            raise ValueError(f"value.weight_mu must be 2-D, got shape {tuple(value.weight_mu.shape)}")
        if (value.bias_mu is None) != (advantage.bias_mu is None):
            raise ValueError("value.bias_mu and advantage.bias_mu must both be given or both be None")
    if support is not None:
        if not isinstance(support, torch.Tensor):
            raise TypeError(f"support must be a torch.Tensor, got {type(support).__name__}")
        if not (log_softmax and atoms > 1):
            raise ValueError("support needs log_softmax=True and atoms > 1 (it weights probabilities)")
        if tuple(support.shape) != (atoms,):
            raise ValueError(f"support must have shape ({atoms},), got {tuple(support.shape)}")
        if support.dtype != torch.float32:
            raise TypeError(f"support must be float32, got {support.dtype}")
        if support.device != x.device:
            raise ValueError(f"support is on {support.device} but x is on {x.device}")
        if not support.is_contiguous():
            raise ValueError(f"support must be contiguous (strides {support.stride()})")
    return advantage, value


def expected_q(log_probs: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """Expected Q-values of a distributional head: ``sum_z exp(log_probs[..., z]) * support[z]``.

    Args:
        log_probs: ``[B, A, Z]`` f32 log-probabilities (the output of :func:`noisy_dueling`).
        support: ``[Z]`` f32 atom values on the same device.

    Returns:
        ``[B, A]`` f32.

    Raises:
        TypeError: non-f32 inputs.
        ValueError: shapes or devices that do not fit.
    """
    for name, t in (("log_probs", log_probs), ("support", support)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != torch.float32:
            raise TypeError(f"{name} must be float32, got {t.dtype}")
    if log_probs.dim() != 3 or tuple(support.shape) != (log_probs.shape[-1],):
        raise ValueError(
            f"log_probs must be [B, A, Z] and support [Z]; got {tuple(log_probs.shape)} and "
            f"{tuple(support.shape)}"
        )
    if support.device != log_probs.device:
        raise ValueError(f"support is on {support.device} but log_probs is on {log_probs.device}")
    return (log_probs.exp() * support).sum(dim=-1)
