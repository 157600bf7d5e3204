"""Walk-forward folds, the stitched out-of-sample record and the period report beside the baselines."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

pytest.importorskip("gymnasium")  # the portfolio env is a gymnasium VectorEnv

from tritonrl.toolkit.backtest.walkforward import evaluate_period, fold_bounds, stitch, walk_forward
from tritonrl.toolkit.bars.panel_sources import synthetic_panel
from tritonrl.toolkit.bars.paneldata import upload_panel
from tritonrl.toolkit.envs.portfolio import PortfolioEnvConfig, run_period, weights_policy

W = 4


@pytest.fixture(scope="module")
def data():
    return upload_panel(synthetic_panel(400, assets=3, seed=5), dtype=torch.float32)


def test_folds_are_in_time_order_and_tile_the_test_span() -> None:
    folds = fold_bounds(1000, 4, W, train=0.5, validation=0.1)
    assert [f.index for f in folds] == [0, 1, 2, 3]
    for f in folds:
        # train, then validation, then test, each test/validation with W - 1 warm-up rows
        assert f.train[1] == f.validation[0] + W - 1
        assert f.validation[1] == f.test[0] + W - 1  # the test decides from the validation's end on
    # the test periods' returns tile rows 600 .. 999 without a gap or an overlap: a period's
    # last row (its final close) is the next one's first decision row
    firsts = [f.test[0] + W - 1 for f in folds]
    assert firsts[0] == 600
    assert all(f.test[1] - 1 == g.test[0] + W - 1 for f, g in zip(folds, folds[1:], strict=False))
    assert folds[-1].test[1] == 1000
    # fold k is fold 0 moved k test blocks later
    assert folds[1].train[0] - folds[0].train[0] == folds[0].test[1] - 1 - (folds[0].test[0] + W - 1)


@pytest.mark.parametrize(
    ("rows", "folds", "train", "validation"),
    [(100, 0, 0.5, 0.1), (100, 2, 0.0, 0.1), (100, 2, 0.6, 0.4), (20, 10, 0.5, 0.1)],
)
def test_bad_folds_are_one_line(rows: int, folds: int, train: float, validation: float) -> None:
    with pytest.raises(ValueError) as info:
        fold_bounds(rows, folds, W, train=train, validation=validation)
    assert "\n" not in str(info.value)


def test_stitch_compounds_the_folds(data) -> None:
    cfg = PortfolioEnvConfig(window=W, actions="weights", cost=1e-3)
    pol = weights_policy([0.0, 1 / 3, 1 / 3, 1 / 3])
    # a's last close (row 150) is b's first decision row: 150 - W + 1 + W - 1
    a, b = run_period(pol, data.rows(0, 151), cfg), run_period(pol, data.rows(150 - W + 1, 300), cfg)
    s = stitch([a, b])
    assert len(s["equity"]) == len(a["equity"]) + len(b["equity"]) - 1 == len(s["dates"])
    # equity compounds: the stitched end is the product of the folds' growths (f64: 1e-12)
    assert s["equity"][-1] == pytest.approx(a["equity"][-1] * b["equity"][-1], rel=1e-12)
    assert s["dates"][len(a["dates"]) - 1] == a["dates"][-1] == b["dates"][0]
    assert s["weights"].shape == (len(s["log_returns"]), 4)


def test_period_report_has_every_baseline_and_the_same_costs(data) -> None:
    cfg = PortfolioEnvConfig(window=W, actions="simplex", cost=1e-3)
    train, test = data.rows(0, 250), data.rows(250 - W + 1, 400)
    zeros = lambda obs: torch.zeros(obs.shape[0], 4)  # noqa: E731 (softmax(0): equal over cash and assets)
    report = evaluate_period(zeros, train, test, cfg, seed=0, trials=3)
    names = ["agent", "equal_weight", "buy_and_hold", "minimum_variance", "momentum"]
    assert list(report["equity"]) == names and list(report["metrics"]) == names
    for name in names:
        assert len(report["equity"][name]) == len(report["dates"]) == len(report["turnover"]) + 1
        assert report["equity"][name][0] == 1.0
    # equal weight rebalanced, run through the same env and costs, equals a direct run
    direct = run_period(
        weights_policy([0, 1 / 3, 1 / 3, 1 / 3]), test, dataclasses.replace(cfg, actions="weights")
    )
    np.testing.assert_allclose(report["equity"]["equal_weight"], direct["equity"], rtol=1e-12)
    # buy-and-hold trades once: the first step only
    assert report["metrics"]["buy_and_hold"]["costs"] == pytest.approx(1e-3 * 1.0, rel=1e-9)


def test_walk_forward_retrains_per_fold_and_reads_only_the_past(data) -> None:
    cfg = PortfolioEnvConfig(window=W, actions="weights", cost=1e-3)
    seen = []

    def train_fold(k, train, validation):
        seen.append((k, train.offset, len(train), validation.offset, len(validation)))
        w = torch.tensor([[0.0, 1.0, 0.0, 0.0]]) if k == 0 else torch.tensor([[0.0, 0.0, 0.0, 1.0]])
        return lambda obs: w

    report = walk_forward(train_fold, data, cfg, folds=3, train=0.5, validation=0.1, seed=0)
    assert [s[0] for s in seen] == [0, 1, 2]
    for k, tr_off, tr_len, va_off, va_len in seen:
        f = fold_bounds(len(data), 3, W)[k]
        assert (tr_off, tr_off + tr_len) == f.train and (va_off, va_off + va_len) == f.validation
    assert len(report["fold_reports"]) == 3 and len(report["folds"]) == 2
    # the stitched equity is the product of the folds' own
    growth = np.prod([r["equity"]["agent"][-1] for r in report["fold_reports"]])
    assert report["equity"]["agent"][-1] == pytest.approx(growth, rel=1e-12)
