"""PortfolioTrader against run_period: the same policy on the same bars, once as the backtest
(`upload_panel` + `PortfolioEnv`) and once fed bar by bar with the same warm-up history.

Exact comparisons: the trader computes the same numbers by the same operations (its observation is
`compute_features` over the same bars and the same one cast; its book is the env's `settle` in f64 on
the same prices), so actions, targets, weights, equity, turnover and costs agree bit for bit.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

gym = pytest.importorskip("gymnasium")

from tritonrl.toolkit.bars.panel import Panel, load_panel  # noqa: E402
from tritonrl.toolkit.bars.panel_sources import synthetic_panel  # noqa: E402
from tritonrl.toolkit.bars.paneldata import PANEL_FEATURES, split_panel, upload_panel  # noqa: E402
from tritonrl.toolkit.envs.portfolio import PortfolioEnvConfig, hold_policy, run_period  # noqa: E402
from tritonrl.toolkit.envs.portfolio.live import (  # noqa: E402
    PortfolioTrader,
    iter_panel,
    portfolio_from_sidecar,
    portfolio_sidecar,
    trade_columns,
)

FILLS = ("next_open", "next_close", "close")
COSTS = {"cost": 2e-3, "slippage_bps": 5.0, "fixed_fee": 50.0, "borrow_cost": 3e-4}
WIDTH = {"discrete": lambda n: n + 3, "long_short": lambda n: n}


@pytest.fixture(scope="module")
def panel() -> Panel:
    return synthetic_panel(150, assets=3, seed=2)


class Recorder:
    """A tiny seeded MLP ``obs -> action`` of an ``actions`` kind that records what it returned."""

    def __init__(self, kind: str, obs_dim: int, n: int, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        out = WIDTH.get(kind, lambda n: n + 1)(n)
        self.w1 = torch.randn(obs_dim, 16, generator=g) / obs_dim**0.5
        self.w2 = torch.randn(16, out, generator=g)
        self.kind, self.actions = kind, []

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        q = torch.tanh(obs.float() @ self.w1) @ self.w2
        action = q.argmax(-1) if self.kind == "discrete" else torch.tanh(q)
        self.actions.append(action.clone())
        return action


def both(panel: Panel, config: PortfolioEnvConfig, make_policy, **trader_kwargs):
    """run_period over the test period of ``panel`` and the trader over all of ``panel`` (the rows
    before the test period's first decision are the warm-up history)."""
    data = upload_panel(panel)
    _, _, test = split_panel(data, config.window)
    first, second = make_policy(), make_policy()
    record = run_period(first, test, config)
    trader = PortfolioTrader(
        second, config, panel.symbols, start=test.time[config.window - 1], **trader_kwargs
    )
    rows = trader.run(panel)
    return record, rows, first, second, trader


def assert_same(record, rows, first, second) -> None:
    steps = len(record["turnover"])
    assert len(rows) == steps + 1  # the last bar's decision awaits a bar that never came
    # exact: the same computation (see the module docstring)
    assert np.array_equal([r.equity for r in rows], record["equity"])
    assert np.array_equal(np.stack([r.weights for r in rows[1:]]), record["weights"])
    assert np.array_equal([r.turnover for r in rows[1:]], record["turnover"])
    assert np.array_equal([r.cost for r in rows[1:]], record["costs"])
    assert len(second.actions) == steps + 1
    for a, b in zip(first.actions, second.actions[:steps], strict=True):
        assert torch.equal(a, b)  # exact: the same policy on the same observation


@pytest.mark.parametrize("fill", FILLS)
@pytest.mark.parametrize("kind", ["simplex", "discrete", "weights", "long_short"])
def test_trader_matches_run_period(panel: Panel, kind: str, fill: str) -> None:
    config = PortfolioEnvConfig(window=4, actions=kind, fill=fill, **COSTS)
    obs_dim = config.window * 3 * len(PANEL_FEATURES) + 3 + 1
    record, rows, first, second, _ = both(panel, config, lambda: Recorder(kind, obs_dim, 3))
    assert_same(record, rows, first, second)
    assert record["turnover"].sum() > 0  # the policy traded: the costs were exercised
    for row, action in zip(rows, second.actions, strict=True):
        if kind == "discrete":
            assert row.action == int(action[0])
        assert row.target is not None
        if kind == "discrete" and row.action == 3 + 2:  # hold: no target, the drifted weights kept
            assert np.isnan(row.target).all()
            continue
        assert abs(row.target.sum() - 1.0) < 1e-12  # f64 weights sum to 1


def test_hold_weights_and_drawdown_end(panel: Panel) -> None:
    """NaN rows (hold) of ``actions="weights"``, and a book that ends at ``max_drawdown`` as the
    env's episode terminates."""
    config = PortfolioEnvConfig(window=5, actions="weights", **COSTS)
    policy = lambda: hold_policy(np.array([0.1, 0.5, 0.2, 0.2]))  # noqa: E731
    record, rows, *_ = both(panel, config, policy)
    assert np.isnan(rows[1].target).all() and not np.isnan(rows[0].target).any()
    # exact: the same computation
    assert np.array_equal([r.equity for r in rows], record["equity"])
    assert np.array_equal(np.stack([r.weights for r in rows[1:]]), record["weights"])

    config = PortfolioEnvConfig(window=4, actions="discrete", max_drawdown=0.01, **COSTS)
    obs_dim = config.window * 3 * len(PANEL_FEATURES) + 4
    record, rows, first, second, trader = both(panel, config, lambda: Recorder("discrete", obs_dim, 3))
    assert trader.ended is not None and "max_drawdown" in trader.ended
    assert rows[-1].target is None and rows[-1].action is None
    _, _, test = split_panel(upload_panel(panel), config.window)
    assert len(rows) == len(record["equity"]) < len(test) - config.window + 1  # ended early
    # exact: the same computation, to the termination
    assert np.array_equal([r.equity for r in rows], record["equity"])
    with pytest.raises(ValueError, match="the book has ended"):
        trader.feed(
            panel.time[-1] + np.timedelta64(1, "D"), {s: (1.0, 1.0, 1.0, 1.0, 0.0) for s in panel.symbols}
        )


def test_missing_bars_filled_as_load_panel(tmp_path: Path, panel: Panel) -> None:
    """A long CSV with holes, read with ``fill=True``: the trader carries the same bars forward
    (and flags them in the features) as `load_panel` and `upload_panel` do."""
    lines = ["date,symbol,open,high,low,close,volume"]
    for j in range(len(panel)):
        for i, s in enumerate(panel.symbols):
            if (j * 7 + i * 3) % 23 == 0 and j > 0:
                continue  # a missing bar
            values = (panel.open, panel.high, panel.low, panel.close, panel.volume)
            lines.append(f"{str(panel.time[j])[:10]},{s}," + ",".join(repr(float(v[j, i])) for v in values))
    path = tmp_path / "holes.csv"
    path.write_text("\n".join(lines) + "\n")
    holes = load_panel(path, fill=True)
    assert holes.filled.sum() > 5
    config = PortfolioEnvConfig(window=4, actions="simplex", **COSTS)
    obs_dim = config.window * 3 * len(PANEL_FEATURES) + 4
    record, rows, first, second, _ = both(holes, config, lambda: Recorder("simplex", obs_dim, 3), fill=True)
    assert_same(record, rows, first, second)
    with pytest.raises(ValueError, match=r"no bar of 'A0\d' \(fill=True carries its last close\)"):
        PortfolioTrader(Recorder("simplex", obs_dim, 3), config, holes.symbols).run(holes)


def bars_at(panel: Panel, j: int) -> dict[str, tuple[float, ...]]:
    return next(b for k, (_, b) in enumerate(iter_panel(panel)) if k == j)


def test_bad_bars_are_one_line(panel: Panel) -> None:
    config = PortfolioEnvConfig(window=4, actions="simplex")
    obs_dim = config.window * 3 * len(PANEL_FEATURES) + 4
    trader = PortfolioTrader(Recorder("simplex", obs_dim, 3), config, panel.symbols)
    for j in range(6):
        trader.feed(panel.time[j], bars_at(panel, j))
    rows_before, weights = trader.decisions, trader.weights
    later = bars_at(panel, 6)
    cases = {
        r"is not after the previous bar at .*: out of order or repeated": (panel.time[5], later),
        r"unknown symbol\(s\) XYZ; the policy's: A00, A01, A02": (
            panel.time[6],
            {**later, "XYZ": later["A00"]},
        ),
        r"no bar of 'A01' \(fill=True": (panel.time[6], {k: v for k, v in later.items() if k != "A01"}),
        r"2 bars for the 3 symbols": (panel.time[6], [later["A00"], later["A01"]]),
        r"'A02': close -1.0 is not a finite positive price": (
            panel.time[6],
            {**later, "A02": (1.0, 1.0, 1.0, -1.0, 0.0)},
        ),
        r"a bar is \(open, high, low, close, volume\), got 4 values": (
            panel.time[6],
            {**later, "A00": (1.0, 1.0, 1.0, 1.0)},
        ),
    }
    for pattern, (time, bars) in cases.items():
        with pytest.raises(ValueError, match=pattern) as info:
            trader.feed(time, bars)
        assert "\n" not in str(info.value)
    assert trader.decisions == rows_before and np.array_equal(trader.weights, weights)  # exact: untouched
    row = trader.feed(panel.time[6], [later[s] for s in panel.symbols])  # a list in symbols order
    assert row is not None and trader.decisions == rows_before + 1
    with pytest.raises(ValueError, match="symbols must be distinct"):
        PortfolioTrader(Recorder("simplex", obs_dim, 3), config, ("A", "A", "B"))
    with pytest.raises(ValueError, match="start .* with 1 bars before it"):
        late = PortfolioTrader(Recorder("simplex", obs_dim, 3), config, panel.symbols, start=panel.time[1])
        late.feed(panel.time[0], bars_at(panel, 0))
        late.feed(panel.time[1], bars_at(panel, 1))


@pytest.mark.parametrize("fill", FILLS)
def test_no_look_ahead(panel: Panel, fill: str) -> None:
    """The decision at bar ``t`` is returned before bar ``t + 1`` exists; bar ``t + 1``'s open moves
    the book only for ``next_open``, its close always, and only once it arrives."""
    config = PortfolioEnvConfig(window=4, actions="simplex", fill=fill, **COSTS)
    obs_dim = config.window * 3 * len(PANEL_FEATURES) + 4
    t = 30

    def run(change: str | None) -> list:
        trader = PortfolioTrader(Recorder("simplex", obs_dim, 3), config, panel.symbols)
        rows = []
        for j in range(t + 2):
            bars = bars_at(panel, j)
            if j == t + 1 and change is not None:
                o, h, lo, c, v = bars["A01"]
                bars["A01"] = (
                    (o * 1.05, h * 1.2, lo, c, v) if change == "open" else (o, h * 1.2, lo, c * 1.05, v)
                )
            rows.append(trader.feed(panel.time[j], bars))
        return rows

    base, new_open, new_close = run(None), run("open"), run("close")
    for other in (new_open, new_close):
        for a, b in zip(base[: t + 1], other[: t + 1], strict=True):
            if a is None:
                assert b is None
                continue
            # exact: the same bars up to t, the same computation
            assert np.array_equal(a.target, b.target) and a.equity == b.equity
    assert (new_open[t + 1].equity != base[t + 1].equity) == (fill == "next_open")
    assert new_close[t + 1].equity != base[t + 1].equity


def test_trade_csv(tmp_path: Path, panel: Panel) -> None:
    config = PortfolioEnvConfig(window=4, actions="discrete", **COSTS)
    obs_dim = config.window * 3 * len(PANEL_FEATURES) + 4
    out = tmp_path / "trades.csv"
    with PortfolioTrader(Recorder("discrete", obs_dim, 3), config, panel.symbols, out) as trader:
        rows = trader.run(panel)
    lines = out.read_text().splitlines()
    assert lines[0].split(",") == list(trade_columns(panel.symbols))
    assert len(lines) == len(rows) + 1
    table = np.array([[float(x) for x in line.split(",")[1:]] for line in lines[1:]])
    # exact: repr of an f64 reads back to the same number
    assert np.array_equal(table[:, 0], [r.equity for r in rows])
    assert np.array_equal(table[:, 3:7], np.stack([r.weights for r in rows]))
    targets = np.stack([r.target for r in rows])
    assert np.array_equal(table[:, 7:], targets, equal_nan=True)  # NaN rows: a hold
    with pytest.raises(ValueError, match="exists: a portfolio trade CSV is written new"):
        PortfolioTrader(Recorder("discrete", obs_dim, 3), config, panel.symbols, out)


def test_sidecar_entry() -> None:
    config = PortfolioEnvConfig(window=3, actions="discrete", cost=5e-4)
    entry = portfolio_sidecar("portfolio:synthetic", config, ["A", "B"])
    shape = [3 * 2 * len(PANEL_FEATURES) + 3]
    spec = portfolio_from_sidecar(
        {"portfolio": json.loads(json.dumps(entry)), "observation": {"shape": shape}}
    )
    assert spec.env_config == config and spec.symbols == ("A", "B") and spec.num_assets == 2
    nameless = portfolio_from_sidecar(
        {"portfolio": {**entry, "symbols": None}, "observation": {"shape": shape}}
    )
    assert nameless.symbols is None and nameless.num_assets == 2
    with pytest.raises(ValueError, match="no 'portfolio' entry"):
        portfolio_from_sidecar({"market": {}})
    with pytest.raises(ValueError, match="is not W \\* N \\* F \\+ N \\+ 1 = 45 for its 2 symbols"):
        portfolio_from_sidecar({"portfolio": entry, "observation": {"shape": [40]}})
    with pytest.raises(ValueError, match="'portfolio' entry is malformed"):
        portfolio_from_sidecar({"portfolio": {**entry, "env_config": {"window": 0}}})
    with pytest.raises(ValueError, match="trained on the features"):
        portfolio_from_sidecar({"portfolio": {**entry, "features": ["x"]}})


def test_exported_dqn_portfolio_and_cli(tmp_path: Path, panel: Panel) -> None:
    """An untrained ``dqn-portfolio`` agent's policy exported to pt2 and loaded: run_period and
    the trader on the same program agree, and ``tritonrl trade`` writes the same rows."""
    from tritonrl.agents.dqn import DQNAgent
    from tritonrl.agents.dqn.presets import preset
    from tritonrl.cli import main
    from tritonrl.toolkit.envs.portfolio import PortfolioEnv
    from tritonrl.toolkit.export import export_policy, load_exported

    config = PortfolioEnvConfig(window=4, actions="discrete", episode_length=8, **COSTS)
    data = upload_panel(panel)
    train, _, test = split_panel(data, config.window)
    env = PortfolioEnv(train, 1, config)
    agent = DQNAgent(
        env.single_observation_space, env.single_action_space, preset("dqn-portfolio", buffer_size=500)
    )
    meta = {"portfolio": portfolio_sidecar("portfolio:test", config, panel.symbols)}
    artifact = export_policy(agent.policy(), format="pt2", path=tmp_path / "policy.pt2", metadata=meta)
    program = load_exported(artifact)
    spec = portfolio_from_sidecar(program.sidecar)
    assert spec.symbols == panel.symbols and spec.env_config == config

    actions: list[torch.Tensor] = []

    def recorded(obs: torch.Tensor) -> torch.Tensor:
        actions.append(program(obs))
        return actions[-1]

    record = run_period(recorded, test, config)
    start = test.time[config.window - 1]
    trader = PortfolioTrader(program, spec.env_config, spec.symbols, start=start)
    rows = trader.run(panel)
    assert [r.action for r in rows[:-1]] == [int(a[0]) for a in actions]
    # exact: the same computation
    assert np.array_equal([r.equity for r in rows], record["equity"])
    assert np.array_equal(np.stack([r.weights for r in rows[1:]]), record["weights"])

    bars = tmp_path / "bars.csv"
    lines = ["date,symbol,open,high,low,close,volume"]
    for time, row in iter_panel(panel):
        lines += [f"{str(time)[:10]},{s}," + ",".join(repr(x) for x in v) for s, v in row.items()]
    bars.write_text("\n".join(lines) + "\n")
    out = tmp_path / "cli.csv"
    args = ["trade", str(artifact), "--bars", str(bars), "--out", str(out), "--start", str(start)]
    assert main(args) == 0
    table = [line.split(",") for line in out.read_text().splitlines()[1:]]
    assert np.array_equal([float(r[1]) for r in table], record["equity"])  # exact: repr round trip
    assert main(args) == 2  # an existing trade CSV: refused, one line
    other = dataclasses.replace(panel, symbols=("A00", "A01", "XX"))
    lines = ["date,symbol,open,high,low,close,volume"]
    for time, row in iter_panel(other):
        lines += [f"{str(time)[:10]},{s}," + ",".join(repr(x) for x in v) for s, v in row.items()]
    bars.write_text("\n".join(lines) + "\n")
    assert main(["trade", str(artifact), "--bars", str(bars), "--out", str(tmp_path / "x.csv")]) == 2
    assert not (tmp_path / "x.csv").exists()
