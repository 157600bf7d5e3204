"""Pixel environments: MinAtar and Atari (ale-py) with their standard preprocessing.

[`preprocess`][tritonrl.toolkit.envs.pixels.preprocess] wraps ``MinAtar/`` ids (uint8 ``[C, 10, 10]``) and
``ALE/`` ids (Nature DQN / CleanRL: 84x84 grey, 4 zero-padded frames, episodic life and clipped rewards in
training). Ids register lazily; emulator state resumes exactly (``extra_state()``). Layer: envs. Guide:
docs/pages/pixels.md.
"""

from __future__ import annotations

import json
from typing import Any, SupportsFloat, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import AtariPreprocessing

__all__ = [
    "RAW_EPISODE_KEY",
    "AtariFrames",
    "ClipRewardSign",
    "EpisodicLife",
    "FireReset",
    "MinAtarObs",
    "RawEpisodeStats",
    "ZeroPadFrameStack",
    "is_pixel_id",
    "make_kwargs",
    "preprocess",
    "register_pixel_ids",
]

RAW_EPISODE_KEY = "raw_episode"
"""The ``info`` key `RawEpisodeStats` sets when the real game ends: ``{"r": return, "l": length}``
(the unclipped return over all lives and the number of agent steps of the game)."""

_EXTRAS = {"MinAtar/": ("minatar", "MinAtar"), "ALE/": ("atari", "ale-py")}


def is_pixel_id(env_id: str) -> bool:
    """Whether ``env_id`` gets the pixel preprocessing of this module (``MinAtar/...``, ``ALE/...``)."""
    return isinstance(env_id, str) and env_id.startswith(tuple(_EXTRAS))


def _missing(env_id: str, package: str, extra: str) -> ValueError:
    return ValueError(f'environment {env_id!r} needs {package}: pip install "tritonrl[{extra}]"')


def register_pixel_ids(env_id: str) -> None:
    """Register the MinAtar or ALE ids in gymnasium if ``env_id`` is one and they are not yet.

    Raises:
        ValueError: the package the id needs is not installed; one line naming the pip extra.
    """
    if not is_pixel_id(env_id):
        return
    if env_id.startswith("MinAtar/"):
        if not any(k.startswith("MinAtar/") for k in gym.registry):
            try:
                import minatar.gym
            except ImportError:
                raise _missing(env_id, "MinAtar", "minatar") from None
            minatar.gym.register_envs()
        return
    try:
        import ale_py
    except ImportError:
        raise _missing(env_id, "ale-py", "atari") from None
    try:
        import cv2  # noqa: F401  (the 84x84 resize of AtariPreprocessing)
    except ImportError:
        raise _missing(env_id, "opencv-python-headless", "atari") from None
    gym.register_envs(ale_py)  # importing ale_py registers its ids; this marks the import as used
    if not any(k.startswith("ALE/") for k in gym.registry):  # removed since (a test's registry)
        from ale_py.registration import register_v5_envs

        register_v5_envs()


def make_kwargs(env_id: str) -> dict[str, Any]:
    """Extra ``gym.make`` keyword arguments of a pixel id.

    ALE: ``frameskip=1`` ([`AtariFrames`][tritonrl.toolkit.envs.pixels.AtariFrames] skips) and no sticky
    actions (their repeated action is not in the emulator's saved state, so no exact resume).
    """
    return {"frameskip": 1, "repeat_action_probability": 0.0} if env_id.startswith("ALE/") else {}


def preprocess(env_id: str, env: gym.Env, *, training: bool = True) -> gym.Env:
    """Wrap a single ``MinAtar/`` or ``ALE/`` env in its preprocessing; any other id is returned as it is.

    ``training`` adds, for Atari, the episodic life and the reward clipping.
    """
    if env_id.startswith("MinAtar/"):
        return MinAtarObs(env)
    if not env_id.startswith("ALE/"):
        return env
    env = RawEpisodeStats(AtariFrames(env))
    if training:
        env = EpisodicLife(env)
    meanings = env.unwrapped.get_action_meanings()  # type: ignore[attr-defined]
    if len(meanings) >= 3 and meanings[1] == "FIRE":
        env = FireReset(env)
    if training:
        env = ClipRewardSign(env)
    return ZeroPadFrameStack(env, 4)


# ----------------------------------------------------------------------------- MinAtar


def _encode(value: Any) -> Any:
    """A MinAtar game attribute as JSON-able data (arrays and tuples tagged)."""
    if isinstance(value, np.ndarray):
        return {"__array__": value.tolist(), "dtype": value.dtype.str}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ValueError(f"a MinAtar game attribute of type {type(value).__name__} cannot be saved")


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"__array__", "dtype"}:
        return np.asarray(value["__array__"], dtype=np.dtype(value["dtype"]))
    if isinstance(value, dict) and set(value) == {"__tuple__"}:
        return tuple(_decode(v) for v in value["__tuple__"])
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ValueError(f"a saved MinAtar attribute holds a {type(value).__name__}")


_GAME_SKIP = ("random", "channels", "action_map", "ramping")


def _random_state(rs: np.random.RandomState) -> list[Any]:
    name, keys, pos, has_gauss, gauss = cast(
        "tuple[str, np.ndarray, int, int, float]", rs.get_state(legacy=True)
    )
    return [name, keys.tolist(), int(pos), int(has_gauss), float(gauss)]


def _scratch_random(saved: Any) -> np.random.RandomState:
    try:
        name, keys, pos, has_gauss, gauss = saved
        rs = np.random.RandomState()
        rs.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    except (TypeError, ValueError, KeyError) as exc:
        raise ValueError(f"MinAtar random state does not fit ({str(exc)[:80]})") from None
    return rs


class MinAtarObs(gym.ObservationWrapper):
    """MinAtar's ``[10, 10, C]`` bool observation as uint8 channels-first ``[C, 10, 10]`` (0/1).

    Also saves the game's state (objects, sticky action, ``RandomState``) as a JSON string
    ([`extra_state`][tritonrl.toolkit.envs.pixels.MinAtarObs.extra_state]).
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        h, w, c = env.observation_space.shape or ()
        self.observation_space = spaces.Box(0, 1, (c, h, w), np.uint8)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(observation.transpose(2, 0, 1), dtype=np.uint8)

    def _game(self) -> Any:
        return self.env.unwrapped.game  # type: ignore[attr-defined]

    def extra_state(self) -> str:
        """The game's state as a JSON string."""
        game = self._game()
        return json.dumps(
            {
                "last_action": int(game.last_action),
                "random": _random_state(game.random),
                "env_random": None if game.env.random is game.random else _random_state(game.env.random),
                "vars": {k: _encode(v) for k, v in vars(game.env).items() if k not in _GAME_SKIP},
            }
        )

    def _plan(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, str):
            raise ValueError(f"MinAtar game state is a {type(value).__name__}, not a JSON string")
        try:
            saved = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"MinAtar game state is not JSON ({str(exc)[:60]})") from None
        if not isinstance(saved, dict) or set(saved) != {"last_action", "random", "env_random", "vars"}:
            raise ValueError("MinAtar game state lacks or adds entries")
        game = self._game()
        names = {k for k in vars(game.env) if k not in _GAME_SKIP}
        if not isinstance(saved["vars"], dict) or set(saved["vars"]) != names:
            raise ValueError(f"MinAtar game state is not one of {game.env_name}")
        if not isinstance(saved["last_action"], int):
            raise ValueError("MinAtar game state: last_action is not an int")
        out = {k: _decode(v) for k, v in saved["vars"].items()}
        for k, v in out.items():
            live = getattr(game.env, k)
            if isinstance(live, np.ndarray) and (not isinstance(v, np.ndarray) or v.shape != live.shape):
                raise ValueError(f"MinAtar game state: {k} is not an array of shape {live.shape}")
        return {
            "vars": out,
            "last_action": saved["last_action"],
            "random": _scratch_random(saved["random"]),
            "env_random": None if saved["env_random"] is None else _scratch_random(saved["env_random"]),
        }

    def check_extra_state(self, value: Any) -> None:
        """Raise ``ValueError`` unless ``value`` is an `extra_state` of this game; changes nothing."""
        self._plan(value)

    def load_extra_state(self, value: Any) -> None:
        """Restore an `extra_state` (checked first)."""
        plan = self._plan(value)
        game = self._game()
        game.random.set_state(plan["random"].get_state())
        if plan["env_random"] is None:
            game.env.random = game.random
        else:
            if game.env.random is game.random:
                game.env.random = np.random.RandomState()
            game.env.random.set_state(plan["env_random"].get_state())
        game.last_action = plan["last_action"]
        for k, v in plan["vars"].items():
            setattr(game.env, k, v)


# ----------------------------------------------------------------------------- Atari


class AtariFrames(AtariPreprocessing):
    """gymnasium's ``AtariPreprocessing`` (84x84 grey uint8) plus the emulator state hook."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env, noop_max=30, frame_skip=4, screen_size=84, terminal_on_life_loss=False)

    def extra_state(self) -> np.ndarray:
        """``[ALE state bytes..., max-pool buffers...]`` uint8 1-D.

        Raises:
            ValueError: sticky actions are on: the saved state lacks the action they repeat.
        """
        if self.ale.getFloat("repeat_action_probability") > 0:
            raise ValueError(
                "an Atari env with sticky actions (repeat_action_probability > 0) cannot be saved for "
                "an exact resume: make it with repeat_action_probability=0 (make_vec_env does)"
            )
        ale_bytes = np.frombuffer(self.ale.cloneState(include_rng=True).serialize(), dtype=np.uint8)
        return np.concatenate([ale_bytes, *(b.reshape(-1) for b in self.obs_buffer)])

    def _split(self, value: Any) -> tuple[Any, list[np.ndarray]]:
        import ale_py

        frames = sum(b.size for b in self.obs_buffer)
        if (
            not isinstance(value, np.ndarray)
            or value.dtype != np.uint8
            or value.ndim != 1
            or value.size <= frames
        ):
            raise ValueError("Atari emulator state is not a uint8 array holding an ALE state and two frames")
        cut = value.size - frames
        try:
            state = ale_py.ALEState(value[:cut].tobytes())
        except Exception:  # the ALE raises a bare SystemError on bytes it cannot read
            raise ValueError("Atari emulator state: the ALE cannot read the saved state") from None
        buffers, at = [], cut
        for b in self.obs_buffer:
            buffers.append(value[at : at + b.size].reshape(b.shape).copy())
            at += b.size
        return state, buffers

    def check_extra_state(self, value: Any) -> None:
        """Raise ``ValueError`` unless ``value`` is an `extra_state` of this game."""
        state, _ = self._split(value)
        current = self.ale.cloneState(include_rng=True)
        try:
            self.ale.restoreState(state)
        except Exception:  # as above: a foreign ROM's state or damaged bytes
            raise ValueError("Atari emulator state does not fit this game") from None
        finally:
            self.ale.restoreState(current)

    def load_extra_state(self, value: Any) -> None:
        """Restore an `extra_state`."""
        state, buffers = self._split(value)
        self.ale.restoreState(state)
        for b, saved in zip(self.obs_buffer, buffers, strict=True):
            b[...] = saved


class RawEpisodeStats(gym.Wrapper):
    """Records the real game's raw return and length in ``info[RAW_EPISODE_KEY]`` at the step the game ends.

    It sits below the episodic life and the clipping; the length counts every step the layers above take.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.game_return = 0.0
        self.game_length = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        self.game_return = 0.0
        self.game_length = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_return += float(reward)
        self.game_length += 1
        if terminated or truncated:
            info = {**info, RAW_EPISODE_KEY: {"r": self.game_return, "l": self.game_length}}
        return obs, reward, terminated, truncated, info


def _carry(src: dict, dst: dict) -> dict:
    """``dst`` with ``src``'s raw-episode record, if any (a game that ended inside a reset)."""
    return {**dst, RAW_EPISODE_KEY: src[RAW_EPISODE_KEY]} if RAW_EPISODE_KEY in src else dst


class EpisodicLife(gym.Wrapper):
    """A life loss ends the episode (``terminated``) but not the game (reset steps a no-op)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.real_done = True

    def _lives(self) -> int:
        return int(self.env.unwrapped.ale.lives())  # type: ignore[attr-defined]

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.real_done = bool(terminated or truncated)
        lives = self._lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        if self.real_done or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, reset_info = self.env.reset(options=options)
                info = _carry(info, reset_info)
        self.real_done = False
        self.lives = self._lives()
        return obs, info


class FireReset(gym.Wrapper):
    """Press FIRE (then action 2) after each reset for games that wait for it, and after a lost life in
    evaluation.

    Without it a greedy evaluation would wait, the ball never served, until the frame limit.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0

    def _fire(self, obs: Any, info: dict) -> tuple[Any, SupportsFloat, bool, bool, dict]:
        reward, terminated, truncated = 0.0, False, False
        for action in (1, 2):
            obs, r, terminated, truncated, step_info = self.env.step(action)
            reward += float(r)
            info = _carry(step_info, info)
            if terminated or truncated:
                break
        return obs, reward, terminated, truncated, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = int(self.env.unwrapped.ale.lives())  # type: ignore[attr-defined]
        if 0 < lives < self.lives and not (terminated or truncated):
            obs, more, terminated, truncated, info = self._fire(obs, info)
            reward = float(reward) + float(more)
            lives = int(self.env.unwrapped.ale.lives())  # type: ignore[attr-defined]
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        obs, _, terminated, truncated, info = self._fire(obs, info)
        if terminated or truncated:
            obs, reset_info = self.env.reset(options=options)
            info = _carry(info, reset_info)
        self.lives = int(self.env.unwrapped.ale.lives())  # type: ignore[attr-defined]
        return obs, info


class ClipRewardSign(gym.RewardWrapper):
    """Rewards clipped to their sign (-1, 0, 1)."""

    def reward(self, reward: SupportsFloat) -> float:
        return float(np.sign(float(reward)))


class ZeroPadFrameStack(gym.Wrapper):
    """The last ``k`` frames ``[k, *frame]`` (newest last), zeros before the episode's start."""

    def __init__(self, env: gym.Env, k: int) -> None:
        super().__init__(env)
        box = env.observation_space
        if not isinstance(box, spaces.Box):
            raise TypeError(f"ZeroPadFrameStack needs a Box observation space, got {type(box).__name__}")
        self.frames = np.zeros((k, *box.shape), dtype=box.dtype)
        low = np.broadcast_to(np.minimum(box.low, 0), self.frames.shape)
        high = np.broadcast_to(box.high, self.frames.shape)
        self.observation_space = spaces.Box(low, high, self.frames.shape, box.dtype)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        frames = np.zeros_like(self.frames)
        frames[-1] = obs
        self.frames = frames  # a new array each time: a saved state keeps the old one
        return frames, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.frames = np.concatenate([self.frames[1:], obs[None]])
        return self.frames, reward, terminated, truncated, info
