"""The noisy linear op (factorised Gaussian noise, NoisyNet): public function and dispatch.

``y = x @ W_mu.T + b_mu + ((x * eps_in) @ W_sigma.T + b_sigma) * eps_out``, optional ReLU.
The noisy weight matrix is never built: the Triton kernel (:mod:`tritonrl.kernels.noisy_head.fused_linear`)
keeps two accumulators in one pass over the input features, the reference takes two products.
"""

from __future__ import annotations

import torch
from tritonrl.kernels.backend import KernelOp
from tritonrl.kernels.noisy_head.reference import NoisyParams, noisy_linear_ref

__all__ = ["NOISY_LINEAR", "SUPPORTED_DTYPES", "check_noisy_params", "noisy_linear"]

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

NOISY_LINEAR = KernelOp(
    "noisy_linear",
    torch_impl=noisy_linear_ref,
    triton_impl="tritonrl.kernels.noisy_head.fused_linear:noisy_linear_triton",
)


# Validated call signatures (shapes, dtypes, devices, contiguity and options of every tensor): a
# call whose signature was validated before skips the checks, which cost more than a small layer's
# matmul. Any change (a new batch size, a moved or re-typed parameter, a non-contiguous view) is a
# new signature and is checked in full. Bounded: cleared when it grows past _SIG_CACHE_MAX.
_SIG_CACHE_MAX = 256


def tensor_signature(tensors: tuple[object, ...]) -> tuple[object, ...] | None:
    """``(shape, dtype, device, is_contiguous)`` per tensor (``None`` entries kept), or ``None``
    when an entry is neither a tensor nor ``None`` (the caller then validates in full)."""
    try:
        return tuple(
            None if t is None else (t.shape, t.dtype, t.device, t.is_contiguous())  # type: ignore[attr-defined]
            for t in tensors
        )
    except (AttributeError, TypeError):
        return None


def remember(cache: dict, key: object) -> None:
    """Record a validated signature (clearing the cache when it is full)."""
    if len(cache) >= _SIG_CACHE_MAX:
        cache.clear()
    cache[key] = True


_validated: dict[object, bool] = {}


def check_input(name: str, x: object, dims: tuple[int, ...]) -> torch.Tensor:
    """``x`` is a floating tensor with one of ``dims`` dimensions and at least one row."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} has dtype {x.dtype}; supported: float32, bfloat16, float16")
    if x.dim() not in dims or x.shape[0] == 0 or x.numel() == 0:
        raise ValueError(
            f"{name} must be a non-empty {' or '.join(f'{d}-D' for d in dims)} tensor, "
            f"got shape {tuple(x.shape)}"
        )
    return x


def check_noisy_params(
    prefix: str,
    p: NoisyParams,
    *,
    x: torch.Tensor,
    in_features: int,
    out_features: int | None,
    noise: bool,
) -> None:
    """Validate one layer's tensors against the input ``x`` (dtype, device, shapes, contiguity).

    Raises:
        TypeError: a tensor is not a tensor or its dtype differs from ``x``'s.
        ValueError: a shape, device or contiguity is wrong, or a tensor needed by ``noise`` is missing.
    """
    w = p.weight_mu
    names = ("weight_mu", "weight_sigma", "bias_mu", "bias_sigma", "eps_in", "eps_out")
    if not isinstance(w, torch.Tensor):
        raise TypeError(f"{prefix}weight_mu must be a torch.Tensor, got {type(w).__name__}")
    if w.dim() not in (2, 3):
        raise ValueError(f"{prefix}weight_mu must be [O, I] or [G, O, I], got shape {tuple(w.shape)}")
    lead = tuple(w.shape[:-2])
    o, i = w.shape[-2], w.shape[-1]
    if i != in_features:
        raise ValueError(
            f"{prefix}weight_mu has {i} input features (shape {tuple(w.shape)}) but the input has "
            f"{in_features}"
        )
    if out_features is not None and o != out_features:
        raise ValueError(f"{prefix}weight_mu must have {out_features} rows, got shape {tuple(w.shape)}")
    if o == 0 or i == 0:
        raise ValueError(f"{prefix}weight_mu must be non-empty, got shape {tuple(w.shape)}")
    if noise:
        for n in ("weight_sigma", "eps_in", "eps_out"):
            if getattr(p, n) is None:
                raise ValueError(f"{prefix}{n} is required when noise=True")
        if (p.bias_mu is None) != (p.bias_sigma is None):
            missing = "bias_sigma" if p.bias_sigma is None else "bias_mu"
            raise ValueError(f"{prefix}{missing} is missing: bias_mu and bias_sigma come together")
    shapes = {
        "weight_mu": w.shape,
        "weight_sigma": w.shape,
        "bias_mu": (*lead, o),
        "bias_sigma": (*lead, o),
        "eps_in": (*lead, i),
        "eps_out": (*lead, o),
    }
    for n in names:
        t = getattr(p, n)
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{prefix}{n} must be a torch.Tensor or None, got {type(t).__name__}")
        if tuple(t.shape) != tuple(shapes[n]):
            raise ValueError(f"{prefix}{n} must have shape {tuple(shapes[n])}, got {tuple(t.shape)}")
        if t.dtype != x.dtype:
            raise TypeError(f"{prefix}{n} has dtype {t.dtype} but the input has dtype {x.dtype}")
        if t.device != x.device:
            raise ValueError(f"{prefix}{n} is on {t.device} but the input is on {x.device}")
        if not t.is_contiguous():
            raise ValueError(f"{prefix}{n} must be contiguous (strides {t.stride()})")


def noisy_linear(
    x: torch.Tensor,
    weight_mu: torch.Tensor,
    weight_sigma: torch.Tensor | None = None,
    bias_mu: torch.Tensor | None = None,
    bias_sigma: torch.Tensor | None = None,
    eps_in: torch.Tensor | None = None,
    eps_out: torch.Tensor | None = None,
    *,
    noise: bool = True,
    activation: str | None = None,
) -> torch.Tensor:
    """Noisy linear layer with factorised Gaussian noise, without building the noisy weight.

    ``y = x @ W_mu.T + b_mu + ((x * eps_in) @ W_sigma.T + b_sigma) * eps_out``; with
    ``noise=False`` (evaluation) only ``x @ W_mu.T + b_mu``. Differentiable in x and every weight
    and bias; the noise vectors take no gradient.

    Args:
        x: ``[B, I]``, float32 / bfloat16 / float16, any strides.
        weight_mu: ``[O, I]``, or ``[G, O, I]`` for G independent layers reading the same x
            (output ``[B, G, O]``).
        weight_sigma: like ``weight_mu``; may be ``None`` when ``noise=False``.
        bias_mu: ``[O]`` (``[G, O]``) or ``None`` (no bias).
        bias_sigma: like ``bias_mu``; given exactly when ``bias_mu`` is (with ``noise=True``).
        eps_in: ``[I]`` (``[G, I]``) input noise, already transformed by ``f(u) = sign(u) sqrt(|u|)``.
        eps_out: ``[O]`` (``[G, O]``) output noise, likewise.
        noise: add the sigma terms.
        activation: ``None`` or ``"relu"`` (fused).

    Every tensor has x's dtype and device and, except x, is contiguous. The output has x's dtype
    (f32 accumulation inside the kernel). CUDA runs the Triton kernel, CPU the torch reference
    (see :mod:`tritonrl.kernels.backend`).

    Raises:
        TypeError: a non-tensor argument, an unsupported dtype, or mixed dtypes.
        ValueError: shape, device or contiguity mismatch; a missing noise tensor with
            ``noise=True``; an unknown ``activation``.
    """
    p = NoisyParams(weight_mu, weight_sigma, bias_mu, bias_sigma, eps_in, eps_out)
    sig = tensor_signature((x, *p)) if type(x) is torch.Tensor else None
    key = None if sig is None else (sig, bool(noise), activation)
    if key is None or key not in _validated:
        if activation not in (None, "relu"):
            raise ValueError(f"activation must be None or 'relu', got {activation!r}")
        x = check_input("x", x, (2,))
        check_noisy_params("", p, x=x, in_features=x.shape[1], out_features=None, noise=noise)
        if key is not None:
            remember(_validated, key)
    if not noise:
        p = NoisyParams(weight_mu, None, bias_mu, None, None, None)
    return NOISY_LINEAR(x.device, x, *p, bool(noise), activation == "relu")
