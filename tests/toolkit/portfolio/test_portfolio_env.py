"""PortfolioEnv against an independent numpy model of its documented rules (`Model`).

The model steps one env at a time in numpy f64, written from the docstrings (not from the env's
tensor code): at the close of row ``t`` the holdings drift to the fill (``next_open``: by
``open[t+1] / close[t]``; ``next_close``: by ``close[t+1] / close[t]``; ``close``: not at all),
are rebalanced to the target paying ``V * sum_i |target_i - held_i| * (cost + slippage_bps * 1e-4)``
(assets only: cash is not traded), ``fixed_fee`` per asset whose weight moves by more than 1e-9
and ``V * borrow_cost * sum of short weights``, then drift on to ``close[t+1]``; the reward is
``log(V[t+1] / V[t])``. The data is made here (numpy prices, random features).

Tolerances: rewards are f32 (an f64 log rounded once, |r| < 0.2): 1e-6 absolute. Equity, weights,
turnover and costs are f64 accounting on both sides, a few dozen roundings per step over <= 40
steps: 1e-12 relative (weights also 1e-14 absolute: long_short's cash is ``1 - sum w``, a
difference of O(1) numbers). Feature windows are copies of the data: exact.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

gym = pytest.importorskip("gymnasium")

from helpers import HostReads  # noqa: E402
from tritonrl.toolkit.bars.paneldata import PanelData  # noqa: E402
from tritonrl.toolkit.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from tritonrl.toolkit.envs.portfolio import (  # noqa: E402
    PortfolioEnv,
    PortfolioEnvConfig,
    discrete_portfolios,
    hold_policy,
    run_period,
    target_weights,
    weights_policy,
)

KINDS = ("simplex", "weights", "long_short", "discrete")
FILLS = ("next_open", "next_close", "close")
COSTS = {"cost": 2e-3, "slippage_bps": 5.0, "fixed_fee": 50.0, "borrow_cost": 3e-4}


def make_data(
    rows: int = 48,
    assets: int = 3,
    features: int = 2,
    *,
    seed: int = 0,
    vol: float = 0.02,
    dtype: torch.dtype = torch.float32,
    name: str = "test",
) -> PanelData:
    """Random walks of ``assets`` closes (log-return scale ``vol``), opens between two closes,
    and standard normal features ``[rows, assets, features]`` in ``dtype``."""
    rng = np.random.default_rng(seed)
    log_ret = rng.normal(0.0, vol, (rows, assets))
    log_ret[0] = 0.0
    close = 100.0 * np.exp(np.cumsum(log_ret, axis=0))
    open_ = np.concatenate((close[:1], close[:-1])) * np.exp(rng.normal(0.0, vol / 2, (rows, assets)))
    return PanelData(
        name=name,
        features=torch.from_numpy(rng.standard_normal((rows, assets, features))).to(dtype),
        open=torch.from_numpy(open_),
        close=torch.from_numpy(close),
        time=np.arange(rows).astype("datetime64[D]").astype("datetime64[s]"),
        symbols=tuple(f"S{i}" for i in range(assets)),
    )


def rows_of(env: PortfolioEnv) -> list[int]:
    return env.get_state()["state"]["row"].tolist()


def random_actions(kind: str, e: int, n: int, rng: np.random.Generator) -> torch.Tensor:
    """Actions of ``kind`` for ``e`` envs, beyond the box where the env clips them."""
    if kind == "discrete":
        return torch.from_numpy(rng.integers(0, n + 3, e))  # N + 2: hold
    width = n if kind == "long_short" else n + 1
    a = rng.uniform(-1.5, 1.5, (e, width))
    if kind == "weights":
        a = rng.uniform(-0.3, 1.0, (e, width))
        a[rng.random(e) < 0.15] = 0.0  # nothing left after clipping: all cash
    return torch.from_numpy(a.astype(np.float32))


# ----------------------------------------------------------------------------- the numpy model


@dataclasses.dataclass
class Episode:
    """One env's episode in numpy f64."""

    row: int
    weights: np.ndarray
    value: float
    peak: float
    steps: int = 0
    max_drawdown: float = 0.0
    turnover: float = 0.0
    costs: float = 0.0
    env_rewards: list[float] = dataclasses.field(default_factory=list)


class Model:
    """The documented rules of one env, in numpy f64."""

    def __init__(self, data: PanelData, cfg: PortfolioEnvConfig) -> None:
        self.cfg, self.n = cfg, data.num_assets
        self.open, self.close = data.open.numpy(), data.close.numpy()
        self.features = data.features
        self.max_steps = min(cfg.episode_length, len(data) - cfg.window)

    def start(self, row: int) -> Episode:
        cash = np.zeros(self.n + 1)
        cash[0] = 1.0
        v = self.cfg.initial_cash
        return Episode(row=row, weights=cash, value=v, peak=v)

    def obs_window(self, row: int) -> torch.Tensor:
        return self.features[row - self.cfg.window + 1 : row + 1].reshape(-1)

    def target(self, action: np.ndarray) -> np.ndarray:
        c, n = self.cfg, self.n
        w = np.zeros(n + 1)
        if c.actions == "discrete":
            k = int(action)
            if k == 0:
                w[0] = 1.0
            elif k == 1:
                w[1:] = 1.0 / n
            else:
                w[1 + k - 2] = 1.0
            return w
        a = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        if c.actions == "simplex":
            x = np.exp(c.simplex_scale * a - np.max(c.simplex_scale * a))
            return x / x.sum()
        if c.actions == "long_short":
            assets = a * c.leverage / max(np.abs(a).sum(), c.leverage)
            return np.concatenate(([1.0 - assets.sum()], assets))
        a = np.maximum(np.asarray(action, dtype=np.float64), 0.0)  # "weights"
        if a.sum() > 0:
            return a / a.sum()
        w[0] = 1.0
        return w

    @staticmethod
    def drift(w: np.ndarray, v: float, growth: np.ndarray | None) -> tuple[np.ndarray, float]:
        if growth is None:
            return w, v
        book = w * v
        book[1:] = book[1:] * growth
        return book / book.sum(), float(book.sum())

    def step(self, ep: Episode, action: np.ndarray) -> dict[str, float | bool]:
        c, t = self.cfg, ep.row
        c0, c1, o1 = self.close[t], self.close[t + 1], self.open[t + 1]
        before, after = {"next_open": (o1 / c0, c1 / o1), "next_close": (c1 / c0, None)}.get(
            c.fill, (None, c1 / c0)
        )
        held, v_a = self.drift(ep.weights.copy(), ep.value, before)
        hold = c.actions == "discrete" and int(action) == self.n + 2
        target = held.copy() if hold else self.target(action)
        delta = target[1:] - held[1:]
        traded = float(np.abs(delta).sum())
        paid = v_a * traded * (c.cost + c.slippage_bps * 1e-4)
        paid += c.fixed_fee * int(np.sum(np.abs(delta) > 1e-9))
        paid += v_a * c.borrow_cost * float(np.sum(np.maximum(-target[1:], 0.0)))
        weights, v_next = self.drift(target.copy(), v_a - paid, after)
        reward = math.log(v_next / ep.value)
        ep.peak = max(ep.peak, v_next)
        drawdown = 1.0 - v_next / ep.peak
        ep.row, ep.steps, ep.weights, ep.value = t + 1, ep.steps + 1, weights, v_next
        ep.max_drawdown = max(ep.max_drawdown, drawdown)
        ep.turnover += traded
        ep.costs += paid / v_a
        limit = c.max_drawdown if c.max_drawdown < 1.0 else math.inf
        return {
            "reward": reward,
            "turnover": traded,
            "cost": paid / v_a,
            "terminated": drawdown > limit or v_next <= c.initial_cash * 1e-12,
            "truncated": ep.steps >= self.max_steps,
        }


def close_rel(got: float | np.ndarray, want: float | np.ndarray, atol: float = 0.0) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=atol)


def run_against_model(
    env: PortfolioEnv, data: PanelData, steps: int, rng: np.random.Generator, seed: int = 0
) -> dict[str, int]:
    """Step ``env`` with random actions and check every output against `Model`; returns the
    counts of terminations, truncations and finished episodes."""
    cfg, e_count, n = env.config, env.num_envs, data.num_assets
    model = Model(data, cfg)
    initial = cfg.initial_cash
    obs, _ = env.reset(seed=seed)
    episodes = [model.start(r) for r in rows_of(env)]
    lo, hi = cfg.window - 1, (len(data) - 1 - cfg.episode_length if cfg.random_start else cfg.window - 1)
    counts = {"terminated": 0, "truncated": 0, "episodes": 0}
    finished: list[Episode] = []
    for e, ep in enumerate(episodes):
        assert lo <= ep.row <= hi
        assert torch.equal(obs[e, : -(n + 1)], model.obs_window(ep.row))  # exact: a copy of the data
        assert obs[e, -(n + 1) :].tolist() == [1.0] + [0.0] * n
    for _ in range(steps):
        actions = random_actions(cfg.actions, e_count, n, rng)
        obs, reward, terminated, truncated, info = env.step(actions)
        new_rows = rows_of(env)
        for e, ep in enumerate(episodes):
            out = model.step(ep, actions[e].numpy())
            ep.env_rewards.append(reward[e].item())
            assert reward[e].item() == pytest.approx(out["reward"], abs=1e-6)
            close_rel(info["equity"][e].item(), ep.value / initial)
            close_rel(info["weights"][e].numpy(), ep.weights, atol=1e-14)
            close_rel(info["turnover"][e].item(), out["turnover"])
            close_rel(info["cost"][e].item(), out["cost"], atol=1e-18)
            assert (terminated[e].item(), truncated[e].item()) == (out["terminated"], out["truncated"])
            final = info["final_obs"][e]
            assert torch.equal(final[: -(n + 1)], model.obs_window(ep.row))  # exact: a copy
            # the observation's weights column is the held weights rounded to f32 once
            np.testing.assert_allclose(
                final[-(n + 1) :].double().numpy(), ep.weights, rtol=1.2e-7, atol=1e-14
            )
            done = bool(out["terminated"] or out["truncated"])
            assert info["_final_obs"][e].item() == done
            if not done:
                assert new_rows[e] == ep.row
                assert torch.equal(obs[e], final)  # exact: the same observation, selected
                continue
            counts["terminated"] += bool(out["terminated"])
            counts["truncated"] += bool(out["truncated"])
            counts["episodes"] += 1
            # the rewards (f32) add up to the log growth of equity, the env's and the model's
            log_growth = math.log(info["equity"][e].item())
            assert math.fsum(ep.env_rewards) == pytest.approx(log_growth, abs=1e-6)
            assert math.fsum(ep.env_rewards) == pytest.approx(math.log(ep.value / initial), abs=1e-6)
            finished.append(ep)
            episodes[e] = model.start(new_rows[e])
            assert lo <= new_rows[e] <= hi
            assert torch.equal(obs[e, : -(n + 1)], model.obs_window(new_rows[e]))  # exact: a copy
            assert obs[e, -(n + 1) :].tolist() == [1.0] + [0.0] * n  # the reset's all-cash obs
    stats = env.episode_stats()
    assert stats["episodes"] == counts["episodes"]
    if finished:
        want = {
            "return": np.mean([math.log(ep.value / initial) for ep in finished]),
            "length": np.mean([ep.steps for ep in finished]),
            "equity": np.mean([ep.value / initial for ep in finished]),
            "max_drawdown": np.mean([ep.max_drawdown for ep in finished]),
            "turnover": np.mean([ep.turnover for ep in finished]),
            "costs": np.mean([ep.costs for ep in finished]),
        }
        for name, value in want.items():
            assert stats[f"mean_{name}"] == pytest.approx(value, rel=1e-9, abs=1e-15), name
    assert env.episode_stats() == {"episodes": 0.0}  # drained
    return counts


@pytest.mark.parametrize("fill", FILLS)
@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=3)
@given(
    seed=st.integers(0, 2**16),
    num_envs=st.integers(1, 3),
    assets=st.integers(2, 4),
    window=st.integers(1, 4),
    episode_length=st.integers(2, 9),
    leverage=st.sampled_from([0.5, 1.0, 2.0]),
    max_drawdown=st.sampled_from([1.0, 0.03]),
)
def test_steps_match_the_numpy_model(
    kind: str,
    fill: str,
    seed: int,
    num_envs: int,
    assets: int,
    window: int,
    episode_length: int,
    leverage: float,
    max_drawdown: float,
) -> None:
    cfg = PortfolioEnvConfig(
        window=window,
        episode_length=episode_length,
        actions=kind,  # type: ignore[arg-type]
        fill=fill,  # type: ignore[arg-type]
        leverage=leverage,
        max_drawdown=max_drawdown,
        **COSTS,
    )
    data = make_data(32, assets, seed=seed)
    env = PortfolioEnv(data, num_envs, cfg, seed=seed)
    counts = run_against_model(env, data, steps=24, rng=np.random.default_rng(seed), seed=seed)
    assert counts["episodes"] > 0  # 24 steps, episodes of at most 9: every env ends one at least


def test_every_end_is_reached_against_the_model() -> None:
    """Terminations, truncations at episode_length and the whole-period run all meet the model."""
    data = make_data(40, 3, vol=0.04, seed=3)
    cfg = PortfolioEnvConfig(
        window=3, episode_length=8, actions="long_short", leverage=2.0, max_drawdown=0.05, **COSTS
    )
    counts = run_against_model(PortfolioEnv(data, 4, cfg), data, 40, np.random.default_rng(0))
    assert counts["terminated"] > 0 and counts["truncated"] > 0
    whole = dataclasses.replace(cfg, episode_length=500, random_start=False, max_drawdown=1.0)
    counts = run_against_model(PortfolioEnv(data, 2, whole), data, 40, np.random.default_rng(1))
    # each env: 37 decisions (rows 2 .. 38) to the data's end, then 3 of the next episode
    assert counts["episodes"] == 2 and counts["terminated"] == 0 and counts["truncated"] == 2


# ----------------------------------------------------------------------------- weights


def test_discrete_table_is_cash_equal_weight_then_each_asset() -> None:
    table = discrete_portfolios(3)
    want = [[1, 0, 0, 0], [0, 1 / 3, 1 / 3, 1 / 3], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
    np.testing.assert_array_equal(table.numpy(), np.array(want))  # exact: 1/3 computed as 1.0 / n
    assert table.dtype == torch.float64


@settings(max_examples=25)
@given(
    action=st.lists(st.floats(-1e6, 1e6), min_size=4, max_size=4),
    scale=st.sampled_from([0.5, 5.0, 20.0]),
    leverage=st.sampled_from([0.25, 1.0, 3.0]),
)
def test_target_weights_keep_their_bounds(action: list[float], scale: float, leverage: float) -> None:
    """Simplex weights are positive and sum to 1; long_short's gross exposure is at most
    ``leverage`` and the weights sum to 1 with the cash (f64: 1e-12)."""
    a = torch.tensor([action], dtype=torch.float32)
    opts = {"scale": scale, "leverage": leverage, "table": None, "dtype": torch.float64}
    w = target_weights(a, "simplex", **opts)
    assert w.shape == (1, 4) and bool((w > 0).all())
    assert w.sum().item() == pytest.approx(1.0, abs=1e-12)
    ls = target_weights(a[:, 1:], "long_short", **opts)
    assert ls.shape == (1, 4) and ls[0, 1:].abs().sum().item() <= leverage * (1 + 1e-12)
    assert ls.sum().item() == pytest.approx(1.0, abs=1e-12)
    direct = target_weights(a, "weights", **opts)
    assert bool((direct >= 0).all()) and direct.sum().item() == pytest.approx(1.0, abs=1e-12)


def test_weights_drift_with_prices_and_holding_trades_nothing() -> None:
    """Filled at the close, a target equal to the observed (f64) weights is no trade: turnover
    and cost 0 (1e-12: the weights renormalised by a sum within 1e-16 of 1), weights that drift
    as ``w_i * g_i / sum_j w_j * g_j`` with the price ratios ``g``."""
    data = make_data(30, 3, dtype=torch.float64, seed=5)
    cfg = PortfolioEnvConfig(
        window=2, episode_length=20, actions="weights", fill="close", random_start=False, **COSTS
    )
    env = PortfolioEnv(data, 1, cfg)
    obs, _ = env.reset()
    obs, _, _, _, info = env.step(torch.tensor([[0.125, 0.25, 0.25, 0.375]]))  # exact in f32
    assert info["turnover"].item() == pytest.approx(0.875, rel=1e-12)
    close = data.close.numpy()
    held = info["weights"][0].numpy()
    for t in range(2, 12):  # decisions at the close of row t, held to the close of t + 1
        obs, _, _, _, info = env.step(obs[:, -4:])
        assert info["turnover"].item() <= 1e-12 and info["cost"].item() <= 1e-12
        book = held * np.concatenate(([1.0], close[t + 1] / close[t]))
        held = book / book.sum()
        close_rel(info["weights"][0].numpy(), held)
    # hold_policy (NaN rows after the first: no trade) holds at every fill, in any features dtype
    for fill in ("close", "next_open", "next_close"):
        rec = run_period(hold_policy([0.125, 0.25, 0.25, 0.375]), data, dataclasses.replace(cfg, fill=fill))
        assert rec["turnover"][0] == pytest.approx(0.875, rel=1e-12)
        assert np.all(rec["turnover"][1:] == 0.0) and np.all(rec["costs"][1:] == 0.0)


# ----------------------------------------------------------------------------- no look-ahead


def perturbed_after(data: PanelData, t: int, seed: int) -> PanelData:
    """``data`` with every price and feature of the rows after ``t`` multiplied by random factors."""
    g = torch.Generator().manual_seed(seed)

    def scale(x: torch.Tensor) -> torch.Tensor:
        f = torch.ones_like(x)
        f[t + 1 :] = torch.empty_like(x[t + 1 :]).uniform_(0.5, 1.5, generator=g)
        return x * f

    return dataclasses.replace(
        data, features=scale(data.features), open=scale(data.open), close=scale(data.close)
    )


@settings(max_examples=6)
@given(t=st.integers(3, 20), seed=st.integers(0, 1000), fill=st.sampled_from(FILLS))
def test_nothing_after_row_t_reaches_the_decision_at_t(t: int, seed: int, fill: str) -> None:
    """Two panels that agree up to row ``t``: the observations at decisions ``W - 1 .. t`` and a
    fixed policy's actions are identical; the reward of the decision at ``t`` reads row ``t + 1``
    (its open and close), so it moves when row ``t + 1`` does and not when only rows ``>= t + 2``
    do; the rewards of the decisions before ``t`` never move."""
    data = make_data(26, 3, seed=seed)
    cfg = PortfolioEnvConfig(window=3, episode_length=100, fill=fill, random_start=False, **COSTS)  # type: ignore[arg-type]
    proj = torch.randn(data.num_features * 3 * 3 + 4, 4, generator=torch.Generator().manual_seed(seed))

    def trace(d: PanelData) -> tuple[list[torch.Tensor], list[torch.Tensor], list[float]]:
        env = PortfolioEnv(d, 1, cfg)
        obs, _ = env.reset()
        seen, acts, rewards = [], [], []
        for _ in range(t - cfg.window + 2):  # decisions at rows W - 1 .. t
            action = torch.tanh(obs @ proj)
            seen.append(obs.clone())
            acts.append(action)
            obs, reward, *_ = env.step(action)
            rewards.append(reward.item())
        return seen, acts, rewards

    base = trace(data)
    moved = trace(perturbed_after(data, t, seed + 1))
    later = trace(perturbed_after(data, t + 1, seed + 1))
    for other in (moved, later):
        # exact: rows <= t are the same numbers, and nothing else reaches these outputs
        assert all(torch.equal(a, b) for a, b in zip(base[0], other[0], strict=True))
        assert all(torch.equal(a, b) for a, b in zip(base[1], other[1], strict=True))
        assert base[2][:-1] == other[2][:-1]
    assert moved[2][-1] != base[2][-1]
    assert later[2][-1] == base[2][-1]  # exact: rows <= t + 1 agree


# ----------------------------------------------------------------------------- episodes


def test_truncation_autoreset_and_fixed_starts() -> None:
    data = make_data(10, 2)
    env = PortfolioEnv(data, 1, PortfolioEnvConfig(window=3, episode_length=4, random_start=False))
    env.reset()
    flags = []
    for _ in range(9):
        obs, _, _, truncated, info = env.step(torch.tensor([[0.3, 0.2, 0.5]]))
        flags.append(truncated.item())
        if truncated.item():
            assert rows_of(env) == [2]  # back at W - 1, all cash
            assert obs[0, -3:].tolist() == [1.0, 0.0, 0.0] and info["final_obs"][0, -3:].tolist() != [1, 0, 0]
            assert torch.equal(info["final_obs"][0, :-3], data.features[4:7].reshape(-1))  # exact: a copy
    assert flags == [False, False, False, True] * 2 + [False]
    # a longer episode than the data holds: decisions at rows 2..8, the last moves to row 9 = T - 1
    env = PortfolioEnv(data, 1, PortfolioEnvConfig(window=3, episode_length=100, random_start=False))
    env.reset()
    flags = []
    for _ in range(8):
        _, _, _, truncated, info = env.step(torch.tensor([[0.3, 0.2, 0.5]]))
        flags.append(truncated.item())
        if truncated.item():
            assert torch.equal(info["final_obs"][0, :-3], data.features[7:10].reshape(-1))  # exact: a copy
    assert flags == [False] * 6 + [True, False]
    assert rows_of(env) == [3]  # restarted at row 2, one decision made


def test_random_starts_cover_exactly_the_rows_where_an_episode_fits() -> None:
    data = make_data(20, 2)
    env = PortfolioEnv(data, 64, PortfolioEnvConfig(window=3, episode_length=2), seed=5)
    env.reset()
    seen = set(rows_of(env))
    for _ in range(30):
        env.step(torch.zeros(64, 3))
        steps = env.get_state()["state"]["steps"].tolist()
        seen |= {r for r, s in zip(rows_of(env), steps, strict=True) if s == 0}  # the new starts
    assert seen == set(range(2, 18))  # [W - 1, T - 1 - episode_length]


def test_terminates_at_the_maximum_drawdown() -> None:
    """Everything in an asset whose close falls 10% a bar, bought at the close, no cost: drawdowns
    0.1, 0.19, then 0.271 > 0.25."""
    data = make_data(12, 2)
    falling = torch.tensor([[100.0 * 0.9**k, 50.0] for k in range(12)], dtype=torch.float64)
    data = dataclasses.replace(data, open=falling.clone(), close=falling)
    cfg = PortfolioEnvConfig(
        window=2,
        actions="discrete",
        cost=0.0,
        max_drawdown=0.25,
        random_start=False,
        episode_length=8,
        fill="close",
    )
    env = PortfolioEnv(data, 2, cfg)
    env.reset()
    for k in (1, 2, 3):
        obs, reward, terminated, truncated, info = env.step(torch.tensor([2, 2]))
        assert reward.tolist() == pytest.approx([math.log(0.9)] * 2, abs=1e-6)
        assert terminated.tolist() == [k == 3] * 2 and not truncated.any()
    close_rel(info["equity"].numpy(), np.full(2, 0.9**3))
    assert rows_of(env) == [1, 1] and obs[:, -3:].tolist() == [[1.0, 0.0, 0.0]] * 2
    stats = env.episode_stats()
    assert stats["episodes"] == 2 and stats["mean_length"] == 3
    assert stats["mean_max_drawdown"] == pytest.approx(1 - 0.9**3, rel=1e-12)


def test_ruin_ends_the_episode_with_a_finite_reward() -> None:
    """A short that outgrows the equity (cash 2, short 1 of an asset that triples: -1) is ruin:
    equity floored at 1e-12 of the initial, all cash, terminated; the reward stays the log change
    (``log(1e-12)``), so the episode's rewards still sum to its log growth."""
    data = make_data(12, 2)
    prices = torch.tensor([[10.0, 50.0]] * 3 + [[30.0, 50.0]] * 9, dtype=torch.float64)
    data = dataclasses.replace(data, open=prices.clone(), close=prices)
    cfg = PortfolioEnvConfig(
        window=2, episode_length=5, actions="long_short", fill="close", cost=0.0, random_start=False
    )
    env = PortfolioEnv(data, 1, cfg)
    env.reset()
    _, r1, *_ = env.step(torch.tensor([[-1.0, 0.0]]))
    _, r2, terminated, _, info = env.step(torch.tensor([[-1.0, 0.0]]))
    assert r1.item() == 0.0 and terminated.item()
    assert r2.item() == pytest.approx(math.log(1e-12), abs=1e-5)
    assert info["equity"].item() == pytest.approx(1e-12, rel=1e-12)
    assert info["weights"][0].tolist() == [1.0, 0.0, 0.0]
    stats = env.episode_stats()
    assert stats["mean_return"] == pytest.approx(math.log(1e-12), rel=1e-12)
    assert stats["mean_max_drawdown"] == pytest.approx(1.0, abs=1e-11)


def test_episode_stats_count_and_average_finished_episodes() -> None:
    """Closes growing 1% a bar: all-in from the close earns log(1.01) a step, all-cash 0 (no cost)."""
    data = make_data(20, 2)
    rising = torch.tensor([[1.01**k, 1.0] for k in range(20)], dtype=torch.float64)
    data = dataclasses.replace(data, open=rising.clone(), close=rising)
    cfg = PortfolioEnvConfig(
        window=2, episode_length=3, actions="discrete", cost=0.0, random_start=False, fill="close"
    )
    env = PortfolioEnv(data, 2, cfg)
    env.reset()
    assert env.episode_stats() == {"episodes": 0.0}
    for _ in range(7):  # two episodes per env and one decision of a third
        env.step(torch.tensor([2, 0]))
    stats = env.episode_stats()
    assert stats["episodes"] == 4 and stats["mean_length"] == 3
    assert stats["mean_return"] == pytest.approx(3 * math.log(1.01) / 2, rel=1e-12)
    assert stats["mean_equity"] == pytest.approx((1.01**3 + 1) / 2, rel=1e-12)
    assert stats["mean_turnover"] == pytest.approx(0.5, rel=1e-12)  # 1 for all-in, 0 for cash
    assert stats["mean_max_drawdown"] == 0.0 and stats["mean_costs"] == 0.0
    assert env.episode_stats() == {"episodes": 0.0}


def test_step_transition_reads_nothing_on_the_host() -> None:
    cfg = PortfolioEnvConfig(window=3, episode_length=4, actions="long_short", max_drawdown=0.02, **COSTS)
    env = PortfolioEnv(make_data(30, 3, vol=0.04), 16, cfg)
    env.reset()
    rng = np.random.default_rng(0)
    actions = [random_actions("long_short", 16, 3, rng) for _ in range(10)]
    with HostReads():
        for a in actions:  # several ends and resets inside the guard
            tr = env.step_transition(a)
    assert tr.obs.shape == (16, 3 * 3 * 2 + 4) and tr.reward.dtype == torch.float32
    assert env.episode_stats()["episodes"] > 0


# ----------------------------------------------------------------------------- exact resume


@settings(max_examples=4)
@given(k=st.integers(0, 12), m=st.integers(1, 15), kind=st.sampled_from(KINDS))
def test_set_state_continues_bit_identically(tmp_path_factory, k: int, m: int, kind: str) -> None:  # type: ignore[no-untyped-def]
    data = make_data(40, 3, vol=0.03)
    cfg = PortfolioEnvConfig(window=3, episode_length=5, actions=kind, max_drawdown=0.05, **COSTS)  # type: ignore[arg-type]
    rng = np.random.default_rng(k)
    a = PortfolioEnv(data, 4, cfg, seed=1)
    a.reset()
    for _ in range(k):
        a.step(random_actions(kind, 4, 3, rng))
    path = tmp_path_factory.mktemp("env") / "env.safetensors"
    save_checkpoint(path, {"env": a.get_state()})  # as the training loop saves it
    b = PortfolioEnv(data, 4, cfg, seed=999)  # another seed, no reset: all comes from the state
    b.set_state(load_checkpoint(path)["env"])
    assert torch.equal(a.obs, b.obs)  # exact: restored
    for _ in range(m):
        actions = random_actions(kind, 4, 3, rng)
        outs = a.step(actions), b.step(actions.clone())
        for x, y in zip(outs[0][:4], outs[1][:4], strict=True):
            assert torch.equal(x, y)  # exact: the same computation on the same state
        for key, value in outs[0][4].items():
            assert torch.equal(value, outs[1][4][key]), key
    assert a.episode_stats() == b.episode_stats()  # exact: the accumulators came along
    assert a.vector_steps == b.vector_steps == k + m


def test_check_state_refuses_another_env_or_damaged_parts_and_changes_nothing() -> None:
    data = make_data(40, 3)
    cfg = PortfolioEnvConfig(window=3, episode_length=6)
    env = PortfolioEnv(data, 4, cfg)
    env.reset()
    env.step(torch.zeros(4, 4))
    good, before = env.get_state(), env.get_state()

    def damaged(**parts: object) -> dict:
        return {**good, "state": {**good["state"], **parts}}

    cases = [
        ({"nope": 1}, "lacks"),
        (PortfolioEnv(data, 5, cfg).get_state(), "is for"),
        (PortfolioEnv(dataclasses.replace(data, name="x"), 4, cfg).get_state(), "portfolio:x"),
        (PortfolioEnv(data.rows(0, 30), 4, cfg).get_state(), "is for"),
        (PortfolioEnv(data, 4, dataclasses.replace(cfg, cost=0.5)).get_state(), "saved with"),
        ({**good, "vector_steps": -1}, "vector_steps"),
        (damaged(weights=good["state"]["weights"].float()), "'weights' is not a torch.float64"),
        (damaged(value=torch.ones(3, dtype=torch.float64)), "'value' is not"),
        (damaged(row=torch.full((4,), 39)), "do not fit"),
        (damaged(steps=torch.full((4,), -1)), "do not fit"),
        (damaged(steps=torch.full((4,), 6), row=good["state"]["row"] + 5), "do not fit"),
        ({**good, "state": {k: v for k, v in good["state"].items() if k != "peak"}}, "must hold exactly"),
        (damaged(value=torch.full((4,), math.nan, dtype=torch.float64)), "non-finite"),
        (damaged(weights=torch.full((4, 4), math.inf, dtype=torch.float64)), "non-finite"),
        (damaged(value=-good["state"]["value"]), "equity that is not positive"),
        (damaged(peak=good["state"]["value"] / 2), "above its peak"),
        ({**good, "accumulators": torch.zeros(3)}, "accumulators"),
        ({**good, "obs": torch.zeros(4, 3)}, "'obs'"),
        ({**good, "generator": torch.zeros(3, 2)}, "generator state"),
    ]
    for state, match in cases:
        with pytest.raises(ValueError, match=match) as err:
            env.set_state(state)
        assert "\n" not in str(err.value)
    after = env.get_state()
    assert all(
        torch.equal(before["state"][k], after["state"][k]) for k in before["state"]
    )  # exact: untouched
    assert torch.equal(before["generator"], after["generator"]) and torch.equal(before["obs"], after["obs"])


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("field", "value"),
    [("window", 0), ("episode_length", 0), ("simplex_scale", 0.0), ("leverage", 0.0), ("cost", 1.0),
     ("cost", -1e-3), ("slippage_bps", 1e4), ("fixed_fee", -1.0), ("borrow_cost", -1.0),
     ("initial_cash", 0.0), ("max_drawdown", 0.0), ("max_drawdown", 1.5), ("cost", math.nan),
     ("window", 2.5), ("actions", "box"), ("fill", "open"), ("cost_model", "flat")],
)  # fmt: skip
def test_config_refuses_each_bad_value(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field) as err:
        PortfolioEnvConfig(**{field: value})  # type: ignore[arg-type]
    assert "\n" not in str(err.value)


def test_construction_and_step_errors() -> None:
    data = make_data(20, 3)
    for args, exc, match in [
        ((data, 0), ValueError, "num_envs must be a positive int, got 0"),
        ((data, True), ValueError, "num_envs"),
        ((data.features, 1), ValueError, "data must be a PanelData"),
        ((data, 1, PortfolioEnvConfig(window=5, episode_length=16)), ValueError,
         "20 rows, fewer than window \\+ episode_length = 21"),
        ((data, 1, PortfolioEnvConfig(window=20, random_start=False)), ValueError, "fewer than window \\+ 1"),
        ((dataclasses.replace(data, close=data.close[:, :2]), 1), ValueError, "data.close must be"),
    ]:  # fmt: skip
        with pytest.raises(exc, match=match):
            PortfolioEnv(*args)
    PortfolioEnv(data, 1, PortfolioEnvConfig(window=5, episode_length=15))  # just fits: rows 4 .. 19
    env = PortfolioEnv(data, 3, PortfolioEnvConfig(window=4, episode_length=8))
    with pytest.raises(RuntimeError, match="call reset\\(\\) before step\\(\\)"):
        env.step(torch.zeros(3, 4))
    env.reset()
    for actions, match in [
        (torch.zeros(3, 3), "shape \\(3, 4\\)"),
        (torch.zeros(4, 4), "shape \\(3, 4\\)"),
        (torch.zeros(3, 4, dtype=torch.int64), "float tensor"),
        (torch.zeros(3, 4, device="meta"), "meta"),
    ]:
        with pytest.raises(ValueError, match=match):
            env.step(actions)
    disc = PortfolioEnv(data, 3, PortfolioEnvConfig(window=4, episode_length=8, actions="discrete"))
    disc.reset()
    for actions in (torch.zeros(3), torch.zeros(4, dtype=torch.int64), torch.zeros(3, dtype=torch.bool)):
        with pytest.raises(ValueError, match="actions must be 3 integers"):
            disc.step(actions)
    ls = PortfolioEnv(data, 1, PortfolioEnvConfig(window=4, episode_length=8, actions="long_short"))
    assert ls.single_action_space.shape == (3,) and disc.single_action_space.n == 6  # N + 3: hold last


# ----------------------------------------------------------------------------- run_period


def test_run_period_equal_weight_matches_the_model() -> None:
    data = make_data(30, 3, seed=2)
    cfg = PortfolioEnvConfig(window=4, episode_length=5, actions="weights", **COSTS)
    rec = run_period(weights_policy([0.0, 1 / 3, 1 / 3, 1 / 3]), data, cfg)
    s = len(data) - cfg.window
    assert len(rec["dates"]) == len(rec["equity"]) == s + 1
    assert len(rec["log_returns"]) == len(rec["turnover"]) == len(rec["costs"]) == s
    assert rec["weights"].shape == (s, 4) and rec["equity"][0] == 1.0
    assert rec["dates"][0] == str(data.time[3])[:10] and rec["dates"][-1] == str(data.time[-1])[:10]
    model = Model(data, dataclasses.replace(cfg, random_start=False, episode_length=s))
    ep = model.start(cfg.window - 1)
    target = np.array([0.0, 1 / 3, 1 / 3, 1 / 3], dtype=np.float32)
    for i in range(s):
        out = model.step(ep, target)
        close_rel(rec["equity"][i + 1], ep.value / cfg.initial_cash)
        close_rel(rec["weights"][i], ep.weights)
        close_rel(rec["turnover"][i], out["turnover"])
    close_rel(np.exp(np.cumsum(rec["log_returns"])), rec["equity"][1:])
