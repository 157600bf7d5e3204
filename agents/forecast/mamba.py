"""The Mamba2 forecaster: residual `tritonrl.agents.nets.mamba2.Mamba2Block` layers.

Trains with the chunked scan over the window; `Mamba2Forecaster.step` rolls forward one bar
at a time. See docs/pages/forecasting.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from torch import nn
from tritonrl.agents.forecast.base import Forecaster
from tritonrl.agents.nets.mamba2 import Mamba2Block, Mamba2State
from tritonrl.agents.nets.norm import rms_norm
from tritonrl.kernels.validate import check_int

__all__ = ["Mamba2Forecaster"]


class Mamba2Forecaster(Forecaster):
    """Mamba2 forecaster: a residual stack of Mamba2 blocks, the forecast from the last step.

    Args:
        window, num_features, horizon, num_targets, device, dtype, target_channels: see
            [`Forecaster`][tritonrl.agents.forecast.base.Forecaster].
        width: model width (``encoding_dim``, the blocks' ``d_model``).
        depth: Mamba2 blocks.
        d_state, d_conv, expand, headdim, chunk_size: of every block
            ([`Mamba2Block`][tritonrl.agents.nets.mamba2.Mamba2Block]); ``chunk_size=None``: 16 on a CPU, else
            the power of two >= ``window`` in [16, 64].
        revin: RevIN around the forecast
            ([`Forecaster.use_revin`][tritonrl.agents.forecast.base.Forecaster.use_revin]).
        revin_anchor: RevIN's centre, each window's ``"mean"`` or its ``"last"`` step.

    Raises:
        ValueError: a size that is not a positive int; inconsistent block sizes.
    """

    name = "mamba2"
    causal = True

    def __init__(
        self,
        window: int,
        num_features: int,
        horizon: int = 1,
        num_targets: int = 1,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        target_channels: Sequence[int] | None = None,
        width: int = 32,
        depth: int = 2,
        d_state: int = 16,
        d_conv: int = 4,
        expand: int = 2,
        headdim: int = 16,
        chunk_size: int | None = None,
        revin: bool = False,
        revin_anchor: str = "mean",
    ) -> None:
        super().__init__(
            window,
            num_features,
            horizon,
            num_targets,
            device=device,
            dtype=dtype,
            target_channels=target_channels,
        )
        check_int("width", width, low=1)
        check_int("depth", depth, low=1)
        fk = self.factory
        if chunk_size is None:
            on_cpu = torch.device(fk["device"]).type == "cpu"
            chunk_size = 16 if on_cpu else min(64, max(16, 1 << (window - 1).bit_length()))
        self.proj = nn.Linear(num_features, width, **fk)
        self.norms = nn.ModuleList(nn.RMSNorm(width, eps=1e-6, **fk) for _ in range(depth))
        self.blocks = nn.ModuleList(
            Mamba2Block(
                width,
                d_state=d_state,
                d_conv=d_conv,
                expand=expand,
                headdim=headdim,
                chunk_size=chunk_size,
                **fk,
            )
            for _ in range(depth)
        )
        self.out_norm = nn.RMSNorm(width, eps=1e-6, **fk)
        self.head = nn.Linear(width, horizon * num_targets, **fk)
        self.encoding_dim = width
        self.use_revin(revin, revin_anchor)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, W, F] -> [B, W, width]`` by the scan, causal; raises as `Forecaster.check_input`."""
        self.check_input(x)
        h = self.proj(x)
        for norm, block in zip(self._norms(), self.blocks, strict=True):
            h = h + block(rms_norm(h, norm.weight, cast("float", norm.eps)))
        return rms_norm(h, self.out_norm.weight, cast("float", self.out_norm.eps))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, W, F] -> [B, H, T]`` in the parameter dtype; raises as `Forecaster.check_input`."""
        return self.last_step_forecast(x)

    def initial_state(self, batch_size: int) -> list[Mamba2State]:
        """Zero memory of every block for ``batch_size`` series (SSM states f32)."""
        return [block.initial_state(batch_size) for block in self._blocks()]

    def _norms(self) -> list[nn.RMSNorm]:
        return cast("list[nn.RMSNorm]", list(self.norms))

    def _blocks(self) -> list[Mamba2Block]:
        return cast("list[Mamba2Block]", list(self.blocks))

    def step(
        self, x_t: torch.Tensor, state: list[Mamba2State], *, inplace: bool = False
    ) -> tuple[torch.Tensor, list[Mamba2State]]:
        """Roll forward one bar: ``x_t [B, F]`` (parameter dtype) -> ``(forecast [B, H, T], state)``.

        ``state`` is left untouched unless ``inplace=True``. No gradient: run under
        ``torch.no_grad()``.

        Raises:
            ValueError: ``x_t`` is not ``[B, F]``, ``state`` does not hold one state per block,
                or the model uses RevIN.
            TypeError: ``x_t`` is not in the parameter dtype.
        """
        if self.revin:
            raise ValueError(f"{self.name}: step() has no window to normalise: build it with revin=False")
        if x_t.dim() != 2 or x_t.shape[1] != self.num_features:
            raise ValueError(f"{self.name}: x_t must be [batch, {self.num_features}], got {tuple(x_t.shape)}")
        if x_t.dtype != self.param_dtype:
            raise TypeError(f"{self.name}: x_t is {x_t.dtype}, the parameters are {self.param_dtype}")
        if not isinstance(state, (list, tuple)) or len(state) != len(self.blocks):
            raise ValueError(f"{self.name}: state must be a list of {len(self.blocks)} Mamba2State")
        h = self.proj(x_t)
        new_state = []
        for norm, block, s in zip(self.norms, self._blocks(), state, strict=True):
            y, s = block.step(norm(h), s, inplace=inplace)
            h = h + y
            new_state.append(s)
        out = self.to_forecast(self.head(self.out_norm(h)))
        return out, new_state
