"""Actions to target weights (cash first, then the ``N`` assets): the simplex map of the
continuous families, long-short with a gross-leverage cap, direct weights, FinRL's rule, and the
discrete set of target portfolios of the DQN family. See docs/pages/portfolio.md."""

from __future__ import annotations

import torch

__all__ = [
    "discrete_portfolios",
    "hold_mask",
    "finrl_weights",
    "numpy_sum",
    "long_short_weights",
    "simplex_weights",
    "target_weights",
]


def simplex_weights(action: torch.Tensor, scale: float) -> torch.Tensor:
    """``softmax(scale * clip(action, -1, 1))`` over the last axis: ``[E, N + 1]`` long-only
    weights summing to 1 (``scale`` sets how concentrated a bounded action can make them)."""
    return torch.softmax(scale * action.clamp(-1.0, 1.0), dim=-1)


def long_short_weights(action: torch.Tensor, leverage: float) -> torch.Tensor:
    """``[E, N]`` actions clipped to ``[-1, 1]`` as asset weights scaled down to a gross exposure
    ``sum |w_i| <= leverage``; cash ``1 - sum w_i`` first: ``[E, N + 1]``."""
    a = action.clamp(-1.0, 1.0)
    gross = a.abs().sum(-1, keepdim=True)
    w = a * (leverage / gross.clamp_min(leverage))
    return torch.cat((1.0 - w.sum(-1, keepdim=True), w), dim=-1)


def direct_weights(action: torch.Tensor) -> torch.Tensor:
    """``[E, N + 1]`` target weights: negatives clipped to 0, then divided by their sum (all
    cash where nothing is left)."""
    w = action.clamp_min(0.0)
    total = w.sum(-1, keepdim=True)
    cash = torch.zeros_like(w)
    cash[..., 0] = 1.0
    return torch.where(total > 0, w / total.clamp_min(torch.finfo(w.dtype).tiny), cash)


def finrl_weights(action: torch.Tensor) -> torch.Tensor:
    """FinRL's ``PortfolioOptimizationEnv`` rule, per env: the action rounded to f32 is used as
    it is when it sums to 1 within 1e-6 and has no negative entry, else its f32 softmax. Sums
    run in NumPy's order (`numpy_sum`); ``exp`` is torch's (NumPy's f32 ``exp`` differs from it
    in the last bit on some inputs, so off-simplex weights agree with FinRL's to f32 rounding)."""
    a = action.to(torch.float32)
    # |sum - 1| is exact in f32 near 1 and no f32 multiple of 2^-24 lies between f32(1e-6) and 1e-6.
    ok = ((numpy_sum(a) - 1.0).abs() <= 1e-6) & (a.min(-1).values >= 0)
    e = torch.exp(a)
    soft = e / numpy_sum(e)[:, None]
    return torch.where(ok[:, None], a, soft)


def numpy_sum(x: torch.Tensor) -> torch.Tensor:
    """``x [..., n]`` summed over the last axis in NumPy's pairwise order (``np.sum`` of a
    contiguous row): sequential below 8 terms, 8 running sums up to 128, halves above, so that
    f32 sums round as FinRL's do."""
    n = x.shape[-1]
    if n < 8:
        res = x[..., 0]
        for i in range(1, n):
            res = res + x[..., i]
        return res
    if n > 128:
        half = n // 2 - (n // 2) % 8
        return numpy_sum(x[..., :half]) + numpy_sum(x[..., half:])
    stop = n - n % 8
    blocks = x[..., :stop].unflatten(-1, (stop // 8, 8))
    r = blocks[..., 0, :]
    for i in range(1, stop // 8):
        r = r + blocks[..., i, :]
    res = ((r[..., 0] + r[..., 1]) + (r[..., 2] + r[..., 3])) + (
        (r[..., 4] + r[..., 5]) + (r[..., 6] + r[..., 7])
    )
    for i in range(stop, n):
        res = res + x[..., i]
    return res


def discrete_portfolios(
    num_assets: int, *, dtype: torch.dtype = torch.float64, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """The DQN family's ``N + 2`` target portfolios ``[N + 2, N + 1]``: action 0 all cash,
    action 1 equal weight over the assets, action ``2 + i`` all in asset ``i`` (action ``N + 2``,
    hold, has no row: see `hold_mask`)."""
    n = num_assets
    table = torch.zeros(n + 2, n + 1, dtype=dtype, device=device)
    table[0, 0] = 1.0
    table[1, 1:] = 1.0 / n
    table[2:, 1:] = torch.eye(n, dtype=dtype, device=device)
    return table


def hold_mask(action: torch.Tensor, kind: str, num_assets: int) -> torch.Tensor | None:
    """``[E]`` bool: the actions that hold (no trade): a row of NaNs for ``"weights"``, action
    ``N + 2`` for ``"discrete"``; ``None`` for the kinds that cannot hold."""
    if kind == "weights":
        return torch.isnan(action).all(-1)
    if kind == "discrete":
        return action.reshape(-1) == num_assets + 2
    return None


def target_weights(
    action: torch.Tensor,
    kind: str,
    *,
    scale: float,
    leverage: float,
    table: torch.Tensor | None,
    dtype: torch.dtype,
) -> torch.Tensor:
    """``[E, N + 1]`` target weights in ``dtype`` of an ``actions`` kind's batch of actions."""
    if kind == "discrete":
        assert table is not None
        return table[action.reshape(-1).long().clamp(0, table.shape[0] - 1)]
    a = action.to(dtype)
    if kind == "simplex":
        return simplex_weights(a, scale)
    if kind == "long_short":
        return long_short_weights(a, leverage)
    if kind == "weights":
        return direct_weights(a)
    return finrl_weights(action).to(dtype)  # "finrl"
