"""The forecaster trainer `fit`: settings (`FitConfig`), the learning-rate schedule (`lr_at`), the
training steps, the checkpoint and the report's scores.

AdamW with f32 masters, f32 MSE, clipping, warm-up then cosine or linear decay, early stopping on
the validation MSE, exact resume; data-parallel under ``torchrun`` with the steps of one process.
The run folder's lifecycle is [`RunLifecycle`][tritonrl.toolkit.lifecycle.RunLifecycle], as the RL
loop's. See docs/pages/forecasting.md ("Training", "Data-parallel fit").
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tritonrl.kernels.validate import check_int, check_real
from tritonrl.toolkit import distributed
from tritonrl.toolkit.checkpoint import CheckpointError, load_checkpoint
from tritonrl.toolkit.config import Config, fixed_changes, format_change
from tritonrl.toolkit.distributed import DistContext, on_main
from tritonrl.toolkit.forecast.baselines import (
    Scores,
    baselines_by_step,
    evaluate,
    evaluate_by_step,
    even_slice,
    horizon_steps,
)
from tritonrl.toolkit.forecast.windows import TARGET_MODES, WindowData, resolve_target_mode
from tritonrl.toolkit.lifecycle import (
    CHECKPOINT_NAME,
    RunLifecycle,
    crossed,
    first_nonfinite,
    seed_everything,
)
from tritonrl.toolkit.logger import ProgressBar
from tritonrl.toolkit.optim import MasterWeightOptimizer
from tritonrl.toolkit.runstate import capture_rng_state, load_into_module, restore_rng_state, section

__all__ = [
    "CHECKPOINT_NAME",
    "FIT_FORMAT",
    "REPORT_NAME",
    "SCHEDULES",
    "FitConfig",
    "FitError",
    "fit",
    "lr_at",
]

FIT_FORMAT = "tritonrl-fit"
"""``format`` entry of a forecaster training checkpoint: sections ``model``, ``optimizer``, ``best``,
``loop``, ``rng``, ``meta`` and ``config``."""
REPORT_NAME = "fit_report.json"
_RUN_FILES = ("metrics.csv", CHECKPOINT_NAME, "events.out.tfevents.*", REPORT_NAME)
"""What an earlier fit left in its folder (moved aside by a fresh run)."""


class FitError(RuntimeError):
    """Training stopped by an error (a non-finite loss, a failed write); the last checkpoint stays."""


SCHEDULES = ("cosine", "linear", "constant")


@dataclass(frozen=True)
class FitConfig(Config):
    """How `fit` trains (every field is fixed for a resumed run; see ``fit``)."""

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
    target_mode: str = "auto"
    """How the model's output is read (`TARGET_MODES`):
    ``level``, ``change`` (a level target fitted as the change from the window's last value, in
    units of the train split's change scale; reported in levels) or ``auto`` (``change`` for a
    level target with a change scale and a model that does not normalise its inputs, else
    ``level``). The loss and every metric are in the level's normalised units either way."""

    def __post_init__(self) -> None:
        """Raise ``ValueError`` at a field out of range (named first in the message)."""
        for name, low in (("epochs", 1), ("batch_size", 1), ("warmup_steps", 0), ("patience", 1)):
            check_int(name, getattr(self, name), low=low)
        for name, low in (("log_every", 1), ("eval_batch", 1), ("season", 1), ("seed", 0)):
            check_int(name, getattr(self, name), low=low)
        for name in ("lr", "weight_decay", "grad_clip", "min_lr_fraction", "min_delta"):
            check_real(name, getattr(self, name), positive=name == "lr")
        if self.min_lr_fraction > 1:
            raise ValueError(f"min_lr_fraction must be <= 1, got {self.min_lr_fraction}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if self.target_mode not in TARGET_MODES:
            raise ValueError(
                f"target_mode must be one of {', '.join(TARGET_MODES)}, got {self.target_mode!r}"
            )


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
    """The training windows' order in ``epoch``: a function of ``(seed, epoch)`` alone."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=g).to(device)


def _channels_text(channels: tuple[int, ...] | None) -> str:
    return "none" if channels is None else ",".join(str(c) for c in channels)


def _meta(
    model: torch.nn.Module, train: WindowData, mode: str, extra: Mapping[str, str] | None
) -> dict[str, str]:
    meta = {
        "model": str(getattr(model, "name", type(model).__name__)),
        "model_class": f"{type(model).__module__}.{type(model).__qualname__}",
        "window": str(train.window),
        "horizon": str(train.horizon),
        "num_features": str(train.num_features),
        "target": train.target,
        "target_channels": _channels_text(getattr(train, "target_channels", None)),
        "target_mode": mode,
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
    targets = getattr(train, "num_targets", 1)
    if getattr(model, "num_targets", 1) != targets:
        raise ValueError(f"the model forecasts {model.num_targets} targets; the windows hold {targets}")
    channels = getattr(train, "target_channels", None)
    have_channels = getattr(model, "target_channels", None)
    if channels is not None and have_channels is not None and tuple(have_channels) != tuple(channels):
        raise ValueError(
            f"the model reads the targets' history from input channels {tuple(have_channels)}, the "
            f"windows hold it in {tuple(channels)}: build it with target_channels={tuple(channels)}"
        )
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
        if getattr(data, "target_channels", None) != channels:
            raise ValueError(f"the {data.split} windows hold the targets in other input channels")
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
        train: windows from [`load_windows`][tritonrl.toolkit.forecast.load_windows]; ``validation`` and
            ``test`` are normalised with the train split's normaliser.
        run_dir: where ``metrics.csv``, TensorBoard files, ``checkpoint.safetensors`` and
            ``fit_report.json`` go (locked for the run); ``None``: nothing is written.
        resume: continue from ``run_dir``'s checkpoint exactly; without it an existing checkpoint
            is an error, never overwritten.
        should_stop: polled at each metric flush; ``True`` saves a checkpoint and returns.
        meta: extra identity strings stored in the checkpoint and compared on resume.
        dist: the data-parallel context (``None``:
            [`tritonrl.toolkit.distributed.current`][tritonrl.toolkit.distributed.current]); every rank calls
            ``fit`` with the same arguments and data.

    Returns:
        the report: ``stopped`` (``"epochs"``, ``"early"`` or ``"should_stop"``), ``global_step``,
        ``epochs``, ``best_epoch``, ``best_val_mse``, the timings, ``normalizer``, ``test`` and
        ``validation`` (``{"model": metrics, baseline: metrics}``), ``horizons`` (absent when
        stopped by ``should_stop``) and ``checkpoint`` (a path or ``None``).

    Raises:
        ValueError / TypeError: sizes, dtypes or normalisers that do not fit, an existing
            checkpoint without ``resume``, a checkpoint of another run.
        FitError: a non-finite loss or validation MSE.
        RunFolderBusy: another process trains in ``run_dir``.
        CheckpointError: a damaged checkpoint.
        DistributedError: ``batch_size`` not divisible by the world size, or ranks that differ.
    """
    ctx = dist if dist is not None else distributed.current()
    config = config or FitConfig()
    _check_model(model, train, validation, test)
    mode = resolve_target_mode(config.target_mode, train, bool(getattr(model, "normalizes_input", False)))
    ident = _meta(model, train, mode, meta)
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
    run = _Fit(model, (train, validation, test), config, ctx, ident, run_dir, mode)
    with run.life:
        run.start(resume, tensorboard)
        stopped = run.train(should_stop, progress)
        return run.report(stopped)


class _Fit:
    """One call of `fit`: `start`, `train`, `report`; the folder is `life`."""

    def __init__(
        self,
        model: torch.nn.Module,
        windows: tuple[WindowData, WindowData, WindowData],
        config: FitConfig,
        ctx: DistContext,
        ident: dict[str, str],
        run_dir: str | Path | None,
        mode: str = "level",
    ) -> None:
        self.model, self.config, self.ctx, self.ident, self.mode = model, config, ctx, ident, mode
        self.train_data, self.validation, self.test = windows
        self.life = RunLifecycle(run_dir, ctx, run_files=_RUN_FILES)
        seed_everything(config.seed)
        if ctx.rank:  # each rank its own dropout stream; rank 0's is the single process's
            torch.manual_seed(_rank_seed(config.seed, ctx.rank))
        ctx.broadcast_tensors_(list(model.state_dict().values()))  # rank 0's weights, before the masters
        # data-parallel: the optimizer averages the ranks' f32 gradients (the global batch's gradient)
        # before clipping and stepping (a no-op in a single process)
        self.opt = MasterWeightOptimizer(
            model.parameters(), torch.optim.AdamW, lr=config.lr, weight_decay=config.weight_decay, dist=ctx
        )
        self.steps_per_epoch = math.ceil(len(self.train_data) / config.batch_size)
        self.total_steps = config.epochs * self.steps_per_epoch
        self.loop: dict[str, Any] = {
            "global_step": 0,
            "epoch": 0,
            "batch": 0,
            "best_val": math.inf,
            "best_epoch": -1,
            "bad_epochs": 0,
        }
        self.best: dict[str, torch.Tensor] | None = None
        self.pending: dict[str, Any] = {}
        self.windows, self.train_s, self.wall = 0, 0.0, 0.0

    # -- start ---------------------------------------------------------------------------------------

    def start(self, resume: bool, tensorboard: bool) -> None:
        """Lock the folder, load its checkpoint or start fresh, open the logger."""
        life, folder = self.life, self.life.run_dir
        refusal = f"{folder} already holds a checkpoint: pass resume=True (--resume), or use another folder"
        resumed_step = None
        if life.begin(resume, refuse_overwrite=refusal):
            self._load(on_main(self.ctx, self._read))
            resumed_step = self.loop["global_step"]
            life.resumed(resumed_step)

        def fresh_notices(moved: Path | None) -> list[str]:
            lines = [f"no checkpoint in {folder} to resume: starting a new run"] if resume else []
            if moved is not None:
                lines.append(f"{folder} held an earlier run's files: moved to {moved}")
            return lines

        life.open(resumed_step, fresh_notices, tensorboard=tensorboard)

    def _read(self) -> dict[str, Any]:
        """Rank 0: the checkpoint (several ranks: on the host, sent to every rank)."""
        ckpt = self.life.ckpt_path
        assert ckpt is not None
        saved = load_checkpoint(ckpt, device="cpu" if self.ctx.enabled else self.train_data.device)
        if not isinstance(saved, dict) or saved.get("format") != FIT_FORMAT:
            raise CheckpointError(f"{ckpt}: not a forecaster training checkpoint (format {FIT_FORMAT!r})")
        return saved

    def _load(self, state: Mapping[str, Any]) -> None:
        """Check ``state`` against this run and load it.

        Raises:
            ValueError: another identity or configuration.
            CheckpointError: a damaged or foreign section.
        """
        model, loop = self.model, self.loop
        where = str(self.life.ckpt_path)
        saved_meta = section(state, "meta", where, "the run identity section")
        if "target_channels" not in saved_meta:
            raise ValueError(
                f"{where} predates target channels and target modes (written by an older tritonrl, "
                "whose forecasts may mean something else): start a new run in another folder"
            )
        for key, value in self.ident.items():
            if saved_meta.get(key) != value:
                raise ValueError(
                    f"{where} was made with {key}={saved_meta.get(key)!r}, this run has {value!r}"
                )
        saved_cfg = FitConfig.from_dict(section(state, "config", where, "the fit config section"))
        changed = fixed_changes(saved_cfg, self.config)
        if changed:
            listed = ", ".join(format_change(k, *v) for k, v in changed.items())
            raise ValueError(f"resume cannot change {listed}: start a new run")
        load_into_module(model, section(state, "model", where, "the model section"), where=f"{where} (model)")
        try:
            self.opt.load_state_dict(section(state, "optimizer", where, "the optimizer section"))
        except ValueError as exc:
            raise CheckpointError(f"{where}: the optimizer section does not fit ({exc})") from None
        saved_loop = section(state, "loop", where, "the loop counters section")
        for key in loop:
            section(saved_loop, key, where, f"the loop counter {key!r}")
        loop.update({k: saved_loop[k] for k in loop})
        saved_best = section(state, "best", where, "the best weights section")
        if saved_best:
            self.best = {k: v.detach().clone() for k, v in model.state_dict().items()}
            load_into_module(_Holder(self.best), saved_best, where=f"{where} (best weights)")
        _restore_rngs(self.ctx, state, where, self.config.seed, loop["global_step"], restore_rng_state)

    # -- the epochs ----------------------------------------------------------------------------------

    def train(self, should_stop: Callable[[], bool] | None, progress: bool) -> str | None:
        """Train until the last epoch, early stopping, or ``should_stop``; the reason."""
        loop, config = self.loop, self.config
        bar = ProgressBar(
            self.total_steps, initial=loop["global_step"], enabled=progress and self.ctx.is_main
        )
        self.model.train()
        stopped = None
        t0 = time.perf_counter()
        while stopped is None and loop["epoch"] < config.epochs:
            t_epoch = time.perf_counter()
            stopped = self._epoch_steps(should_stop, bar)
            if self.train_data.device.type == "cuda":  # the steps' time, not the evaluation's: one sync
                torch.cuda.synchronize(self.train_data.device)
            self.train_s += time.perf_counter() - t_epoch
            if stopped is not None:
                break
            val = self._end_of_epoch()
            bar.update(loop["global_step"], f"epoch {loop['epoch']} val_mse {val:.4f}")
            if loop["bad_epochs"] >= config.patience:
                stopped = "early"
            elif self.life.stop_requested(should_stop):
                stopped = "should_stop"
        bar.close()
        self.wall = time.perf_counter() - t0
        return stopped

    def _epoch_steps(self, should_stop: Callable[[], bool] | None, bar: ProgressBar) -> str | None:
        """The rest of this epoch's steps; ``"should_stop"`` when a flush found it asked (saved)."""
        loop, config, ctx, opt = self.loop, self.config, self.ctx, self.opt
        perm = _permutation(config.seed, loop["epoch"], len(self.train_data), self.train_data.device)
        while loop["batch"] < self.steps_per_epoch:
            k = loop["batch"]
            idx = perm[k * config.batch_size : (k + 1) * config.batch_size]
            mine, weight = _rank_share(idx, ctx)
            x, y = self.train_data.batch(mine)
            lr = lr_at(config, loop["global_step"], self.total_steps)
            opt.set_lr(lr)
            pred = self.model(x).float()  # the one upcast
            if self.mode != "level":  # the output is a change from the window's last value
                pred = self.train_data.decode(mine, pred, self.mode)
            loss = torch.nn.functional.mse_loss(pred, y)  # f32, in the level's normalised units
            if weight != 1.0:  # a short last batch over several ranks (see _rank_share)
                loss = loss * weight
            opt.zero_grad()
            loss.backward()
            norm = opt.clip_grad_norm_(config.grad_clip) if config.grad_clip > 0 else None
            opt.step()
            loop["global_step"] += 1
            loop["batch"] += 1
            self.windows += int(idx.shape[0])
            _add(self.pending, "losses/train_mse", loss.detach())
            if norm is not None:
                _add(self.pending, "losses/grad_norm", norm)
            _add(self.pending, "charts/lr", lr)
            step = loop["global_step"]
            if crossed(step - 1, step, config.log_every) and loop["batch"] < self.steps_per_epoch:
                self.flush(step)
                bar.update(step)
                if self.life.stop_requested(should_stop):
                    self.save()
                    return "should_stop"
        return None

    def _end_of_epoch(self) -> float:
        """Validate, flush the epoch's row, keep the best weights, save; the validation MSE."""
        loop, config = self.loop, self.config
        val = evaluate(
            self.model, self.validation, batch=config.eval_batch, dist=self.ctx, target_mode=self.mode
        )
        loop["epoch"] += 1
        loop["batch"] = 0
        row = {"val/mse": val["mse"], "val/mae": val["mae"], "val/direction": val["direction"]}
        self.flush(loop["global_step"], {**row, "charts/epoch": loop["epoch"]})
        if val["mse"] < loop["best_val"] - config.min_delta:
            loop.update(best_val=val["mse"], best_epoch=loop["epoch"], bad_epochs=0)
            self.best = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        else:
            loop["bad_epochs"] += 1
        self.save()
        return val["mse"]

    def flush(self, step: int, extra: Mapping[str, float] | None = None) -> dict[str, float]:
        """Write the interval's means (one host read); raise ``FitError`` on a non-finite loss first."""
        if self.ctx.enabled and "losses/train_mse" in self.pending:
            # each rank's sum of weighted shard losses -> the sum of the global batch losses
            self.ctx.all_reduce_mean_([self.pending["losses/train_mse"][0]])
        means = _means(self.pending)
        self.pending = {}
        means.update(extra or {})
        bad = first_nonfinite(means, _WATCHED.__contains__)
        if bad is not None:
            raise FitError(
                f"non-finite {bad} at step {step}: stopped; the last checkpoint stays "
                "(lower the learning rate or check the data)"
            )
        logger = self.life.logger
        if logger is not None and means:
            logger.log(step, means)
            self.life.flush(step)
        return means

    def save(self) -> None:
        """The checkpoint (every rank's RNG state gathered to rank 0, which writes); no folder: nothing."""
        if self.life.ckpt_path is None:
            return
        ctx = self.ctx
        rngs = ctx.all_gather_objects(capture_rng_state()) if ctx.enabled else None

        def state() -> dict[str, Any]:
            payload: dict[str, Any] = {
                "format": FIT_FORMAT,
                "model": self.model.state_dict(),
                "optimizer": self.opt.state_dict(),
                "best": self.best or {},
                "loop": dict(self.loop),
                "rng": capture_rng_state(),
                "meta": self.ident,
                "config": self.config.to_dict(),
            }
            if rngs is not None:
                payload["ranks"] = {"world_size": ctx.world_size, "rng": rngs}
            return payload

        self.life.save(self.loop["global_step"], state)

    # -- the report ----------------------------------------------------------------------------------

    def report(self, stopped: str | None) -> dict[str, Any]:
        """The report of `fit`, scored on the best weights and written to ``fit_report.json``."""
        loop, config, train = self.loop, self.config, self.train_data
        report: dict[str, Any] = {
            "stopped": stopped or "epochs",
            "global_step": loop["global_step"],
            "epochs": loop["epoch"],
            "best_epoch": loop["best_epoch"],
            "best_val_mse": loop["best_val"],
            "wall_s": self.wall,
            "train_s": self.train_s,
            "windows_per_s": self.windows / self.train_s if self.train_s > 0 else float("nan"),
            "target": train.target,
            "target_mode": self.mode,
            "target_channels": self.ident["target_channels"],
            "normalizer": train.normalizer.to_dict(),
            "checkpoint": str(self.life.ckpt_path) if self.life.ckpt_path is not None else None,
        }
        if stopped == "should_stop":
            return report
        if self.best is not None:
            load_into_module(self.model, self.best, where="best weights")
        steps = horizon_steps(train.horizon)
        report["horizons"] = {"steps": list(steps)}
        for name, data in (("validation", self.validation), ("test", self.test)):
            model_scores = evaluate_by_step(
                self.model, data, batch=config.eval_batch, dist=self.ctx, target_mode=self.mode
            )
            scores = {"model": model_scores}
            scores.update(baselines_by_step(data, season=min(config.season, data.window)))
            report[name] = {who: overall for who, (overall, _) in scores.items()}
            report["horizons"][name] = {who: _at_steps(s, steps) for who, s in scores.items()}
        report["season"] = min(config.season, train.window)
        self.life.write_report(REPORT_NAME, {**report, "meta": self.ident})
        return report


def _at_steps(scores: Scores, steps: tuple[int, ...]) -> dict[str, list[float]]:
    """The per-step MSE and MAE (and their original-unit twins) of ``scores`` at ``steps`` (1-based)."""
    by_step = scores[1]
    return {k: [by_step[k][h - 1] for h in steps] for k in by_step if k != "direction"}


_WATCHED = frozenset({"losses/train_mse", "val/mse"})
"""The metrics whose NaN or infinity stops a fit (the gradient norm follows the loss)."""


def _rank_share(idx: torch.Tensor, ctx: DistContext) -> tuple[torch.Tensor, float]:
    """This rank's contiguous share of the global batch ``idx`` and the weight ``n_r * world / b``
    of its mean loss, so the averaged gradient is the single process's. A rank left without a
    window forecasts the batch's first one with weight 0 (the same graph, exact zeros)."""
    if not ctx.enabled:
        return idx, 1.0
    b = int(idx.shape[0])
    start, stop = even_slice(b, ctx.rank, ctx.world_size)
    if stop == start:
        return idx[:1], 0.0
    n = stop - start
    return idx[start:stop], 1.0 if n * ctx.world_size == b else n * ctx.world_size / b


def _rank_seed(seed: int, rank: int, step: int = 0) -> int:
    """The torch seed of rank ``rank > 0``: ``SeedSequence((seed, rank, step))``'s first 63-bit word."""
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
    """Put back this rank's RNG states from a checkpoint (another world size: rank 0's on rank 0,
    fresh `_rank_seed` streams elsewhere)."""
    ranks = state.get("ranks")
    if ctx.enabled and isinstance(ranks, Mapping) and ranks.get("world_size") == ctx.world_size:
        saved = ranks.get("rng")
        if not isinstance(saved, list) or len(saved) != ctx.world_size:
            raise CheckpointError(f"{where}: the per-rank RNG states are not a list of {ctx.world_size}")
        restore(saved[ctx.rank], where=f"{where} (rng of rank {ctx.rank})")
        return
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
