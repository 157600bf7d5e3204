"""Pixel environments through ``make_vec_env``: MinAtar and Atari preprocessing (toolkit/envs/pixels.py).

Checks the observation layout, the zero-padded frame stack against stacks rebuilt from single
frames, episodic life (the game continues after a life loss), reward clipping, the real games'
unclipped returns against a plain emulator replaying the same actions, exact resume, and the
one-line error of a missing extra.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import torch
from helpers import HostReads

pytest.importorskip("gymnasium", reason="gymnasium is missing (benchmarks/fetch-wheels.sh brings it)")
pytest.importorskip("minatar")
pytest.importorskip("ale_py")
pytest.importorskip("cv2")

import gymnasium as gym
from tritonrl.toolkit.checkpoint import load_checkpoint, save_checkpoint
from tritonrl.toolkit.envs import pixels
from tritonrl.toolkit.envs.vector import VecEnv, make_vec_env


def _actions(env: VecEnv, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, env.single_action_space.n, env.num_envs)  # type: ignore[attr-defined]


def _layer(env: gym.Env, cls: type) -> Any:
    while not isinstance(env, cls):
        env = env.env  # type: ignore[attr-defined]
    return env


# ----------------------------------------------------------------------------- MinAtar


def test_importing_tritonrl_imports_neither_minatar_nor_ale() -> None:
    code = (
        "import sys, tritonrl.toolkit.envs.vector as v; v.make_vec_env('CartPole-v1', 1, 0);"
        "print('minatar' in sys.modules, 'ale_py' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("env_id", ["MinAtar/Breakout-v1", "MinAtar/Seaquest-v1"])
def test_minatar_observation_uint8_channels_first(env_id: str) -> None:
    env = make_vec_env(env_id, 2, seed=0)
    space = env.single_observation_space
    assert isinstance(space, gym.spaces.Box) and space.dtype == np.uint8
    c = space.shape[0]
    assert space.shape == (c, 10, 10) and int(space.low.min()) == 0 and int(space.high.max()) == 1
    rng = np.random.default_rng(0)
    seen_one = False
    for _ in range(40):
        tr = env.step(_actions(env, rng))
        for x in (tr.obs, tr.next_obs):
            assert x.dtype == torch.uint8 and tuple(x.shape) == (2, c, 10, 10)
            assert bool(((x == 0) | (x == 1)).all())
            seen_one |= bool(x.any())
        assert tr.reward.dtype == torch.float32
    assert seen_one
    env.close()


def test_minatar_matches_the_raw_game_transposed() -> None:
    env = make_vec_env("MinAtar/Breakout-v1", 1, seed=3)
    plain = gym.make("MinAtar/Breakout-v1", disable_env_checker=True)
    o, _ = plain.reset(seed=3)
    # exact: the same game, seeded alike; the wrapper only transposes and casts 0/1
    assert torch.equal(env.obs[0], torch.from_numpy(o.transpose(2, 0, 1).astype(np.uint8)))
    rng = np.random.default_rng(1)
    for _ in range(30):
        a = _actions(env, rng)
        tr = env.step(a)
        o, r, te, tr_, _ = plain.step(int(a[0]))
        assert torch.equal(
            tr.next_obs[0], torch.from_numpy(o.transpose(2, 0, 1).astype(np.uint8))
        )  # exact: as above
        assert float(tr.reward[0]) == r and bool(tr.terminated[0]) == te
        if te or tr_:
            o, _ = plain.reset()
    env.close()


def test_minatar_step_reads_no_tensor_on_the_host() -> None:
    env = make_vec_env("MinAtar/Breakout-v1", 2, seed=0)
    rng = np.random.default_rng(0)
    with HostReads():
        for _ in range(10):
            env.step(_actions(env, rng))  # numpy actions: a host env reads no tensor value
    env.close()


def _run(env: VecEnv, actions: list[np.ndarray]) -> list[Any]:
    out = []
    for a in actions:
        tr = env.step(a)
        out.append((tr.obs.clone(), tr.next_obs.clone(), tr.reward.clone(), tr.terminated.clone(),
                    tr.truncated.clone(), tr.episode_returns, tr.episode_lengths))  # fmt: skip
    return out


def _assert_same_runs(a: list[Any], b: list[Any]) -> None:
    for x, y in zip(a, b, strict=True):
        for u, v in zip(x[:5], y[:5], strict=True):
            assert torch.equal(u, v)  # exact: the same env state replayed with the same actions
        assert x[5:] == y[5:]


@pytest.mark.parametrize(
    "env_id", ["MinAtar/Breakout-v1", "MinAtar/Seaquest-v1", "MinAtar/Asterix-v1", "ALE/Breakout-v5"]
)
def test_exact_resume(env_id: str, tmp_path: Any) -> None:
    """get_state, through a checkpoint file, into another env: the same transitions afterwards."""
    env = make_vec_env(env_id, 2, seed=5)
    rng = np.random.default_rng(2)
    for _ in range(60):
        env.step(_actions(env, rng))
    save_checkpoint(tmp_path / "env.ckpt", {"env": env.get_state()})
    state = load_checkpoint(tmp_path / "env.ckpt")["env"]
    actions = [_actions(env, rng) for _ in range(150)]
    first = _run(env, actions)
    other = make_vec_env(env_id, 2, seed=99)
    for _ in range(7):
        other.step(_actions(other, rng))
    other.check_state(state)
    other.set_state(state)
    assert other.obs is not None and other.obs.dtype == torch.uint8
    _assert_same_runs(first, _run(other, actions))
    env.close()
    other.close()


def test_damaged_emulator_state_is_refused_and_changes_nothing() -> None:
    env = make_vec_env("ALE/Pong-v5", 1, seed=0)
    state = env.get_state()
    layers = state["envs"][0]
    i = next(k for k, layer in enumerate(layers) if "__extra__" in layer)
    for bad in (np.zeros_like(layers[i]["__extra__"]), layers[i]["__extra__"][:100], "text"):
        damaged = {**state, "envs": [[*layers[:i], {**layers[i], "__extra__": bad}, *layers[i + 1 :]]]}
        with pytest.raises(ValueError, match="emulator state"):
            env.set_state(damaged)
    minatar = make_vec_env("MinAtar/Breakout-v1", 1, seed=0)
    mstate = minatar.get_state()
    for bad in ("{}", "not json", 3):
        mlayers = [
            {**layer, "__extra__": bad} if "__extra__" in layer else layer for layer in mstate["envs"][0]
        ]
        with pytest.raises(ValueError, match="MinAtar game state"):
            minatar.check_state({**mstate, "envs": [mlayers]})
    minatar.close()
    rng = np.random.default_rng(0)
    actions = [_actions(env, rng) for _ in range(40)]
    first = _run(env, actions)
    env.set_state(state)
    _assert_same_runs(first, _run(env, actions))
    env.close()


# ----------------------------------------------------------------------------- Atari


@pytest.mark.parametrize("env_id", ["ALE/Breakout-v5", "ALE/Pong-v5"])
@pytest.mark.parametrize("training", [True, False])
def test_atari_observation_is_four_84x84_uint8_frames(env_id: str, training: bool) -> None:
    env = make_vec_env(env_id, 2, seed=0, training=training)
    assert env.single_observation_space.shape == (4, 84, 84)
    assert env.single_observation_space.dtype == np.uint8
    assert env.obs is not None and env.obs.dtype == torch.uint8 and tuple(env.obs.shape) == (2, 4, 84, 84)
    # exact: the first stack of an episode is three zero frames and the first frame
    assert not env.obs[:, :3].any() and env.obs[:, 3].any()
    tr = env.step(np.zeros(2, dtype=np.int64))
    assert tr.next_obs.dtype == torch.uint8 and tuple(tr.next_obs.shape) == (2, 4, 84, 84)
    env.close()


def _padded(frames: list[torch.Tensor]) -> torch.Tensor:
    last = frames[-4:]
    return torch.stack([torch.zeros_like(last[0])] * (4 - len(last)) + last)


def test_frame_stack_equals_single_frames_zero_padded_at_the_episode_start() -> None:
    """The stack of step t is the last 4 single frames (``obs[-1]``) of its training episode with
    zeros before the episode's start: what a replay rebuilds from single frames."""
    env = make_vec_env("ALE/Breakout-v5", 2, seed=1)
    assert env.obs is not None
    episodes = [[env.obs[i, -1].clone()] for i in range(2)]
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(300):
        tr = env.step(_actions(env, rng))
        done = tr.terminated | tr.truncated
        for i in range(2):
            if bool(done[i]):
                ends += 1
                # exact: the final stack holds the ended episode's last frames
                assert torch.equal(tr.next_obs[i], _padded([*episodes[i], tr.next_obs[i, -1]]))
                episodes[i] = [tr.obs[i, -1].clone()]
            else:
                episodes[i].append(tr.obs[i, -1].clone())
                assert torch.equal(tr.next_obs[i], tr.obs[i])  # exact: the same tensor rows
            assert torch.equal(tr.obs[i], _padded(episodes[i]))  # exact: a copy of the same frames
    assert ends >= 4  # life losses of a random policy within 300 steps (about 23 steps a life)
    env.close()


def test_episodic_life_ends_training_episodes_but_the_game_continues() -> None:
    env = make_vec_env("ALE/Breakout-v5", 1, seed=2)
    ale = env.vec.envs[0].unwrapped.ale  # type: ignore[attr-defined]
    lives = [ale.lives()]
    rng = np.random.default_rng(0)
    life_ends = 0
    while True:
        before = ale.getEpisodeFrameNumber()
        tr = env.step(_actions(env, rng))
        if bool(tr.terminated[0]):
            if tr.episode_returns:  # the real game over: the emulator was reset
                assert ale.lives() == 5 and ale.getEpisodeFrameNumber() < before
                break
            life_ends += 1
            # the game goes on: one life fewer, the emulator's frame count not reset
            assert ale.lives() == lives[-1] - 1 and ale.getEpisodeFrameNumber() > before
            lives.append(ale.lives())
    assert life_ends == 4 and lives == [5, 4, 3, 2, 1]
    evaluation = make_vec_env("ALE/Breakout-v5", 1, seed=2, training=False)
    ale = evaluation.vec.envs[0].unwrapped.ale  # type: ignore[attr-defined]
    while True:
        lives_before = ale.lives()
        tr = evaluation.step(_actions(evaluation, rng))
        if bool(tr.terminated[0]):
            assert lives_before == 1 and len(tr.episode_returns) == 1  # only the game's end
            break
    env.close()
    evaluation.close()


def test_evaluation_serves_after_a_lost_life_so_a_still_agent_loses_the_game() -> None:
    # Training presses FIRE in the reset after each lost life (episodic life), so an agent never
    # learns to; evaluation plays whole games and presses it after a lost life too. An agent that
    # never moves loses its 5 lives in a few hundred steps instead of waiting, the ball never
    # served, for the 108,000-frame limit (27,000 steps).
    env = make_vec_env("ALE/Breakout-v5", 1, seed=3, training=False)
    ale = env.vec.envs[0].unwrapped.ale  # type: ignore[attr-defined]
    lives, steps = [ale.lives()], 0
    while True:
        tr = env.step(np.zeros(1, np.int64))  # NOOP only
        steps += 1
        if bool(tr.terminated[0] or tr.truncated[0]):
            break
        if ale.lives() < lives[-1]:
            lives.append(ale.lives())
    assert bool(tr.terminated[0]) and lives == [5, 4, 3, 2, 1] and steps < 2_000, (lives, steps)
    # the length counts the serving steps too: two after the reset, two after each of 4 lost lives
    assert tr.episode_lengths == [steps + 2 + 2 * 4]
    env.close()


class _Record(gym.Wrapper):
    """Logs the actions the preprocessed emulator receives (below the raw-return layer)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.log: list[Any] = []

    def reset(self, **kwargs: Any) -> Any:
        self.log.append(("reset", kwargs.get("seed")))
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        out = self.env.step(action)
        self.log.append(("step", int(action), float(out[1])))
        return out


@pytest.mark.parametrize("training", [True, False])
def test_reported_returns_are_whole_unclipped_games(training: bool) -> None:
    """A plain emulator (same preprocessing below the life and clipping layers, same seed) replaying
    the actions the env's emulator received sums the reported return over the same length."""
    env_id, seed = "ALE/SpaceInvaders-v5", 4
    env = make_vec_env(env_id, 1, seed=seed, training=training)
    raw = _layer(env.vec.envs[0], pixels.RawEpisodeStats)
    raw.env = rec = _Record(raw.env)
    env.reset()
    rng = np.random.default_rng(3)
    rewards, raw_rewards, games = [], [], []
    while not games:
        step_start = len(rec.log)
        tr = env.step(_actions(env, rng))
        rewards.append(float(tr.reward[0]))
        raw_rewards.append(rec.log[step_start][2])  # the step's own emulator reward
        games += list(zip(tr.episode_returns, tr.episode_lengths, strict=True))
    (game_return, game_length), = games  # fmt: skip
    assert rec.log[0] == ("reset", seed)
    steps = []
    for entry in rec.log[1:]:
        if entry[0] == "reset":
            break
        steps.append(entry)
    assert game_length == len(steps)
    plain = pixels.AtariFrames(gym.make(env_id, **pixels.make_kwargs(env_id), disable_env_checker=True))
    plain.reset(seed=seed)
    total, terminated = 0.0, False
    for k, (_, action, logged) in enumerate(steps):
        assert not terminated
        _, r, terminated, truncated, _ = plain.step(action)
        assert float(r) == logged, k  # the same emulator, the same actions: the same rewards
        total += float(r)
    assert terminated and game_return == total and max(raw_rewards) > 1.0
    if training:
        assert rewards == [float(np.sign(r)) for r in raw_rewards]  # clipped to the sign
    else:
        assert rewards == raw_rewards
    env.close()


def test_missing_extra_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for prefix, module, message in (
        ("MinAtar/", "minatar", 'needs MinAtar: pip install "tritonrl[minatar]"'),
        ("ALE/", "ale_py", 'needs ale-py: pip install "tritonrl[atari]"'),
        ("ALE/", "cv2", 'needs opencv-python-headless: pip install "tritonrl[atari]"'),
    ):
        with monkeypatch.context() as m:
            for key in [k for k in gym.registry if k.startswith(prefix)]:
                m.delitem(gym.registry, key)
            m.setitem(sys.modules, module, None)  # the import fails as on a machine without it
            m.setitem(sys.modules, f"{module}.gym", None)
            env_id = f"{prefix}Breakout-v{1 if prefix == 'MinAtar/' else 5}"
            with pytest.raises(ValueError) as info:
                make_vec_env(env_id, 1, seed=0)
            assert str(info.value) == f"environment {env_id!r} {message}"


@pytest.mark.parametrize("env_id", ["MinAtar/Freeway-v1", "ALE/Pong-v5"])
def test_ids_are_registered_on_first_use(env_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = env_id.split("/")[0] + "/"
    for key in [k for k in gym.registry if k.startswith(prefix)]:
        monkeypatch.delitem(gym.registry, key)
    env = make_vec_env(env_id, 1, seed=0)
    assert env_id in gym.registry and env.obs is not None and env.obs.dtype == torch.uint8
    env.close()
