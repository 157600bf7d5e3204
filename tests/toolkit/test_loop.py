"""The shared loop, the vector env wrapper, the registry and the metric logger (with a toy agent)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

from toy_agent import ToyAgent
from tritonrl.toolkit.config import apply_overrides
from tritonrl.toolkit.envs.vector import evaluate, make_vec_env, space_from_json, space_to_json
from tritonrl.toolkit.logger import MetricLogger, ProgressBar, plot_learning_curve, read_csv
from tritonrl.toolkit.training.loop import LoopConfig, run_training
from tritonrl.toolkit.training.onpolicy import OnPolicySchedule


def test_transitions_keep_the_true_final_observation():
    env = make_vec_env("CartPole-v1", 3, seed=0)
    obs = env.obs
    ends = 0
    for _ in range(60):
        tr = env.step(torch.ones(3, dtype=torch.long))  # always push right: episodes end fast
        done = tr.terminated | tr.truncated
        # Where nothing ended, next_obs is the observation to act on; where something ended, the
        # final observation is out of bounds (terminated) and the new one is a fresh reset (|x| small).
        assert torch.equal(tr.next_obs[~done], tr.obs[~done])
        if done.any():
            ends += int(done.sum())
            final = tr.next_obs[done]
            assert (final[:, 2].abs() > 0.2).all() or (final[:, 0].abs() > 2.4).all()
            assert (tr.obs[done].abs() <= 0.05).all()
            assert len(tr.episode_returns) == int(done.sum())
        obs = tr.obs
    assert ends > 3 and obs.dtype == torch.float32 and tr.terminated.dtype == torch.bool


def test_truncation_is_reported_separately():
    env = make_vec_env("Pendulum-v1", 2, seed=0)
    for _ in range(200):
        tr = env.step(torch.zeros(2, 1))
    assert tr.truncated.all() and not tr.terminated.any()
    assert tr.episode_lengths == [200, 200]
    assert not torch.equal(tr.next_obs, tr.obs)


@pytest.mark.parametrize(
    ("env_id", "num_envs", "draw"),
    [
        ("CartPole-v1", 1, lambda g, n: torch.randint(0, 2, (n,), generator=g)),
        ("CartPole-v1", 3, lambda g, n: torch.randint(0, 2, (n,), generator=g)),
        # actions beyond the bounds: VecEnv clips them once, the reference gets them clipped too
        ("Pendulum-v1", 2, lambda g, n: 4.0 * torch.randn(n, 1, generator=g)),
    ],
)
def test_vec_env_steps_like_gymnasium_same_step_autoreset(env_id, num_envs, draw):
    """VecEnv steps its sub-environments itself: the transitions must be those of gymnasium's own
    SyncVectorEnv in same-step autoreset mode (bit for bit: same env calls in the same order)."""
    import gymnasium as gym

    ours = make_vec_env(env_id, num_envs, seed=5)
    ref = gym.vector.SyncVectorEnv(
        [lambda: gym.make(env_id, disable_env_checker=True) for _ in range(num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    ref_obs, _ = ref.reset(seed=[5 + i for i in range(num_envs)])
    assert torch.equal(ours.obs, torch.as_tensor(ref_obs, dtype=torch.float32))
    space = ref.single_action_space
    g = torch.Generator().manual_seed(0)
    ends = 0
    for _ in range(260):
        a = draw(g, num_envs)
        tr = ours.step(a)
        a_ref = a.numpy()
        if isinstance(space, gym.spaces.Box):
            a_ref = np.clip(a_ref, space.low, space.high)
        obs, reward, term, trunc, info = ref.step(a_ref)
        done = term | trunc
        next_obs = obs.copy()
        for i in np.flatnonzero(done):
            next_obs[i] = info["final_obs"][i]
        ends += int(done.sum())
        assert torch.equal(tr.obs, torch.as_tensor(obs, dtype=torch.float32))
        assert torch.equal(tr.next_obs, torch.as_tensor(next_obs, dtype=torch.float32))
        assert torch.equal(tr.reward, torch.as_tensor(reward, dtype=torch.float32))
        assert torch.equal(tr.terminated, torch.as_tensor(term))
        assert torch.equal(tr.truncated, torch.as_tensor(trunc))
        assert tr.obs.dtype == tr.reward.dtype == torch.float32 and tr.terminated.dtype == torch.bool
    assert ends >= num_envs  # episodes ended (and reset) during the comparison
    with pytest.raises(ValueError, match="leading size"):
        ours.step(draw(g, num_envs + 1))


def test_env_state_round_trip_continues_exactly():
    env = make_vec_env("CartPoleNoVel-v1", 4, seed=3)
    assert env.obs.shape == (4, 2)
    for _ in range(5):
        env.step(torch.randint(0, 2, (4,)))
    state = env.get_state()
    actions = [torch.randint(0, 2, (4,)) for _ in range(40)]
    first = [env.step(a) for a in actions]
    env.set_state(state)
    second = [env.step(a) for a in actions]
    for x, y in zip(first, second, strict=True):
        assert torch.equal(x.next_obs, y.next_obs) and torch.equal(x.obs, y.obs)
        assert x.episode_returns == y.episode_returns
    other = make_vec_env("CartPole-v1", 4, seed=3)
    with pytest.raises(ValueError, match="CartPoleNoVel-v1"):
        other.set_state(state)


def test_bad_env_arguments():
    with pytest.raises(ValueError, match="unknown environment id 'CartPol-v9'"):
        make_vec_env("CartPol-v9", 1, 0)
    with pytest.raises(ValueError, match="num_envs"):
        make_vec_env("CartPole-v1", 0, 0)
    env = make_vec_env("CartPole-v1", 2, 0)
    with pytest.raises(ValueError, match="leading size 3"):
        env.step(torch.zeros(3, dtype=torch.long))


def test_space_json_round_trip():
    env = make_vec_env("Pendulum-v1", 1, 0)
    for space in (env.single_action_space, env.single_observation_space):
        assert space_from_json(space_to_json(space)) == space


def test_evaluate_counts_one_episode_per_env():
    out = evaluate(lambda obs: torch.ones(obs.shape[0], dtype=torch.long), "CartPole-v1", 4, seed=0)
    assert len(out["returns"]) == 4 and all(5 <= r <= 20 for r in out["returns"])
    assert out["mean_return"] == pytest.approx(np.mean(out["returns"]))


def test_metric_logger_means_and_columns(tmp_path):
    log = MetricLogger(tmp_path, tensorboard=False)
    log.log(10, {"a": torch.tensor(1.0), "b": 2.0})
    log.log(10, {"a": torch.tensor(3.0)})
    assert log.flush(10) == {"a": 2.0, "b": 2.0}
    log.log(20, {"c": torch.tensor([5.0])})
    log.flush(20)
    rows = read_csv(tmp_path / "metrics.csv")
    assert rows == [{"global_step": 10, "a": 2.0, "b": 2.0}, {"global_step": 20, "c": 5.0}]
    with pytest.raises(TypeError, match="'bad' must be a scalar"):
        log.log(30, {"bad": torch.ones(2)})
    log.close()


def test_progress_bar_draws_to_its_stream():
    out = io.StringIO()  # not a terminal: plain lines, no carriage returns
    bar = ProgressBar(100, stream=out, interval=0.0, log_interval=0.0)
    bar.update(50, "return 3.0")
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "50/100" in lines[0] and "return 3.0" in lines[0] and "100/100" not in lines[0]
    assert "\r" not in out.getvalue()


def test_overrides_convert_types():
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Cfg:
        lr: float = 1.0
        n: int = 2
        flag: bool = False
        hidden: tuple[int, ...] = (64,)
        clip: float | None = None

    raw = {"lr": "1e-3", "n": "4096", "flag": "true", "hidden": "32,32", "clip": "none"}
    cfg = apply_overrides(Cfg(), raw)
    assert cfg == Cfg(lr=1e-3, n=4096, flag=True, hidden=(32, 32), clip=None)
    with pytest.raises(ValueError, match="unknown config key 'lrr'"):
        apply_overrides(Cfg(), {"lrr": "1"})
    with pytest.raises(ValueError, match="n='abc' is not a valid int"):
        apply_overrides(Cfg(), {"n": "abc"})


def test_target_return_stops_early(tmp_path):
    env = make_vec_env("CartPole-v1", 2, seed=0)
    summary = run_training(
        ToyAgent(2),
        env,
        OnPolicySchedule(4),
        LoopConfig(total_steps=10_000, eval_every=16, eval_episodes=2, target_return=1.0),
    )
    assert summary["reached_target_at"] == 16 and summary["global_step"] == 16


def test_plot_learning_curve_needs_a_metric(tmp_path):
    (tmp_path / "m.csv").write_text("global_step,x\n1,2\n")
    with pytest.raises(ValueError, match="none of"):
        plot_learning_curve(tmp_path / "m.csv", tmp_path / "c.png")
