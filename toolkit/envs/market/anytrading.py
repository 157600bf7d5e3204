"""gym-anytrading 2.0.0's ``StocksEnv`` and ``ForexEnv``, N copies stepped at once as tensor ops.

[`AnyTradingEnv`][tritonrl.toolkit.envs.market.anytrading.AnyTradingEnv] reproduces the published environments
step for step, bit for bit in f32 under NumPy >= 2, so results can be compared across the move;
[`process_data`][tritonrl.toolkit.envs.market.anytrading.process_data] builds the prices and signal features
the same way. See docs/pages/market.md ("gym-anytrading compatibility").
"""

from __future__ import annotations

from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space
from tritonrl.toolkit.bars.types import Bars
from tritonrl.toolkit.envs.market.actions import as_actions
from tritonrl.toolkit.envs.vector import Transition

__all__ = ["ANYTRADING_WINDOW", "AnyTradingEnv", "process_data"]

#: The window sizes of the package's registered ids: ``stocks-v0`` (GOOGL) and ``forex-v0``
#: (EUR/USD); both register ``frame_bound = (window_size, len(df))``.
ANYTRADING_WINDOW: dict[str, int] = {"stocks": 30, "forex": 24}

_KINDS = ("stocks", "forex")
_PIP = 10000.0  # the forex reward unit: price differences are reported in pips
_OBS_BOUND = 1e10  # the package's observation Box bounds


def process_data(
    close: np.ndarray, window_size: int, frame_bound: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """The published ``_process_data`` of both envs: prices and ``[price, diff]`` features.

    Args:
        close: ``[L]`` close prices (any real dtype; the diff is taken in f64).
        frame_bound: ``(first, stop)`` with ``W <= first < stop <= L`` and ``stop - first >= 2``
            (the package silently wraps or clips the others).

    Returns:
        ``prices`` ``[T]`` f32 and ``signal_features`` ``[T, 2]`` f32 with
        ``T = stop - first + W`` (rows ``first - W .. stop - 1`` of ``close``).

    Raises:
        ValueError: ``close`` not 1-D or not finite, ``window_size < 1``, a bad ``frame_bound``.
    """
    close = np.asarray(close)
    if close.ndim != 1 or not np.issubdtype(close.dtype, np.number):
        raise ValueError(f"close must be a 1-D numeric array, got shape {close.shape} {close.dtype}")
    w = _check_window(window_size)
    if len(frame_bound) != 2:
        raise ValueError(f"frame_bound must be (first, stop), got {frame_bound!r}")
    first, stop = (int(b) for b in frame_bound)
    if not (w <= first and first + 2 <= stop <= close.shape[0]):
        raise ValueError(
            f"frame_bound={tuple(frame_bound)!r} with window_size={w} needs "
            f"window_size <= first, first + 2 <= stop <= len(close) = {close.shape[0]}"
        )
    prices = close[first - w : stop].astype(np.float64)
    if not np.isfinite(prices).all():
        raise ValueError("close holds NaN or inf inside frame_bound")
    diff = np.concatenate([[0.0], np.diff(prices)])
    features = np.stack([prices, diff], axis=1)
    return prices.astype(np.float32), features.astype(np.float32)


def _check_window(window_size: int) -> int:
    if isinstance(window_size, bool) or not isinstance(window_size, (int, np.integer)) or window_size < 1:
        raise ValueError(f"window_size must be an int >= 1, got {window_size!r}")
    return int(window_size)


class AnyTradingEnv(gym.vector.VectorEnv):
    """``num_envs`` copies of gym-anytrading's ``StocksEnv`` or ``ForexEnv``.

    Args:
        prices: ``[T]`` prices (the package's ``env.prices``), cast to f32 once.
        signal_features: ``[T, F]`` features (the package's ``env.signal_features``), cast to f32 once.
        kind: ``"stocks"`` or ``"forex"``: which reward and profit rules apply.
        window_size: ``W``, with ``T >= W + 2``; the fees and ``unit_side`` are as published.

    Observations are ``[N, W, F]`` f32, actions ``[N]`` int64 (0 Sell, 1 Buy), rewards ``[N]`` f32,
    flags ``[N]`` bool. ``info`` holds ``total_reward`` and ``total_profit`` ``[N]`` f32 and
    ``position`` ``[N]`` int64 (0 Short, 1 Long); ``step`` adds ``final_obs`` ``[N, W, F]``.

    Raises:
        ValueError: bad shapes, kind, window, counts, fees or ``unit_side``.
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(
        self,
        prices: np.ndarray | torch.Tensor,
        signal_features: np.ndarray | torch.Tensor,
        *,
        kind: Literal["stocks", "forex"],
        window_size: int,
        num_envs: int = 1,
        device: torch.device | str = "cpu",
        trade_fee_bid_percent: float = 0.01,
        trade_fee_ask_percent: float = 0.005,
        trade_fee: float = 0.0003,
        unit_side: Literal["left", "right"] = "left",
    ) -> None:
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
        if str(unit_side).lower() not in ("left", "right"):
            raise ValueError(f"unit_side must be 'left' or 'right', got {unit_side!r}")
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
        w = _check_window(window_size)
        device = torch.device(device)
        p = torch.as_tensor(prices).to(device=device, dtype=torch.float32)
        f = torch.as_tensor(signal_features).to(device=device, dtype=torch.float32)
        if p.ndim != 1 or f.ndim != 2 or f.shape[0] != p.shape[0]:
            raise ValueError(
                f"prices must be [T] and signal_features [T, F], got {tuple(p.shape)} and {tuple(f.shape)}"
            )
        if p.shape[0] < w + 2:
            raise ValueError(
                f"{p.shape[0]} price rows are too few for window_size={w} (need window_size + 2)"
            )
        for name, fee in (
            ("trade_fee_bid_percent", trade_fee_bid_percent),
            ("trade_fee_ask_percent", trade_fee_ask_percent),
            ("trade_fee", trade_fee),
        ):
            if not np.isfinite(fee):
                raise ValueError(f"{name} must be finite, got {fee!r}")

        self.kind = kind
        self.unit_side = str(unit_side).lower()
        self.window_size = w
        self.num_envs = int(num_envs)
        self.device = device
        self.env_id = f"anytrading:{kind}"
        self.prices = p.contiguous()
        self.signal_features = f.contiguous()
        self.start_tick = w
        self.end_tick = int(p.shape[0]) - 1
        self.trade_fee_bid_percent = float(trade_fee_bid_percent)
        self.trade_fee_ask_percent = float(trade_fee_ask_percent)
        self.trade_fee = float(trade_fee)

        # The package mixes Python floats into f32 arithmetic; NEP 50 casts each to f32 first.
        def const(x: float) -> torch.Tensor:
            return torch.tensor(x, dtype=torch.float32, device=device)

        self._keep_ask = const(1 - self.trade_fee_ask_percent)
        self._keep_bid = const(1 - self.trade_fee_bid_percent)
        self._fee = const(self.trade_fee)
        self._pip = const(_PIP)

        self.single_observation_space = gym.spaces.Box(
            low=-_OBS_BOUND, high=_OBS_BOUND, shape=(w, int(f.shape[1])), dtype=np.float32
        )
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

        self.obs: torch.Tensor | None = None  # the observation to act on next (None before reset)
        self._tick = self.start_tick
        n = self.num_envs
        self._position = torch.zeros(n, dtype=torch.int64, device=device)
        self._last_trade_tick = torch.full((n,), self.start_tick - 1, dtype=torch.int64, device=device)
        self._total_reward = torch.zeros(n, dtype=torch.float32, device=device)
        self._total_profit = torch.ones(n, dtype=torch.float32, device=device)

    # ------------------------------------------------------------------ constructors

    @classmethod
    def from_close(
        cls,
        close: np.ndarray,
        *,
        kind: Literal["stocks", "forex"] = "stocks",
        window_size: int | None = None,
        frame_bound: tuple[int, int] | None = None,
        num_envs: int = 1,
        device: torch.device | str = "cpu",
        **fees: Any,
    ) -> AnyTradingEnv:
        """Build from a close series as the package builds from a DataFrame's ``Close`` column.

        ``window_size`` and ``frame_bound`` default to the registered ids' (`ANYTRADING_WINDOW`,
        ``(window_size, len(close))``); raises as
        [`process_data`][tritonrl.toolkit.envs.market.anytrading.process_data] and the constructor.
        """
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
        w = ANYTRADING_WINDOW[kind] if window_size is None else window_size
        close = np.asarray(close)
        bound = (w, close.shape[0] if close.ndim == 1 else 0) if frame_bound is None else frame_bound
        prices, features = process_data(close, w, bound)
        return cls(prices, features, kind=kind, window_size=w, num_envs=num_envs, device=device, **fees)

    @classmethod
    def from_bars(cls, bars: Bars, **kwargs: Any) -> AnyTradingEnv:
        """`from_close` on ``bars.close`` (e.g. ``anytrading_bars("googl")``); same keywords."""
        return cls.from_close(bars.close, **kwargs)

    # ------------------------------------------------------------------ gymnasium API

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Reset every env to the start tick (deterministic: ``seed`` only seeds `np_random`).

        Returns:
            ``(obs [N, W, F] f32, info)``.
        """
        super().reset(seed=seed if not isinstance(seed, list) else seed[0], options=options)
        self._reset_state()
        self.obs = self._window(self._tick)
        return self.obs, self._info()

    def step(
        self, actions: Any
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Step every env with ``actions`` ``[N]`` int64 on `device` (0 Sell, 1 Buy; other
        values never trade, as in the package).

        Returns:
            ``(obs, reward, terminated, truncated, info)`` as the class doc says.

        Raises:
            RuntimeError: before [`reset`][tritonrl.toolkit.envs.market.anytrading.AnyTradingEnv.reset].
            ValueError: ``actions`` not integer ``[N]`` on `device`.
        """
        if self.obs is None:
            raise RuntimeError("step() before reset()")
        actions = self._check_actions(actions)
        self._tick += 1
        tick = self._tick
        truncated = tick == self.end_tick

        pos = self._position
        long = pos == 1
        trade = ((actions == 1) & ~long) | ((actions == 0) & long)
        cur = self.prices[tick]
        last = self.prices.index_select(0, self._last_trade_tick)
        booked = trade | truncated  # when the package updates total_profit
        profit = self._total_profit
        if self.kind == "stocks":
            reward = torch.where(trade & long, cur - last, 0.0)
            shares = profit * self._keep_ask / last
            profit = torch.where(booked & long, shares * self._keep_bid * cur, profit)
        else:
            pips = (cur - last) * self._pip
            # The package negates the difference before scaling; negation is exact either way.
            reward = torch.where(trade, torch.where(long, pips, -pips), 0.0)
            if self.unit_side == "left":
                profit = torch.where(booked & ~long, profit * (last - self._fee) / cur, profit)
            else:
                profit = torch.where(booked & long, profit / last * (cur - self._fee), profit)
        self._total_reward = self._total_reward + reward
        self._total_profit = profit
        self._position = torch.where(trade, 1 - pos, pos)
        self._last_trade_tick = torch.where(trade, tick, self._last_trade_tick)

        obs = self._window(tick)
        info = self._info()
        info["final_obs"] = obs
        if truncated:
            self._reset_state()
            obs = self._window(self._tick)
        self.obs = obs
        n = self.num_envs
        terminated = torch.zeros(n, dtype=torch.bool, device=self.device)
        truncated_t = torch.full((n,), truncated, dtype=torch.bool, device=self.device)
        return obs, reward, terminated, truncated_t, info

    def step_transition(self, actions: Any) -> Transition:
        """`step` as a tritonrl `Transition` (episode lists
        left empty: filling them would read the device)."""
        obs, reward, terminated, truncated, info = self.step(actions)
        return Transition(
            obs=obs, reward=reward, next_obs=info["final_obs"], terminated=terminated, truncated=truncated
        )

    # ------------------------------------------------------------------ internals

    def _reset_state(self) -> None:
        self._tick = self.start_tick
        self._position = torch.zeros_like(self._position)
        self._last_trade_tick = torch.full_like(self._last_trade_tick, self.start_tick - 1)
        self._total_reward = torch.zeros_like(self._total_reward)
        self._total_profit = torch.ones_like(self._total_profit)

    def _window(self, tick: int) -> torch.Tensor:
        rows = self.signal_features[tick - self.window_size + 1 : tick + 1]  # [W, F]
        return rows.expand(self.num_envs, *rows.shape).contiguous()  # [N, W, F], a fresh tensor

    def _info(self) -> dict[str, torch.Tensor]:
        return {
            "total_reward": self._total_reward,
            "total_profit": self._total_profit,
            "position": self._position,
        }

    def _check_actions(self, actions: Any) -> torch.Tensor:
        if not isinstance(actions, torch.Tensor):  # the package's ints, gymnasium's numpy arrays
            actions = as_actions(actions, self.num_envs, self.device)
            if actions.dtype.is_floating_point or actions.dtype.is_complex or actions.dtype == torch.bool:
                raise ValueError(f"actions must be integers, got {actions.dtype}")
            actions = actions.to(torch.int64)
        if actions.shape != (self.num_envs,) or actions.dtype != torch.int64 or actions.device != self.device:
            raise ValueError(
                f"actions must be int64 [{self.num_envs}] on {self.device}, got "
                f"{actions.dtype} {list(actions.shape)} on {actions.device}"
            )
        return actions

    def __repr__(self) -> str:
        return (
            f"AnyTradingEnv(kind={self.kind!r}, window_size={self.window_size}, "
            f"ticks={self.start_tick}..{self.end_tick}, num_envs={self.num_envs}, device={self.device})"
        )
