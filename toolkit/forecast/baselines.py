"""Scores of forecasts over every window of a split: MSE, MAE (normalised units) and directional
accuracy of a model ([`evaluate`][tritonrl.toolkit.forecast.baselines.evaluate]) and of the `BASELINES`
([`baselines`][tritonrl.toolkit.forecast.baselines.baselines]), overall and per horizon step. See
docs/pages/forecasting.md ("Baselines", "Errors by horizon step").
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from tritonrl.toolkit.distributed import DistContext
from tritonrl.toolkit.forecast.windows import WindowData

__all__ = [
    "BASELINES",
    "Scores",
    "baselines",
    "baselines_by_step",
    "evaluate",
    "evaluate_by_step",
    "even_slice",
    "horizon_steps",
]

BASELINES = ("naive", "seasonal_naive", "train_mean")


def _sums(
    pred: torch.Tensor, y: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor | None = None
) -> torch.Tensor:
    """``[3, H]`` f32 sums per horizon step of squared error, absolute error and direction score;
    with ``scale`` (the normaliser's std) ``[5, H]``, adding both errors in the original units."""
    err = pred - y  # [B, H, T]
    hit = 0.5 * (1.0 + torch.sign(pred - ref) * torch.sign(y - ref))
    sums = [(err * err).sum((0, 2)), err.abs().sum((0, 2)), hit.sum((0, 2))]
    if scale is not None:
        raw = err * scale
        sums += [(raw * raw).sum((0, 2)), raw.abs().sum((0, 2))]
    return torch.stack(sums)


def horizon_steps(horizon: int) -> tuple[int, ...]:
    """The steps a per-horizon report shows: ``1, H / 4, H / 2, H`` rounded down, without repeats.

    Raises:
        ValueError: ``horizon`` below 1.
    """
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    return tuple(sorted({1, max(1, horizon // 4), max(1, horizon // 2), horizon}))


def even_slice(n: int, rank: int, world: int) -> tuple[int, int]:
    """``(start, stop)`` of rank ``rank``'s contiguous, as even as possible share of ``n`` items."""
    q, rem = divmod(n, world)
    start = rank * q + min(rank, rem)
    return start, start + q + (rank < rem)


Scores = tuple[dict[str, float], dict[str, list[float]]]
"""``(overall, by_step)``: the means over every window, step and target (``mse``, ``mae``,
``direction``; ``mse_original``, ``mae_original`` for windows with a ``scale``) and the same
keys' means at each horizon step ``1 .. H`` (lists of ``H``; their average is the overall one)."""


def _metrics(
    data: WindowData,
    forecast: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    batch: int,
    dist: DistContext | None = None,
) -> Scores:
    scale = getattr(data, "scale", None)  # SeriesWindows: also the errors in the file's units
    keys = ["mse", "mae", "direction"] + ([] if scale is None else ["mse_original", "mae_original"])
    total = torch.zeros(len(keys), data.horizon, device=data.device, dtype=torch.float64)
    lo, hi = 0, len(data)
    if dist is not None and dist.enabled:  # this rank's contiguous share of the windows
        lo, hi = even_slice(len(data), dist.rank, dist.world_size)
    for start in range(lo, hi, batch):
        idx = torch.arange(start, min(start + batch, hi), device=data.device)
        x, y = data.batch(idx)
        total += _sums(forecast(idx, x), y, data.naive(idx), None if scale is None else scale(idx)).double()
    if dist is not None and dist.enabled:
        dist.all_reduce_sum_(total)  # the global sums (f64) ...
        dist.broadcast_tensors_([total])  # ... with rank 0's bits on every rank: same decisions
    per_step = len(data) * getattr(data, "num_targets", 1)  # forecasts scored at each step
    rows = torch.cat([total.sum(1, keepdim=True), total], dim=1).tolist()  # the one host read
    overall = {k: row[0] / (per_step * data.horizon) for k, row in zip(keys, rows, strict=True)}
    by_step = {k: [v / per_step for v in row[1:]] for k, row in zip(keys, rows, strict=True)}
    return overall, by_step


@torch.no_grad()
def evaluate_by_step(
    model: torch.nn.Module,
    data: WindowData,
    *,
    batch: int = 1024,
    dist: DistContext | None = None,
    target_mode: str = "level",
) -> Scores:
    """`Scores` of ``model`` over every window of ``data`` (one pass, one host read), its
    output read by ``data.decode(idx, output, target_mode)`` and upcast to f32 once. With a
    data-parallel ``dist`` each rank scores its share and the f64 sums are all-reduced."""
    was = model.training
    model.eval()
    try:
        if target_mode == "level":
            return _metrics(data, lambda idx, x: model(x).float(), batch, dist)
        return _metrics(data, lambda idx, x: data.decode(idx, model(x).float(), target_mode), batch, dist)
    finally:
        model.train(was)


def evaluate(
    model: torch.nn.Module,
    data: WindowData,
    *,
    batch: int = 1024,
    dist: DistContext | None = None,
    target_mode: str = "level",
) -> dict[str, float]:
    """The overall part of `evaluate_by_step`: MSE, MAE and directional accuracy."""
    return evaluate_by_step(model, data, batch=batch, dist=dist, target_mode=target_mode)[0]


def baselines_by_step(data: WindowData, *, season: int = 5, batch: int = 4096) -> dict[str, Scores]:
    """``{name: (overall, by_step)}`` of the `BASELINES`; ``ValueError`` unless ``1 <= season <= W``."""
    return {
        "naive": _metrics(data, lambda idx, x: data.naive(idx), batch),
        "seasonal_naive": _metrics(data, lambda idx, x: data.seasonal_naive(idx, season), batch),
        "train_mean": _metrics(data, lambda idx, x: data.train_mean(idx), batch),
    }


def baselines(data: WindowData, *, season: int = 5, batch: int = 4096) -> dict[str, dict[str, float]]:
    """The overall part of `baselines_by_step`: ``{name: {"mse", "mae", "direction"}}``."""
    return {name: scores[0] for name, scores in baselines_by_step(data, season=season, batch=batch).items()}
