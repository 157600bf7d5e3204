"""Scores of forecasts over every window of a split: MSE, MAE (normalised units) and directional
accuracy of a model (:func:`evaluate`) and of the :data:`BASELINES` (:func:`baselines`).

**Baselines**: ``naive`` (no change: a zero return, or the last value for a level-like target
such as ``close`` or ``price_z``), ``seasonal_naive`` (the value one season back, ``season``
bars), and ``train_mean`` (the training split's mean target). **Directional accuracy** scores
each forecast step against the no-change forecast: 1 when the forecast and the truth move the
same way from it, 0 when opposite, 1/2 when either does not move (so the naive forecast scores
exactly 1/2, a coin flip).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from tritonrl.toolkit.distributed import DistContext
from tritonrl.toolkit.forecast.windows import WindowData

__all__ = ["BASELINES", "baselines", "evaluate", "even_slice"]

BASELINES = ("naive", "seasonal_naive", "train_mean")


def _sums(
    pred: torch.Tensor, y: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor | None = None
) -> torch.Tensor:
    """``[3]`` f32 sums of squared error, absolute error and direction score (see the module doc);
    with ``scale`` (broadcast to the errors: the normaliser's std) ``[5]``, adding the squared and
    absolute errors in the original units."""
    err = pred - y
    hit = 0.5 * (1.0 + torch.sign(pred - ref) * torch.sign(y - ref))
    sums = [(err * err).sum(), err.abs().sum(), hit.sum()]
    if scale is not None:
        raw = err * scale
        sums += [(raw * raw).sum(), raw.abs().sum()]
    return torch.stack(sums)


def even_slice(n: int, rank: int, world: int) -> tuple[int, int]:
    """``(start, stop)`` of rank ``rank``'s contiguous share of ``n`` items split as evenly as
    possible over ``world`` ranks (the first ``n % world`` ranks take one more)."""
    q, rem = divmod(n, world)
    start = rank * q + min(rank, rem)
    return start, start + q + (rank < rem)


def _metrics(
    data: WindowData,
    forecast: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    batch: int,
    dist: DistContext | None = None,
) -> dict[str, float]:
    scale = getattr(data, "scale", None)  # SeriesWindows: also the errors in the file's units
    total = torch.zeros(3 if scale is None else 5, device=data.device, dtype=torch.float64)
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
    count = len(data) * data.horizon * getattr(data, "num_targets", 1)
    sums = [v / count for v in total.tolist()]  # the one host read
    out = {"mse": sums[0], "mae": sums[1], "direction": sums[2]}
    if scale is not None:
        out.update(mse_original=sums[3], mae_original=sums[4])
    return out


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    data: WindowData,
    *,
    batch: int = 1024,
    dist: DistContext | None = None,
    target_mode: str = "level",
) -> dict[str, float]:
    """MSE, MAE (normalised units) and directional accuracy of ``model`` over every window of ``data``
    (its output read as ``data.decode(idx, output, target_mode)``: a level or a change).

    The forecast is upcast to f32 once; one host read at the end. The model is put in eval mode
    and back in the mode it was in. With a data-parallel ``dist`` (every rank calls it, with the
    same model) each rank forecasts a contiguous share of the windows and the f64 sums are
    all-reduced: the exact global means (sum over every window / count), equal on every rank.
    ``None``: this process alone evaluates every window.
    """
    was = model.training
    model.eval()
    try:
        if target_mode == "level":
            return _metrics(data, lambda idx, x: model(x).float(), batch, dist)
        return _metrics(data, lambda idx, x: data.decode(idx, model(x).float(), target_mode), batch, dist)
    finally:
        model.train(was)


def baselines(data: WindowData, *, season: int = 5, batch: int = 4096) -> dict[str, dict[str, float]]:
    """``{name: {"mse", "mae", "direction"}}`` of the :data:`BASELINES` over ``data``'s windows.

    Raises:
        ValueError: ``season`` outside ``1 .. W``.
    """
    return {
        "naive": _metrics(data, lambda idx, x: data.naive(idx), batch),
        "seasonal_naive": _metrics(data, lambda idx, x: data.seasonal_naive(idx, season), batch),
        "train_mean": _metrics(data, lambda idx, x: data.train_mean(idx), batch),
    }
