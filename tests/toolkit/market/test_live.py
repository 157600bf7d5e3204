"""The live bar stream (toolkit/envs/market/live.py, ``tritonrl trade``): observations and rewards
as the env computes them, bit-identity of an exported policy's trades with the env's test report,
gaps, refusals, and resuming a killed stream byte for byte."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

import inspect
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tritonrl.agents.dqn import DQNAgent
from tritonrl.agents.dqn.presets import preset as dqn_preset
from tritonrl.agents.sac import SACAgent
from tritonrl.agents.sac.presets import preset as sac_preset
from tritonrl.cli.commands import main
from tritonrl.toolkit.bars import FEATURES, Bars, compute_features, source_bars, split, synthetic_bars, upload
from tritonrl.toolkit.envs.market.env import MarketEnv, MarketEnvConfig
from tritonrl.toolkit.envs.market.evaluate import evaluate_market, strategy_figures
from tritonrl.toolkit.envs.market.live import (
    SCALE_WINDOW,
    TRADE_COLUMNS,
    Bar,
    LiveTrader,
    iter_bars,
    market_from_sidecar,
    market_sidecar,
    read_trades,
)
from tritonrl.toolkit.export import export_policy, load_exported

ROOT = Path(__file__).resolve().parents[3]
W = 8  # the env's window: the first decisions fall inside the features' warm-up of 20 rows
BARS = synthetic_bars(600, seed=3)  # business days: weekends are 3-day spacings


def _config(actions: str = "discrete") -> MarketEnvConfig:
    return MarketEnvConfig(window=W, episode_length=16, actions=actions, cost=1e-3, borrow_cost=2e-4)


def _bars(bars: Bars, keep: np.ndarray) -> Bars:
    """``bars`` at the rows of ``keep`` (a boolean mask or indices)."""
    cut = {f: getattr(bars, f)[keep] for f in ("time", "open", "high", "low", "close", "volume")}
    return dataclasses.replace(bars, **cut)


def _write_csv(bars: Bars, path: Path) -> Path:
    """``bars`` as an OHLCV CSV whose numbers read back exactly (repr)."""
    lines = ["time,open,high,low,close,volume"]
    for b in iter_bars(bars):
        lines.append(f"{b.time},{b.open!r},{b.high!r},{b.low!r},{b.close!r},{b.volume!r}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _dqn(config: MarketEnvConfig, data: Any) -> DQNAgent:
    """A DQN after a few updates (untrained, it takes one action everywhere)."""
    env = MarketEnv(data, 4, config, seed=2)
    cfg = dqn_preset("dqn", torso_width=16, batch_size=8, buffer_size=256, learning_starts=0, lr=1e-2)
    agent = DQNAgent(env.single_observation_space, env.single_action_space, cfg, num_envs=4, seed=2)
    obs, _ = env.reset()
    for _ in range(32):
        action = agent.act(obs)
        nxt, reward, terminated, truncated, info = env.step(action)
        agent.observe(obs, action, reward * 100, info["final_obs"], terminated, truncated)
        obs = nxt
    for _ in range(20):
        agent.update()
    return agent


def _sac(config: MarketEnvConfig, data: Any) -> SACAgent:
    env = MarketEnv(data, 1, config)
    cfg = sac_preset("sac", hidden=(16, 16), batch_size=4, buffer_size=64)
    return SACAgent(env.single_observation_space, env.single_action_space, cfg, seed=0)


def _export(agent: Any, config: MarketEnvConfig, folder: Path) -> Path:
    meta = {"market": market_sidecar("market:synthetic", config, 252.0)}
    return export_policy(agent.policy(), format="pt2", path=folder / "policy.pt2", metadata=meta)


class Recorder:
    """A policy that records its observations and acts from them (every action comes up)."""

    def __init__(self, discrete: bool = True) -> None:
        self.seen: list[torch.Tensor] = []
        self.discrete = discrete

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        self.seen.append(obs.clone())
        x = float(obs[0, :-1].sum())
        if self.discrete:
            return torch.tensor([int(abs(x) * 7) % 3])
        return torch.tensor([[math.sin(x) * 1.5]])


class Script:
    """A policy that plays a list of actions, one per decision."""

    def __init__(self, actions: list[Any], discrete: bool = True) -> None:
        self.actions: Iterator[Any] = iter(actions)
        self.discrete = discrete

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        a = next(self.actions)
        return torch.tensor([a]) if self.discrete else torch.tensor([[a]], dtype=torch.float32)


# ---------------------------------------------------------------- the sidecar


def test_market_sidecar_reads_back_and_refuses_other_policies() -> None:
    config = _config("continuous")
    entry = market_sidecar("market:synthetic", config, 252.0)
    assert entry == {
        "source": "market:synthetic",
        "env": config.to_dict(),
        "features": {"names": list(FEATURES), "warmup": 20, "scale_window": 100},
        "periods_per_year": 252.0,
    }
    json.dumps(entry)  # JSON values only
    assert inspect.signature(compute_features).parameters["scale_window"].default == SCALE_WINDOW
    spec = market_from_sidecar({"market": json.loads(json.dumps(entry))})
    assert spec.env_config == config and spec.features.window == 20 and spec.features.scale_window == 100
    assert spec.source == "market:synthetic" and spec.periods_per_year == 252.0
    with pytest.raises(ValueError, match="this policy was not trained on market data"):
        market_from_sidecar({"format": "tritonrl-policy"})
    other = {**entry, "features": {**entry["features"], "names": ["close"]}}
    with pytest.raises(ValueError, match="trained on the features"):
        market_from_sidecar({"market": other})
    with pytest.raises(ValueError, match="malformed"):
        market_from_sidecar({"market": {**entry, "env": {"window": -1}}})
    with pytest.raises(ValueError, match="observation shape"):
        market_from_sidecar({"market": entry, "observation": {"shape": [7]}})


# ---------------------------------------------------------------- observations and rewards


@pytest.mark.parametrize("actions", ["discrete", "continuous"])
def test_observations_are_the_full_series_features(actions: str) -> None:
    """Each decision sees the last W rows of compute_features over the whole series (computed
    from the prefix the trader holds) and the position it held."""
    bars = _bars(BARS, np.arange(300))
    policy = Recorder(actions == "discrete")
    trader = LiveTrader(policy, _config(actions), feature_dtype=torch.float32)
    rows = [row for bar in iter_bars(bars) for row in trader.feed(bar)]
    full = torch.from_numpy(compute_features(bars))
    assert len(rows) == len(policy.seen) == len(bars) - (W - 1)
    held = 0.0
    for k, (obs, row) in enumerate(zip(policy.seen, rows, strict=True)):
        t = W - 1 + k
        assert obs.shape == (1, W * len(FEATURES) + 1) and obs.dtype == torch.float32
        # (causal features; numpy's cumsum is a sequential scan)
        # exact: a prefix's rows are the full series' rows computed again by the same operations
        torch.testing.assert_close(obs[0, :-1], full[t - W + 1 : t + 1].reshape(-1), rtol=0, atol=0)
        assert obs[0, -1].item() == held  # exact: the f32 position the trader itself wrote
        held = row.position
    if actions == "discrete":
        assert {r.action for r in rows} == {0, 1, 2}
    else:
        assert any(abs(r.action) > 1 for r in rows)  # clipped ones too


@pytest.mark.parametrize("actions", ["discrete", "continuous"])
def test_rewards_follow_the_env_rules(actions: str) -> None:
    """Against a plain-Python model in f64: reward at t+1 = p_t * log(c[t+1] / c[t]) - cost *
    |p_t - p_{t-1}| - borrow * max(-p_t, 0); equity = exp(sum of rewards)."""
    config = _config(actions)
    bars = _bars(BARS, np.arange(120))
    rng = np.random.default_rng(0)
    n = len(bars) - (W - 1)
    script = rng.integers(0, 3, n).tolist() if actions == "discrete" else rng.uniform(-1.5, 1.5, n).tolist()
    rows: list[Any] = []
    with LiveTrader(Script(script, actions == "discrete"), config) as trader:
        for bar in iter_bars(bars):
            rows += trader.feed(bar)
    pos = [float(np.clip(a - 1 if actions == "discrete" else a, -1, 1)) for a in script]
    close = bars.close[W - 1 :]
    log_equity = 0.0
    for k, row in enumerate(rows):
        assert row.position == pytest.approx(pos[k], abs=1e-7)
        if k == 0:
            want = 0.0
        else:
            p, before = pos[k - 1], pos[k - 2] if k > 1 else 0.0
            want = p * math.log(close[k] / close[k - 1]) - 1e-3 * abs(p - before) - 2e-4 * max(-p, 0.0)
        assert row.reward == pytest.approx(want, abs=1e-6)  # f32 rewards
        log_equity += row.reward
        assert row.log_equity == pytest.approx(log_equity, abs=1e-12)
        assert row.equity == pytest.approx(math.exp(log_equity), rel=1e-12)
    assert trader.decisions == n and trader.position == rows[-1].position


# ---------------------------------------------------------------- bit-identity with the report


@pytest.mark.parametrize(
    ("actions", "dtype"),
    [("discrete", torch.float32), ("continuous", torch.float32), ("continuous", torch.bfloat16)],
    ids=["discrete", "continuous", "continuous-bf16-features"],
)
def test_an_exported_policy_trades_as_the_test_report(
    actions: str, dtype: torch.dtype, tmp_path: Path
) -> None:
    """The test report of ``evaluate_market`` and the trade CSV of the exported program over the
    same bars: the same decisions, positions, rewards and equity, bit for bit. With bf16 features
    (what an env on a GPU holds) the trader rounds the features and the position as the env does
    and hands the f32 program their exact f32 values."""
    config = _config(actions)
    train, _, test = split(upload(BARS, dtype=dtype), W)
    agent = _dqn(config, train) if actions == "discrete" else _sac(config, train)
    report = evaluate_market(agent.eval_policy(), test, config, steps=True)
    steps = report["steps"]
    n = report["period"]["decisions"]
    assert all(len(steps[k]) == n for k in ("time", "action", "position", "reward"))
    policy = load_exported(_export(agent, config, tmp_path))
    spec = market_from_sidecar(policy.sidecar)
    out = tmp_path / "trades.csv"
    trader = LiveTrader(
        policy, spec.env_config, out, features=spec.features, start=test.time[W - 1], feature_dtype=dtype
    )
    with trader:
        written = trader.run(BARS)
    rows, _ = read_trades(out)
    assert written == len(rows) == n + 1  # the last bar is decided too: its reward comes with the next bar
    # exact: the same f32 program at a batch of one on the same observation, then the same f32
    # operations on the same numbers in the same order (the env's, and the report's f64 cumsum)
    assert [r.time for r in rows[:n]] == list(steps["time"])
    assert [r.action for r in rows[:n]] == steps["action"].tolist()
    assert [r.position for r in rows[:n]] == steps["position"].tolist()
    assert [r.reward for r in rows[1:]] == steps["reward"].tolist()
    assert [r.equity for r in rows] == report["agent"]["equity"]
    assert not any(r.filled for r in rows)
    if actions == "discrete":
        assert len(set(steps["action"].tolist())) >= 2  # the positions change: the costs count
    # the steps are the report's agent row, decision by decision
    again = strategy_figures(steps["reward"], steps["position"], 252.0)
    assert again == report["agent"]  # exact: the same figures from the same arrays
    assert "steps" not in evaluate_market(agent.eval_policy(), test, config)


# ---------------------------------------------------------------- refusals and gaps


def test_bars_out_of_order_repeated_or_after_a_gap_are_refused() -> None:
    trader = LiveTrader(Recorder(), _config())
    bars = list(iter_bars(_bars(BARS, np.arange(40))))
    for bar in bars[:30]:
        trader.feed(bar)
    last = bars[29].time
    with pytest.raises(ValueError, match=f"bar at {bars[29].time} repeats the previous bar's time {last}"):
        trader.feed(bars[29])
    with pytest.raises(
        ValueError, match=f"bar at {bars[20].time} is older than the previous bar at {last}: out of order"
    ):
        trader.feed(bars[20])
    with pytest.raises(
        ValueError, match=rf"bar at {bars[35].time} comes \d+ days after the bar at {last}.*a gap"
    ):
        trader.feed(bars[35])  # 6 business days later: more than a weekend
    assert trader.bars == 30  # nothing refused was kept
    trader.feed(bars[30])
    with pytest.raises(ValueError, match="volume"):
        trader.feed(bars[31]._replace(volume=-1.0))
    with pytest.raises(ValueError, match="close"):
        trader.feed(bars[31]._replace(close=float("nan")))
    # an explicit max_gap: one day, so a weekend is a gap
    strict = LiveTrader(Recorder(), _config(), max_gap=86400)
    with pytest.raises(ValueError, match=r"3 days after .* more than max_gap \(1 day\)"):
        for bar in bars:
            strict.feed(bar)
    # a start before the window is full
    early = LiveTrader(Recorder(), _config(), start=bars[3].time)
    with pytest.raises(ValueError, match="window - 1 = 7"):
        for bar in bars:
            early.feed(bar)


def test_gaps_fill_inserts_flat_bars_and_holds_the_position() -> None:
    bars = _bars(BARS, np.r_[0:50, 54:80])  # 4 business days missing: 6 days of spacing or more
    config = _config()
    rows: list[Any] = []
    with LiveTrader(Script([0, 2] * 100), config, gaps="fill") as trader:
        for bar in iter_bars(bars):
            rows += trader.feed(bar)
    filled = [r for r in rows if r.filled]
    gap_start, gap_end = BARS.time[49], BARS.time[54]
    day = np.timedelta64(86400, "s")
    want = np.arange(gap_start + day, gap_end, day)
    assert [r.time for r in filled] == list(want)  # every day (the most common spacing)
    first = rows.index(filled[0])
    held = rows[first - 1].position
    assert all(r.position == held and r.action is None and r.close == BARS.close[49] for r in filled)
    # exact: a flat bar's log return is log(c) - log(c) = 0; its reward is the costs alone
    before = rows[first - 2].position
    cost = torch.tensor(1e-3, dtype=torch.float32) * abs(held - before)
    borrow = torch.tensor(2e-4, dtype=torch.float32) if held < 0 else torch.tensor(0.0)
    assert filled[0].reward == float(torch.tensor(0.0) - cost - borrow)
    assert all(r.reward == -float(borrow) for r in filled[1:])
    assert trader.filled == len(filled) and trader.decisions == len(rows) - len(filled)
    with pytest.raises(ValueError, match="shorter than the history's most common spacing"):
        LiveTrader(Recorder(), config, gaps="fill", max_gap=3600).run(bars)


# ---------------------------------------------------------------- resuming


def test_a_cut_csv_resumes_to_the_same_bytes(tmp_path: Path) -> None:
    """A trade CSV cut after some rows (and inside a row, as a kill mid-write leaves it) resumes
    to the bytes of an uninterrupted run; a CSV from other bars is refused."""
    bars = _bars(BARS, np.r_[0:120, 123:200])
    config = _config("continuous")
    ref = tmp_path / "ref.csv"
    with LiveTrader(Recorder(False), config, ref, gaps="fill") as trader:
        trader.run(bars)
    whole = ref.read_bytes()
    lines = whole.splitlines(keepends=True)
    assert lines[0].decode() == ",".join(TRADE_COLUMNS) + "\n" and b",1\n" in whole
    for cut in (1, 2, 60, 117, 118, len(lines) - 1):
        for extra in (b"", lines[cut][:9]):  # a whole row lost, or half of one
            out = tmp_path / f"cut{cut}-{len(extra)}.csv"
            out.write_bytes(b"".join(lines[:cut]) + extra)
            with LiveTrader(Recorder(False), config, out, gaps="fill") as trader:
                assert trader.resumed == cut - 1
                trader.run(bars)
            assert out.read_bytes() == whole  # exact: the resumed run decides the same bars the same way
    half_header = tmp_path / "header.csv"
    half_header.write_bytes(lines[0][:7])
    with LiveTrader(Recorder(False), config, half_header, gaps="fill") as trader:
        trader.run(bars)
    assert half_header.read_bytes() == whole
    other = tmp_path / "other.csv"
    other.write_bytes(b"".join(lines[:50]))
    with pytest.raises(ValueError, match="written from other bars"):
        LiveTrader(Recorder(False), config, other, gaps="fill").run(_bars(BARS, np.arange(1, 200)))
    with pytest.raises(ValueError, match="its actions are not discrete"):
        LiveTrader(Recorder(), _config(), ref)
    with LiveTrader(Recorder(False), config, ref, gaps="fill"):
        with pytest.raises(ValueError, match="another trader is writing it"):
            LiveTrader(Recorder(False), config, ref, gaps="fill")
    foreign = tmp_path / "foreign.csv"
    foreign.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a trade CSV"):
        LiveTrader(Recorder(), _config(), foreign)
    assert foreign.read_text() == "a,b\n1,2\n"


def _cli(*args: Any) -> list[str]:
    return ["trade", *(str(a) for a in args)]


def test_cli_trades_and_refuses_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _config()
    train, _, test = split(upload(BARS), W)
    agent = _dqn(config, train)
    artifact = _export(agent, config, tmp_path)
    csv = _write_csv(BARS, tmp_path / "bars.csv")
    out = tmp_path / "trades.csv"
    start = str(test.time[W - 1])
    assert main(_cli(artifact, "--bars", f"csv={csv}", "--out", out, "--start", start)) == 0
    assert "decisions, 0 filled bars; equity" in capsys.readouterr().out
    api = tmp_path / "api.csv"
    with LiveTrader(load_exported(artifact), config, api, start=start) as trader:
        trader.run(BARS)
    assert out.read_bytes() == api.read_bytes()  # exact: the same program on the same bars
    assert main(_cli(artifact, "--bars", f"csv={csv}", "--out", out, "--start", start)) == 0
    assert f"({len(read_trades(out)[0])} rows resumed)" in capsys.readouterr().out
    assert out.read_bytes() == api.read_bytes()  # a rerun adds nothing: every bar is decided

    bare = export_policy(agent.policy(), path=tmp_path / "bare.pt2")  # no market entry
    gap = _write_csv(_bars(BARS, np.r_[0:100, 110:200]), tmp_path / "gap.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("time,open,high,low,close,volume\n2020-01-01,1,1,1,x,1\n")
    cases = [
        (_cli(tmp_path / "none.pt2", "--bars", f"csv={csv}"), "no such artifact"),
        (_cli(csv, "--bars", f"csv={csv}"), "no sidecar"),
        (_cli(bare, "--bars", f"csv={csv}"), "not trained on market data"),
        (_cli(artifact, "--bars", f"csv={bad}"), "line 2, column 'close'"),
        (_cli(artifact, "--bars", f"csv={tmp_path / 'missing.csv'}"), "no such file"),
        (_cli(artifact, "--bars", f"csv={csv}", "--max-gap", "-1"), "--max-gap"),
        (_cli(artifact, "--bars", f"csv={csv}", "--start", "soon"), "not an ISO 8601 time"),
        (_cli(artifact, "--bars", f"csv={gap}"), "a gap"),
    ]
    for argv, message in cases:
        target = tmp_path / "refused.csv"
        rc = main([*argv, "--out", str(target)])
        err = capsys.readouterr().err
        assert rc == 2 and err.startswith("error: ") and message in err and err.count("\n") == 1, err
        if message != "a gap":
            assert not target.exists()  # nothing written
    filled = tmp_path / "filled.csv"
    assert main(_cli(artifact, "--bars", f"csv={gap}", "--out", filled, "--gaps", "fill")) == 0
    assert sum(r.filled for r in read_trades(filled)[0]) > 0


_SLOW = """
import sys, time
from tritonrl.toolkit.envs.market import live
feed = live.LiveTrader.feed
def slow(self, bar):  # the test's throttle: the kill lands mid-stream
    rows = feed(self, bar)
    if rows:
        time.sleep(0.01)
    return rows
live.LiveTrader.feed = slow
from tritonrl.cli.commands import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_killed_trade_resumes_byte_for_byte(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``tritonrl trade`` killed with SIGKILL mid-stream, then run again: the same CSV, byte for
    byte, as an uninterrupted run (no decision repeated or lost)."""
    config = _config("continuous")
    train, _, _ = split(upload(BARS), W)
    artifact = _export(_sac(config, train), config, tmp_path)
    csv = _write_csv(_bars(BARS, np.r_[0:300, 305:600]), tmp_path / "bars.csv")
    flags = ["--bars", f"csv={csv}", "--gaps", "fill"]
    ref, out = tmp_path / "ref.csv", tmp_path / "killed.csv"
    assert main(_cli(artifact, *flags, "--out", ref)) == 0
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW, *_cli(artifact, *flags, "--out", out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not out.exists() or out.read_bytes().count(b"\n") < 40:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the stream did not start"
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    killed = out.read_bytes()
    assert 40 <= killed.count(b"\n") < ref.read_bytes().count(b"\n")
    capsys.readouterr()
    assert main(_cli(artifact, *flags, "--out", out)) == 0
    assert "rows resumed" in capsys.readouterr().out
    assert out.read_bytes() == ref.read_bytes()  # exact: the same decisions, resumed, as one run's


def test_feed_takes_bar_records_tuples_and_times() -> None:
    bars = _bars(BARS, np.arange(20))
    a, b = LiveTrader(Recorder(), _config()), LiveTrader(Recorder(), _config())
    rows_a = a.run(bars)
    rows_b = b.run(
        (str(x.time), x.open, x.high, x.low, x.close, x.volume) if i % 2 else Bar(*x)
        for i, x in enumerate(iter_bars(bars))
    )
    assert rows_a == rows_b == 20 - (W - 1)
    assert a.last_time == bars.time[-1] and a.equity == b.equity  # exact: the same bars, twice
    with pytest.raises(ValueError, match="a bar is"):
        a.feed((1, 2, 3))
    with pytest.raises(ValueError, match="not an ISO 8601 time"):
        a.feed(("tomorrow", 1, 1, 1, 1, 1))


def test_a_failed_decision_leaves_the_bar_to_come_again() -> None:
    calls = []

    def flaky(obs: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("the model server is down")
        return torch.tensor([2, 2]) if len(calls) == 5 else torch.tensor([2])

    bars = list(iter_bars(_bars(BARS, np.arange(12))))
    trader = LiveTrader(flaky, _config())
    rows = [row for bar in bars[:9] for row in trader.feed(bar)]
    with pytest.raises(RuntimeError, match="down"):
        trader.feed(bars[9])
    rows += trader.feed(bars[9])  # the same bar again: taken this time
    with pytest.raises(ValueError, match="returned 2 actions for one observation"):
        trader.feed(bars[10])
    rows += trader.feed(bars[10]) + trader.feed(bars[11])
    assert [r.time for r in rows] == [b.time for b in bars[W - 1 :]]


@pytest.mark.parametrize("agent", ["dqn", "ppo-continuous"])
def test_train_export_trade_reproduces_the_run_folders_test_report(
    agent: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The whole path from the command line: ``tritonrl train --env market:...`` (its
    test_report.json), ``tritonrl export`` (the market rules go into the sidecar), ``tritonrl
    trade`` on the same series as a CSV from its first bar, deciding from the test period's first
    decision: the trade CSV's equity is the report's, bit for bit."""
    run = tmp_path / "run"
    source = "synthetic,bars=1500,seed=4"
    train = ["train", "--agent", agent, "--env", f"market:{source}", "--steps", "2048", "--run-dir", str(run)]
    assert main([*train, "--no-progress", "--no-tensorboard", "--num-envs", "8"]) == 0
    assert main(["export", str(run)]) == 0
    report = json.loads((run / "test_report.json").read_text())
    bars = _write_csv(source_bars(source), tmp_path / "bars.csv")
    out = tmp_path / "trades.csv"
    start = report["period"]["start"]
    assert main(_cli(run / "policy.pt2", "--bars", f"csv={bars}", "--out", out, "--start", start)) == 0
    capsys.readouterr()
    rows, _ = read_trades(out)
    decided = [r.equity for r in rows]  # the first decision's row, then one per bar
    want = report["agent"]["equity"]
    assert decided[: len(want)] == want  # exact: the report's numbers, bit for bit (module doc)
    assert len(decided) == len(want)  # the period's last bar closes the last position: no decision after
