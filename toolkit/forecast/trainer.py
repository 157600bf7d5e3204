"""Training forecasters on market bars: windows, baselines, the trainer ``fit`` and ``tritonrl fit``.

::

    tritonrl fit --list
    tritonrl fit --model patchtst --data market:googl --horizon 1 --window 64
    tritonrl fit --model gru --data market:synthetic,ar=0.3 --target price_z --set hidden=32
    tritonrl fit --model gru --data market:synthetic,ar=0.3 --run-dir runs/g --resume

(the command line: :mod:`tritonrl.toolkit.cli.fit`)

**Windows** (:class:`WindowData`): a window ending at row ``t`` of a split holds the features of
rows ``t - W + 1 .. t`` (in the training dtype they were uploaded in: one gather per batch, never a
cast) and its target is rows ``t + 1 .. t + H`` of the target series (f32), so no input reads a
bar after the window's end. The target is the next-bar log return by default
(``MarketData.log_return``), ``close``, or any feature column taken in f32 from the host features
before the upload (:func:`target_series`). Targets are normalised with the mean and std of the
TRAIN split's target rows only (:class:`Normalizer`); every MSE and MAE is in those units (an MSE
of 1 is the train split's variance).

**Baselines** (every report): ``naive`` (no change: a zero return, or the last value for a
level-like target such as ``close`` or ``price_z``), ``seasonal_naive`` (the value one season
back, ``season`` bars), and ``train_mean`` (the training split's mean target).
**Directional accuracy** scores each forecast step against the no-change forecast: 1 when the
forecast and the truth move the same way from it, 0 when opposite, 1/2 when either does not move
(so the naive forecast scores exactly 1/2, a coin flip).

**The trainer** (:func:`fit`): AdamW through :class:`~tritonrl.toolkit.optim.MasterWeightOptimizer`
(bf16 parameters keep f32 masters), the f32 MSE loss on the forecast upcast once, gradient
clipping, a cosine or linear learning-rate schedule with linear warm-up, early stopping on the
validation MSE (``patience`` epochs; the best weights are restored for the test), deterministic
seeds (the epoch's shuffle is a function of the seed and the epoch), metrics to ``metrics.csv``
and TensorBoard (:class:`~tritonrl.toolkit.logger.MetricLogger`: ``losses/train_mse``,
``losses/grad_norm``, ``charts/lr`` every ``log_every`` steps; ``val/mse``, ``val/mae``,
``val/direction`` each epoch), a progress bar, and exact resume from
``<run_dir>/checkpoint.safetensors`` (:func:`tritonrl.toolkit.checkpoint.save_checkpoint`, format
:data:`FIT_FORMAT`; written at each epoch's end and when ``should_stop`` asks, at a metric flush,
so a resumed run writes the same rows as an uninterrupted one). A run folder has one writer
(:class:`~tritonrl.toolkit.runfolder.RunLock`).

**Data-parallel** (``torchrun --nproc-per-node N -m tritonrl.toolkit fit ...``, or ``fit(...,
dist=ctx)`` on every rank): the configuration is global. The ``batch_size`` windows of a step are
split evenly over the ranks (``batch_size`` must be a multiple of the world size, else
:class:`~tritonrl.toolkit.distributed.DistributedError`): every rank draws the same epoch
permutation and takes its contiguous share of each batch; the gradients are averaged (one flat
all-reduce) before clipping, so N ranks take the steps of one process with the same
``batch_size``, to f32 rounding. A last batch shorter than the others is split as evenly as
possible and each rank's mean loss weighted by its share (``n_r * N / b``), so the averaged
gradient is still the gradient of that batch's mean loss. Validation and test metrics are exact
global means (f64 sums all-reduced over each rank's share of the windows), so early stopping and
the best weights are decided identically on every rank. Every rank checks that the others run the
same configuration and data, starts from rank 0's weights, and draws its own dropout stream
(rank 0 the single process's); rank 0 alone locks and writes the run folder (metrics, checkpoint
with every rank's RNG state, report) and prints; ``should_stop`` is agreed at each flush.

The CLI (:mod:`tritonrl.toolkit.cli.fit`) follows ``train``'s rules
(:mod:`tritonrl.toolkit.cli.common`): bad input is one ``error:`` line and exit status 2 before
anything is written; an existing checkpoint is never overwritten without ``--resume``; a
non-finite loss stops the run with status 1, keeping the last checkpoint; SIGINT / SIGTERM save a
checkpoint and exit with 130 / 143. The models come from
:func:`tritonrl.toolkit.cli.registry.forecasters` (the lazy import of ``tritonrl.agents.forecast``).
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tritonrl.toolkit import distributed
from tritonrl.toolkit.config import Config
from tritonrl.toolkit.distributed import DistContext

__all__ = [
    "BASELINES",
    "CHANGE_TARGETS",
    "FIT_FORMAT",
    "FitConfig",
    "FitError",
    "Normalizer",
    "WindowData",
    "baselines",
    "evaluate",
    "fit",
    "format_report",
    "load_windows",
    "lr_at",
    "target_series",
]

FIT_FORMAT = "tritonrl-fit"
"""``format`` entry of a forecaster training checkpoint: sections ``model``, ``optimizer``, ``best``,
``loop``, ``rng``, ``meta`` and ``config``."""
CHECKPOINT_NAME = "checkpoint.safetensors"
REPORT_NAME = "fit_report.json"
CHANGE_TARGETS = frozenset({"log_return", "return"})
"""Targets that are changes: their no-change forecast is 0. Every other target is a level (``close``,
``price_z``, ``volatility``, ...): its no-change forecast is the last observed value."""
BASELINES = ("naive", "seasonal_naive", "train_mean")


class FitError(RuntimeError):
    """Training stopped by an error (a non-finite loss, a failed write); the last checkpoint stays."""


# ----------------------------------------------------------------------------- targets and windows


def target_series(data: Any, target: str = "log_return", host_features: Any = None) -> torch.Tensor:
    """The target column of ``data`` (a :class:`~tritonrl.toolkit.envs.market.MarketData`), ``[T]`` f32.

    ``log_return`` and ``close`` are ``data``'s f32 columns; a feature name is taken from
    ``host_features`` (the ``[T, F]`` f32 host array of
    :func:`~tritonrl.toolkit.envs.market.compute_features`, before the upload's cast), or from
    ``data.features`` when those are f32 already.

    Raises:
        ValueError: an unknown target, or a feature target of bf16 features without ``host_features``.
    """
    if target == "log_return":
        return data.log_return
    if target == "close":
        return data.close
    names = tuple(data.feature_names)
    if target not in names:
        raise ValueError(
            f"unknown target {target!r}; choose log_return, close or a feature: {', '.join(names)}"
        )
    col = names.index(target)
    if host_features is not None:
        host = torch.as_tensor(np.asarray(host_features, dtype=np.float32))
        if host.dim() != 2 or host.shape != (len(data), len(names)):
            raise ValueError(f"host_features must be [{len(data)}, {len(names)}], got {tuple(host.shape)}")
        return host[:, col].contiguous().to(data.device)
    if data.features.dtype != torch.float32:
        raise ValueError(
            f"target {target!r}: the features are {data.features.dtype}; pass host_features (the f32 "
            "compute_features array) so the target is not read from the rounded copy"
        )
    return data.features[:, col]


@dataclass(frozen=True)
class Normalizer:
    """``z = (y - mean) / std`` of a target series, from the training split only."""

    mean: float
    std: float

    @classmethod
    def from_train(cls, values: torch.Tensor, window: int, horizon: int) -> Normalizer:
        """Mean and std (f64 on the host) of rows ``window .. T - 1`` of the train split's target
        series: exactly the rows its windows forecast.

        Raises:
            ValueError: fewer than 2 such rows, or a constant target (std 0).
        """
        rows = values[window:].double().cpu()
        if rows.numel() < 2:
            raise ValueError(f"the train split has {rows.numel()} target rows, fewer than 2")
        mean, std = float(rows.mean()), float(rows.std(correction=0))
        if not (math.isfinite(std) and std > 0):
            raise ValueError(f"the target is constant over the train split (std {std}): nothing to forecast")
        return cls(mean, std)

    def to_dict(self) -> dict[str, float]:
        """``{"mean", "std"}``."""
        return {"mean": self.mean, "std": self.std}


class WindowData:
    """The windows of one split: inputs ``[B, W, F]`` in the features' dtype, targets f32 ``[B, H, 1]``.

    Args:
        data: one split (:class:`~tritonrl.toolkit.envs.market.MarketData`, ``T`` rows).
        window: ``W``.
        horizon: ``H``.
        target: the target's name (for change vs level: :data:`CHANGE_TARGETS`).
        values: the split's target series, ``[T]`` f32 on ``data``'s device (default
            :func:`target_series` of ``data``).
        normalizer: the train split's :class:`Normalizer`; ``None`` computes it from this split
            (pass it for validation and test).
        split: a label for messages (``"train"``, ``"validation"``, ``"test"``).

    Windows end at rows ``W - 1 .. T - 1 - H`` (``num_windows = T - W - H + 1``).

    Raises:
        ValueError: ``W`` or ``H`` below 1, the split shorter than ``W + H`` rows, a NaN or
            infinite feature or target (one host read, here), ``values`` of the wrong shape.
        TypeError: ``values`` not f32.
    """

    def __init__(
        self,
        data: Any,
        window: int,
        horizon: int = 1,
        *,
        target: str = "log_return",
        values: torch.Tensor | None = None,
        normalizer: Normalizer | None = None,
        split: str = "train",
    ) -> None:
        if window < 1 or horizon < 1:
            raise ValueError(f"window={window} and horizon={horizon} must be >= 1")
        n = len(data)
        if n < window + horizon:
            raise ValueError(
                f"the {split} split of {data.name!r} has {n} rows, fewer than window + horizon = "
                f"{window} + {horizon}: shorten --window or --horizon, or use a longer series"
            )
        values = target_series(data, target) if values is None else values
        if values.dtype != torch.float32:
            raise TypeError(f"target values must be float32, got {values.dtype}")
        if values.shape != (n,) or values.device != data.device:
            raise ValueError(f"target values must be [{n}] on {data.device}, got {tuple(values.shape)}")
        bad = torch.stack([(~torch.isfinite(data.features)).any(), (~torch.isfinite(values)).any()]).tolist()
        if bad[0] or bad[1]:
            what = "features" if bad[0] else f"target {target!r}"
            raise ValueError(f"the {split} split of {data.name!r} holds NaN or infinite {what}")
        self.data, self.window, self.horizon, self.target, self.split = data, window, horizon, target, split
        self.normalizer = normalizer or Normalizer.from_train(values, window, horizon)
        self.values = values
        self.y = (values - self.normalizer.mean) / self.normalizer.std  # [T] f32, normalised
        self.num_windows = n - window - horizon + 1
        self.ends = torch.arange(window - 1, n - horizon, device=data.device)  # [N] last row of each window
        self._x = data.features.unfold(0, window, 1).transpose(
            1, 2
        )  # [T - W + 1, W, F] view, row i: i..i+W-1
        self._y = self.y.unfold(0, horizon, 1)  # [T - H + 1, H] view, row i: i..i+H-1

    @property
    def dtype(self) -> torch.dtype:
        """The inputs' dtype (the training dtype the features were uploaded in)."""
        return self.data.features.dtype

    @property
    def device(self) -> torch.device:
        """Where the windows live."""
        return self.data.device

    @property
    def num_features(self) -> int:
        """``F``."""
        return int(self.data.features.shape[1])

    def __len__(self) -> int:
        return self.num_windows

    def batch(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Windows ``idx`` (``[B]`` int64 window numbers): ``(x [B, W, F]`` features dtype, ``y
        [B, H, 1]`` f32 normalised); one gather each."""
        end = self.ends[idx]
        return self._x[end - (self.window - 1)], self._y[end + 1].unsqueeze(-1)

    def naive(self, idx: torch.Tensor) -> torch.Tensor:
        """The no-change forecast ``[B, H, 1]`` f32 (normalised): a zero change, or the last value."""
        if self.target in CHANGE_TARGETS:
            zero = -self.normalizer.mean / self.normalizer.std
            return torch.full((idx.shape[0], self.horizon, 1), zero, device=self.device)
        return self.y[self.ends[idx]][:, None, None].expand(-1, self.horizon, 1)

    def seasonal_naive(self, idx: torch.Tensor, season: int) -> torch.Tensor:
        """Each step ``h`` forecast by the value ``season * ceil(h / season)`` rows before it, the
        most recent observed value one season back; ``[B, H, 1]`` f32 normalised.

        Raises:
            ValueError: ``season`` outside ``1 .. W`` (the window's rows are what is observed).
        """
        if not 1 <= season <= self.window:
            raise ValueError(f"season={season} must lie between 1 and the window {self.window}")
        h = torch.arange(1, self.horizon + 1, device=self.device)
        back = h - season * torch.div(h + season - 1, season, rounding_mode="floor")  # <= 0
        return self.y[self.ends[idx][:, None] + back[None, :]].unsqueeze(-1)

    def train_mean(self, idx: torch.Tensor) -> torch.Tensor:
        """The training mean (0 once normalised), ``[B, H, 1]`` f32."""
        return torch.zeros(idx.shape[0], self.horizon, 1, device=self.device)


def load_windows(
    source: Any,
    window: int,
    horizon: int = 1,
    *,
    target: str = "log_return",
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
    fractions: tuple[float, float, float] = (0.7, 0.15, 0.15),
) -> tuple[WindowData, WindowData, WindowData]:
    """Train, validation and test windows of a bar source (a ``market:`` spec string or
    :class:`~tritonrl.toolkit.envs.market.Bars`): upload once, split by time, normalise on train.

    Raises:
        ValueError: a bad source, target, sizes, or data (from the source, :func:`split` or
            :class:`WindowData`).
    """
    from tritonrl.toolkit.envs.market import compute_features, source_bars, split, upload

    bars = source_bars(source) if isinstance(source, str) else source
    if window < 1 or horizon < 1:
        raise ValueError(f"window={window} and horizon={horizon} must be >= 1")
    if len(bars) < window + horizon + 2:
        raise ValueError(
            f"{bars.name!r} has {len(bars)} bars, too few for window + horizon = {window} + {horizon} "
            "in each of three splits"
        )
    data = upload(bars, device, dtype=dtype)
    host = None if target in ("log_return", "close") else compute_features(bars)
    values = target_series(data, target, host)
    parts = split(data, window, fractions)
    out: list[WindowData] = []
    for label, part in zip(("train", "validation", "test"), parts, strict=True):
        vals = values[part.offset : part.offset + len(part)]
        norm = out[0].normalizer if out else None
        out.append(
            WindowData(part, window, horizon, target=target, values=vals, normalizer=norm, split=label)
        )
    return out[0], out[1], out[2]


# ----------------------------------------------------------------------------- metrics and baselines


def _sums(pred: torch.Tensor, y: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """``[3]`` f32 sums of squared error, absolute error and direction score (see the module doc)."""
    err = pred - y
    hit = 0.5 * (1.0 + torch.sign(pred - ref) * torch.sign(y - ref))
    return torch.stack([(err * err).sum(), err.abs().sum(), hit.sum()])


def _even_slice(n: int, rank: int, world: int) -> tuple[int, int]:
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
    total = torch.zeros(3, device=data.device, dtype=torch.float64)
    lo, hi = 0, len(data)
    if dist is not None and dist.enabled:  # this rank's contiguous share of the windows
        lo, hi = _even_slice(len(data), dist.rank, dist.world_size)
    for start in range(lo, hi, batch):
        idx = torch.arange(start, min(start + batch, hi), device=data.device)
        x, y = data.batch(idx)
        total += _sums(forecast(idx, x), y, data.naive(idx)).double()
    if dist is not None and dist.enabled:
        dist.all_reduce_sum_(total)  # the global sums (f64) ...
        dist.broadcast_tensors_([total])  # ... with rank 0's bits on every rank: same decisions
    count = len(data) * data.horizon
    mse, mae, hit = (v / count for v in total.tolist())  # the one host read
    return {"mse": mse, "mae": mae, "direction": hit}


@torch.no_grad()
def evaluate(
    model: torch.nn.Module, data: WindowData, *, batch: int = 1024, dist: DistContext | None = None
) -> dict[str, float]:
    """MSE, MAE (normalised units) and directional accuracy of ``model`` over every window of ``data``.

    The forecast is upcast to f32 once; one host read at the end. The model is put in eval mode
    and back in the mode it was in. With a data-parallel ``dist`` (every rank calls it, with the
    same model) each rank forecasts a contiguous share of the windows and the f64 sums are
    all-reduced: the exact global means (sum over every window / count), equal on every rank.
    ``None``: this process alone evaluates every window.
    """
    was = model.training
    model.eval()
    try:
        return _metrics(data, lambda idx, x: model(x).float(), batch, dist)
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


# ----------------------------------------------------------------------------- the trainer


SCHEDULES = ("cosine", "linear", "constant")


@dataclass(frozen=True)
class FitConfig(Config):
    """How :func:`fit` trains (every field is fixed for a resumed run; see ``fit``)."""

    epochs: int = 20
    """Passes over the training windows (at most)."""
    batch_size: int = 64
    """Windows per step."""
    lr: float = 1e-3
    """Peak AdamW learning rate."""
    weight_decay: float = 1e-2
    """AdamW's decoupled weight decay."""
    grad_clip: float = 1.0
    """Global gradient-norm clip (on the f32 master gradients); 0: none."""
    schedule: str = "cosine"
    """After the warm-up: ``cosine`` or ``linear`` decay to ``min_lr_fraction * lr``, or ``constant``."""
    warmup_steps: int = 100
    """Steps of linear warm-up from ``lr / warmup_steps`` to ``lr``."""
    min_lr_fraction: float = 0.1
    """Where the decay ends, as a fraction of ``lr``."""
    patience: int = 5
    """Stop after this many epochs without a validation MSE below the best minus ``min_delta``."""
    min_delta: float = 0.0
    """The improvement that counts (normalised MSE units)."""
    seed: int = 0
    """Seeds the global RNGs (dropout) and each epoch's shuffle."""
    log_every: int = 50
    """Steps between metric rows (each epoch's end writes one too)."""
    eval_batch: int = 1024
    """Windows per evaluation batch."""
    season: int = 5
    """The seasonal-naive baseline's season in bars (5: a week of daily bars; 24: a day of hourly);
    a season longer than the window is cut to the window (the report's ``season`` says which)."""

    def __post_init__(self) -> None:
        for name, lo in (("epochs", 1), ("batch_size", 1), ("warmup_steps", 0), ("patience", 1)):
            _check_int(name, getattr(self, name), lo)
        for name, lo in (("log_every", 1), ("eval_batch", 1), ("season", 1), ("seed", 0)):
            _check_int(name, getattr(self, name), lo)
        for name in ("lr", "weight_decay", "grad_clip", "min_lr_fraction", "min_delta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
            if value < 0 or (name == "lr" and value == 0):
                raise ValueError(f"{name} must be {'> 0' if name == 'lr' else '>= 0'}, got {value!r}")
        if self.min_lr_fraction > 1:
            raise ValueError(f"min_lr_fraction must be <= 1, got {self.min_lr_fraction}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")


def _check_int(name: str, value: Any, lo: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ValueError(f"{name} must be an int >= {lo}, got {value!r}")


def lr_at(config: FitConfig, step: int, total_steps: int) -> float:
    """The learning rate of step ``step`` (0-based) of ``total_steps``: linear warm-up, then the
    schedule's decay from ``lr`` to ``min_lr_fraction * lr`` at the last step."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    if config.schedule == "constant":
        return config.lr
    p = min(max((step - config.warmup_steps) / max(total_steps - 1 - config.warmup_steps, 1), 0.0), 1.0)
    shape = 0.5 * (1.0 + math.cos(math.pi * p)) if config.schedule == "cosine" else 1.0 - p
    floor = config.min_lr_fraction
    return config.lr * (floor + (1.0 - floor) * shape)


def _permutation(seed: int, epoch: int, n: int, device: torch.device) -> torch.Tensor:
    """The training windows' order in ``epoch``: a function of ``(seed, epoch)`` alone (so a resumed
    run draws the same one)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=g).to(device)


def _seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - the legacy global generator is the one to seed
    random.seed(seed)


def _meta(model: torch.nn.Module, train: WindowData, extra: Mapping[str, str] | None) -> dict[str, str]:
    meta = {
        "model": str(getattr(model, "name", type(model).__name__)),
        "model_class": f"{type(model).__module__}.{type(model).__qualname__}",
        "window": str(train.window),
        "horizon": str(train.horizon),
        "num_features": str(train.num_features),
        "target": train.target,
        "data": str(train.data.name),
    }
    meta.update({str(k): str(v) for k, v in (extra or {}).items()})
    return meta


def _check_model(model: torch.nn.Module, train: WindowData, *others: WindowData) -> torch.dtype:
    params = list(model.parameters())
    if not params:
        raise ValueError(f"{type(model).__name__} has no parameters to train")
    dtype = params[0].dtype
    for what, want in (
        ("window", train.window),
        ("horizon", train.horizon),
        ("num_features", train.num_features),
    ):
        have = getattr(model, what, want)
        if have != want:
            raise ValueError(f"the model's {what} is {have}, the data's {want}")
    if getattr(model, "num_targets", 1) != 1:
        raise ValueError(f"the model forecasts {model.num_targets} targets; the windows hold 1")
    for data in (train, *others):
        if data.dtype != dtype:
            raise TypeError(
                f"the {data.split} windows are {data.dtype}, the model's parameters {dtype}: upload the "
                "features in the training dtype (one cast) or build the model with dtype="
            )
        if (data.window, data.horizon, data.target) != (train.window, train.horizon, train.target):
            raise ValueError(
                f"the {data.split} windows differ from the train windows in window, horizon or target"
            )
        if data.normalizer != train.normalizer:
            raise ValueError(f"the {data.split} windows are not normalised with the train split's normalizer")
    return dtype


def fit(
    model: torch.nn.Module,
    train: WindowData,
    validation: WindowData,
    test: WindowData,
    config: FitConfig | None = None,
    *,
    run_dir: str | Path | None = None,
    resume: bool = False,
    progress: bool = False,
    tensorboard: bool = True,
    should_stop: Callable[[], bool] | None = None,
    meta: Mapping[str, str] | None = None,
    dist: DistContext | None = None,
) -> dict[str, Any]:
    """Train ``model`` (a forecaster ``[B, W, F] -> [B, H, 1]``) on ``train``; report on ``test``.

    Args:
        model: its parameters in the windows' dtype (bf16 ones are trained through f32 masters).
        train: the training windows, from :func:`load_windows`.
        validation: the validation windows (normalised with the train split's :class:`Normalizer`).
        test: the test windows (normalised the same way).
        config: :class:`FitConfig` (default ``FitConfig()``).
        run_dir: where ``metrics.csv``, TensorBoard files, ``checkpoint.safetensors`` and
            ``fit_report.json`` go (held with a lock for the run); ``None``: nothing is written.
        resume: continue from ``run_dir``'s checkpoint exactly (its config, data identity and
            model must match); without one, start fresh. Without ``resume`` an existing
            checkpoint is an error, never overwritten.
        progress: draw a progress bar on stderr.
        tensorboard: also write TensorBoard scalars.
        should_stop: polled at each metric flush; ``True`` saves a checkpoint and returns
            (``stopped == "should_stop"``).
        meta: extra identity strings stored in the checkpoint and compared on resume.
        dist: the data-parallel context (``None``: :func:`tritonrl.toolkit.distributed.current`,
            a single process unless :func:`~tritonrl.toolkit.distributed.init_distributed` joined
            a group). With several ranks every rank calls ``fit`` with the same arguments and
            data (see **Data-parallel** in the module docstring).

    Returns:
        the report: ``stopped`` (``"epochs"``, ``"early"`` or ``"should_stop"``), ``global_step``,
        ``epochs`` run, ``best_epoch``, ``best_val_mse``, ``wall_s`` (this call's loop),
        ``train_s`` (its training steps alone), ``windows_per_s`` (training windows of every
        rank / ``train_s``), ``normalizer``, ``test`` and ``validation`` (``{"model": metrics,
        baseline: metrics}``, absent when stopped by ``should_stop``) and ``checkpoint`` (a path
        or ``None``). Every rank returns the same report but for the timings.

    Raises:
        ValueError / TypeError: sizes, dtypes or normalisers that do not fit, an existing
            checkpoint without ``resume``, a checkpoint of another run.
        FitError: a non-finite loss or validation MSE (nothing saved after it).
        RunFolderBusy: another process trains in ``run_dir``.
        CheckpointError: a damaged checkpoint.
        DistributedError: (several ranks) ``batch_size`` not divisible by the world size, or
            the ranks' configurations, data or ``run_dir`` differ. Errors met by rank 0 alone
            (the run folder, the checkpoint file) are raised on every rank.
    """
    from tritonrl.toolkit.checkpoint import (
        CheckpointError,
        capture_rng_state,
        load_checkpoint,
        load_into_module,
        remove_stale_temps,
        restore_rng_state,
        save_checkpoint,
        section,
    )
    from tritonrl.toolkit.config import fixed_changes, format_change
    from tritonrl.toolkit.logger import MetricLogger, ProgressBar, repair_csv
    from tritonrl.toolkit.optim import MasterWeightOptimizer
    from tritonrl.toolkit.runfolder import RunLock, move_aside

    ctx = dist if dist is not None else distributed.current()
    config = config or FitConfig()
    _check_model(model, train, validation, test)
    ident = _meta(model, train, meta)
    if ctx.enabled:
        ctx.check_same(
            "the fit configuration, data or run folder",
            {
                "config": config.to_dict(),
                "meta": ident,
                "windows": [len(train), len(validation), len(test)],
                "normalizer": train.normalizer.to_dict(),
                "run_dir": None if run_dir is None else str(run_dir),
                "resume": resume,
            },
        )
        ctx.shard(config.batch_size, "batch_size")  # DistributedError unless it splits evenly
    writes = ctx.is_main  # rank 0 alone writes the run folder, prints and draws the bar
    folder = Path(run_dir) if run_dir is not None else None
    ckpt = folder / CHECKPOINT_NAME if folder is not None else None
    _seed_everything(config.seed)
    if ctx.rank:  # each rank its own dropout stream; rank 0's is the single process's
        torch.manual_seed(_rank_seed(config.seed, ctx.rank))
    ctx.broadcast_tensors_(list(model.state_dict().values()))  # rank 0's weights, before the masters
    # data-parallel: the optimizer averages the ranks' f32 gradients (the global batch's gradient)
    # before clipping and stepping (a no-op in a single process)
    opt = MasterWeightOptimizer(
        model.parameters(), torch.optim.AdamW, lr=config.lr, weight_decay=config.weight_decay, dist=ctx
    )
    steps_per_epoch = math.ceil(len(train) / config.batch_size)
    total_steps = config.epochs * steps_per_epoch
    loop: dict[str, Any] = {
        "global_step": 0,
        "epoch": 0,
        "batch": 0,
        "best_val": math.inf,
        "best_epoch": -1,
        "bad_epochs": 0,
    }
    best: dict[str, torch.Tensor] | None = None

    def open_run() -> tuple[RunLock | None, dict | None]:
        """Rank 0: refuse an overwrite, lock the folder, read its checkpoint or clear old files."""
        if ckpt is not None and ckpt.exists() and not resume:
            raise ValueError(
                f"{folder} already holds a checkpoint: pass resume=True (--resume), or use another folder"
            )
        held = RunLock(folder).acquire() if folder is not None else None
        try:
            if ckpt is not None and ckpt.exists():
                remove_stale_temps(ckpt)
                # several ranks: read on the host, sent to every rank, loaded onto each one's device
                saved = load_checkpoint(ckpt, device="cpu" if ctx.enabled else train.device)
                if not isinstance(saved, dict) or saved.get("format") != FIT_FORMAT:
                    raise CheckpointError(
                        f"{ckpt}: not a forecaster training checkpoint (format {FIT_FORMAT!r})"
                    )
                return held, saved
            if folder is not None:
                if resume:
                    print(f"notice: no checkpoint in {folder} to resume: starting a new run", file=sys.stderr)
                stale = move_aside(folder, (*_RUN_FILES, REPORT_NAME))
                if stale is not None:
                    print(f"notice: {folder} held an earlier run's files: moved to {stale}", file=sys.stderr)
            return held, None
        except BaseException:
            if held is not None:
                held.release()
            raise

    lock, state = _on_rank0(ctx, open_run)
    logger = None
    try:
        if state is not None:
            where = str(ckpt)
            saved_meta = section(state, "meta", where, "the run identity section")
            for key, value in ident.items():
                if saved_meta.get(key) != value:
                    raise ValueError(
                        f"{where} was made with {key}={saved_meta.get(key)!r}, this run has {value!r}"
                    )
            saved_cfg = FitConfig.from_dict(section(state, "config", where, "the fit config section"))
            changed = fixed_changes(saved_cfg, config)
            if changed:
                listed = ", ".join(format_change(k, *v) for k, v in changed.items())
                raise ValueError(f"resume cannot change {listed}: start a new run")
            load_into_module(
                model, section(state, "model", where, "the model section"), where=f"{where} (model)"
            )
            try:
                opt.load_state_dict(section(state, "optimizer", where, "the optimizer section"))
            except ValueError as exc:
                raise CheckpointError(f"{where}: the optimizer section does not fit ({exc})") from None
            saved_loop = section(state, "loop", where, "the loop counters section")
            for key in loop:
                section(saved_loop, key, where, f"the loop counter {key!r}")
            loop.update({k: saved_loop[k] for k in loop})
            saved_best = section(state, "best", where, "the best weights section")
            if saved_best:
                best = {k: v.detach().clone() for k, v in model.state_dict().items()}
                scratch = _Holder(best)
                load_into_module(scratch, saved_best, where=f"{where} (best weights)")
            _restore_rngs(ctx, state, where, config.seed, loop["global_step"], restore_rng_state)
            if writes:
                repair_csv(Path(where).parent / "metrics.csv", loop["global_step"])
        if folder is not None and writes:
            purge = loop["global_step"] + 1 if loop["global_step"] else None
            logger = MetricLogger(folder, tensorboard=tensorboard, purge_step=purge)

        def save() -> None:
            if ckpt is None:
                return
            rngs = ctx.all_gather_objects(capture_rng_state()) if ctx.enabled else None
            if not writes:
                return
            payload: dict[str, Any] = {
                "format": FIT_FORMAT,
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                "best": best or {},
                "loop": dict(loop),
                "rng": capture_rng_state(),
                "meta": ident,
                "config": config.to_dict(),
            }
            if rngs is not None:
                payload["ranks"] = {"world_size": ctx.world_size, "rng": rngs}
            save_checkpoint(ckpt, payload)

        def stop_asked() -> bool:
            asked = should_stop is not None and should_stop()
            return ctx.any(asked) if ctx.enabled else asked  # every rank stops at the same step

        pending: dict[str, Any] = {}

        def flush(step: int, extra: Mapping[str, float] | None = None) -> dict[str, float]:
            """Write the interval's means (one host read); raise on a non-finite loss."""
            nonlocal pending
            if ctx.enabled and "losses/train_mse" in pending:
                # each rank's sum of weighted shard losses -> the sum of the global batch losses
                ctx.all_reduce_mean_([pending["losses/train_mse"][0]])
            means = _means(pending)
            pending = {}
            means.update(extra or {})
            bad = [k for k in ("losses/train_mse", "val/mse") if k in means and not math.isfinite(means[k])]
            if bad:
                raise FitError(
                    f"non-finite {bad[0]} at step {step}: stopped; the last checkpoint stays "
                    "(lower the learning rate or check the data)"
                )
            if logger is not None and means:
                logger.log(step, means)
                logger.flush(step)
            return means

        bar = ProgressBar(total_steps, initial=loop["global_step"], enabled=progress and writes)
        model.train()
        stopped = None
        windows, train_s = 0, 0.0
        t0 = time.perf_counter()
        while stopped is None and loop["epoch"] < config.epochs:
            perm = _permutation(config.seed, loop["epoch"], len(train), train.device)
            t_epoch = time.perf_counter()
            while loop["batch"] < steps_per_epoch:
                k = loop["batch"]
                idx = perm[k * config.batch_size : (k + 1) * config.batch_size]
                mine, weight = _rank_share(idx, ctx)
                x, y = train.batch(mine)
                lr = lr_at(config, loop["global_step"], total_steps)
                opt.set_lr(lr)
                loss = torch.nn.functional.mse_loss(model(x).float(), y)  # the one upcast: f32 loss
                if weight != 1.0:  # a short last batch over several ranks (see _rank_share)
                    loss = loss * weight
                opt.zero_grad()
                loss.backward()
                norm = opt.clip_grad_norm_(config.grad_clip) if config.grad_clip > 0 else None
                opt.step()
                loop["global_step"] += 1
                loop["batch"] += 1
                windows += int(idx.shape[0])
                _add(pending, "losses/train_mse", loss.detach())
                if norm is not None:
                    _add(pending, "losses/grad_norm", norm)
                _add(pending, "charts/lr", lr)
                if loop["global_step"] % config.log_every == 0 and loop["batch"] < steps_per_epoch:
                    flush(loop["global_step"])
                    bar.update(loop["global_step"])
                    if stop_asked():
                        save()
                        stopped = "should_stop"
                        break
            if train.device.type == "cuda":  # the steps' time, not the evaluation's: one sync an epoch
                torch.cuda.synchronize(train.device)
            train_s += time.perf_counter() - t_epoch
            if stopped is not None:
                break
            val = evaluate(model, validation, batch=config.eval_batch, dist=ctx)
            loop["epoch"] += 1
            loop["batch"] = 0
            flush(
                loop["global_step"],
                {
                    "val/mse": val["mse"],
                    "val/mae": val["mae"],
                    "val/direction": val["direction"],
                    "charts/epoch": loop["epoch"],
                },
            )
            if val["mse"] < loop["best_val"] - config.min_delta:
                loop.update(best_val=val["mse"], best_epoch=loop["epoch"], bad_epochs=0)
                best = {k: v.detach().clone() for k, v in model.state_dict().items()}
            else:
                loop["bad_epochs"] += 1
            save()
            bar.update(loop["global_step"], f"epoch {loop['epoch']} val_mse {val['mse']:.4f}")
            if loop["bad_epochs"] >= config.patience:
                stopped = "early"
            elif stop_asked():
                stopped = "should_stop"
        bar.close()
        wall = time.perf_counter() - t0
        report: dict[str, Any] = {
            "stopped": stopped or "epochs",
            "global_step": loop["global_step"],
            "epochs": loop["epoch"],
            "best_epoch": loop["best_epoch"],
            "best_val_mse": loop["best_val"],
            "wall_s": wall,
            "train_s": train_s,
            "windows_per_s": windows / train_s if train_s > 0 else float("nan"),
            "target": train.target,
            "normalizer": train.normalizer.to_dict(),
            "checkpoint": str(ckpt) if ckpt is not None else None,
        }
        if stopped == "should_stop":
            return report
        if best is not None:
            load_into_module(model, best, where="best weights")
        for name, data in (("validation", validation), ("test", test)):
            report[name] = {"model": evaluate(model, data, batch=config.eval_batch, dist=ctx)}
            report[name].update(baselines(data, season=min(config.season, data.window)))
        report["season"] = min(config.season, train.window)
        if folder is not None and writes:
            from tritonrl.toolkit.checkpoint import atomic_write_bytes

            atomic_write_bytes(folder / REPORT_NAME, json.dumps({**report, "meta": ident}, indent=2).encode())
        return report
    finally:
        if logger is not None:
            logger.close()
        if lock is not None:
            lock.release()


def _rank_share(idx: torch.Tensor, ctx: DistContext) -> tuple[torch.Tensor, float]:
    """This rank's windows of the global batch ``idx`` and the weight of its mean loss.

    Every rank takes a contiguous share of ``idx``, split as evenly as possible. The weight
    ``n_r * world / b`` (``n_r`` of the batch's ``b`` windows) makes the mean over ranks of the
    weighted shard means equal the batch's mean loss, so the averaged gradient is the single
    process's gradient of that batch. A full batch splits evenly (``batch_size`` is a multiple of
    the world size): weight 1. A rank left without a window (a last batch shorter than the
    world) forecasts the batch's first window with weight 0: the same graph as the others (the
    same gradients exist), contributing exact zeros.
    """
    if not ctx.enabled:
        return idx, 1.0
    b = int(idx.shape[0])
    start, stop = _even_slice(b, ctx.rank, ctx.world_size)
    if stop == start:
        return idx[:1], 0.0
    n = stop - start
    return idx[start:stop], 1.0 if n * ctx.world_size == b else n * ctx.world_size / b


def _on_rank0(ctx: DistContext, fn: Callable[[], tuple[Any, Any]]) -> tuple[Any, Any]:
    """``fn()`` (``(local, shared)``) on rank 0 alone; every rank gets ``(local or None, shared)``,
    or raises rank 0's error (the same class and message), so no rank waits for a rank that
    stopped."""
    if not ctx.enabled:
        return fn()
    local, shared, failure = None, None, None
    if ctx.is_main:
        try:
            local, shared = fn()
        except Exception as exc:  # raised below on every rank
            failure = exc
    sent = ctx.broadcast_object((shared, None if failure is None else (type(failure), str(failure))))
    if failure is not None:
        raise failure
    if sent[1] is not None:
        cls, message = sent[1]
        try:
            error = cls(message)
        except Exception:
            error = distributed.DistributedError(f"rank 0: {message}")
        raise error
    return local, sent[0]


def _rank_seed(seed: int, rank: int, step: int = 0) -> int:
    """The torch seed of rank ``rank > 0`` (its dropout stream): ``SeedSequence((seed, rank,
    step))``'s first 63-bit word (``step``: the global step of a resume that starts it fresh)."""
    word = np.random.SeedSequence([seed, rank, step]).generate_state(1, np.uint64)[0]
    return int(word) >> 1


def _restore_rngs(
    ctx: DistContext,
    state: Mapping[str, Any],
    where: str,
    seed: int,
    step: int,
    restore: Callable[..., None],
) -> None:
    """Put back this rank's RNG states from a checkpoint: its own on the world size that saved
    them (``ranks.rng[rank]``); rank 0's ``rng`` on rank 0 otherwise, and a fresh
    :func:`_rank_seed` stream on the other ranks (one notice)."""
    from tritonrl.toolkit.checkpoint import CheckpointError

    ranks = state.get("ranks")
    if ctx.enabled and isinstance(ranks, Mapping) and ranks.get("world_size") == ctx.world_size:
        saved = ranks.get("rng")
        if not isinstance(saved, list) or len(saved) != ctx.world_size:
            raise CheckpointError(f"{where}: the per-rank RNG states are not a list of {ctx.world_size}")
        restore(saved[ctx.rank], where=f"{where} (rng of rank {ctx.rank})")
        return
    from tritonrl.toolkit.checkpoint import section

    restore(section(state, "rng", where), where=f"{where} (rng)")
    if ctx.enabled:
        had = ranks.get("world_size", 1) if isinstance(ranks, Mapping) else 1
        if ctx.rank:
            torch.manual_seed(_rank_seed(seed, ctx.rank, step))
        elif had != ctx.world_size:
            print(
                f"notice: {where} was written by {had} process(es), this run has {ctx.world_size}: "
                "ranks other than 0 start fresh dropout streams",
                file=sys.stderr,
            )


_RUN_FILES = ("metrics.csv", "checkpoint.safetensors", "events.out.tfevents.*")


class _Holder(torch.nn.Module):
    """A module whose state dict is ``tensors`` (to load the best weights with the same checks)."""

    def __init__(self, tensors: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self._tensors = tensors

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:  # type: ignore[override]
        return self._tensors


def _add(pending: dict[str, Any], name: str, value: torch.Tensor | float) -> None:
    total, n = pending.get(name, (0.0, 0))
    pending[name] = (total + value, n + 1)


def _means(pending: Mapping[str, Any]) -> dict[str, float]:
    """The interval means of ``pending`` (``name -> (sum, count)``), with one device read."""
    sums = [v[0] for v in pending.values()]
    on_device = [i for i, v in enumerate(sums) if isinstance(v, torch.Tensor)]
    if on_device:
        host = torch.stack([sums[i].float() for i in on_device]).cpu().tolist()
        for i, h in zip(on_device, host, strict=True):
            sums[i] = h
    return {name: float(total) / v[1] for (name, v), total in zip(pending.items(), sums, strict=True)}


def format_report(report: Mapping[str, Any], split: str = "test") -> str:
    """The report's ``split`` as a table: MSE, MAE (normalised units) and directional accuracy of
    the model and each baseline."""
    rows = report[split]
    lines = [
        f"{split} windows, target {report['target']} normalised by the train split (mean "
        f"{report['normalizer']['mean']:.4g}, std {report['normalizer']['std']:.4g}: MSE 1 = its variance)",
        f"{'forecast':<22} {'MSE':>9} {'MAE':>9} {'direction':>9}",
    ]
    for name, m in rows.items():
        label = f"{name} (s={report['season']})" if name == "seasonal_naive" else name
        lines.append(f"{label:<22} {m['mse']:>9.4f} {m['mae']:>9.4f} {m['direction']:>9.3f}")
    return "\n".join(lines)
