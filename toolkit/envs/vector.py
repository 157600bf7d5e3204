"""Vector environments with autoreset handled in one place, greedy evaluation, extra env ids.

[`VecEnv`][tritonrl.toolkit.envs.vector.VecEnv] puts a same-step-autoreset ``SyncVectorEnv`` behind torch and
reports real transitions; its state resumes exactly (MuJoCo included). Extra ids for tests of memory:
``CartPoleNoVel-v1``, ``PendulumNoVel-v1``. Layer: envs. Guide: docs/pages/training.md.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from tritonrl.toolkit.envs import pixels
from tritonrl.toolkit.envs.transition import Transition, host_actions, host_tensor, host_transition
from tritonrl.toolkit.spaces import space_from_json, space_to_json

__all__ = [
    "EXTRA_ENV_IDS",
    "Transition",
    "VecEnv",
    "evaluate",
    "make_vec_env",
    "space_from_json",
    "space_to_json",
]


# ----------------------------------------------------------------------------- extra env ids


class _SelectObs(gym.ObservationWrapper):
    """Keep only the observation entries at ``indices`` (a partially observed variant)."""

    def __init__(self, env: gym.Env, indices: Sequence[int]) -> None:
        super().__init__(env)
        self._indices = np.asarray(indices, dtype=np.int64)
        box = cast(spaces.Box, env.observation_space)  # checked by the caller
        self.observation_space = spaces.Box(
            box.low[self._indices],
            box.high[self._indices],
            dtype=box.dtype,
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[self._indices]


def _cartpole_novel(**kwargs: Any) -> gym.Env:
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv

    return _SelectObs(CartPoleEnv(**kwargs), [0, 2])


def _pendulum_novel(**kwargs: Any) -> gym.Env:
    from gymnasium.envs.classic_control.pendulum import PendulumEnv

    return _SelectObs(PendulumEnv(**kwargs), [0, 1])


EXTRA_ENV_IDS: dict[str, dict[str, Any]] = {
    "CartPoleNoVel-v1": {"entry_point": _cartpole_novel, "max_episode_steps": 500, "reward_threshold": 475.0},
    "PendulumNoVel-v1": {"entry_point": _pendulum_novel, "max_episode_steps": 200},
}


def _register_extra() -> None:
    for env_id, kwargs in EXTRA_ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, **kwargs)


_register_extra()


# ----------------------------------------------------------------------------- vector env


_EXTRA = "__extra__"  # a layer's own state beyond its plain attributes (see the module doc)
_MUJOCO = "__mujoco__"  # a MuJoCo env's integration state (f64 [mj_stateSize]), see _mujoco_parts


def _mujoco_parts(layer: Any) -> tuple[Any, Any, Any, int] | None:
    """``(mujoco, model, data, spec)`` of a layer holding a MuJoCo simulation, else ``None``.

    ``spec`` is ``mjSTATE_INTEGRATION``: everything ``mj_step`` reads, so a restored simulation steps bit for
    bit.
    """
    data = vars(layer).get("data")
    if data is None or type(data).__module__.split(".")[0] != "mujoco":
        return None
    import mujoco

    model = vars(layer).get("model")
    if not isinstance(model, mujoco.MjModel) or not isinstance(data, mujoco.MjData):
        return None
    return mujoco, model, data, int(mujoco.mjtState.mjSTATE_INTEGRATION)


def _mujoco_state(layer: Any) -> np.ndarray | None:
    parts = _mujoco_parts(layer)
    if parts is None:
        return None
    mujoco, model, data, spec = parts
    state = np.empty(mujoco.mj_stateSize(model, spec), dtype=np.float64)
    mujoco.mj_getState(model, data, state, spec)
    return state


_SKIP_ATTRS = {
    "env",
    "spec",
    "_saved_kwargs",
    "_cached_spec",
    "metadata",
    "_metadata",
    "render_mode",
    "screen",
    "clock",
}


def _capture_layer(layer: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in vars(layer).items():
        if name in _SKIP_ATTRS or isinstance(value, (gym.Space, gym.Env)):
            continue
        if isinstance(value, np.random.Generator):
            out[name] = {"__generator__": value.bit_generator.state}
        elif isinstance(value, np.ndarray):
            out[name] = value.copy()  # a layer may write its arrays in place after the capture
        elif value is None or isinstance(value, (bool, int, float, str, np.generic)):
            out[name] = value
        elif isinstance(value, (tuple, list)) and all(isinstance(v, (int, float, np.generic)) for v in value):
            out[name] = {
                "__seq__": type(value).__name__,
                "items": [float(v) if isinstance(v, float) else v for v in value],
            }
    if callable(getattr(layer, "extra_state", None)):
        out[_EXTRA] = layer.extra_state()
    physics = _mujoco_state(layer)
    if physics is not None:
        out[_MUJOCO] = physics
    return out


def _plan_layer(layer: Any, state: Any) -> list[tuple[str, Any]]:
    """Check one wrapper layer's saved attributes and return the ``(name, value)`` pairs to set; changes
    nothing.

    Raises:
        ValueError: not a dict, a name that is not a plain attribute, or a value of a kind
            `_capture_layer` does not write.
    """
    if not isinstance(state, dict):
        raise ValueError(f"layer state of {type(layer).__name__} is a {type(state).__name__}, not a dict")
    plan: list[tuple[str, Any]] = []
    hook = getattr(layer, "check_extra_state", None)
    if callable(hook) and _EXTRA not in state:
        raise ValueError(f"layer state of {type(layer).__name__} lacks its extra state")
    live_physics = _mujoco_state(layer)
    if (live_physics is None) != (_MUJOCO not in state):
        has = "holds" if live_physics is None else "lacks"
        raise ValueError(f"layer state of {type(layer).__name__} {has} a MuJoCo simulation state")
    for name, value in state.items():
        if name == _MUJOCO and live_physics is not None:
            shape = live_physics.shape
            if not (isinstance(value, np.ndarray) and value.dtype == np.float64 and value.shape == shape):
                raise ValueError(
                    f"{type(layer).__name__}: the MuJoCo state is not an f64 array of shape {shape}"
                )
            if not np.isfinite(value).all():
                raise ValueError(f"{type(layer).__name__}: the MuJoCo state holds NaN or infinite values")
            plan.append((name, value.copy()))
            continue
        if name == _EXTRA and callable(hook):
            try:
                hook(value)
            except ValueError as exc:
                raise ValueError(f"{type(layer).__name__}: {exc}") from None
            plan.append((name, value))
            continue
        cls_attr = getattr(type(layer), name, None) if isinstance(name, str) else None
        if (
            not isinstance(name, str)
            or not name.isidentifier()
            or name.startswith("__")
            or callable(cls_attr)
            or isinstance(cls_attr, property)
            or name in _SKIP_ATTRS
        ):
            raise ValueError(f"{type(layer).__name__} state names {repr(name)[:40]}, not a plain attribute")
        if isinstance(value, dict) and set(value) == {"__generator__"}:
            gen = getattr(layer, name, None)
            bit = type(gen.bit_generator) if isinstance(gen, np.random.Generator) else np.random.PCG64
            scratch = bit()
            try:
                scratch.state = value["__generator__"]
                exact = scratch.state == value["__generator__"]  # numpy casts some wrong types silently
            except (TypeError, ValueError, KeyError) as exc:
                raise ValueError(
                    f"{type(layer).__name__}.{name}: generator state does not fit ({str(exc)[:80]})"
                ) from None
            if not exact:
                raise ValueError(f"{type(layer).__name__}.{name}: generator state does not fit")
            plan.append((name, scratch))
        elif isinstance(value, dict) and set(value) == {"__seq__", "items"}:
            if value["__seq__"] not in ("tuple", "list") or not isinstance(value["items"], list):
                raise ValueError(f"{type(layer).__name__}.{name}: malformed sequence state")
            items = value["items"]
            plan.append((name, tuple(items) if value["__seq__"] == "tuple" else list(items)))
        elif isinstance(value, np.ndarray):
            plan.append((name, value.copy()))
        elif value is None or isinstance(value, (bool, int, float, str, np.generic)):
            plan.append((name, value))
        else:
            raise ValueError(
                f"{type(layer).__name__}.{name}: a {type(value).__name__} is not an env state value"
            )
        live = vars(layer).get(name)
        wrong = _unlike(live, plan[-1][1])
        if wrong:
            raise ValueError(f"{type(layer).__name__}.{name}: {wrong}, this env's holds {_describe(live)}")
    return plan


def _describe(value: Any) -> str | None:
    """What kind of env state ``value`` is, in words; ``None`` for an unknown kind."""
    if isinstance(value, (np.random.Generator, np.random.BitGenerator)):
        return "a generator"
    if isinstance(value, (bool, int, float, np.bool_, np.number)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} numbers"
    return None


def _unlike(live: Any, saved: Any) -> str | None:
    """Why ``saved`` cannot stand where the layer holds ``live`` now, else ``None``.

    The same kind and, for an array or tuple, as many numbers (a list may grow); ``None`` on either side is
    not judged. A damaged value fails at load, not steps later inside the env.
    """
    live_kind, saved_kind = _describe(live), _describe(saved)
    if live_kind is None or saved is None:
        return None
    seqs = (np.ndarray, tuple, list)
    if not (isinstance(live, seqs) and isinstance(saved, seqs)):
        return None if live_kind == saved_kind else f"saved {saved_kind}"
    if isinstance(live, list) or isinstance(saved, list):
        return None
    if isinstance(live, np.ndarray) and isinstance(saved, np.ndarray):
        return None if live.shape == saved.shape else f"saved {saved_kind}"
    live_n = live.size if isinstance(live, np.ndarray) else len(live)
    saved_n = saved.size if isinstance(saved, np.ndarray) else len(saved)
    return None if live_n == saved_n else f"saved {saved_n} numbers"


def _apply_layer(layer: Any, plan: list[tuple[str, Any]]) -> None:
    for name, value in plan:
        if name == _EXTRA:
            layer.load_extra_state(value)
        elif name == _MUJOCO:
            mujoco, model, data, spec = cast(tuple[Any, Any, Any, int], _mujoco_parts(layer))
            mujoco.mj_setState(model, data, value, spec)
            mujoco.mj_forward(model, data)  # derived quantities (positions of bodies, sensors)
        elif isinstance(value, np.random.BitGenerator):
            gen = getattr(layer, name, None)
            if isinstance(gen, np.random.Generator) and type(gen.bit_generator) is type(value):
                gen.bit_generator.state = value.state
            else:
                setattr(layer, name, np.random.Generator(value))
        else:
            setattr(layer, name, value)


def _layers(env: gym.Env) -> list[Any]:
    """The wrapper chain down to the base env, without the passive checker (it only checks once)."""
    layers = [env]
    while hasattr(layers[-1], "env"):
        layers.append(layers[-1].env)
    return [layer for layer in layers if not isinstance(layer, gym.wrappers.PassiveEnvChecker)]


class VecEnv:
    """A gymnasium vector env behind a torch interface with real transitions; build it with
    [`make_vec_env`][tritonrl.toolkit.envs.vector.make_vec_env].

    Observations and rewards are f32 (uint8 for a uint8 ``Box``), flags bool, on ``device``. Actions: int64
    ``[E]`` (Discrete), int64 ``[E, K]`` (MultiDiscrete), float ``[E, D]`` (Box, clipped to the bounds here).
    """

    def __init__(
        self, vec: gym.vector.SyncVectorEnv, env_id: str, seed: int, device: torch.device | str = "cpu"
    ) -> None:
        self.vec = vec
        self.env_id = env_id
        self.seed = seed
        self.device = torch.device(device)
        self.num_envs = vec.num_envs
        self.single_observation_space = vec.single_observation_space
        self.single_action_space = vec.single_action_space
        self._returns = np.zeros(self.num_envs, dtype=np.float64)
        self._lengths = np.zeros(self.num_envs, dtype=np.int64)
        self.obs: torch.Tensor | None = None
        self._obs_shape = (self.num_envs, *(self.single_observation_space.shape or ()))
        obs_space = self.single_observation_space
        uint8 = isinstance(obs_space, spaces.Box) and obs_space.dtype == np.uint8
        self._obs_dtype: type[np.generic] = np.uint8 if uint8 else np.float32
        self._obs_torch = torch.uint8 if uint8 else torch.float32
        self._raw = any(isinstance(layer, pixels.RawEpisodeStats) for layer in _layers(vec.envs[0]))
        space = self.single_action_space
        self._box = isinstance(space, spaces.Box)
        if isinstance(space, spaces.Box):
            self._low, self._high = space.low, space.high

    def reset(self) -> torch.Tensor:
        """Reset every environment with seeds ``seed, seed + 1, ...``; returns ``obs`` ``[E, *obs_shape]``."""
        obs, _ = self.vec.reset(seed=[self.seed + i for i in range(self.num_envs)])
        self._returns[:] = 0.0
        self._lengths[:] = 0
        self.obs = host_tensor(self.device, np.asarray(obs, dtype=self._obs_dtype))
        return self.obs

    def step(self, actions: torch.Tensor | np.ndarray) -> Transition:
        """Step every environment once; finished ones reset in the same call (see `Transition`).

        Raises:
            RuntimeError: called before [`reset`][tritonrl.toolkit.envs.vector.VecEnv.reset].
            ValueError: ``actions`` has the wrong leading size.
        """
        if self.obs is None:
            raise RuntimeError("VecEnv.step called before reset()")
        a = host_actions(actions, self.num_envs)
        if self._box:
            a = np.clip(a.astype(self._low.dtype, copy=False), self._low, self._high)
        n = self.num_envs
        obs = np.empty(self._obs_shape, self._obs_dtype)
        reward = np.empty(n, np.float32)
        terminated = np.empty(n, np.bool_)
        truncated = np.empty(n, np.bool_)
        finals: list[tuple[int, Any]] = []
        games: list[dict[str, Any]] = []  # real games that ended (a RawEpisodeStats layer)
        for i, env in enumerate(self.vec.envs):
            o, r, te, tr, info = env.step(a[i])
            reward[i], terminated[i], truncated[i] = r, te, tr
            if self._raw and pixels.RAW_EPISODE_KEY in info:
                games.append(info[pixels.RAW_EPISODE_KEY])
            if te or tr:
                finals.append((i, o))
                o, info = env.reset()
                if self._raw and pixels.RAW_EPISODE_KEY in info:
                    games.append(info[pixels.RAW_EPISODE_KEY])
            obs[i] = o
        returns, lengths = self._returns, self._lengths
        returns += reward
        lengths += 1
        ep_returns: list[float] = []
        ep_lengths: list[int] = []
        next_obs = obs
        if finals:
            next_obs = obs.copy()
            for i, o in finals:
                next_obs[i] = o
                if not self._raw:
                    ep_returns.append(float(returns[i]))
                    ep_lengths.append(int(lengths[i]))
                returns[i] = 0.0
                lengths[i] = 0
        for game in games:
            ep_returns.append(float(game["r"]))
            ep_lengths.append(int(game["l"]))
        out = host_transition(
            self.device, obs, reward, next_obs, terminated, truncated, ep_returns, ep_lengths
        )
        self.obs = out.obs
        return out

    def get_state(self) -> dict[str, Any]:
        """Everything needed to continue exactly: sub-env plain state, episode counters, ``obs``."""
        return {
            "env_id": self.env_id,
            "num_envs": self.num_envs,
            "envs": [[_capture_layer(layer) for layer in _layers(e)] for e in self.vec.envs],
            "returns": self._returns.copy(),
            "lengths": self._lengths.copy(),
            "obs": None if self.obs is None else self.obs.cpu(),
        }

    def check_state(self, state: dict[str, Any]) -> list[list[list[tuple[str, Any]]]]:
        """The plan `set_state` applies; ``ValueError`` unless ``state`` is this env's."""
        if not isinstance(state, dict):
            raise ValueError(f"env state is a {type(state).__name__}, not a dict")
        if state.get("env_id") != self.env_id or state.get("num_envs") != self.num_envs:
            raise ValueError(
                f"env state is for {repr(state.get('env_id'))[:60]} x "
                f"{repr(state.get('num_envs'))[:20]}, this is {self.env_id!r} x {self.num_envs}"
            )
        envs = state.get("envs")
        if not isinstance(envs, list) or len(envs) != self.num_envs:
            raise ValueError(
                f"env state holds {len(envs) if isinstance(envs, list) else 'no'} environment "
                f"states, expected {self.num_envs}"
            )
        plans = []
        for i, (e, layer_states) in enumerate(zip(self.vec.envs, envs, strict=True)):
            layers = _layers(e)
            if not isinstance(layer_states, list) or len(layer_states) != len(layers):
                raise ValueError(
                    f"env state does not match the wrapper chain of {self.env_id} ({len(layers)} layers)"
                )
            try:
                plans.append([_plan_layer(layer, s) for layer, s in zip(layers, layer_states, strict=True)])
            except ValueError as exc:
                raise ValueError(f"env state of environment {i}: {exc}") from None
        for key, kind in (("returns", "f"), ("lengths", "i")):
            value = state.get(key)
            kinds = "fi" if kind == "f" else "i"
            if (
                not isinstance(value, np.ndarray)
                or value.shape != (self.num_envs,)
                or value.dtype.kind not in kinds
            ):
                raise ValueError(f"env state {key!r} is not a numeric array of shape ({self.num_envs},)")
        if "obs" not in state:
            raise ValueError("env state lacks 'obs'")
        obs = state["obs"]
        shape = (self.num_envs, *(self.single_observation_space.shape or ()))
        if self._obs_torch == torch.uint8:
            if obs is not None and (
                not isinstance(obs, torch.Tensor) or tuple(obs.shape) != shape or obs.dtype != torch.uint8
            ):
                raise ValueError(f"env state 'obs' is not a uint8 tensor of shape {shape}")
        elif obs is not None and (
            not isinstance(obs, torch.Tensor) or tuple(obs.shape) != shape or not obs.is_floating_point()
        ):
            raise ValueError(f"env state 'obs' is not a float tensor of shape {shape}")
        return plans

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore `get_state` output (every part checked before anything changes).

        Raises:
            ValueError: the state belongs to another env id or number of environments, or is damaged.
        """
        plans = self.check_state(state)
        for e, layer_plans in zip(self.vec.envs, plans, strict=True):
            for layer, plan in zip(_layers(e), layer_plans, strict=True):
                _apply_layer(layer, plan)
        self._returns[:] = np.asarray(state["returns"], dtype=np.float64)
        self._lengths[:] = np.asarray(state["lengths"], dtype=np.int64)
        self.obs = None if state["obs"] is None else state["obs"].to(self.device, self._obs_torch)

    def close(self) -> None:
        """Close the environments."""
        self.vec.close()


def _check_env_id(env_id: str) -> None:
    pixels.register_pixel_ids(env_id)
    if not isinstance(env_id, str) or env_id not in gym.registry:
        hint = ""
        if isinstance(env_id, str) and env_id:
            stem = env_id.lower().split("-")[0]
            close = difflib.get_close_matches(env_id, list(gym.registry), n=5, cutoff=0.6)
            close += sorted(k for k in gym.registry if stem in k.lower() and k not in close)
            if close:
                hint = f" (did you mean {', '.join(close[:5])}?)"
        raise ValueError(f"unknown environment id {env_id!r}{hint}")


# gymnasium.envs.<family> -> the gymnasium extra that installs what the family imports
_EXTRAS = {"box2d": "box2d", "mujoco": "mujoco", "phys2d": "jax", "tabular": "jax"}
_OURS = ("tritonrl",)


def _make_single(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make`` with a missing optional dependency turned into a one-line ``ValueError``."""
    try:
        return gym.make(env_id, **kwargs)
    except (gym.error.DependencyNotInstalled, ImportError) as exc:
        if isinstance(exc, ImportError) and (exc.name or "").split(".")[0] in _OURS:
            raise  # a bug of ours, not a missing extra
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "pip install" not in msg:
            entry = gym.spec(env_id).entry_point
            family = ""
            if isinstance(entry, str) and entry.startswith("gymnasium.envs."):
                family = entry.split(".")[2]
            if family in _EXTRAS:
                msg += f'; install it with pip install "gymnasium[{_EXTRAS[family]}]"'
        raise ValueError(f"environment {env_id!r} needs a package that is not installed: {msg}") from None


def make_vec_env(
    env_id: str,
    num_envs: int,
    seed: int,
    *,
    capture_video: bool = False,
    wrappers: Sequence[Callable[[gym.Env], gym.Env]] = (),
    device: torch.device | str = "cpu",
    video_dir: str | None = None,
    training: bool = True,
) -> VecEnv:
    """Build ``num_envs`` copies of ``env_id`` as a `VecEnv` (env ``i`` reset with ``seed + i``).

    ``MinAtar/`` and ``ALE/`` ids get their preprocessing
    ([`tritonrl.toolkit.envs.pixels.preprocess`][tritonrl.toolkit.envs.pixels.preprocess]) before
    ``wrappers``; ``envpool:<Game>-v5`` ids give an `EnvPoolVecEnv`.

    Args:
        env_id: a gymnasium id, one of `EXTRA_ENV_IDS`, a ``MinAtar/`` / ``ALE/`` id, or
            ``envpool:<Game>-v5``.
        capture_video: record environment 0 into ``video_dir`` (needs ``moviepy``).
        wrappers: callables applied, in order, to each single environment.
        training: the training variant of an Atari id (episodic life, clipped rewards).

    Raises:
        ValueError: unknown ``env_id`` (close ids suggested), a missing optional dependency (its pip extra
            named), ``num_envs < 1``, or wrappers or a video asked of an envpool id.
    """
    if not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
    from tritonrl.toolkit.envs import pool

    if pool.is_envpool_id(env_id):
        if capture_video or wrappers:
            raise ValueError(f"{env_id}: envpool games take no wrappers and record no video")
        games = pool.EnvPoolVecEnv(env_id, num_envs, seed, device, training=training)
        games.reset()
        return games  # type: ignore[return-value]  # the same interface (duck-typed, as MarketEnv)
    _check_env_id(env_id)

    extra = pixels.make_kwargs(env_id)

    def thunk(i: int) -> Callable[[], gym.Env]:
        def make() -> gym.Env:
            if capture_video and i == 0:
                env = _make_single(env_id, render_mode="rgb_array", disable_env_checker=True, **extra)
                env = gym.wrappers.RecordVideo(env, video_dir or "videos")
            else:
                env = _make_single(env_id, disable_env_checker=True, **extra)
            env = pixels.preprocess(env_id, env, training=training)
            for w in wrappers:
                env = w(env)
            return env

        return make

    vec = gym.vector.SyncVectorEnv(
        [thunk(i) for i in range(num_envs)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    env = VecEnv(vec, env_id, seed, device)
    env.reset()
    return env


def evaluate(
    policy: Callable[[torch.Tensor], torch.Tensor],
    env_id: str,
    episodes: int,
    seed: int,
    *,
    device: torch.device | str = "cpu",
    wrappers: Sequence[Callable[[gym.Env], gym.Env]] = (),
) -> dict[str, Any]:
    """Run ``episodes`` episodes (one per environment, in parallel) with a greedy ``policy``; returns and
    lengths.

    ``policy(obs [N, *obs_shape]) -> actions`` on the evaluation variant; its ``reset(mask)``, if any, is
    called first.

    Returns:
        ``{"mean_return", "std_return", "mean_length", "returns": [...], "lengths": [...]}``.

    Raises:
        ValueError: unknown ``env_id`` or ``episodes < 1``.
    """
    if not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be a positive int, got {episodes!r}")
    env = make_vec_env(env_id, episodes, seed, wrappers=wrappers, device=device, training=False)
    reset = getattr(policy, "reset", None)
    if reset is not None:
        reset(torch.ones(episodes, dtype=torch.bool, device=device))
    returns = np.zeros(episodes)
    lengths = np.zeros(episodes, dtype=np.int64)
    active = np.ones(episodes, dtype=bool)
    obs = env.reset() if env.obs is None else env.obs  # make_vec_env has reset it
    try:
        with torch.no_grad():
            while active.any():
                tr = env.step(policy(obs))
                r = tr.reward.cpu().numpy()
                done = (tr.terminated | tr.truncated).cpu().numpy()
                returns[active] += r[active]
                lengths[active] += 1
                active &= ~done
                obs = tr.obs
    finally:
        env.close()
    return {
        "mean_return": float(returns.mean()),
        "std_return": float(returns.std()),
        "mean_length": float(lengths.mean()),
        "returns": returns.tolist(),
        "lengths": lengths.tolist(),
    }
