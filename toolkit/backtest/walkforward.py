"""Walk-forward evaluation: `fold_bounds` cuts K rolling train / validation / test periods in
time order, `evaluate_period` runs a policy and the four baselines over one test period with the
same costs, and `walk_forward` retrains per fold (through a callable the caller supplies) and
stitches the out-of-sample record. Imports envs and bars, never training or agents. See
docs/pages/portfolio.md."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from tritonrl.toolkit.backtest.baselines import Baseline, baselines
from tritonrl.toolkit.backtest.metrics import performance_summary
from tritonrl.toolkit.bars.paneldata import PanelData
from tritonrl.toolkit.envs.portfolio.env import PortfolioEnvConfig
from tritonrl.toolkit.envs.portfolio.evaluate import hold_policy, run_period, weights_policy

__all__ = ["Fold", "evaluate_period", "fold_bounds", "stitch", "walk_forward"]

Policy = Callable[[torch.Tensor], Any]
TrainFold = Callable[[int, PanelData, PanelData], Policy]
"""``train_fold(k, train, validation) -> greedy policy`` for fold ``k``."""


@dataclasses.dataclass(frozen=True)
class Fold:
    """Rows ``[start, stop)`` of the panel for each period of one fold (test and validation keep
    ``window - 1`` rows of warm-up before their first decision)."""

    index: int
    train: tuple[int, int]
    validation: tuple[int, int]
    test: tuple[int, int]


def fold_bounds(
    rows: int, folds: int, window: int, *, train: float = 0.5, validation: float = 0.1
) -> list[Fold]:
    """``folds`` rolling folds over ``rows`` bars: each trains on ``train * rows`` bars, validates
    on the next ``validation * rows``, and tests on the next of ``folds`` equal test blocks that
    tile the rest; fold ``k`` is fold 0 moved ``k`` test blocks later. A test period ends with the
    close the next one decides at, so the stitched returns have no gap.

    Raises:
        ValueError: ``folds < 1``, shares out of (0, 1) or summing to 1 or more, or a period
            shorter than ``window + 1`` rows.
    """
    if folds < 1 or not (0 < train < 1 and 0 < validation < 1 and train + validation < 1):
        raise ValueError(
            f"folds={folds}, train={train}, validation={validation}: need folds >= 1 and shares in (0, 1) "
            "summing below 1"
        )
    n_train, n_val = round(rows * train), round(rows * validation)
    block = (rows - n_train - n_val) // folds
    out = []
    for k in range(folds):
        a = k * block
        b, c = a + n_train, a + n_train + n_val
        d = c + block if k < folds - 1 else rows
        # a period's last row is only its final close: the next test period decides from it on
        fold = Fold(k, (a, b), (b - window + 1, c), (c - window + 1, min(d + 1, rows)))
        for label, (start, stop) in (
            ("train", fold.train),
            ("validation", fold.validation),
            ("test", fold.test),
        ):
            if stop - max(start, 0) < window + 1 or start < 0:
                raise ValueError(
                    f"fold {k}'s {label} period has {stop - max(start, 0)} rows, fewer than window + 1 = "
                    f"{window + 1} ({rows} rows, {folds} folds): fewer folds or a smaller window"
                )
        out.append(fold)
    return out


def _baseline_policy(b: Baseline, device: torch.device) -> Policy:
    return weights_policy(b.weights, device) if b.rebalance else hold_policy(b.weights, device)


def _records(
    policy: Policy,
    train: PanelData,
    test: PanelData,
    env_config: PortfolioEnvConfig,
    *,
    seed: int,
    strategy: str,
) -> dict[str, dict[str, Any]]:
    """``policy``'s `run_period` record over ``test``, then each baseline's (fitted on ``train``'s
    closes, acting with target weights under the same costs and fill)."""
    records = {strategy: run_period(policy, test, env_config, seed=seed)}
    as_weights = dataclasses.replace(env_config, actions="weights")
    for b in baselines(train.close.double().cpu().numpy()):
        records[b.name] = run_period(_baseline_policy(b, test.device), test, as_weights, seed=seed)
    return records


def evaluate_period(
    policy: Policy,
    train: PanelData,
    test: PanelData,
    env_config: PortfolioEnvConfig,
    *,
    seed: int = 0,
    trials: int = 1,
    strategy: str = "agent",
) -> dict[str, Any]:
    """``policy`` over ``test`` beside the baselines fitted on ``train``'s closes (same costs and
    fill; baselines act with target weights). The tear sheet's report: ``dates``, ``equity`` per
    name, the strategy's ``weights``, ``turnover`` and ``costs``, ``metrics`` per name."""
    records = _records(policy, train, test, env_config, seed=seed, strategy=strategy)
    return _report(records, strategy, test, env_config, trials=trials, folds=[])


def stitch(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Test-period records of consecutive folds as one: returns, weights, turnover and costs
    concatenated, equity compounded on from each fold's end, dates joined."""
    first = records[0]
    out = {k: first[k] for k in ("symbols", "periods_per_year")}
    out["log_returns"] = np.concatenate([r["log_returns"] for r in records])
    for key in ("weights", "turnover", "costs"):
        out[key] = np.concatenate([r[key] for r in records])
    out["equity"] = np.exp(np.concatenate(([0.0], np.cumsum(out["log_returns"]))))
    out["dates"] = list(first["dates"]) + [d for r in records[1:] for d in r["dates"][1:]]
    return out


def walk_forward(
    train_fold: TrainFold,
    data: PanelData,
    env_config: PortfolioEnvConfig,
    *,
    folds: int,
    train: float = 0.5,
    validation: float = 0.1,
    seed: int = 0,
    trials: int = 1,
    strategy: str = "agent",
    on_fold: Callable[[int, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Retrain per fold with ``train_fold``, test each fold's policy and the baselines (fitted on
    that fold's train period) on its test period, and stitch the out-of-sample records.

    Returns:
        the tear sheet's report over the stitched test periods, plus ``fold_reports`` (each
        fold's own report) and ``folds`` (the dates each test period starts).

    Raises:
        ValueError: as `fold_bounds`, or as the env.
    """
    bounds = fold_bounds(len(data), folds, env_config.window, train=train, validation=validation)
    per_name: dict[str, list[dict[str, Any]]] = {}
    fold_reports = []
    for fold in bounds:
        tr, va, te = (data.rows(*p) for p in (fold.train, fold.validation, fold.test))
        policy = train_fold(fold.index, tr, va)
        records = _records(policy, tr, te, env_config, seed=seed, strategy=strategy)
        for name, rec in records.items():
            per_name.setdefault(name, []).append(rec)
        fold_report = _report(records, strategy, te, env_config, trials=trials, folds=[])
        fold_reports.append(fold_report)
        if on_fold is not None:
            on_fold(fold.index, fold_report)
    stitched = {name: stitch(recs) for name, recs in per_name.items()}
    starts = [r["dates"][0] for r in per_name[strategy]]
    report = _report(stitched, strategy, data, env_config, trials=trials, folds=starts[1:])
    report["fold_reports"] = fold_reports
    report["fold_starts"] = starts
    return report


def _report(
    records: dict[str, dict[str, Any]],
    strategy: str,
    data: PanelData,
    env_config: PortfolioEnvConfig,
    *,
    trials: int,
    folds: list[str],
) -> dict[str, Any]:
    """The JSON-able report of the tear sheet from one record per name."""
    main = records[strategy]
    ppy = float(main["periods_per_year"])
    metrics = {}
    for name, rec in records.items():
        simple = np.expm1(rec["log_returns"])
        metrics[name] = performance_summary(
            simple,
            ppy,
            trials=trials if name == strategy else 1,
            turnover=float(rec["turnover"].mean()) / 2,  # one-way, as metrics.turnover counts it
            costs=rec["costs"],
        )
        metrics[name]["costs"] = float(rec["costs"].sum())
    return {
        "title": f"{strategy} on {data.name} ({main['dates'][0]} .. {main['dates'][-1]})",
        "strategy": strategy,
        "periods_per_year": ppy,
        "fill": env_config.fill,
        "env_config": env_config.to_dict(),
        "dates": list(main["dates"]),
        "equity": {name: rec["equity"].tolist() for name, rec in records.items()},
        "weights": main["weights"].tolist(),
        "symbols": list(main["symbols"]),
        "turnover": main["turnover"].tolist(),
        "costs": main["costs"].tolist(),
        "folds": folds,
        "metrics": metrics,
    }
