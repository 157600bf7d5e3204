"""The public Mamba2 ops: validation and dispatch. Imports no triton (the kernels load lazily).

[`mamba2_step_unchecked`][tritonrl.kernels.mamba2.api.mamba2_step_unchecked] skips the input checks for a
caller that built the inputs itself (the Mamba2 block's ``step``, where the checks would cost as much as the
step).
"""

from __future__ import annotations

import math

import torch
from tritonrl.kernels.backend import KernelOp
from tritonrl.kernels.library import traces_reference
from tritonrl.kernels.mamba2.factored import mamba2_scan_factored
from tritonrl.kernels.mamba2.fast import mamba2_scan_fast
from tritonrl.kernels.mamba2.reference import mamba2_scan_ref, mamba2_step_ref
from tritonrl.kernels.validate import check_tensor

__all__ = [
    "MAMBA2_SCAN",
    "MAMBA2_STEP",
    "mamba2_scan",
    "mamba2_scan_torch",
    "mamba2_step",
    "mamba2_step_unchecked",
]


def mamba2_scan_torch(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    dt_softplus: bool,
    dt_limit: tuple[float, float],
    initial_states: torch.Tensor | None,
    resets: torch.Tensor | None,
    chunk_size: int,
    return_final_states: bool,
    **kwargs: object,
) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """The scan's torch path (arguments as `mamba2_scan_ref`):
    the factored or fast scan without resets on a CPU, the reference otherwise."""
    if resets is None and not kwargs:
        args = (
            x,
            dt,
            A,
            B,
            C,
            D,
            z,
            dt_bias,
            dt_softplus,
            dt_limit,
            initial_states,
            chunk_size,
            return_final_states,
        )
        if x.device.type == "cpu":
            out = mamba2_scan_factored(*args)
            if out is not None:
                return out
        return mamba2_scan_fast(*args)
    return mamba2_scan_ref(
        x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_limit, initial_states, resets, chunk_size,
        return_final_states, **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip


MAMBA2_SCAN = KernelOp(
    "mamba2_scan",
    torch_impl=mamba2_scan_torch,
    triton_impl="tritonrl.kernels.mamba2.chunk:mamba2_scan_triton",
)
MAMBA2_STEP = KernelOp(
    "mamba2_step", torch_impl=mamba2_step_ref, triton_impl="tritonrl.kernels.mamba2.step:mamba2_step_triton"
)

_DATA_DTYPES = (torch.float32, torch.bfloat16)
_MAX_CHUNK = 256


def _check_params(
    x: torch.Tensor,
    nheads: int,
    headdim: int,
    A: torch.Tensor,
    D: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    dt_limit: tuple[float, float],
) -> None:
    param_dtypes = (torch.float32, x.dtype)
    check_tensor("A", A, shape=(nheads,), what="[H]", dtype=param_dtypes, device=x.device)
    if D is not None:
        check_tensor("D", D)
        if tuple(D.shape) not in ((nheads,), (nheads, headdim)):
            raise ValueError(
                f"D must have shape [H] = ({nheads},) or [H, P] = ({nheads}, {headdim}), got {tuple(D.shape)}"
            )
        check_tensor("D", D, dtype=param_dtypes, device=x.device)
    if dt_bias is not None:
        check_tensor("dt_bias", dt_bias, shape=(nheads,), what="[H]", dtype=param_dtypes, device=x.device)
    if (
        not isinstance(dt_limit, (tuple, list))
        or len(dt_limit) != 2
        or not all(isinstance(v, (int, float)) for v in dt_limit)
        or math.isnan(dt_limit[0])
        or math.isnan(dt_limit[1])
        or dt_limit[0] > dt_limit[1]
    ):
        raise ValueError(f"dt_limit must be a pair (min, max) of numbers with min <= max, got {dt_limit!r}")


def mamba2_scan(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    *,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = True,
    dt_limit: tuple[float, float] = (0.0, math.inf),
    initial_states: torch.Tensor | None = None,
    resets: torch.Tensor | None = None,
    chunk_size: int = 64,
    return_final_states: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The Mamba2 selective scan over a sequence (chunked SSD), with episode resets.

    With ``dt'_t = clamp(softplus(dt_t + dt_bias), *dt_limit)`` (softplus only if
    ``dt_softplus``), per batch and head, with the state ``h`` of shape [P, N]::

        h_t = exp(dt'_t * A) * h_{t-1} * (1 - reset_t) + dt'_t * outer(x_t, B_t)
        y_t = (h_t @ C_t + D * x_t) * silu(z_t)

    ``h_0`` is ``initial_states`` (zeros if None); head ``h`` reads group ``h // (H // G)`` of B
    and C.

    Args:
        x: [B, L, H, P], float32 or bfloat16 (the data dtype).
        dt: [B, L, H], the data dtype or float32.
        A: [H] (negative for a decaying state), float32 or the data dtype.
        B: [B, L, G, N] in the data dtype; ``H % G == 0``.
        C: [B, L, G, N] in the data dtype.
        D: optional skip, [H] or [H, P], float32 or the data dtype.
        z: optional gate [B, L, H, P] in the data dtype: ``y *= silu(z)``.
        dt_bias: optional [H], float32 or the data dtype.
        dt_softplus: apply softplus to ``dt + dt_bias``.
        dt_limit: (min, max) clamp of dt' after the softplus.
        initial_states: optional [B, H, P, N] float32.
        resets: optional [B, L] bool: zero the state before step ``t``.
        chunk_size: a power of two in [16, 256]; the result does not depend on it (up to rounding).
        return_final_states: also return ``h_L``.

    Returns:
        y [B, L, H, P] in the data dtype, or ``(y, final_states)`` with final_states
        [B, H, P, N] float32. Accumulates in float32; differentiable in every tensor input; the
        Triton backward is deterministic (no atomics).

    Raises:
        TypeError: an argument is not a tensor or has a wrong dtype.
        ValueError: inconsistent shapes, ``H % G != 0``, mixed devices, a bad chunk_size or
            dt_limit.
    """
    x = check_tensor("x", x)
    if x.dim() != 4:
        raise ValueError(f"x must be 4-D [B, L, H, P], got shape {tuple(x.shape)}")
    check_tensor("x", x, dtype=_DATA_DTYPES)
    batch, length, nheads, headdim = x.shape
    if min(x.shape) < 1:
        raise ValueError(f"x must have non-empty dimensions [B, L, H, P], got {tuple(x.shape)}")
    dev = x.device
    check_tensor(
        "dt", dt, shape=(batch, length, nheads), what="[B, L, H]", dtype=(x.dtype, torch.float32), device=dev
    )
    check_tensor("B", B)
    if B.dim() != 4 or tuple(B.shape[:2]) != (batch, length) or min(B.shape) < 1:
        raise ValueError(
            f"B must have shape [B, L, G, N] with B, L = {(batch, length)}, got {tuple(B.shape)}"
        )
    ngroups, dstate = B.shape[2:]
    if nheads % ngroups != 0:
        raise ValueError(
            f"the number of heads H={nheads} (x) must be divisible by the groups G={ngroups} (B)"
        )
    check_tensor("B", B, dtype=x.dtype, device=dev)
    check_tensor("C", C, shape=tuple(B.shape), what="[B, L, G, N] (like B)", dtype=x.dtype, device=dev)
    _check_params(x, nheads, headdim, A, D, dt_bias, dt_limit)
    if z is not None:
        check_tensor("z", z, shape=tuple(x.shape), what="[B, L, H, P] (like x)", dtype=x.dtype, device=dev)
    if initial_states is not None:
        check_tensor(
            "initial_states",
            initial_states,
            shape=(batch, nheads, headdim, dstate),
            what="[B, H, P, N]",
            dtype=torch.float32,
            device=dev,
        )
    if resets is not None:
        check_tensor("resets", resets, shape=(batch, length), what="[B, L]", dtype=torch.bool, device=dev)
    if (
        not isinstance(chunk_size, int)
        or isinstance(chunk_size, bool)
        or chunk_size < 16
        or chunk_size > _MAX_CHUNK
        or chunk_size & (chunk_size - 1)
    ):
        raise ValueError(f"chunk_size must be a power of two in [16, {_MAX_CHUNK}], got {chunk_size!r}")
    if torch.compiler.is_compiling():  # the reference or the custom op (checks above ran once, at trace time)
        if traces_reference(MAMBA2_SCAN, dev):  # inline: Inductor fuses it, AOTAutograd differentiates it
            limit = (float(dt_limit[0]), float(dt_limit[1]))
            return mamba2_scan_ref(
                x, dt, A, B, C, D, z, dt_bias, bool(dt_softplus), limit, initial_states, resets,
                chunk_size, bool(return_final_states),
            )  # fmt: skip
        tensors = (x, dt, A, B, C, D, z, dt_bias, initial_states)
        need_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
        y, final, _ = torch.ops.tritonrl.mamba2_scan(
            x,
            dt,
            A,
            B,
            C,
            D,
            z,
            dt_bias,
            bool(dt_softplus),
            float(dt_limit[0]),
            float(dt_limit[1]),
            initial_states,
            resets,
            chunk_size,
            bool(return_final_states),
            need_grad,
        )
        return (y, final) if return_final_states else y
    return MAMBA2_SCAN(
        dev,
        x,
        dt,
        A,
        B,
        C,
        D,
        z,
        dt_bias,
        bool(dt_softplus),
        (float(dt_limit[0]), float(dt_limit[1])),
        initial_states,
        resets,
        chunk_size,
        bool(return_final_states),
    )


def mamba2_step(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    *,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = True,
    dt_limit: tuple[float, float] = (0.0, math.inf),
    reset: torch.Tensor | None = None,
) -> torch.Tensor:
    """One step of the Mamba2 recurrence for acting: updates ``state`` in place, returns ``y_t``.

    One step of [`mamba2_scan`][tritonrl.kernels.mamba2.api.mamba2_scan] (same arguments without the time
    axis). The state stays float32 even for a bf16 model: a bf16 state would drift over long episodes.

    Args:
        state: [B, H, P, N] float32, contiguous; overwritten with the new state.
        x: [B, H, P], float32 or bfloat16 (the data dtype).
        dt: [B, H], the data dtype or float32.
        A: [H], float32 or the data dtype.
        B: [B, G, N] in the data dtype, ``H % G == 0``.
        C: [B, G, N] in the data dtype.
        D: optional skip, [H] or [H, P], float32 or the data dtype.
        z: optional gate [B, H, P] in the data dtype.
        dt_bias: optional [H], float32 or the data dtype.
        dt_softplus: apply softplus to ``dt + dt_bias``.
        dt_limit: (min, max) clamp of dt'.
        reset: optional [B] bool: zero that row's state before the update (episode start).

    Returns:
        y [B, H, P] in the data dtype; computed under ``torch.no_grad()``.

    Raises:
        TypeError: an argument is not a tensor or has a wrong dtype (a non-float32 state included).
        ValueError: inconsistent shapes, ``H % G != 0``, mixed devices, a non-contiguous state.
    """
    x = check_tensor("x", x)
    if x.dim() != 3 or min(x.shape) < 1:
        raise ValueError(f"x must be 3-D [B, H, P] with non-empty dimensions, got shape {tuple(x.shape)}")
    check_tensor("x", x, dtype=_DATA_DTYPES)
    batch, nheads, headdim = x.shape
    dev = x.device
    check_tensor("B", B)
    if B.dim() != 3 or B.shape[0] != batch or min(B.shape) < 1:
        raise ValueError(f"B must have shape [B, G, N] with B = {batch}, got {tuple(B.shape)}")
    ngroups, dstate = B.shape[1:]
    if nheads % ngroups != 0:
        raise ValueError(
            f"the number of heads H={nheads} (x) must be divisible by the groups G={ngroups} (B)"
        )
    check_tensor("B", B, dtype=x.dtype, device=dev)
    check_tensor("C", C, shape=tuple(B.shape), what="[B, G, N] (like B)", dtype=x.dtype, device=dev)
    check_tensor(  # updated in place: contiguous
        "state",
        state,
        shape=(batch, nheads, headdim, dstate),
        what="[B, H, P, N]",
        dtype=torch.float32,
        device=dev,
        contiguous=True,
    )
    check_tensor("dt", dt, shape=(batch, nheads), what="[B, H]", dtype=(x.dtype, torch.float32), device=dev)
    _check_params(x, nheads, headdim, A, D, dt_bias, dt_limit)
    if z is not None:
        check_tensor("z", z, shape=tuple(x.shape), what="[B, H, P] (like x)", dtype=x.dtype, device=dev)
    if reset is not None:
        check_tensor("reset", reset, shape=(batch,), what="[B]", dtype=torch.bool, device=dev)
    limit = (float(dt_limit[0]), float(dt_limit[1]))
    return mamba2_step_unchecked(state, x, dt, A, B, C, D, z, dt_bias, bool(dt_softplus), limit, reset)


def mamba2_step_unchecked(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    dt_softplus: bool,
    dt_limit: tuple[float, float],
    reset: torch.Tensor | None,
) -> torch.Tensor:
    """`mamba2_step` without its input checks (positional arguments, ``dt_limit`` two floats).

    For [`tritonrl.agents.nets.mamba2.Mamba2Block.step`][tritonrl.agents.nets.mamba2.Mamba2Block.step], which
    builds and checks its own arguments. They must satisfy every condition
    [`mamba2_step`][tritonrl.kernels.mamba2.api.mamba2_step] states: nothing here verifies them, and the
    Triton kernel reads out of bounds if they do not hold.

    Returns:
        y [B, H, P] in the data dtype; ``state`` is updated in place.
    """
    with torch.no_grad():
        if torch.compiler.is_compiling():  # the reference or the custom op (the caller checked)
            if traces_reference(MAMBA2_STEP, x.device):  # inline: Inductor fuses it
                return mamba2_step_ref(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_limit, reset)
            return torch.ops.tritonrl.mamba2_step(
                state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_limit[0], dt_limit[1], reset
            )
        return MAMBA2_STEP(x.device, state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_limit, reset)
