"""The Mamba2 block: trains on whole sequences, acts one step at a time.

Resets clear the scan's state and the conv window; ``step`` L times equals ``forward`` over L
steps. The SSM state is always f32. See docs/pages/mamba2.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tritonrl.agents.nets.norm import rms_norm
from tritonrl.kernels.mamba2 import mamba2_scan, mamba2_step_unchecked
from tritonrl.kernels.validate import check_int
from tritonrl.toolkit.precision import dtype_or_default

__all__ = ["Mamba2Block", "Mamba2State"]


@dataclass
class Mamba2State:
    """The memory of a `Mamba2Block` for a batch of sequences.

    Attributes:
        conv: [B, d_conv - 1, conv_dim], the parameter dtype: the last raw conv inputs.
        ssm: [B, H, P, N] float32: the scan's state.
    """

    conv: torch.Tensor
    ssm: torch.Tensor

    def clone(self) -> Mamba2State:
        """A copy that shares no storage with this state."""
        return Mamba2State(self.conv.clone(), self.ssm.clone())

    def detach(self) -> Mamba2State:
        """The same values, cut from the autograd graph."""
        return Mamba2State(self.conv.detach(), self.ssm.detach())


class _CausalConv(torch.autograd.Function):
    """Causal depthwise conv from a zero window, no resets: ``x [B, L, C]``, ``w [C, K]``, ``b [C]``
    -> ``[B, L, C]`` in ``x``'s dtype, accumulated in place (no padded copies)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        K, L = w.shape[1], x.shape[1]
        out = torch.addcmul(b, x, w[:, K - 1])
        for k in range(1, min(K, L)):  # tap k reads the input k steps back
            out[:, k:].addcmul_(x[:, : L - k], w[:, K - 1 - k])
        ctx.save_for_backward(x, w)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, w = ctx.saved_tensors
        K, L = w.shape[1], x.shape[1]
        gx = grad * w[:, K - 1]
        gw = torch.zeros_like(w)
        gw[:, K - 1] = (grad * x).sum((0, 1))
        for k in range(1, min(K, L)):
            gx[:, : L - k].addcmul_(grad[:, k:], w[:, K - 1 - k])
            gw[:, K - 1 - k] = (grad[:, k:] * x[:, : L - k]).sum((0, 1))
        return gx, gw, grad.sum((0, 1))


class Mamba2Block(nn.Module):
    """One Mamba2 layer (no residual, no outer norm: the caller adds those).

    Args:
        d_model: input and output features.
        d_state: N, the state size per head.
        d_conv: taps of the causal depthwise conv (>= 1).
        expand: inner width ``d_inner = expand * d_model``.
        headdim: P; ``d_inner`` must be a multiple of it, giving ``H = d_inner // P`` heads.
        ngroups: G groups of B and C shared by ``H // G`` heads each (``H % G == 0``).
        chunk_size: the scan's chunk (a power of two in [16, 256]).

    Raises:
        ValueError: inconsistent or non-positive sizes.
    """

    def __init__(
        self,
        d_model: int,
        *,
        d_state: int = 16,
        d_conv: int = 4,
        expand: int = 2,
        headdim: int = 16,
        ngroups: int = 1,
        chunk_size: int = 64,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        for name, v in (
            ("d_model", d_model),
            ("d_state", d_state),
            ("d_conv", d_conv),
            ("expand", expand),
            ("headdim", headdim),
            ("ngroups", ngroups),
        ):
            check_int(name, v, low=1)
        d_inner = expand * d_model
        if d_inner % headdim:
            raise ValueError(f"expand * d_model = {d_inner} must be a multiple of headdim = {headdim}")
        nheads = d_inner // headdim
        if nheads % ngroups:
            raise ValueError(f"the number of heads {nheads} must be divisible by ngroups = {ngroups}")
        if chunk_size < 16 or chunk_size > 256 or chunk_size & (chunk_size - 1):
            raise ValueError(f"chunk_size must be a power of two in [16, 256], got {chunk_size}")
        device = torch.device(device) if device is not None else torch.device("cpu")
        dtype = dtype_or_default(dtype, device)
        self.d_model, self.d_state, self.d_conv, self.headdim = d_model, d_state, d_conv, headdim
        self.d_inner, self.nheads, self.ngroups, self.chunk_size = d_inner, nheads, ngroups, chunk_size
        self.conv_dim = d_inner + 2 * ngroups * d_state
        fk: dict[str, Any] = {"device": device, "dtype": dtype}

        self.in_proj = nn.Linear(d_model, d_inner + self.conv_dim + nheads, bias=False, **fk)
        bound = 1.0 / math.sqrt(d_conv)  # nn.Conv1d's default for a depthwise conv
        # The conv, dt and A initial values are drawn in f32 (the log/exp/expm1 of the dt and A
        # inits lose accuracy in bf16) and rounded once into parameters of ``dtype``: no parameter
        # exists in f32 and is cast afterwards.
        f32: dict[str, Any] = {"device": device, "dtype": torch.float32}
        conv_w = torch.empty(self.conv_dim, d_conv, **f32).uniform_(-bound, bound)
        self.conv_weight = nn.Parameter(conv_w.to(dtype))
        self.conv_bias = nn.Parameter(torch.empty(self.conv_dim, **f32).uniform_(-bound, bound).to(dtype))
        # dt' initialised log-uniform in [1e-3, 1e-1]; dt_bias is its inverse softplus.
        dt0 = torch.exp(torch.rand(nheads, **f32) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
        dt0 = dt0.clamp(min=1e-4)
        self.dt_bias = nn.Parameter((dt0 + torch.log(-torch.expm1(-dt0))).to(dtype))
        self.A_log = nn.Parameter(torch.log(torch.empty(nheads, **f32).uniform_(1.0, 16.0)).to(dtype))
        self.D = nn.Parameter(torch.ones(nheads, **fk))
        self.norm_weight = nn.Parameter(torch.ones(d_inner, **fk))
        self.out_proj = nn.Linear(d_inner, d_model, bias=False, **fk)
        self.norm_eps = 1e-5

    @property
    def dtype(self) -> torch.dtype:
        """The parameter dtype (inputs must arrive in it)."""
        return self.in_proj.weight.dtype

    def initial_state(self, batch_size: int) -> Mamba2State:
        """Zero memory for ``batch_size`` sequences on the parameters' device (SSM state f32)."""
        dev = self.in_proj.weight.device
        return Mamba2State(
            conv=torch.zeros(batch_size, self.d_conv - 1, self.conv_dim, device=dev, dtype=self.dtype),
            ssm=torch.zeros(
                batch_size, self.nheads, self.headdim, self.d_state, device=dev, dtype=torch.float32
            ),
        )

    def _check(self, x: torch.Tensor, shape: tuple[int, ...], what: str) -> None:
        if tuple(x.shape[:-1]) != shape[:-1] or x.shape[-1] != self.d_model or x.dim() != len(shape):
            raise ValueError(f"x must have shape {what} with d_model = {self.d_model}, got {tuple(x.shape)}")
        if x.dtype != self.dtype:
            raise TypeError(
                f"x has dtype {x.dtype} but the block's parameters are {self.dtype}: cast data once when "
                "it enters (replay buffer, rollout storage), not inside the model"
            )

    def _check_state(self, state: Mamba2State, batch: int) -> None:
        if not isinstance(state, Mamba2State):
            raise TypeError(f"state must be a Mamba2State, got {type(state).__name__}")
        want = (batch, self.d_conv - 1, self.conv_dim)
        if tuple(state.conv.shape) != want or tuple(state.ssm.shape) != (
            batch,
            self.nheads,
            self.headdim,
            self.d_state,
        ):
            raise ValueError(
                f"state does not fit batch {batch}: conv {tuple(state.conv.shape)} (want {want}), "
                f"ssm {tuple(state.ssm.shape)} (want {(batch, self.nheads, self.headdim, self.d_state)})"
            )

    def _conv(
        self, xbc: torch.Tensor, window: torch.Tensor | None, resets: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Causal depthwise conv over [B, L, C] that never reaches across a reset, and the next window."""
        batch, length, _ = xbc.shape
        W = self.d_conv
        if window is None and resets is None and not torch.compiler.is_compiling():
            out = _CausalConv.apply(xbc, self.conv_weight, self.conv_bias)
            tail = xbc[:, max(0, length - (W - 1)) :]
            if tail.shape[1] < W - 1:  # fewer inputs than the window holds: zeros before them
                tail = torch.cat([tail.new_zeros(batch, W - 1 - tail.shape[1], self.conv_dim), tail], dim=1)
            return out, tail
        if window is None:
            window = xbc.new_zeros(batch, W - 1, self.conv_dim)
        full = torch.cat([window, xbc], dim=1)  # [B, W - 1 + L, C]
        w = self.conv_weight
        out = self.conv_bias + full[:, W - 1 :] * w[:, W - 1]
        seg = None
        if resets is not None:
            seg = F.pad(resets.cumsum(dim=1), (W - 1, 0))  # episode index of every position
        for k in range(1, W):  # tap k reads the input k steps back
            term = full[:, W - 1 - k : W - 1 - k + length] * w[:, W - 1 - k]
            if seg is not None:
                keep = seg[:, W - 1 - k : W - 1 - k + length] == seg[:, W - 1 :]
                term = torch.where(keep[..., None], term, 0.0)
            out = out + term
        new_window = full[:, full.shape[1] - (W - 1) :]
        if seg is not None:
            keep = seg[:, seg.shape[1] - (W - 1) :] == seg[:, -1:]
            new_window = torch.where(keep[..., None], new_window, 0.0)
        return out, new_window

    def forward(
        self,
        x: torch.Tensor,
        resets: torch.Tensor | None = None,
        *,
        state: Mamba2State | None = None,
        return_state: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, Mamba2State]:
        """Run the block over sequences.

        Args:
            x: [B, L, d_model] in the parameter dtype.
            resets: optional [B, L] bool, true where an episode starts.
            state: optional memory entering step 0 (default: zeros); not modified.
            return_state: also return the memory after step ``L - 1``.

        Returns:
            [B, L, d_model] in the parameter dtype, or ``(y, Mamba2State)``.

        Raises:
            ValueError / TypeError: wrong shape or dtype of ``x``, ``resets`` or ``state``.
        """
        if x.dim() != 3:
            raise ValueError(
                f"x must have shape [B, L, d_model] with d_model = {self.d_model}, got {tuple(x.shape)}"
            )
        batch, length, _ = x.shape
        self._check(x, (batch, length, self.d_model), "[B, L, d_model]")
        if resets is not None:
            if not isinstance(resets, torch.Tensor) or resets.dtype != torch.bool:
                raise TypeError(f"resets must be a bool tensor, got {getattr(resets, 'dtype', type(resets))}")
            if tuple(resets.shape) != (batch, length):
                raise ValueError(
                    f"resets must have shape [B, L] = {(batch, length)}, got {tuple(resets.shape)}"
                )
        if state is not None:
            self._check_state(state, batch)
        H, P, G, N = self.nheads, self.headdim, self.ngroups, self.d_state
        # in_proj as three products on its weight's row blocks (the same sums as one product split
        # in three, up to the library's order for the narrow dt block): the backward concatenates
        # no [B, L, ...] gradients, which torch.split's backward does
        w_in, d, c = self.in_proj.weight, self.d_inner, self.conv_dim
        z, xbc, dt = F.linear(x, w_in[:d]), F.linear(x, w_in[d : d + c]), F.linear(x, w_in[d + c :])
        xbc, window = self._conv(xbc, state.conv if state is not None else None, resets)
        xs, Bm, Cm = torch.split(F.silu(xbc), [self.d_inner, G * N, G * N], dim=-1)
        out = mamba2_scan(
            xs.view(batch, length, H, P),
            dt,
            -torch.exp(self.A_log),
            Bm.view(batch, length, G, N),
            Cm.view(batch, length, G, N),
            D=self.D,
            z=z.view(batch, length, H, P),
            dt_bias=self.dt_bias,
            dt_softplus=True,
            initial_states=state.ssm if state is not None else None,
            resets=resets,
            chunk_size=self.chunk_size,
            return_final_states=return_state,
        )
        y, ssm = out if isinstance(out, tuple) else (out, None)  # a tuple when return_state
        y = y.reshape(batch, length, self.d_inner)
        y = rms_norm(y, self.norm_weight, self.norm_eps)
        y = self.out_proj(y)
        if ssm is not None:  # return_state
            return y, Mamba2State(conv=window, ssm=ssm)
        return y

    def _check_step(
        self, x_t: torch.Tensor, state: Mamba2State, reset: torch.Tensor | None, inplace: bool
    ) -> None:
        """Check what `step` takes from outside (``x_t``, ``state``, ``reset``), so the op runs
        unchecked; a fast test first, detailed checks naming the problem otherwise."""
        try:
            batch = x_t.shape[0]
            conv, ssm = state.conv, state.ssm
            dev = self.conv_bias.device
            if (
                type(state) is Mamba2State
                and x_t.shape == (batch, self.d_model)
                and x_t.dtype == conv.dtype == self.conv_bias.dtype
                and conv.shape == (batch, self.d_conv - 1, self.conv_dim)
                and ssm.shape == (batch, self.nheads, self.headdim, self.d_state)
                and ssm.dtype == torch.float32
                and x_t.device == dev
                and conv.device == dev
                and ssm.device == dev
                and (not inplace or ssm.is_contiguous())
                and (
                    reset is None
                    or (
                        type(reset) is torch.Tensor
                        and reset.dtype == torch.bool
                        and reset.shape == (batch,)
                        and reset.device == dev
                    )
                )
            ):
                return
        except (AttributeError, IndexError, TypeError):  # the detailed checks raise the right error
            pass
        self._check_step_slow(x_t, state, reset, inplace)

    def _check_step_slow(
        self, x_t: torch.Tensor, state: Mamba2State, reset: torch.Tensor | None, inplace: bool
    ) -> None:
        if not isinstance(x_t, torch.Tensor) or x_t.dim() != 2:
            raise ValueError(
                f"x_t must have shape [B, d_model] with d_model = {self.d_model}, "
                f"got {tuple(getattr(x_t, 'shape', ()))}"
            )
        batch = x_t.shape[0]
        self._check(x_t, (batch, self.d_model), "[B, d_model]")
        self._check_state(state, batch)
        if state.conv.dtype != self.dtype:
            raise TypeError(f"state.conv has dtype {state.conv.dtype}, want the parameter dtype {self.dtype}")
        if state.ssm.dtype != torch.float32:
            raise TypeError(
                f"state.ssm has dtype {state.ssm.dtype}, want torch.float32 (the SSM state is f32)"
            )
        dev = self.conv_bias.device
        for name, t in (("x_t", x_t), ("state.conv", state.conv), ("state.ssm", state.ssm)):
            if t.device != dev:
                raise ValueError(f"{name} is on {t.device}, the block's parameters on {dev}")
        if inplace and not state.ssm.is_contiguous():
            raise ValueError("state.ssm must be contiguous to be updated in place (inplace=True)")
        if reset is not None:
            if not isinstance(reset, torch.Tensor) or reset.dtype != torch.bool:
                raise TypeError(f"reset must be a bool tensor, got {getattr(reset, 'dtype', type(reset))}")
            if tuple(reset.shape) != (batch,):
                raise ValueError(f"reset must have shape [B] = ({batch},), got {tuple(reset.shape)}")
            if reset.device != dev:
                raise ValueError(f"reset is on {reset.device}, the block's parameters on {dev}")

    def step(
        self,
        x_t: torch.Tensor,
        state: Mamba2State,
        reset: torch.Tensor | None = None,
        *,
        inplace: bool = False,
    ) -> tuple[torch.Tensor, Mamba2State]:
        """One step for acting: ``x_t [B, d_model]`` -> ``(y_t [B, d_model], next state)``.

        ``reset [B]`` bool clears that row's memory first. ``state`` is left untouched unless
        ``inplace=True``. No gradient flows: train with ``forward``. The new conv window is a
        view (not contiguous); any layout of ``state.conv`` is accepted.

        Raises:
            ValueError / TypeError: wrong shape, dtype or device of ``x_t``, ``reset`` or ``state``
                (a non-float32 SSM state; a non-contiguous one with ``inplace=True``).
        """
        self._check_step(x_t, state, reset, inplace)
        batch = x_t.shape[0]
        H, P, G, N, W = self.nheads, self.headdim, self.ngroups, self.d_state, self.d_conv
        z, xbc, dt = torch.split(self.in_proj(x_t), [self.d_inner, self.conv_dim, H], dim=-1)
        full = torch.cat([state.conv, xbc[:, None]], dim=1)  # [B, d_conv, C]: the window, then x_t's
        if reset is not None:  # an episode starts: forget the window (on the new buffer, not the state)
            full[:, : W - 1].masked_fill_(reset[:, None, None], 0.0)
        xc = (full * self.conv_weight.t()).sum(dim=1) + self.conv_bias
        if inplace:
            conv, ssm = state.conv, state.ssm
            conv.copy_(full[:, 1:])
        else:  # the next window is the buffer's tail; the SSM state a contiguous copy (updated in place)
            conv, ssm = full[:, 1:].detach(), state.ssm.clone(memory_format=torch.contiguous_format)
        xs, Bm, Cm = torch.split(F.silu(xc), [self.d_inner, G * N, G * N], dim=-1)
        y = mamba2_step_unchecked(  # every argument checked by _check_step or built here
            ssm,
            xs.view(batch, H, P),
            dt,
            -torch.exp(self.A_log),
            Bm.view(batch, G, N),
            Cm.view(batch, G, N),
            self.D,
            z.view(batch, H, P),
            self.dt_bias,
            True,
            (0.0, math.inf),
            reset,
        )
        y = F.rms_norm(y.view(batch, self.d_inner), (self.d_inner,), self.norm_weight, self.norm_eps)
        return self.out_proj(y), Mamba2State(conv=conv, ssm=ssm)
