"""The recurrent cores of the PPO family: LSTM, GRU and Mamba2 memories shared by actor and critic.

Memories reset where an episode starts; training runs whole sequences in one fused op.
See docs/pages/ppo.md.
"""

from __future__ import annotations

import abc
import math
from typing import Any

import torch
from torch import nn
from tritonrl.agents.nets._layers import factory_kwargs, orthogonal_linear, tanh_mlp
from tritonrl.agents.nets.mamba2 import Mamba2Block
from tritonrl.agents.nets.torsos import init_orthogonal_

__all__ = ["GRUCore", "LSTMCore", "Mamba2Core", "subsequence_layout", "subsequence_stats"]


def _mask_state(state: tuple[torch.Tensor, ...], starts: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Zero the memory of batch rows where ``starts`` ([B] bool) is set."""
    return tuple(torch.where(starts.view(-1, *([1] * (s.dim() - 1))), torch.zeros_like(s), s) for s in state)


def _pieces(starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``starts [B, L]`` split at every ``t > 0`` where set: ``(count [B], piece [B, L], tau [B, L])``
    int64 (sub-sequences per row, each step's sub-sequence, its position there); no host read."""
    t = torch.arange(starts.shape[1], device=starts.device)
    begins = torch.cat([torch.ones_like(starts[:, :1]), starts[:, 1:]], 1)  # [B, L]
    piece = begins.cumsum(1) - 1
    tau = t - torch.where(begins, t, 0).cummax(1).values  # steps since the sub-sequence began
    return piece[:, -1] + 1, piece, tau


def subsequence_stats(starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of ``starts [S, L]`` bool: ``(count [S], longest [S])`` int64, the number of
    sub-sequences and the longest's length (no host read).

    Raises:
        ValueError: ``starts`` is not 2-d bool with at least one step.
    """
    if starts.dim() != 2 or starts.dtype != torch.bool or starts.shape[1] < 1:
        raise ValueError(f"starts must be [S, L >= 1] bool, got {tuple(starts.shape)} {starts.dtype}")
    count, _, tau = _pieces(starts)
    return count, tau.amax(1) + 1


def subsequence_layout(starts: torch.Tensor) -> tuple[int, int]:
    """``(rows, length)`` of the padded layout of ``starts [B, L]``'s sub-sequences.

    One host read (a device sync on CUDA); PPO reads all of an update's layouts at once instead.

    Raises:
        ValueError: ``starts`` is not 2-d bool with at least one step.
    """
    count, longest = subsequence_stats(starts)
    rows, length = torch.stack([count.sum(), longest.amax()]).tolist()
    return int(rows), int(length)


class _RecurrentCore(nn.Module, abc.ABC):
    """``obs -> MLP encoder -> recurrent cell``; features shared by actor and critic. Acting steps the
    cell; training runs the fused op over whole sequences (`sequence`)."""

    recurrent = True
    supports_initial_state = True  # sequences may start from a stored memory
    splits_at_starts = True  # sequence() takes a ``layout`` (see subsequence_layout)
    cell: nn.LSTMCell | nn.GRUCell
    state_tensors: int  # tensors in the state: (h, c) or (h,)

    def __init__(
        self,
        obs_dim: int,
        hidden: tuple[int, ...],
        size: int,
        cell: type[nn.LSTMCell] | type[nn.GRUCell],
        fk: dict[str, Any],
    ) -> None:
        super().__init__()
        self.encoder = tanh_mlp(obs_dim, hidden, fk)
        self.cell = cell(hidden[-1] if hidden else obs_dim, size, **fk)
        for name, p in self.cell.named_parameters():
            if "bias" in name:
                nn.init.zeros_(p)
            else:
                init_orthogonal_(p, 1.0)
        self.size = size
        self.feature_dim = size

    # the two things an LSTM and a GRU do differently

    @abc.abstractmethod
    def _cell_step(self, x: torch.Tensor, state: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """One cell step: ``x [B, D]``, state -> new state (its first tensor is the output ``h``)."""

    @abc.abstractmethod
    def _fused(self, x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """The cell over ``x [R, L, D]`` from ``state [n, R, size]`` -> ``[R, L, size]``, by torch's
        fused op with the cell's weights."""

    def _weights(self) -> list[torch.Tensor]:
        c = self.cell
        return [c.weight_ih, c.weight_hh, c.bias_ih, c.bias_hh]

    # shared

    def initial_state(self, batch: int) -> tuple[torch.Tensor, ...]:
        """Zero memory for ``batch`` rows (``[batch, size]`` each, in the parameters' dtype)."""
        w = self.cell.weight_hh
        return tuple(
            torch.zeros(batch, self.size, dtype=w.dtype, device=w.device) for _ in range(self.state_tensors)
        )

    def step(
        self, x: torch.Tensor, state: tuple[torch.Tensor, ...], starts: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
        """One step: ``x [B, obs_dim]``, ``starts [B]`` bool (reset first where set) ->
        ``(actor feat, critic feat, new state)``, features ``[B, size]``."""
        if starts is not None:
            state = _mask_state(state, starts)
        state = self._cell_step(self.encoder(x), state)
        return state[0], state[0], state

    def sequence(
        self,
        x: torch.Tensor,
        starts: torch.Tensor,
        state: tuple[torch.Tensor, ...],
        layout: tuple[int, int] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Features of whole sequences, memory reset at episode starts, in one fused recurrence.

        ``x [B, L, obs_dim]``, ``starts [B, L]`` bool, ``state`` before step 0 -> features
        ``[B, L, size]`` (twice: actor and critic share them). Equals `sequence_stepwise`
        up to f32 rounding, gradients included.

        Rows are split at their starts into right-padded sub-sequences, run once, scattered back.
        ``layout = (rows, length)`` sizes that layout
        ([`subsequence_stats`][tritonrl.agents.nets.recurrent.subsequence_stats]; larger only pads); ``None``
        measures it ([`subsequence_layout`][tritonrl.agents.nets.recurrent.subsequence_layout], one host
        read). A layout too small is the caller's error (an index error; a device assert on CUDA). Runs
        eagerly under ``torch.compile``: the layout's size changes with the data.
        """
        return _run_split(self, self.encoder(x), starts, tuple(state), layout)

    def sequence_stepwise(
        self, x: torch.Tensor, starts: torch.Tensor, state: tuple[torch.Tensor, ...]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`sequence` one step at a time (the test reference)."""
        enc = self.encoder(x)
        out = []
        s = tuple(state)
        for t in range(x.shape[1]):
            s = self._cell_step(enc[:, t], _mask_state(s, starts[:, t]))
            out.append(s[0])
        feat = torch.stack(out, 1)
        return feat, feat


@torch.compiler.disable
def _run_split(
    core: _RecurrentCore,
    enc: torch.Tensor,
    starts: torch.Tensor,
    state: tuple[torch.Tensor, ...],
    layout: tuple[int, int] | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`_RecurrentCore.sequence` after the encoder: split, pad, one fused run, scatter back."""
    B, L, D = enc.shape
    rows, length = layout if layout is not None else subsequence_layout(starts)
    count, piece, tau = _pieces(starts)
    first = count.cumsum(0) - count  # [B]: layout row of each row's first sub-sequence
    flat = ((first[:, None] + piece) * length + tau).reshape(-1)  # [B * L] into [rows * length]
    x = enc.new_zeros(rows * length, D).index_copy(0, flat, enc.reshape(B * L, D)).view(rows, length, D)
    # the first sub-sequence of a row continues the stored memory (zero where the row starts an
    # episode); later ones start from zero
    stored = torch.stack(state).masked_fill(starts[None, :, :1], 0)  # [n, B, size]
    init = stored.new_zeros(len(state), rows, stored.shape[2]).index_copy(1, first, stored)
    y = core._fused(x, init)  # [rows, length, size]
    feat = y.reshape(rows * length, -1).index_select(0, flat).view(B, L, -1)
    return feat, feat


class LSTMCore(_RecurrentCore):
    """``obs -> MLP encoder -> LSTMCell``; features shared by actor and critic.

    State: ``(h, c)``, each ``[B, size]`` in the parameters' dtype; training runs the cell's
    weights through ``torch.lstm``.

    Raises:
        ValueError: a layer size below 1.
    """

    state_tensors = 2

    def __init__(
        self,
        obs_dim: int,
        hidden: tuple[int, ...],
        size: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(obs_dim, hidden, size, nn.LSTMCell, factory_kwargs(device, dtype))

    def _cell_step(self, x: torch.Tensor, state: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        h, c = state
        return tuple(self.cell(x, (h, c)))

    def _fused(self, x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        hx = (state[0:1], state[1:2])  # [num_layers = 1, R, size] each
        # (input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
        return torch.lstm(x, hx, self._weights(), True, 1, 0.0, torch.is_grad_enabled(), False, True)[0]


class GRUCore(_RecurrentCore):
    """``obs -> MLP encoder -> GRUCell``; features shared by actor and critic.

    State: ``(h,)``, ``[B, size]`` in the parameters' dtype; training runs ``torch.gru``.

    Raises:
        ValueError: a layer size below 1.
    """

    state_tensors = 1

    def __init__(
        self,
        obs_dim: int,
        hidden: tuple[int, ...],
        size: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(obs_dim, hidden, size, nn.GRUCell, factory_kwargs(device, dtype))

    def _cell_step(self, x: torch.Tensor, state: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        return (self.cell(x, state[0]),)

    def _fused(self, x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        # (input, hx [num_layers = 1, R, size], params, has_biases, num_layers, dropout, train,
        # bidirectional, batch_first)
        return torch.gru(x, state, self._weights(), True, 1, 0.0, torch.is_grad_enabled(), False, True)[0]


class Mamba2Core(nn.Module):
    """``obs -> Linear -> Mamba2Block (+ residual) -> LayerNorm``; features shared by actor and critic;
    state: [`tritonrl.agents.nets.mamba2.Mamba2State`][tritonrl.agents.nets.mamba2.Mamba2State]."""

    recurrent = True
    supports_initial_state = True

    def __init__(
        self,
        obs_dim: int,
        d_model: int,
        *,
        d_state: int = 16,
        d_conv: int = 4,
        expand: int = 2,
        headdim: int = 16,
        chunk_size: int = 64,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        fk = factory_kwargs(device, dtype)
        self.encoder = orthogonal_linear(obs_dim, d_model, math.sqrt(2), fk)
        self.block = Mamba2Block(
            d_model,
            d_state=d_state,
            d_conv=d_conv,
            expand=expand,
            headdim=headdim,
            chunk_size=chunk_size,
            **fk,
        )
        self.norm = nn.LayerNorm(d_model, **fk)
        self.feature_dim = d_model

    def initial_state(self, batch: int) -> Any:
        """The block's zero state for ``batch`` rows."""
        return self.block.initial_state(batch)

    def step(
        self, x: torch.Tensor, state: Any, starts: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """One step, reset where ``starts``: ``x [B, obs_dim]`` -> ``(feat, feat, state)``."""
        u = torch.tanh(self.encoder(x))
        y, state = self.block.step(u, state, starts)
        feat = self.norm(u + y)
        return feat, feat, state

    def sequence(
        self, x: torch.Tensor, starts: torch.Tensor, state: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [B, L, obs_dim]``, ``starts [B, L]``, memory at step 0 -> features ``[B, L, d_model]``
        (twice)."""
        u = torch.tanh(self.encoder(x))
        feat = self.norm(u + self.block(u, starts, state=state))
        return feat, feat
