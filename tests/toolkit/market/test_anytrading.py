"""The compatibility mode against the installed gym-anytrading 2.0.0, step for step.

Each of our N batched envs runs beside its own package env, fed the same action sequence, through
at least one truncation and into the next episode (the package env is reset where it truncates;
ours resets in the same step). Compared at every step: observation, reward, terminated,
truncated, ``total_reward``, ``total_profit``, ``position``; at truncation also our
``final_obs`` against the package's last observation and our reset observation against its
``reset()``.

Tolerance: none (bit-for-bit equality). Under NumPy >= 2 (NEP 50) the package computes prices,
features, rewards and profits in f32, and our env does the same f32 operations in the same order,
each correctly rounded on both sides. Under NumPy 1.x the package's scalar arithmetic promotes to
f64, so those tests are skipped there with that reason (they would fail in the last bits).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

gym = pytest.importorskip("gymnasium")  # first: a bare machine's skip reason names gymnasium
gym_anytrading = pytest.importorskip(
    "gym_anytrading",
    reason="gym-anytrading is not installed (the 'market' extra: pip install 'tritonrl[market]')",
)

from gym_anytrading import datasets  # noqa: E402
from gym_anytrading.envs import ForexEnv, StocksEnv  # noqa: E402
from tritonrl.toolkit.bars import Bars  # noqa: E402
from tritonrl.toolkit.envs.market import ANYTRADING_WINDOW, AnyTradingEnv, process_data  # noqa: E402
from tritonrl.toolkit.envs.vector import Transition  # noqa: E402

exact_numpy = pytest.mark.skipif(
    int(np.__version__.split(".")[0]) < 2,
    reason="under NumPy 1.x gym-anytrading's scalar arithmetic promotes to f64; this mode "
    "reproduces its NumPy >= 2 (NEP 50) f32 arithmetic bit for bit",
)

DATA = {"googl": datasets.STOCKS_GOOGL, "eurusd": datasets.FOREX_EURUSD_1H_ASK}
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _close(dataset: str) -> np.ndarray:
    return DATA[dataset]["Close"].to_numpy()


def _actions(rng: np.random.Generator, steps: int, style: str) -> np.ndarray:
    """One env's action sequence: ``uniform`` bits, ``sticky`` (flip with probability 0.03,
    long holds), ``buy`` (always Buy: profit booked only at truncation), ``odd`` (values 0, 1
    and 2; 2 never trades, in the package as here)."""
    if style == "uniform":
        return rng.integers(0, 2, steps)
    if style == "sticky":
        return np.cumsum(rng.random(steps) < 0.03) % 2
    if style == "buy":
        return np.ones(steps, dtype=np.int64)
    if style == "odd":
        return rng.integers(0, 3, steps)
    raise AssertionError(style)


def _feed(actions: np.ndarray, feed: str, device: torch.device) -> Any:
    """One step's actions ``[N]`` as a user passes them: a tensor, a numpy array, a Python int."""
    if feed == "tensor":
        return torch.as_tensor(actions, dtype=torch.int64, device=device)
    if feed == "numpy":
        return actions.astype(np.int32)  # any integer dtype
    assert feed == "int" and actions.shape == (1,)
    return int(actions[0])


def _side_by_side(
    make_package: Callable[[], Any], ours: AnyTradingEnv, actions: np.ndarray, feed: str = "tensor"
) -> dict[str, int]:
    """Step ``ours`` and one package env per column of ``actions`` ``[L, N]``; assert equality.
    ``feed``: how our env gets its actions (see :func:`_feed`)."""
    steps, n = actions.shape
    assert ours.num_envs == n
    pkgs = [make_package() for _ in range(n)]
    obs, info = ours.reset(seed=0)
    for i, pkg in enumerate(pkgs):
        p_obs, p_info = pkg.reset(seed=i)
        np.testing.assert_array_equal(obs[i].cpu().numpy(), p_obs)
        assert info["total_reward"][i].item() == p_info["total_reward"]
        assert info["total_profit"][i].item() == p_info["total_profit"]
        assert info["position"][i].item() == p_info["position"].value
    truncations = trades = 0
    for t in range(steps):
        obs, reward, terminated, truncated, info = ours.step(_feed(actions[t], feed, ours.device))
        got = {
            "obs": obs.cpu().numpy(),
            "final_obs": info["final_obs"].cpu().numpy(),
            "reward": reward.cpu().numpy(),
            "terminated": terminated.cpu().numpy(),
            "truncated": truncated.cpu().numpy(),
            "total_reward": info["total_reward"].cpu().numpy(),
            "total_profit": info["total_profit"].cpu().numpy(),
            "position": info["position"].cpu().numpy(),
        }
        assert reward.dtype == torch.float32 and got["obs"].dtype == np.float32
        for i, pkg in enumerate(pkgs):
            p_obs, p_reward, p_term, p_trunc, p_info = pkg.step(int(actions[t, i]))
            where = f"step {t}, env {i}, action {actions[t, i]}"
            np.testing.assert_array_equal(got["final_obs"][i], p_obs, err_msg=where)
            # the package's reward is a Python int 0 or an np.float32; equality of values
            assert got["reward"][i] == np.float32(p_reward), where
            assert bool(got["terminated"][i]) is bool(p_term) is False, where
            assert bool(got["truncated"][i]) is bool(p_trunc), where
            assert got["total_reward"][i] == np.float32(p_info["total_reward"]), where
            assert got["total_profit"][i] == np.float32(p_info["total_profit"]), where
            assert got["position"][i] == p_info["position"].value, where
            trades += int(p_reward != 0)
            if p_trunc:
                p_obs, _ = pkg.reset()
            else:
                np.testing.assert_array_equal(got["final_obs"][i], got["obs"][i], err_msg=where)
            np.testing.assert_array_equal(got["obs"][i], p_obs, err_msg=where)
        truncations += int(got["truncated"].all())
        assert got["truncated"].all() or not got["truncated"].any()  # lockstep
    return {"truncations": truncations, "trades": trades}


def _run(kind: str, ours: AnyTradingEnv, make_package: Callable[[], Any], episodes: float, seed: int) -> None:
    steps = int((ours.end_tick - ours.start_tick) * episodes)
    rng = np.random.default_rng(seed)
    styles = ["uniform", "sticky", "buy", "odd"][: ours.num_envs]
    actions = np.stack([_actions(rng, steps, s) for s in styles], axis=1)
    seen = _side_by_side(make_package, ours, actions)
    assert seen["truncations"] == int(episodes)  # the run crossed every episode end it should
    assert seen["trades"] > 0  # rewards were non-zero somewhere: the comparison had teeth


@exact_numpy
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("env_id", "kind", "dataset"), [("stocks-v0", "stocks", "googl"), ("forex-v0", "forex", "eurusd")]
)
def test_registered_ids_step_for_step(env_id: str, kind: str, dataset: str, device: str) -> None:
    """The registered ids with their defaults: one whole episode and into the next, 4 envs."""
    ours = AnyTradingEnv.from_close(_close(dataset), kind=kind, num_envs=4, device=device)
    pkg0 = gym.make(env_id, disable_env_checker=True).unwrapped
    assert ours.window_size == pkg0.window_size == ANYTRADING_WINDOW[kind]
    assert (ours.start_tick, ours.end_tick) == (pkg0._start_tick, pkg0._end_tick)
    assert ours.single_observation_space == pkg0.observation_space
    assert ours.single_action_space == pkg0.action_space
    _run(kind, ours, lambda: gym.make(env_id, disable_env_checker=True).unwrapped, episodes=1.05, seed=1)


CUSTOM = [
    # kind, dataset, window, frame_bound, unit_side
    ("stocks", "googl", 10, (50, 140), None),
    ("stocks", "eurusd", 3, (400, 470), None),
    ("forex", "eurusd", 5, (100, 180), "left"),
    ("forex", "eurusd", 12, (3000, 3060), "right"),
    ("forex", "googl", 7, (1000, 1080), "right"),
    ("forex", "googl", 1, (1, 60), "left"),
]


@exact_numpy
@pytest.mark.parametrize(("kind", "dataset", "window", "bound", "unit_side"), CUSTOM)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_custom_window_and_frame_step_for_step(
    kind: str, dataset: str, window: int, bound: tuple[int, int], unit_side: str | None, seed: int
) -> None:
    """Custom window sizes and frame bounds on both datasets, three episodes, 4 envs per seed."""
    df = DATA[dataset]
    extra: dict[str, Any] = {} if unit_side is None else {"unit_side": unit_side}
    cls = StocksEnv if kind == "stocks" else ForexEnv

    def make() -> Any:
        return cls(df=df, window_size=window, frame_bound=bound, **extra)

    ours = AnyTradingEnv.from_close(
        _close(dataset), kind=kind, window_size=window, frame_bound=bound, num_envs=4, **extra
    )
    _run(kind, ours, make, episodes=3, seed=seed)


@exact_numpy
def test_custom_fees_step_for_step() -> None:
    """Fees set on the package env after construction (its only way) match the keywords here."""
    fees = {"trade_fee_bid_percent": 0.02, "trade_fee_ask_percent": 0.001}

    def make() -> Any:
        env = StocksEnv(df=DATA["googl"], window_size=8, frame_bound=(20, 90))
        vars(env).update(fees)
        return env

    ours = AnyTradingEnv.from_close(_close("googl"), window_size=8, frame_bound=(20, 90), num_envs=2, **fees)
    _run("stocks", ours, make, episodes=2, seed=3)

    def make_fx() -> Any:
        env = ForexEnv(df=DATA["eurusd"], window_size=8, frame_bound=(20, 90))
        env.trade_fee = 0.001
        return env

    ours = AnyTradingEnv.from_close(
        _close("eurusd"), kind="forex", window_size=8, frame_bound=(20, 90), num_envs=2, trade_fee=0.001
    )
    _run("forex", ours, make_fx, episodes=2, seed=4)


@pytest.mark.parametrize("dataset", ["googl", "eurusd"])
def test_process_data_matches_the_package(dataset: str) -> None:
    pkg = StocksEnv(df=DATA[dataset], window_size=6, frame_bound=(40, 200))
    prices, features = process_data(_close(dataset), 6, (40, 200))
    assert prices.dtype == features.dtype == np.float32
    np.testing.assert_array_equal(prices, pkg.prices)
    np.testing.assert_array_equal(features, pkg.signal_features)


def test_from_bars_and_custom_features() -> None:
    close = _close("googl")
    n = close.shape[0]
    bars = Bars(
        "googl",
        np.arange(n).astype("datetime64[D]").astype("datetime64[s]"),
        close,
        close,
        close,
        close,
        close,
    )
    a = AnyTradingEnv.from_bars(bars, num_envs=2)
    b = AnyTradingEnv.from_close(close, num_envs=2)
    # exact: the same features from the same closes
    torch.testing.assert_close(a.reset()[0], b.reset()[0], rtol=0, atol=0)
    # A custom _process_data (three features) goes through the plain constructor.
    prices, feats = process_data(close, 4, (4, 50))
    env = AnyTradingEnv(prices, np.column_stack([feats, feats[:, 1] ** 2]), kind="stocks", window_size=4)
    obs, _ = env.reset()
    assert obs.shape == (1, 4, 3) and env.single_observation_space.shape == (4, 3)


def test_same_step_autoreset_and_transition() -> None:
    prices, feats = process_data(np.linspace(10.0, 20.0, 30), 3, (3, 8))  # ticks 3..7: 4 steps
    env = AnyTradingEnv(prices, feats, kind="stocks", window_size=3, num_envs=2)
    assert env.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
    first, _ = env.reset()
    buy = torch.ones(2, dtype=torch.int64)
    for _ in range(3):
        tr = env.step_transition(buy)
        assert isinstance(tr, Transition) and not tr.truncated.any()
        assert torch.equal(tr.obs, tr.next_obs) and tr.obs is env.obs
    obs, reward, terminated, truncated, info = env.step(buy)
    assert truncated.all() and not terminated.any()
    assert torch.equal(obs, first) and env.obs is obs  # the reset observation
    assert torch.equal(info["final_obs"][0], torch.from_numpy(feats[5:8]))  # the last one, tick 7
    # The finished episode: bought at tick 4, held Long, the profit booked at truncation (tick 7).
    assert info["position"].tolist() == [1, 1]
    expected = np.float32(1.0) * np.float32(1 - 0.005) / prices[4] * np.float32(1 - 0.01) * prices[7]
    assert info["total_profit"].tolist() == [float(expected)] * 2
    # The next step starts the new episode from scratch (position Short, profit 1).
    _, _, _, _, info = env.step(torch.zeros(2, dtype=torch.int64))
    assert info["position"].tolist() == [0, 0] and info["total_profit"].tolist() == [1.0, 1.0]


class _ScalarReads(TorchDispatchMode):
    """Counts host reads of tensor values (``.item()``, ``bool(t)``...: ``_local_scalar_dense``)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func is torch.ops.aten._local_scalar_dense.default:
            self.count += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("kind", ["stocks", "forex"])
def test_no_host_read_per_step(kind: str) -> None:
    """Steps (a truncation and autoreset included) never read a tensor value on the host."""
    env = AnyTradingEnv.from_close(
        _close("eurusd"), kind=kind, window_size=4, frame_bound=(4, 12), num_envs=5
    )
    env.reset()
    actions = torch.randint(0, 2, (20, 5), generator=torch.Generator().manual_seed(0))
    with _ScalarReads() as reads:
        truncated = sum(env.step(actions[t])[3] for t in range(20))
    assert reads.count == 0
    assert truncated.sum().item() == 2 * 5  # the guarded steps did cross episode ends


def test_errors() -> None:
    close = _close("googl")
    with pytest.raises(ValueError, match="frame_bound"):
        process_data(close, 10, (5, 100))  # first < window (the package wraps around)
    with pytest.raises(ValueError, match="frame_bound"):
        process_data(close, 10, (10, close.shape[0] + 1))  # past the end (the package clips)
    with pytest.raises(ValueError, match="frame_bound"):
        process_data(close, 10, (10, 11))  # no step to take
    with pytest.raises(ValueError, match="window_size"):
        process_data(close, 0, (10, 100))
    with pytest.raises(ValueError, match="close must be"):
        process_data(close[:, None], 10, (10, 100))
    with pytest.raises(ValueError, match="NaN"):
        process_data(np.where(np.arange(close.shape[0]) == 50, np.nan, close), 10, (10, 100))
    with pytest.raises(ValueError, match="kind"):
        AnyTradingEnv.from_close(close, kind="crypto")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unit_side"):
        AnyTradingEnv.from_close(close, kind="forex", unit_side="middle")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_envs"):
        AnyTradingEnv.from_close(close, num_envs=0)
    prices, feats = process_data(close, 5, (5, 100))
    with pytest.raises(ValueError, match="too few"):
        AnyTradingEnv(prices[:6], feats[:6], kind="stocks", window_size=5)
    with pytest.raises(ValueError, match=r"\[T\]"):
        AnyTradingEnv(prices, feats[:-1], kind="stocks", window_size=5)
    env = AnyTradingEnv(prices, feats, kind="stocks", window_size=5, num_envs=3)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(torch.zeros(3, dtype=torch.int64))
    env.reset()
    for bad in (
        torch.zeros(3, dtype=torch.int32),
        torch.zeros(2, dtype=torch.int64),
        torch.zeros(3, 1).long(),
    ):
        with pytest.raises(ValueError, match=r"int64 \[3\]"):
            env.step(bad)
    for bad, match in [
        (np.zeros(2, dtype=np.int64), r"int64 \[3\]"),  # a numpy array of the wrong length
        (np.zeros(3), "integers"),
        (np.zeros(3, dtype=bool), "integers"),
        (1, "single action steps one env, this one has 3"),
        ("buy", "numbers"),
        (object(), "numbers"),
    ]:
        with pytest.raises(ValueError, match=match):
            env.step(bad)
    one = AnyTradingEnv(prices, feats, kind="stocks", window_size=5, num_envs=1)
    one.reset()
    for bad, match in [(True, "integers, got bool"), (1.0, "integers"), (np.float32(1), "integers")]:
        with pytest.raises(ValueError, match=match):
            one.step(bad)


@exact_numpy
@pytest.mark.parametrize(("feed", "num_envs"), [("int", 1), ("numpy", 3)])
def test_ints_and_numpy_actions_step_for_step(feed: str, num_envs: int) -> None:
    """A Python int (one env, as gym-anytrading users step it) and numpy integer arrays give
    the same run as tensors do, step for step against the package."""
    ours = AnyTradingEnv.from_close(
        _close("googl"), kind="stocks", window_size=10, frame_bound=(50, 120), num_envs=num_envs
    )
    rng = np.random.default_rng(3)
    steps = int((ours.end_tick - ours.start_tick) * 1.2)
    actions = np.stack([_actions(rng, steps, s) for s in ["uniform", "odd", "sticky"][:num_envs]], axis=1)
    seen = _side_by_side(
        lambda: StocksEnv(df=DATA["googl"], window_size=10, frame_bound=(50, 120)), ours, actions, feed=feed
    )
    assert seen["truncations"] == 1 and seen["trades"] > 0
