"""The noisy-head ops: validation, dispatch and the public functions. Imports no triton.

The noisy weight matrix is never built; [`noisy_dueling`][tritonrl.kernels.noisy_head.api.noisy_dueling] ends
in an f32 epilogue (the loss-boundary cast). See docs/pages/noisy-head.md.
"""

from __future__ import annotations

import torch
from tritonrl.kernels.backend import KernelOp
from tritonrl.kernels.library import traces_reference
from tritonrl.kernels.noisy_head.reference import NoisyParams, noisy_dueling_ref, noisy_linear_ref
from tritonrl.kernels.validate import check_int, check_tensor

__all__ = [
    "NOISY_DUELING",
    "NOISY_LINEAR",
    "SUPPORTED_DTYPES",
    "check_noisy_params",
    "expected_q",
    "linear_q",
    "noisy_dueling",
    "noisy_linear",
]

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

NOISY_LINEAR = KernelOp(
    "noisy_linear",
    torch_impl=noisy_linear_ref,
    triton_impl="tritonrl.kernels.noisy_head.fused_linear:noisy_linear_triton",
)
NOISY_DUELING = KernelOp(
    "noisy_dueling",
    torch_impl=noisy_dueling_ref,
    triton_impl="tritonrl.kernels.noisy_head.fused_dueling:noisy_dueling_triton",
)


# Validated call signatures (shapes, dtypes, devices, contiguity and options of every tensor): a
# call whose signature was validated before skips the checks, which cost more than a small layer's
# matmul. Any change (a new batch size, a moved or re-typed parameter, a non-contiguous view) is a
# new signature and is checked in full. Bounded: cleared when it grows past _SIG_CACHE_MAX.
_SIG_CACHE_MAX = 256
_validated_linear: dict[object, bool] = {}
_validated_dueling: dict[object, bool] = {}


def _signature(tensors: tuple[object, ...]) -> tuple[object, ...] | None:
    """``(shape, dtype, device, is_contiguous)`` per tensor, or ``None`` when an entry is neither a
    tensor nor ``None`` (the caller then validates in full)."""
    try:
        return tuple(
            None if t is None else (t.shape, t.dtype, t.device, t.is_contiguous())  # type: ignore[attr-defined]
            for t in tensors
        )
    except (AttributeError, TypeError):
        return None


def _remember(cache: dict, key: object) -> None:
    """Record a validated signature (clearing the cache when it is full)."""
    if len(cache) >= _SIG_CACHE_MAX:
        cache.clear()
    cache[key] = True


def _check_input(name: str, x: object, dims: tuple[int, ...]) -> torch.Tensor:
    """``x`` is a floating tensor with one of ``dims`` dimensions and at least one row."""
    x = check_tensor(name, x, dtype=SUPPORTED_DTYPES)
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
    w = check_tensor(f"{prefix}weight_mu", p.weight_mu)
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
    for n, shape in shapes.items():
        t = getattr(p, n)
        if t is not None:
            check_tensor(
                f"{prefix}{n}",
                t,
                shape=shape,
                dtype=x.dtype,
                dtype_note="(x's dtype)",
                device=x.device,
                contiguous=True,
            )


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
    ``noise=False`` only ``x @ W_mu.T + b_mu``. Differentiable in x and every weight and bias.

    Args:
        x: ``[B, I]``, float32 / bfloat16 / float16, any strides.
        weight_mu: ``[O, I]``, or ``[G, O, I]`` for G layers reading the same x (output ``[B, G, O]``).
        weight_sigma: like ``weight_mu``; may be ``None`` when ``noise=False``.
        bias_mu: ``[O]`` (``[G, O]``) or ``None`` (no bias).
        bias_sigma: like ``bias_mu``; given exactly when ``bias_mu`` is (with ``noise=True``).
        eps_in: ``[I]`` (``[G, I]``) input noise, already ``sign(u) sqrt(|u|)``; no gradient.
        eps_out: ``[O]`` (``[G, O]``) output noise, likewise.
        noise: add the sigma terms.
        activation: ``None`` or ``"relu"`` (fused).

    Every tensor has x's dtype and device and, except x, is contiguous. Returns x's dtype (f32
    accumulation).

    Raises:
        TypeError: a non-tensor argument, an unsupported dtype, or mixed dtypes.
        ValueError: shape, device or contiguity mismatch; a missing noise tensor with
            ``noise=True``; an unknown ``activation``.
    """
    p = NoisyParams(weight_mu, weight_sigma, bias_mu, bias_sigma, eps_in, eps_out)
    if torch.compiler.is_compiling():  # traced once: plain checks, then the reference or the custom op
        _check_linear(x, p, noise, activation)
        if not noise:
            p = NoisyParams(weight_mu, None, bias_mu, None, None, None)
        if traces_reference(NOISY_LINEAR, x.device):
            return noisy_linear_ref(x, *p, bool(noise), activation == "relu")
        return torch.ops.tritonrl.noisy_linear(x, *p, bool(noise), activation == "relu")
    sig = _signature((x, *p)) if type(x) is torch.Tensor else None
    key = None if sig is None else (sig, bool(noise), activation)
    if key is None or key not in _validated_linear:
        _check_linear(x, p, noise, activation)
        if key is not None:
            _remember(_validated_linear, key)
    if not noise:
        p = NoisyParams(weight_mu, None, bias_mu, None, None, None)
    return NOISY_LINEAR(x.device, x, *p, bool(noise), activation == "relu")


def _check_linear(x: object, p: NoisyParams, noise: bool, activation: str | None) -> None:
    """Every input check of `noisy_linear`."""
    if activation not in (None, "relu"):
        raise ValueError(f"activation must be None or 'relu', got {activation!r}")
    x = _check_input("x", x, (2,))
    check_noisy_params("", p, x=x, in_features=x.shape[1], out_features=None, noise=noise)


def _as_params(name: str, p: object) -> NoisyParams:
    if isinstance(p, NoisyParams):
        return p
    if isinstance(p, tuple) and 1 <= len(p) <= 6:
        return NoisyParams(*p)
    raise TypeError(f"{name} must be a NoisyParams (or a tuple of its fields), got {type(p).__name__}")


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

    ``A = noisy(x_a; advantage)`` viewed ``[B, A, Z]``; with ``value``,
    ``Q = V + A - mean_a A``, else ``Q = A``. With ``Z > 1`` and ``log_softmax``, returns
    ``log_softmax(Q, dim=-1)`` (C51); otherwise the raw values (QR-DQN quantiles).

    Args:
        x: ``[B, I]`` read by both streams, or ``[B, 2, I]`` (``x[:, 0]`` value, ``x[:, 1]`` advantage).
        advantage: the advantage layer, ``weight_mu [A * Z, I]`` (row ``a * Z + z``).
        value: the value layer, ``weight_mu [Z, I]``; ``None`` for a plain (non-dueling) head.
        num_actions: A.
        atoms: Z.
        noise: add the sigma terms of both layers.
        log_softmax: log-probabilities over the atoms (only when ``atoms > 1``).
        support: ``[Z]`` f32 atom values; also return ``q[b, a] = sum_z exp(log_p) * support[z]``.
            Needs ``log_softmax`` and ``atoms > 1``; takes no gradient.

    Returns:
        ``[B, A, Z]`` f32, or ``([B, A, Z], [B, A])`` f32 with ``support``. Differentiable in x
        and every weight and bias.

    Raises:
        TypeError: non-tensor arguments, unsupported or mixed dtypes.
        ValueError: shapes, devices or contiguity that do not fit, inconsistent options.
    """
    check_int("num_actions", num_actions, low=1)
    check_int("atoms", atoms, low=1)
    if torch.compiler.is_compiling():  # traced once: plain checks, then the reference or the custom op
        advantage, value = _check(x, advantage, value, num_actions, atoms, noise, log_softmax, support)
        if traces_reference(NOISY_DUELING, x.device):
            strip_v = None if value is None else _strip(value, noise)
            return noisy_dueling_ref(
                x,
                _strip(advantage, noise),
                strip_v,
                num_actions,
                atoms,
                bool(noise),
                bool(log_softmax),
                support,
            )
        adv = _strip(advantage, noise)
        val = (None,) * 6 if value is None else _strip(value, noise)
        out, q = torch.ops.tritonrl.noisy_dueling(
            x, *adv, *val, support, num_actions, atoms, bool(noise), bool(log_softmax)
        )
        return out if support is None else (out, q)
    key = None
    layers_ok = type(advantage) is NoisyParams and (value is None or type(value) is NoisyParams)
    if type(x) is torch.Tensor and layers_ok:
        sig = _signature((x, support, *advantage, *(value if value is not None else (None,) * 6)))
        if sig is not None:
            key = (sig, num_actions, atoms, bool(noise), bool(log_softmax), value is None)
    if key is None or key not in _validated_dueling:
        advantage, value = _check(x, advantage, value, num_actions, atoms, noise, log_softmax, support)
        if key is not None:
            _remember(_validated_dueling, key)

    return NOISY_DUELING(
        x.device,
        x,
        _strip(advantage, noise),
        None if value is None else _strip(value, noise),
        num_actions,
        atoms,
        bool(noise),
        bool(log_softmax),
        support,
    )


def linear_q(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
    """``F.linear(x, weight, bias)`` in f32, ``[B, A]``: the plain case of `noisy_dueling`
    without its validation and dispatch layers, for acting on a small batch (counted as a torch
    call of `NOISY_DUELING`).

    Returns ``None`` where the general op must run: a Triton selection, under ``torch.compile``,
    or inputs these few checks do not vouch for.
    """
    if type(x) is not torch.Tensor or torch.compiler.is_compiling():
        return None
    if x.dim() != 2 or x.shape[0] == 0 or x.shape[1] != weight.shape[-1] or weight.dim() != 2:
        return None
    if x.dtype != weight.dtype or x.device != weight.device or x.dtype not in SUPPORTED_DTYPES:
        return None
    if bias is not None and (bias.dtype != weight.dtype or bias.device != weight.device):
        return None
    if NOISY_DUELING.select(x.device).backend != "torch":
        return None
    return NOISY_DUELING.dispatch(
        x.device, _unreachable, lambda: torch.nn.functional.linear(x, weight, bias).float()
    )


def _unreachable() -> torch.Tensor:
    raise AssertionError("linear_q dispatched to Triton after selecting torch")


def _strip(p: NoisyParams, noise: bool) -> NoisyParams:
    """``p`` without its sigma and noise tensors when ``noise`` is off (the mu terms only)."""
    return p if noise else NoisyParams(p.weight_mu, None, p.bias_mu, None, None, None)


def _check(
    x: object,
    advantage: object,
    value: object,
    num_actions: int,
    atoms: int,
    noise: bool,
    log_softmax: bool,
    support: object,
) -> tuple[NoisyParams, NoisyParams | None]:
    """Every input check of `noisy_dueling`; returns the layers as `NoisyParams`."""
    x = _check_input("x", x, (2, 3))
    advantage = _as_params("advantage", advantage)
    value = None if value is None else _as_params("value", value)
    if x.dim() == 3 and (x.shape[1] != 2 or value is None):
        raise ValueError(
            f"x of shape {tuple(x.shape)}: a 3-D x must be [B, 2, I] (value rows, advantage rows) "
            "and needs a value layer"
        )
    in_features = x.shape[-1]
    check_noisy_params(
        "advantage.",
        advantage,
        x=x,
        in_features=in_features,
        out_features=num_actions * atoms,
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
        check_tensor("support", support)
        if not (log_softmax and atoms > 1):
            raise ValueError("support needs log_softmax=True and atoms > 1 (it weights probabilities)")
        check_tensor(
            "support",
            support,
            shape=(atoms,),
            what="[Z]",
            dtype=torch.float32,
            device=x.device,
            contiguous=True,
        )
    return advantage, value


def expected_q(log_probs: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """Expected Q-values of a distributional head: ``sum_z exp(log_probs[..., z]) * support[z]``.

    Args:
        log_probs: ``[B, A, Z]`` f32 log-probabilities.
        support: ``[Z]`` f32 atom values on the same device.

    Returns:
        ``[B, A]`` f32.

    Raises:
        TypeError: non-f32 inputs.
        ValueError: shapes or devices that do not fit.
    """
    check_tensor("log_probs", log_probs, dtype=torch.float32)
    check_tensor("support", support, dtype=torch.float32)
    if log_probs.dim() != 3 or tuple(support.shape) != (log_probs.shape[-1],):
        raise ValueError(
            f"log_probs must be [B, A, Z] and support [Z]; got {tuple(log_probs.shape)} and "
            f"{tuple(support.shape)}"
        )
    check_tensor("support", support, device=log_probs.device, device_of="log_probs")
    return (log_probs.exp() * support).sum(dim=-1)
