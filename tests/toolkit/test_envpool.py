"""``envpool:<Game>-v5`` ids (:mod:`tritonrl.toolkit.envs.pool`): the adapter's semantics against a
stand-in for envpool's synchronous API (what CI runs: envpool itself is ~0.8 GB), and the real
package where it is installed.

The stand-in follows envpool's Atari behaviour as observed with envpool 1.2.5: with
``episodic_life=True`` a lost life or a game over is ``terminated`` (``info["terminated"]`` only at
a game over), rewards come clipped when ``reward_clip`` and raw in ``info["reward"]``; the step of
an env after it ended is its reset step (the action ignored, reward 0): after a lost life it
continues the game and its frame stack, after a game over it starts a new game whose stack
repeats the first frame; ``step`` and ``reset`` take a subset of envs (``env_id``) and return
theirs only.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("gymnasium", reason="gymnasium is missing (benchmarks/fetch-wheels.sh brings it)")

from gymnasium import spaces
from tritonrl.toolkit.envs.vector import evaluate, make_vec_env

LIVES = 2
LIFE_STEPS = 5  # a life is lost at every 5th step of a life
MAX_STEPS = 1_000


class _Spec:
    def __init__(self, fields: tuple[str, ...]) -> None:
        self.config = types.SimpleNamespace(_fields=fields)


class FakePool:
    """envpool's synchronous Atari pool, in miniature: frame ``t`` of env ``i`` is filled with
    ``1 + (7 * i + t) % 250`` (never 0, so zero padding shows); raw reward 3 at each 3rd step."""

    def __init__(self, num_envs: int, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.n = num_envs
        self.action_space = spaces.Discrete(4)
        self.t = np.zeros(num_envs, np.int64)  # frames drawn so far
        self.life_t = np.zeros(num_envs, np.int64)
        self.game_t = np.zeros(num_envs, np.int64)
        self.lives = np.full(num_envs, LIVES)
        self.pending = np.zeros(num_envs, bool)  # the next step is a reset step
        self.stack = np.zeros((num_envs, 4, 84, 84), np.uint8)
        self.actions: list[np.ndarray] = []
        self.closed = False

    def _frame(self, i: int) -> np.ndarray:
        self.t[i] += 1
        return np.full((84, 84), 1 + (7 * i + self.t[i]) % 250, np.uint8)

    def _new_game(self, i: int) -> None:
        self.stack[i] = self._frame(i)  # envpool repeats the first frame
        self.lives[i], self.life_t[i], self.game_t[i] = LIVES, 0, 0

    def _info(self, ids: np.ndarray, raw: np.ndarray, over: np.ndarray) -> dict[str, Any]:
        return {
            "env_id": ids,
            "lives": self.lives[ids].copy(),
            "reward": raw,
            "terminated": over.astype(np.int32),
        }

    def reset(self, env_id: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        for i in env_id:
            self._new_game(i)
            self.pending[i] = False
        return self.stack[env_id].copy(), self._info(
            env_id, np.zeros(len(env_id), np.float32), np.zeros(len(env_id))
        )

    def step(self, action: np.ndarray, env_id: np.ndarray) -> tuple[Any, ...]:
        assert action.dtype == np.int32 and len(action) == len(env_id)
        self.actions.append(action.copy())
        k = len(env_id)
        raw, term, trunc, over = (
            np.zeros(k, np.float32),
            np.zeros(k, bool),
            np.zeros(k, bool),
            np.zeros(k, bool),
        )
        for j, i in enumerate(env_id):
            if self.pending[i]:  # the reset step
                self.pending[i] = False
                if self.lives[i] == 0 or self.game_t[i] >= MAX_STEPS:
                    self._new_game(i)
                else:  # a lost life: the game goes on, so does the stack
                    self.stack[i] = np.concatenate([self.stack[i, 1:], self._frame(i)[None]])
                    self.life_t[i] = 0
                continue
            self.stack[i] = np.concatenate([self.stack[i, 1:], self._frame(i)[None]])
            self.life_t[i] += 1
            self.game_t[i] += 1
            raw[j] = 3.0 if self.game_t[i] % 3 == 0 else 0.0
            if self.life_t[i] == LIFE_STEPS:
                self.lives[i] -= 1
                term[j] = True
                over[j] = self.lives[i] == 0
            trunc[j] = self.game_t[i] >= MAX_STEPS and not term[j]
            self.pending[i] = term[j] or trunc[j]
        reward = np.sign(raw) if self.kwargs["reward_clip"] else raw
        return self.stack[env_id].copy(), reward, term, trunc, self._info(env_id, raw, over)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> list[FakePool]:
    """A stand-in ``envpool`` module; the list collects the pools it makes."""
    made: list[FakePool] = []

    def make(task: str, env_type: str, num_envs: int, **kwargs: Any) -> FakePool:
        assert env_type == "gymnasium" and kwargs["batch_size"] == num_envs
        made.append(FakePool(num_envs, task=task, **kwargs))
        return made[-1]

    module = types.ModuleType("envpool")
    module.list_all_envs = lambda: ["Breakout-v5", "Pong-v5", "CartPole-v1", "Ant-v5"]  # type: ignore[attr-defined]
    module.make_spec = lambda task: _Spec(("episodic_life",) if task in ("Breakout-v5", "Pong-v5") else ())  # type: ignore[attr-defined]
    module.make = make  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "envpool", module)
    return made


def _filled(obs: torch.Tensor, i: int) -> list[bool]:
    """Which of env ``i``'s 4 stacked frames hold anything (False: zero padding)."""
    return [bool(obs[i, k].any()) for k in range(4)]


def test_training_episodes_end_at_each_lost_life_and_restart_in_the_same_step(fake: list[FakePool]) -> None:
    env = make_vec_env("envpool:Breakout-v5", 2, seed=3)
    p = fake[0]
    assert p.kwargs["seed"] == 3 and p.kwargs["reward_clip"] and p.kwargs["episodic_life"]
    assert p.kwargs["repeat_action_probability"] == 0.0 and p.kwargs["stack_num"] == 4
    assert env.obs is not None and env.obs.shape == (2, 4, 84, 84) and env.obs.dtype == torch.uint8
    assert _filled(env.obs, 0) == [False, False, False, True]  # zeros before the first frame
    rewards, returns = [], []
    for t in range(1, LIFE_STEPS + 1):
        tr = env.step(torch.tensor([1, 2]))
        rewards.append(tr.reward[0].item())
        if t < LIFE_STEPS:
            assert not tr.terminated.any() and tr.next_obs is tr.obs
            assert _filled(tr.obs, 0) == [k >= 3 - t for k in range(4)]
    # step 5: the first life is lost, the episode ends and the next one starts in the same call
    assert tr.terminated.tolist() == [True, True] and not tr.truncated.any()
    assert _filled(tr.next_obs, 0) == [True] * 4  # the final observation, whole
    assert _filled(tr.obs, 0) == [False, False, False, True]  # a new episode: one frame
    assert not torch.equal(tr.obs[0, 3], tr.next_obs[0, 3])  # the reset step's frame
    assert tr.episode_returns == []  # the game goes on: no game ended
    assert len(p.actions) == 6 and p.actions[-1].tolist() == [0, 0]  # the reset step, both envs
    assert rewards == [0.0, 0.0, 1.0, 0.0, 0.0]  # clipped (raw 3)
    for _ in range(LIFE_STEPS):
        tr = env.step(np.array([1, 1]))
        returns += tr.episode_returns
    # the second (last) life lost: the game ends; its whole raw return and agent steps are reported
    assert tr.terminated.tolist() == [True, True]
    assert returns == [9.0, 9.0] and tr.episode_lengths == [2 * LIFE_STEPS] * 2  # raw 3 at steps 3, 6, 9
    assert _filled(tr.obs, 1) == [False, False, False, True]
    assert p.lives.tolist() == [LIVES, LIVES]  # a new game


def test_evaluation_plays_whole_games_with_raw_rewards(fake: list[FakePool]) -> None:
    env = make_vec_env("envpool:Pong-v5", 1, seed=0, training=False)
    p = fake[0]
    # raw rewards; envpool's episodic life on, so that its reset step continues the game
    assert not p.kwargs["reward_clip"] and p.kwargs["episodic_life"]
    seen = []
    for t in range(1, 2 * LIFE_STEPS + 1):
        tr = env.step(np.array([2]))
        seen.append(tr.reward.item())
        if t == LIFE_STEPS:  # a lost life: not the end of an evaluation episode, the stack goes on
            assert not tr.terminated.any() and _filled(tr.obs, 0) == [True] * 4
    assert tr.terminated.tolist() == [True] and tr.episode_returns == [9.0]
    assert seen[2] == 3.0  # raw
    result = evaluate(lambda obs: torch.zeros(obs.shape[0], dtype=torch.long), "envpool:Pong-v5", 3, seed=0)
    assert result["returns"] == [9.0] * 3 and result["lengths"] == [2 * LIFE_STEPS] * 3


def test_a_cut_game_is_truncated_and_reported(fake: list[FakePool], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "MAX_STEPS", 3)
    env = make_vec_env("envpool:Breakout-v5", 1, seed=0)
    for _ in range(2):
        assert not env.step(np.array([0])).truncated.any()
    tr = env.step(np.array([0]))
    assert tr.truncated.tolist() == [True] and not tr.terminated.any()
    assert tr.episode_returns == [3.0] and tr.episode_lengths == [3]
    assert _filled(tr.obs, 0) == [False, False, False, True]


def test_a_checkpoint_of_an_envpool_run_refuses_to_resume(fake: list[FakePool]) -> None:
    env = make_vec_env("envpool:Breakout-v5", 2, seed=0)
    state = env.get_state()
    assert state == {"env_id": "envpool:Breakout-v5", "num_envs": 2, "kind": "envpool"}
    for call in (env.check_state, env.set_state):
        with pytest.raises(ValueError, match=r"envpool:Breakout-v5 cannot be resumed.*ALE/ id"):
            call(state)
    env.close()
    assert fake[0].closed


def test_bad_ids_sizes_and_options_are_one_line_errors(
    fake: list[FakePool], monkeypatch: pytest.MonkeyPatch
) -> None:
    did_you_mean = r"unknown envpool Atari game 'envpool:Breakout-v4' \(did you mean envpool:Breakout-v5"
    with pytest.raises(ValueError, match=did_you_mean):
        make_vec_env("envpool:Breakout-v4", 1, seed=0)
    with pytest.raises(ValueError, match="unknown envpool Atari game 'envpool:CartPole-v1'"):
        make_vec_env("envpool:CartPole-v1", 1, seed=0)
    with pytest.raises(ValueError, match="no wrappers"):
        make_vec_env("envpool:Breakout-v5", 1, seed=0, wrappers=[lambda e: e])
    env = make_vec_env("envpool:Breakout-v5", 2, seed=0)
    with pytest.raises(ValueError, match="leading size 3, expected num_envs=2"):
        env.step(np.zeros(3, np.int64))
    monkeypatch.setitem(sys.modules, "envpool", None)  # not installed
    with pytest.raises(ValueError, match=r'pip install "tritonrl\[envpool\]"'):
        make_vec_env("envpool:Breakout-v5", 1, seed=0)


def test_cli_trains_on_an_envpool_id_and_refuses_its_resume(
    fake: list[FakePool], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tritonrl.cli import main

    run = tmp_path / "run"
    argv = ["train", "--agent", "dqn-atari", "--env", "envpool:Breakout-v5", "--steps", "150",
            "--set", "buffer_size=500", "--set", "learning_starts=100", "--eval-every", "0",
            "--eval-episodes", "1", "--run-dir", str(run), "--no-progress", "--no-tensorboard"]  # fmt: skip
    assert main(argv) == 0
    assert (run / "checkpoint.safetensors").is_file()
    assert "dqn-atari on envpool:Breakout-v5: 150 steps" in capsys.readouterr().out
    assert main([*argv[:5], "--steps", "300", *argv[7:], "--resume"]) != 0
    assert "cannot be resumed: envpool cannot save" in capsys.readouterr().err


def test_real_envpool_breakout_matches_the_adapter_contract() -> None:
    pytest.importorskip("envpool")  # ~0.8 GB: not in CI; runs where `tritonrl[envpool]` is installed
    env = make_vec_env("envpool:Breakout-v5", 2, seed=1)
    assert env.obs is not None and _filled(env.obs, 0) == [False, False, False, True]
    rng = np.random.default_rng(0)
    ended = games = 0
    for _ in range(600):
        tr = env.step(rng.integers(0, 4, 2))
        for i in tr.terminated.nonzero().flatten().tolist():
            ended += 1
            assert _filled(tr.obs, i) == [False, False, False, True] and _filled(tr.next_obs, i) == [True] * 4
        games += len(tr.episode_returns)
        assert tr.reward.abs().max() <= 1.0  # clipped in training
    assert ended > games >= 1  # lives are lost before games end
    env.close()
