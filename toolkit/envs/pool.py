"""Atari through envpool: ``envpool:<Game>-v5`` ids behind the ``VecEnv`` interface (the ``envpool`` extra).

`EnvPoolVecEnv` adds same-step autoreset, zeros before an episode's first frame and training/evaluation
variants. envpool cannot save its emulators: resuming is refused (use ``ALE/`` ids). Layer: envs. Guide:
docs/pages/pixels.md.
"""

from __future__ import annotations

import difflib
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from tritonrl.toolkit.envs.transition import Transition, host_actions, host_tensor, host_transition

__all__ = ["ENVPOOL_PREFIX", "EnvPoolVecEnv", "is_envpool_id"]

ENVPOOL_PREFIX = "envpool:"
STACK = 4
"""Frames per observation (as the ``ALE/`` preprocessing)."""
_KIND = "envpool"


def is_envpool_id(env_id: object) -> bool:
    """Whether ``env_id`` names an envpool game (``envpool:<Game>-v5``)."""
    return isinstance(env_id, str) and env_id.startswith(ENVPOOL_PREFIX)


def _envpool() -> Any:
    try:
        import envpool
    except ImportError:
        raise ValueError('envpool ids need envpool: pip install "tritonrl[envpool]"') from None
    return envpool


class EnvPoolVecEnv:
    """``num_envs`` envpool Atari games behind the `VecEnv` interface.

    Observations are ``[E, 4, 84, 84]`` uint8 (``obs[:, -1]`` the newest frame) on ``device``.
    ``training=True``: a lost life ends an episode and rewards are clipped to their sign; reported returns and
    lengths are always the whole games'. Build it with
    [`make_vec_env`][tritonrl.toolkit.envs.vector.make_vec_env].
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int,
        device: torch.device | str = "cpu",
        *,
        training: bool = True,
    ) -> None:
        if not is_envpool_id(env_id):
            raise ValueError(f"not an envpool id: {env_id!r} (expected {ENVPOOL_PREFIX}<Game>-v5)")
        envpool = _envpool()
        task = env_id[len(ENVPOOL_PREFIX) :]
        atari = [name for name in envpool.list_all_envs() if name.endswith("-v5") and "-" not in name[:-3]]
        if task not in atari or "episodic_life" not in envpool.make_spec(task).config._fields:
            close = difflib.get_close_matches(task, atari, n=3, cutoff=0.6)
            hint = f" (did you mean {', '.join(ENVPOOL_PREFIX + c for c in close)}?)" if close else ""
            raise ValueError(f"unknown envpool Atari game {env_id!r}{hint}")
        self.env_id = env_id
        self.num_envs = num_envs
        self.seed = seed
        self.training = training
        self.device = torch.device(device)
        self.pool = envpool.make(
            task, env_type="gymnasium", num_envs=num_envs, batch_size=num_envs, seed=seed,
            episodic_life=True,  # envpool's reset step then continues the game after a lost life
            reward_clip=training, stack_num=STACK, frame_skip=4, noop_max=30, img_height=84, img_width=84,
            repeat_action_probability=0.0, use_fire_reset=True,
        )  # fmt: skip
        self.single_observation_space = spaces.Box(0, 255, (STACK, 84, 84), np.uint8)
        self.single_action_space = self.pool.action_space
        self._all = np.arange(num_envs, dtype=np.int32)
        self._depth = np.zeros(num_envs, np.int64)  # frames of the agent's episode so far
        self._returns = np.zeros(num_envs, np.float64)  # the whole game's raw return
        self._lengths = np.zeros(num_envs, np.int64)
        self.obs: torch.Tensor | None = None

    def _pad(self, obs: np.ndarray) -> None:
        """Zero the frames of ``obs`` [E, 4, 84, 84] from before each env's episode start (in place)."""
        for k in range(STACK - 1):
            before = self._depth < STACK - k  # frame k lies before the episode's first frame
            if before.any():
                obs[before, k] = 0

    def reset(self) -> torch.Tensor:
        """Start a new game in every environment; returns ``obs`` [E, 4, 84, 84] uint8."""
        obs, _ = self.pool.reset(self._all)
        obs = np.array(obs, dtype=np.uint8)  # a fresh array: envpool reuses its buffers
        self._depth[:] = 1
        self._returns[:] = 0.0
        self._lengths[:] = 0
        self._pad(obs)
        self.obs = host_tensor(self.device, obs)
        return self.obs

    def step(self, actions: torch.Tensor | np.ndarray) -> Transition:
        """Step every game once; where an episode ends, its env steps again in the same call (same-step
        autoreset).

        Raises:
            RuntimeError: called before `reset`.
            ValueError: ``actions`` has the wrong leading size.
        """
        if self.obs is None:
            raise RuntimeError("EnvPoolVecEnv.step called before reset()")
        a = host_actions(actions, self.num_envs)
        if a.ndim != 1:
            raise ValueError(
                f"actions has shape {a.shape}, expected one discrete action per env [{self.num_envs}]"
            )
        obs, reward, life_or_game, truncated, info = self.pool.step(a.astype(np.int32, copy=False), self._all)
        obs = np.array(obs, dtype=np.uint8)
        reward = np.asarray(reward, dtype=np.float32).copy()
        truncated = np.asarray(truncated, dtype=np.bool_).copy()
        game_over = np.asarray(info["terminated"], dtype=np.bool_) & ~truncated
        life_or_game = np.asarray(life_or_game, dtype=np.bool_)
        terminated = life_or_game.copy() if self.training else game_over
        self._returns += np.asarray(info["reward"], dtype=np.float64)
        self._lengths += 1
        self._depth += 1
        ep_returns: list[float] = []
        ep_lengths: list[int] = []
        ended = np.flatnonzero(life_or_game | truncated)  # envpool resets these at their next step
        next_obs = obs
        if ended.size:
            next_obs = obs.copy()
            fresh, _, _, _, _ = self.pool.step(np.zeros(ended.size, np.int32), ended.astype(np.int32))
            obs[ended] = fresh
            games = ended[game_over[ended] | truncated[ended]]
            for i in games:
                ep_returns.append(float(self._returns[i]))
                ep_lengths.append(int(self._lengths[i]))
            self._returns[games] = 0.0
            self._lengths[games] = 0
            # a new agent episode starts where one ended (in evaluation, only at a new game)
            starts = ended if self.training else games
            self._depth[starts] = 1
        self._pad(obs)
        out = host_transition(
            self.device, obs, reward, next_obs, terminated, truncated, ep_returns, ep_lengths
        )
        self.obs = out.obs
        return out

    def get_state(self) -> dict[str, Any]:
        """This env's id and size, marked as not resumable (`check_state` refuses it)."""
        return {"env_id": self.env_id, "num_envs": self.num_envs, "kind": _KIND}

    def check_state(self, state: dict[str, Any]) -> None:
        """Refuse to resume: envpool cannot restore its games.

        Raises:
            ValueError: always, naming the id whose games the checkpoint could not keep.
        """
        saved = state.get("env_id") if isinstance(state, dict) else None
        raise ValueError(
            f"the environments of {saved or self.env_id} cannot be resumed: envpool cannot save its "
            "emulators' state (the checkpoint's weights still load for evaluation); train with the "
            "ALE/ id of the game for a run that resumes exactly"
        )

    def set_state(self, state: dict[str, Any]) -> None:
        """Refused (`check_state`)."""
        self.check_state(state)

    def close(self) -> None:
        """Close the pool."""
        self.pool.close()
