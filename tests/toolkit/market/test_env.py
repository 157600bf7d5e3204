"""MarketEnv: the batched trading environment against a plain-Python model of its rules.

The data is built here by hand (random features and returns on the CPU), so these tests depend
on nothing but the :class:`MarketData` record.

Tolerances: the env computes in f32 (rewards, log-equity, Welford moments), the model in Python
floats (f64). Rewards are O(0.1) at most, so one f32 rounding is ~1e-8: ``1e-6`` absolute bounds
a reward or a drawdown with room to spare; equity and turnover (sums up to ~40) are compared
relatively (``1e-5``: 40 f32 additions of ~6e-8 relative error each). The Sharpe ratio divides by
the standard deviation of <= 40 rewards, computed incrementally in f32: ``1e-3`` relative (and
absolute, for ratios near 0). Observations, flags, positions and rows must be exact.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

gym = pytest.importorskip("gymnasium")

from helpers import HostReads  # noqa: E402
from tritonrl.toolkit.bars import MarketData  # noqa: E402
from tritonrl.toolkit.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from tritonrl.toolkit.envs.market import MarketEnv, MarketEnvConfig  # noqa: E402
from tritonrl.toolkit.envs.vector import Transition  # noqa: E402  (imports gymnasium)

PPY = 252.0


def make_data(
    rows: int = 120,
    features: int = 3,
    *,
    seed: int = 0,
    vol: float = 0.03,
    dtype: torch.dtype = torch.float32,
    name: str = "test",
) -> MarketData:
    """Random features ``[rows, features]`` (in ``dtype``) and f32 log returns of scale ``vol``."""
    g = torch.Generator().manual_seed(seed)
    log_return = torch.randn(rows, generator=g) * vol
    log_return[0] = 0.0
    return MarketData(
        name=name,
        features=torch.randn(rows, features, generator=g).to(dtype),
        log_return=log_return,
        close=100.0 * log_return.cumsum(0).exp(),
        time=np.arange(rows).astype("datetime64[D]").astype("datetime64[s]"),
        feature_names=tuple(f"f{i}" for i in range(features)),
        periods_per_year=PPY,
    )


def row_data(rows: int, features: int = 2) -> MarketData:
    """Features that name their row: ``features[r, f] = r + f / 8`` (exact in f32)."""
    data = make_data(rows, features)
    grid = torch.arange(rows, dtype=torch.float32)[:, None] + torch.arange(features) / 8
    return dataclasses.replace(data, features=grid)


def random_actions(env: MarketEnv, g: torch.Generator) -> torch.Tensor:
    if env.config.actions == "discrete":
        return torch.randint(0, 3, (env.num_envs,), generator=g)
    return torch.rand(env.num_envs, 1, generator=g) * 3.0 - 1.5  # beyond [-1, 1]: clipped


def rows_of(env: MarketEnv) -> list[int]:
    return env.get_state()["state"]["row"].tolist()


# ----------------------------------------------------------------------------- the Python model


@dataclasses.dataclass
class Episode:
    """One env's episode in Python floats."""

    row: int
    position: float = 0.0
    log_equity: float = 0.0
    peak: float = 0.0
    max_drawdown: float = 0.0
    turnover: float = 0.0
    rewards: list[float] = dataclasses.field(default_factory=list)

    def sharpe(self) -> float:
        sd = statistics.pstdev(self.rewards)
        return statistics.fmean(self.rewards) / sd * math.sqrt(PPY) if sd > 0 else 0.0


def expected_obs(data: MarketData, window: int, row: int, position: float) -> torch.Tensor:
    win = data.features[row - window + 1 : row + 1].reshape(-1)
    return torch.cat((win, torch.tensor([position], dtype=win.dtype)))


def run_against_model(env: MarketEnv, data: MarketData, steps: int, seed: int) -> dict[str, int]:
    """Step ``env`` with random actions and check every output against :class:`Episode`.

    Returns:
        counts of terminations, truncations (of each cause) and finished episodes.
    """
    cfg, w, n_rows = env.config, env.config.window, len(data)
    lr = data.log_return.double().tolist()
    g = torch.Generator().manual_seed(seed)
    obs, _ = env.reset(seed=seed)
    episodes = [Episode(row=r) for r in rows_of(env)]
    for e, ep in enumerate(episodes):
        assert torch.equal(obs[e], expected_obs(data, w, ep.row, 0.0))
    counts = {"terminated": 0, "truncated_length": 0, "truncated_end": 0, "episodes": 0}
    finished: list[tuple[float, int, float, float, float, float]] = []
    for _ in range(steps):
        actions = random_actions(env, g)
        obs, reward, terminated, truncated, info = env.step(actions)
        new_rows = rows_of(env)
        for e, ep in enumerate(episodes):
            a = actions[e].tolist()
            p = float(a - 1) if cfg.actions == "discrete" else min(max(a[0], -1.0), 1.0)
            change = abs(p - ep.position)
            r = p * lr[ep.row + 1] - cfg.cost * change - cfg.borrow_cost * max(-p, 0.0)
            ep.row += 1
            ep.position = p
            ep.log_equity += r
            ep.peak = max(ep.peak, ep.log_equity)
            drawdown = 1.0 - math.exp(ep.log_equity - ep.peak)
            ep.max_drawdown = max(ep.max_drawdown, drawdown)
            ep.turnover += change
            ep.rewards.append(r)
            term = cfg.max_drawdown < 1.0 and drawdown > cfg.max_drawdown
            by_length = len(ep.rewards) >= cfg.episode_length
            by_end = ep.row >= n_rows - 1
            assert reward[e].item() == pytest.approx(r, abs=1e-6)
            assert (terminated[e].item(), truncated[e].item()) == (term, by_length or by_end)
            assert info["position"][e].item() == p
            assert info["equity"][e].item() == pytest.approx(math.exp(ep.log_equity), rel=1e-5)
            assert info["max_drawdown"][e].item() == pytest.approx(ep.max_drawdown, abs=1e-6)
            assert info["turnover"][e].item() == pytest.approx(ep.turnover, rel=1e-5)
            assert info["sharpe"][e].item() == pytest.approx(ep.sharpe(), rel=1e-3, abs=1e-3)
            # the true next observation: rows t+1-W+1 .. t+1 and the new position
            assert torch.equal(info["final_obs"][e], expected_obs(data, w, ep.row, p))
            done = term or by_length or by_end
            assert info["_final_obs"][e].item() == done
            if done:
                counts["terminated"] += term
                counts["truncated_length"] += by_length
                counts["truncated_end"] += by_end and not by_length
                counts["episodes"] += 1
                finished.append(
                    (
                        ep.log_equity,
                        len(ep.rewards),
                        math.exp(ep.log_equity),
                        ep.sharpe(),
                        ep.max_drawdown,
                        ep.turnover,
                    )
                )
                start = new_rows[e]
                lo = w - 1
                hi = n_rows - 1 - cfg.episode_length if cfg.random_start else w - 1
                assert lo <= start <= hi
                episodes[e] = ep = Episode(row=start)
                assert torch.equal(obs[e], expected_obs(data, w, start, 0.0))  # the reset obs
            else:
                assert new_rows[e] == ep.row
                assert torch.equal(obs[e], info["final_obs"][e])
    stats = env.episode_stats()
    assert stats["episodes"] == counts["episodes"]
    if finished:
        means = [statistics.fmean(col) for col in zip(*finished, strict=True)]
        names = ["return", "length", "equity", "sharpe", "max_drawdown", "turnover"]
        for name, mean in zip(names, means, strict=True):
            assert stats[f"mean_{name}"] == pytest.approx(mean, rel=1e-3, abs=1e-5), name
    assert env.episode_stats() == {"episodes": 0.0}  # drained
    return counts


CASES = {
    "discrete": MarketEnvConfig(window=4, episode_length=30, cost=1e-3, borrow_cost=2e-4, max_drawdown=0.15),
    "continuous": MarketEnvConfig(
        window=3, episode_length=25, actions="continuous", cost=2e-3, borrow_cost=1e-4, max_drawdown=0.15
    ),
    "no-drawdown-limit": MarketEnvConfig(window=5, episode_length=20, cost=1e-3, max_drawdown=1.0),
    "fixed-start": MarketEnvConfig(window=4, episode_length=40, random_start=False, max_drawdown=0.3),
    "whole-period": MarketEnvConfig(
        window=4, episode_length=500, actions="continuous", random_start=False, max_drawdown=1.0
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_steps_match_the_python_model(case: str) -> None:
    cfg = CASES[case]
    data = make_data(60 if case == "whole-period" else 120, vol=0.04)
    env = MarketEnv(data, 5, cfg, seed=1)
    counts = run_against_model(env, data, steps=130, seed=7)
    assert counts["episodes"] > 0
    # each case reaches the ends it is meant to reach (so the checks above ran on them)
    if cfg.max_drawdown < 1.0:
        assert counts["terminated"] > 0
    else:
        assert counts["terminated"] == 0
    if case == "whole-period":
        assert counts["truncated_end"] > 0 and counts["truncated_length"] == 0
    else:
        assert counts["truncated_length"] > 0


# ----------------------------------------------------------------------------- ends of episodes


def test_terminates_at_the_maximum_drawdown() -> None:
    data = dataclasses.replace(make_data(50), log_return=torch.full((50,), -0.1))
    env = MarketEnv(data, 2, MarketEnvConfig(window=2, cost=0.0, max_drawdown=0.25, random_start=False))
    env.reset()
    long = torch.full((2,), 2)
    # drawdowns 1 - exp(-0.1 k): 0.095, 0.181, then 0.259 > 0.25
    for k in (1, 2, 3):
        obs, reward, terminated, truncated, info = env.step(long)
        assert torch.allclose(reward, torch.full((2,), -0.1))
        assert terminated.tolist() == [k == 3] * 2 and not truncated.any()
    assert info["max_drawdown"].tolist() == pytest.approx([1 - math.exp(-0.3)] * 2, abs=1e-6)
    assert info["final_obs"][:, -1].tolist() == [1.0, 1.0]  # held long when it ended
    assert obs[:, -1].tolist() == [0.0, 0.0] and rows_of(env) == [1, 1]  # reset: flat, first row
    assert info["equity"].tolist() == pytest.approx([math.exp(-0.3)] * 2, rel=1e-6)


def test_never_terminates_with_max_drawdown_one() -> None:
    data = dataclasses.replace(make_data(50), log_return=torch.full((50,), -2.0))
    env = MarketEnv(data, 1, MarketEnvConfig(window=2, episode_length=40, max_drawdown=1.0))
    env.reset()
    for _ in range(39):
        _, _, terminated, _, info = env.step(torch.tensor([2]))
        assert not terminated.any()
    assert info["equity"].item() < 1e-30  # exp(-78): nearly all lost, still running


def test_truncates_at_episode_length_and_at_the_end_of_the_data() -> None:
    data = make_data(10)
    env = MarketEnv(data, 1, MarketEnvConfig(window=3, episode_length=4, random_start=False))
    env.reset()
    flags = [env.step(torch.tensor([1]))[3].item() for _ in range(9)]
    assert flags == [False, False, False, True] * 2 + [False]
    # a longer episode than the data holds: decisions at rows 2..8, the last moves to row 9 = T-1
    env = MarketEnv(data, 1, MarketEnvConfig(window=3, episode_length=100, random_start=False))
    env.reset()
    flags = [env.step(torch.tensor([1]))[3].item() for _ in range(8)]
    assert flags == [False] * 6 + [True, False]
    assert rows_of(env) == [3]  # restarted at row 2, one decision made


def test_random_starts_cover_exactly_the_rows_where_an_episode_fits() -> None:
    data = make_data(20)
    env = MarketEnv(data, 64, MarketEnvConfig(window=3, episode_length=1), seed=5)
    env.reset()
    seen = set(rows_of(env))
    for _ in range(20):  # every episode ends at every step: new starts everywhere
        env.step(torch.ones(64, dtype=torch.int64))
        seen |= set(rows_of(env))
    assert seen == set(range(2, 19))  # [W - 1, T - 1 - episode_length]


# ----------------------------------------------------------------------------- observations


def test_an_observation_never_holds_a_later_row() -> None:
    data = row_data(80)
    cfg = MarketEnvConfig(window=6, episode_length=15, max_drawdown=1.0)
    env = MarketEnv(data, 8, cfg, seed=2)
    obs, _ = env.reset()
    g = torch.Generator().manual_seed(0)
    for _ in range(40):
        window = obs[:, :-1].reshape(8, 6, 2)
        rows = torch.tensor(rows_of(env))
        # the window is exactly rows t-5 .. t, oldest first: nothing of row t+1 or later
        assert torch.equal(window[:, :, 0], rows[:, None] + torch.arange(-5, 1).float())
        assert torch.equal(window[:, :, 1] - window[:, :, 0], torch.full((8, 6), 1 / 8))
        obs, *_ = env.step(random_actions(env, g))


def test_the_position_column_is_the_position_held() -> None:
    cfg = MarketEnvConfig(window=2, episode_length=20, actions="continuous", max_drawdown=1.0)
    env = MarketEnv(make_data(60), 3, cfg)
    obs, _ = env.reset()
    assert obs[:, -1].tolist() == [0.0, 0.0, 0.0]
    obs, *_ = env.step(torch.tensor([[0.25], [-3.0], [0.5]]))
    assert obs[:, -1].tolist() == [0.25, -1.0, 0.5]


def test_bf16_features_give_bf16_observations_without_casting_the_features() -> None:
    data = make_data(80, 4, dtype=torch.bfloat16)
    env = MarketEnv(data, 6, MarketEnvConfig(window=5, episode_length=10, max_drawdown=1.0))
    casts: list[tuple[torch.dtype, torch.dtype, int]] = []

    class Casts(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            src = args[0] if args and isinstance(args[0], torch.Tensor) else None
            if func in (torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default):
                source = args[1] if func is torch.ops.aten.copy_.default else src
                if isinstance(source, torch.Tensor) and source.dtype != out.dtype:
                    casts.append((source.dtype, out.dtype, source.numel()))
            return out

    with Casts():
        obs, _ = env.reset()
        for _ in range(12):
            obs, reward, *_ = env.step(torch.randint(0, 3, (6,)))
    assert obs.dtype == torch.bfloat16 and reward.dtype == torch.float32
    rows = rows_of(env)
    for e in range(6):
        assert torch.equal(obs[e, :-1], data.features[rows[e] - 4 : rows[e] + 1].reshape(-1))
    bf16_casts = [c for c in casts if torch.bfloat16 in c[:2]]
    assert bf16_casts, "the position column is written in bf16: the probe must see that cast"
    # only the position columns: both observations of a step (the true next one and the one after
    # the autoreset, 2 x 6 values) in one copy, and a reset's zeros written in place
    assert all(c == (torch.float32, torch.bfloat16, 12) for c in bf16_casts), bf16_casts


# ----------------------------------------------------------------------------- seeds and resume


def test_same_seed_same_episodes_other_seed_other_starts() -> None:
    data = make_data(200)
    cfg = MarketEnvConfig(window=4, episode_length=10)

    def trace(seed: int) -> list[torch.Tensor]:
        env = MarketEnv(data, 16, cfg, seed=seed)
        obs, _ = env.reset()
        g = torch.Generator().manual_seed(0)
        out = [obs]
        for _ in range(30):
            obs, reward, terminated, truncated, info = env.step(random_actions(env, g))
            out += [obs, reward, terminated, truncated, info["final_obs"], info["sharpe"]]
        return out

    a, b, c = trace(3), trace(3), trace(4)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0], c[0])
    # reset(seed=...) restarts the stream
    env = MarketEnv(data, 16, cfg, seed=99)
    assert torch.equal(env.reset(seed=3)[0], a[0])


def test_get_state_set_state_resumes_exactly(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = make_data(150, vol=0.05)
    cfg = MarketEnvConfig(window=4, episode_length=12, actions="continuous", cost=1e-3, max_drawdown=0.2)
    a = MarketEnv(data, 8, cfg, seed=1)
    a.reset()
    g = torch.Generator().manual_seed(0)
    for _ in range(25):
        a.step(random_actions(a, g))
    # through a checkpoint file, as the training loop saves it
    save_checkpoint(tmp_path / "env.safetensors", {"env": a.get_state()})
    state = load_checkpoint(tmp_path / "env.safetensors")["env"]
    b = MarketEnv(data, 8, cfg, seed=12345)  # another seed and no reset: all comes from the state
    b.set_state(state)
    assert torch.equal(a.obs, b.obs)
    for _ in range(40):
        actions = random_actions(a, g)
        ta, tb = a.step_transition(actions), b.step_transition(actions.clone())
        for field in ("obs", "reward", "next_obs", "terminated", "truncated"):
            assert torch.equal(getattr(ta, field), getattr(tb, field)), field
    assert a.episode_stats() == b.episode_stats()  # the accumulators came along
    assert a.vector_steps == b.vector_steps == 65


def test_check_state_refuses_another_env_and_changes_nothing() -> None:
    data = make_data(100)
    cfg = MarketEnvConfig(window=4, episode_length=10)
    env = MarketEnv(data, 4, cfg)
    env.reset()
    good = env.get_state()
    before = env.get_state()

    def damaged(**changes: object) -> dict:
        state = dict(good)
        state.update(changes)
        return state

    bad_rows = {**good["state"], "row": torch.full((4,), 99)}
    for state, match in [
        ({"nope": 1}, "lacks"),
        (MarketEnv(data, 5, cfg).get_state(), "x 5 envs"),
        (MarketEnv(data, 4, dataclasses.replace(cfg, cost=0.5)).get_state(), "saved with"),
        (MarketEnv(dataclasses.replace(data, name="other"), 4, cfg).get_state(), "market:other"),
        (damaged(state={**good["state"], "position": torch.zeros(4, dtype=torch.float64)}), "position"),
        (damaged(state=bad_rows), "outside the decision rows"),
        # a row the steps could not have reached from an allowed start (truncation counts steps)
        (damaged(state={**good["state"], "steps": good["state"]["row"]}), "steps do not fit"),  # start 0
        (
            damaged(state={**good["state"], "row": good["state"]["row"] + 10, "steps": torch.full((4,), 10)}),
            "steps do not fit",
        ),  # the episode is 10 decisions long: it ended
        (damaged(state={**good["state"], "steps": torch.full((4,), -1)}), "steps do not fit"),
        (damaged(generator=torch.zeros(3, dtype=torch.uint8)), "generator state"),
        (damaged(obs=torch.zeros(4, 3)), "obs"),
    ]:
        with pytest.raises(ValueError, match=match):
            env.set_state(state)
    after = env.get_state()
    for key in ("state",):
        assert all(torch.equal(before[key][k], after[key][k]) for k in before[key])
    assert torch.equal(before["generator"], after["generator"])


# ----------------------------------------------------------------------------- loop interface


def test_discrete_actions_of_any_integer_dtype_choose_the_same_positions() -> None:
    data = make_data(60)
    cfg = MarketEnvConfig(window=3, episode_length=20, borrow_cost=1e-3, max_drawdown=1.0)
    actions = torch.tensor([0, 1, 2, 0, 5, 2])  # 5: clamped to long
    outs = []
    for dtype in (torch.int64, torch.int32, torch.int16, torch.uint8):
        env = MarketEnv(data, 6, cfg, seed=4)
        env.reset()
        obs, reward, *_ = env.step(actions.to(dtype))
        outs.append((obs, reward))
        assert obs[:, -1].tolist() == [-1.0, 0.0, 1.0, -1.0, 1.0, 1.0], dtype  # uint8 0 is short
    assert all(torch.equal(o, outs[0][0]) and torch.equal(r, outs[0][1]) for o, r in outs)


def test_step_transition_reads_nothing_on_the_host() -> None:
    for actions_kind in ("discrete", "continuous"):
        cfg = MarketEnvConfig(
            window=4, episode_length=5, actions=actions_kind, borrow_cost=1e-4, max_drawdown=0.1
        )
        env = MarketEnv(make_data(60, vol=0.05), 32, cfg)
        env.reset()
        g = torch.Generator().manual_seed(0)
        actions = [random_actions(env, g) for _ in range(12)]
        with HostReads():
            for a in actions:  # several episode ends (length 5) and resets inside the guard
                tr = env.step_transition(a)
                env.step(a)
        assert isinstance(tr, Transition) and tr.episode_returns == [] and tr.episode_lengths == []
        assert env.episode_stats()["episodes"] > 0


def test_episode_stats_sum_the_finished_episodes() -> None:
    data = dataclasses.replace(make_data(40), log_return=torch.full((40,), 0.01))
    cfg = MarketEnvConfig(window=2, episode_length=3, cost=0.0, random_start=False)
    env = MarketEnv(data, 2, cfg)
    env.reset()
    assert env.episode_stats() == {"episodes": 0.0}
    for _ in range(7):  # two episodes each (3 + 3 decisions) and one decision of a third
        env.step(torch.tensor([2, 0]))  # long earns +0.01 a step, short -0.01
    stats = env.episode_stats()
    assert stats["episodes"] == 4
    assert stats["mean_length"] == 3
    assert stats["mean_return"] == pytest.approx(0.0, abs=1e-7)  # +0.03 and -0.03, twice
    assert stats["mean_equity"] == pytest.approx((math.exp(0.03) + math.exp(-0.03)) / 2, rel=1e-6)
    assert stats["mean_turnover"] == 1.0
    assert stats["mean_sharpe"] == 0.0  # constant rewards: no deviation, Sharpe 0 by definition
    assert stats["mean_max_drawdown"] == pytest.approx((1 - math.exp(-0.03)) / 2, abs=1e-6)
    assert env.episode_stats() == {"episodes": 0.0}


def test_gymnasium_vector_api() -> None:
    data = make_data(100, 3)
    env = MarketEnv(data, 4, MarketEnvConfig(window=5, episode_length=8), seed=0)
    assert isinstance(env, gym.vector.VectorEnv)
    assert env.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
    assert env.env_id == "market:test" and env.num_envs == 4 and env.device == torch.device("cpu")
    assert env.single_observation_space.shape == (16,) and env.observation_space.shape == (4, 16)
    assert env.single_action_space == gym.spaces.Discrete(3)
    assert env.action_space == gym.spaces.MultiDiscrete([3, 3, 3, 3])
    assert env.obs is None
    obs, info = env.reset(seed=1, options=None)
    assert obs.shape == (4, 16) and info == {} and env.obs is obs
    out = env.step(env.action_space.sample())  # numpy actions, as a gymnasium user passes them
    assert len(out) == 5
    obs, reward, terminated, truncated, info = out
    assert obs.shape == (4, 16) and reward.shape == (4,) and reward.dtype == torch.float32
    assert terminated.dtype == truncated.dtype == torch.bool and terminated.shape == (4,)
    assert set(info) == {
        "final_obs",
        "_final_obs",
        "equity",
        "sharpe",
        "max_drawdown",
        "turnover",
        "position",
    }
    assert info["final_obs"].shape == (4, 16)
    assert all(info[k].shape == (4,) for k in info if k != "final_obs")
    cont = MarketEnv(data, 2, MarketEnvConfig(window=5, episode_length=8, actions="continuous"))
    assert cont.single_action_space == gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    assert cont.action_space.shape == (2, 1)
    cont.reset()
    cont.step(cont.action_space.sample())
    env.close()
    assert env.closed


def test_int_list_and_numpy_actions_step_as_tensors_do() -> None:
    """A Python int (one env), a list and a numpy array of any integer dtype give the same step
    as the int64 tensor; a scalar for several envs and a bool are refused."""
    data = make_data(100, 3)
    for num_envs, feeds in [(1, [2, np.int64(2), [2], np.array([2], np.int32)]), (3, [[2, 0, 1]])]:
        want = torch.tensor([2, 0, 1][:num_envs])
        ref = MarketEnv(data, num_envs, MarketEnvConfig(window=5, episode_length=8), seed=0)
        ref.reset(seed=1)
        expected = ref.step(want)
        for feed in [*feeds, np.asarray(want.numpy(), np.int16)]:
            env = MarketEnv(data, num_envs, MarketEnvConfig(window=5, episode_length=8), seed=0)
            env.reset(seed=1)
            got = env.step(feed)
            for g, e in zip(got[:4], expected[:4], strict=True):
                torch.testing.assert_close(g, e, rtol=0, atol=0)  # exact: the same step on equal inputs
    env = MarketEnv(data, 3, MarketEnvConfig(window=5, episode_length=8), seed=0)
    env.reset()
    with pytest.raises(ValueError, match="single action steps one env, this one has 3"):
        env.step(1)
    one = MarketEnv(data, 1, MarketEnvConfig(window=5, episode_length=8), seed=0)
    one.reset()
    with pytest.raises(ValueError, match="integers, got bool"):
        one.step(True)


def test_errors() -> None:
    data = make_data(40)
    with pytest.raises(ValueError, match="num_envs"):
        MarketEnv(data, 0)
    with pytest.raises(ValueError, match="fewer than window \\+ episode_length = 45"):
        MarketEnv(data, 1, MarketEnvConfig(window=5, episode_length=40))
    MarketEnv(data, 1, MarketEnvConfig(window=5, episode_length=40, random_start=False))  # fits
    with pytest.raises(ValueError, match="window \\+ 1"):
        MarketEnv(data, 1, MarketEnvConfig(window=40, random_start=False))
    for field, value in [("window", 0), ("episode_length", 0), ("actions", "box"), ("cost", -1.0),
                         ("max_drawdown", 0.0), ("max_drawdown", 1.5), ("cost", math.nan)]:  # fmt: skip
        with pytest.raises(ValueError, match=field):
            MarketEnvConfig(**{field: value})
    env = MarketEnv(data, 3, MarketEnvConfig(window=4, episode_length=10))
    with pytest.raises(RuntimeError, match="before reset"):
        env.step(torch.zeros(3, dtype=torch.int64))
    env.reset()
    for actions, match in [
        (torch.zeros(4, dtype=torch.int64), "shape \\(3,\\)"),
        (torch.zeros(3, 1, dtype=torch.int64), "shape \\(3,\\)"),
        (torch.zeros(3), "integers"),
        (torch.zeros(3, dtype=torch.int64, device="meta"), "meta"),  # another device: no value read
    ]:
        with pytest.raises(ValueError, match=match):
            env.step(actions)
    cont = MarketEnv(data, 3, MarketEnvConfig(window=4, episode_length=10, actions="continuous"))
    cont.reset()
    for actions, match in [
        (torch.zeros(3), "shape \\(3, 1\\)"),
        (torch.zeros(3, 1, dtype=torch.int64), "floating"),
    ]:
        with pytest.raises(ValueError, match=match):
            cont.step(actions)
