"""A batched portfolio environment: ``E`` allocations over ``N`` assets plus cash, stepped as
tensor operations on the data's device, with exact accounting: the rewards of an episode sum to
the log of its final over its initial equity after every cost. See docs/pages/portfolio.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector.utils import batch_space
from tritonrl.toolkit.bars.paneldata import PanelData
from tritonrl.toolkit.checks import check_config
from tritonrl.toolkit.config import Config
from tritonrl.toolkit.envs.market.actions import as_actions
from tritonrl.toolkit.envs.portfolio.weights import discrete_portfolios, hold_mask, target_weights
from tritonrl.toolkit.envs.statecheck import check_state_header
from tritonrl.toolkit.envs.vector import Transition
from tritonrl.toolkit.runstate import generator_state_fits
from tritonrl.toolkit.seeding import reseed

__all__ = ["PortfolioEnv", "PortfolioEnvConfig", "Settlement", "fill_growth", "settle"]


@dataclass(frozen=True)
class PortfolioEnvConfig(Config):
    """The allocation rules of `PortfolioEnv` (immutable; copy with ``dataclasses.replace``)."""

    window: int = 8
    """``W``: bars per observation (rows ``t - W + 1 .. t`` of every asset's features; the
    observation grows as ``W * N``, and a long one lets a network memorise a short history)."""
    episode_length: int = 256
    """Decisions per episode; the episode is truncated after the last one (or at the data's end)."""
    actions: Literal["simplex", "weights", "long_short", "discrete", "finrl"] = "simplex"
    """``"simplex"``: ``Box(-1, 1, (N + 1,))``, weights ``softmax(simplex_scale * a)`` (cash first);
    ``"weights"``: ``Box(0, 1, (N + 1,))`` target weights, normalised by their sum (a row of NaNs:
    no trade, the drifted weights are held);
    ``"long_short"``: ``Box(-1, 1, (N,))`` asset weights scaled to ``sum |w| <= leverage``, cash the
    rest; ``"discrete"``: ``Discrete(N + 3)``, 0 cash, 1 equal weight, ``2 + i`` all in asset ``i``,
    ``N + 2`` hold (no trade);
    ``"finrl"``: FinRL's rule (used as given on the simplex, else softmax, in f32; see
    `PortfolioEnv` for what FinRL's mode reproduces)."""
    simplex_scale: float = 5.0
    """The softmax's scale in ``"simplex"`` (a bounded action reaches weights near 0 and 1)."""
    leverage: float = 1.0
    """The gross exposure cap of ``"long_short"``."""
    fill: Literal["next_open", "next_close", "close"] = "next_open"
    """Where a decision made at the close of bar ``t`` trades: the open or the close of ``t + 1``,
    or (``"close"``, FinRL's timing) the close of ``t`` itself, with FinRL's f32 price relatives."""
    cost: float = 1e-3
    """Proportional cost per side, a fraction of the notional traded."""
    slippage_bps: float = 0.0
    """Slippage in basis points of the notional traded."""
    fixed_fee: float = 0.0
    """A fee in currency per asset traded (a weight change above 1e-9)."""
    borrow_cost: float = 0.0
    """Cost per step per unit of short weight (``"long_short"``)."""
    initial_cash: float = 1_000_000.0
    """Equity at the start of an episode (what ``fixed_fee`` is measured against)."""
    max_drawdown: float = 1.0
    """Terminate when equity falls below ``(1 - max_drawdown) * peak``; 1.0: only at ruin."""
    random_start: bool = True
    """Episodes start at a uniform decision row (every episode fits); ``False``: at row ``W - 1``."""
    cost_model: Literal["proportional", "finrl_wvm", "finrl_trf"] = "proportional"
    """``"proportional"``: ``cost``, slippage and fees on the notional traded; ``"finrl_wvm"`` /
    ``"finrl_trf"``: FinRL's weights-vector-modifier / transaction-remainder-factor models with
    ``cost`` as its fee (compatibility mode; slippage, fees and borrowing must be 0). As in FinRL,
    wvm charges the whole notional traded (``cost`` unused) and skips a trade it exceeds the
    target cash of."""

    def __post_init__(self) -> None:
        check_config(self, _RANGES)
        if self.cost_model != "proportional" and (self.slippage_bps or self.fixed_fee or self.borrow_cost):
            raise ValueError(
                f"cost_model={self.cost_model!r} is FinRL's model: slippage_bps, fixed_fee and "
                "borrow_cost must be 0"
            )


_RANGES = {
    "window": "[1, inf)",
    "episode_length": "[1, inf)",
    "simplex_scale": "(0, inf)",
    "leverage": "(0, inf)",
    "cost": "[0, 1)",
    "slippage_bps": "[0, 10000)",
    "fixed_fee": "[0, inf)",
    "borrow_cost": "[0, inf)",
    "initial_cash": "(0, inf)",
    "max_drawdown": "(0, 1]",
}

# Accumulated per finished episode (episode_stats names the means), in this order.
_STATS = ("return", "length", "equity", "max_drawdown", "turnover", "costs")
# The per-env state (get_state / set_state): name -> accounting dtype or int64.
_STATE = ("row", "steps", "weights", "value", "peak", "max_drawdown", "turnover", "costs")
_STATE_KEYS = (
    "env_id",
    "num_envs",
    "rows",
    "config",
    "vector_steps",
    "state",
    "accumulators",
    "generator",
    "obs",
)
_RUIN = 1e-12  # equity ratio below which an episode ends (long-short only can get there)


class PortfolioEnv(gym.vector.VectorEnv):
    """``num_envs`` allocations over ``data``'s ``N`` assets and cash, on ``data.device``.

    At the close of decision row ``t`` an env observes every asset's features over rows
    ``t - W + 1 .. t`` (``[W, N, F]`` flattened) and its held weights ``[N + 1]`` (cash first),
    and chooses target weights. Its holdings drift with prices to the fill (``config.fill``), are
    rebalanced there at the costs of ``config.cost_model``, and drift on to the close of ``t + 1``.
    The reward is ``log(V[t + 1] / V[t])`` of the equity after every cost, so an episode's rewards
    sum to ``log(final / initial equity)``. Nothing after row ``t`` reaches the observation at
    ``t``. Equity at or below 1e-12 of the initial (a short that outgrew it) is ruin: floored
    there, all cash, terminated. Episodes reset in the same step (``info["final_obs"]``).
    Accounting is f64 (f32 on MPS); observations ``[E, W * N * F + N + 1]`` in the features'
    dtype, rewards f32.

    FinRL's mode (``actions="finrl"``, ``fill="close"``, ``cost_model="finrl_wvm"`` / ``"finrl_trf"``
    or ``"proportional"`` with ``cost=0`` for its ``None``; ``random_start=False``,
    ``episode_length=T - W``) reproduces ``PortfolioOptimizationEnv``'s rewards, portfolio values
    and final weights, its f32 actions, price relatives and weight products included: to 1e-9 on
    the simplex when FinRL's value is f64 (an f64 ``initial_amount``), to f32 rounding where its
    softmax runs (NumPy's f32 ``exp`` differs in the last bit) or its value is f32 (a Python-number
    ``initial_amount`` under NumPy >= 2). Not reproduced: its observation (``[F, N, W]`` features
    normalized by the previous bar, no weights), its episode of all the data (here a config), its
    extra terminal step (a no-op there; here the last trade truncates), its plots and report.
    """

    metadata: dict[str, Any] = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
    metric_prefix: str = "portfolio"

    def __init__(
        self, data: PanelData, num_envs: int, config: PortfolioEnvConfig | None = None, *, seed: int = 0
    ) -> None:
        """Build the environments (they start after `reset`).

        Raises:
            ValueError: ``num_envs < 1``, a wrong config type, malformed data, or data too short
                for one episode.
        """
        config = PortfolioEnvConfig() if config is None else config
        if not isinstance(config, PortfolioEnvConfig):
            raise ValueError(f"config must be a PortfolioEnvConfig, got {type(config).__name__}")
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an int, got {seed!r}")
        _check_data(data)
        w, t_rows = config.window, len(data)
        need = w + config.episode_length if config.random_start else w + 1
        if t_rows < need:
            what = "window + episode_length" if config.random_start else "window + 1"
            raise ValueError(f"portfolio data {data.name!r} has {t_rows} rows, fewer than {what} = {need}")
        self.data, self.config, self.num_envs, self.seed = data, config, num_envs, seed
        self.device = data.device
        self.env_id = "portfolio:" + data.name
        self.num_assets = n = data.num_assets
        self._acc = data.close.dtype
        self._width = w * n * data.num_features
        self.obs_dim = self._width + n + 1
        self.single_observation_space = spaces.Box(-np.inf, np.inf, (self.obs_dim,), np.float32)
        self.single_action_space = _action_space(config, n)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        features = data.features if data.features.is_contiguous() else data.features.contiguous()
        self._windows = features.as_strided((t_rows - w + 1, self._width), (n * data.num_features, 1))
        self._first = w - 1
        self._last_start = t_rows - 1 - config.episode_length if config.random_start else w - 1
        self._max_steps = min(config.episode_length, t_rows - w)
        self._table = discrete_portfolios(n, dtype=self._acc, device=self.device)
        self._cash = torch.zeros(n + 1, dtype=self._acc, device=self.device)
        self._cash[0] = 1.0
        self._dd_limit = config.max_drawdown if config.max_drawdown < 1.0 else math.inf
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)
        self.vector_steps = 0
        self._state = _zero_state(num_envs, n, self._acc, self.device)
        self._sums = torch.zeros(1 + len(_STATS), dtype=self._acc, device=self.device)
        self.obs: torch.Tensor | None = None

    # ------------------------------------------------------------------------------- internals

    def _starts(self) -> torch.Tensor:
        """``[E]`` start rows, uniform over the allowed ones (drawn for every env: fixed shapes)."""
        count = self._last_start - self._first + 1
        return self._first + torch.randint(
            0, count, (self.num_envs,), generator=self.generator, device=self.device
        )

    def _observe(self, row: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """``[E, D]``: the feature windows ending at ``row`` and the held ``weights`` (written in
        place into one new tensor: no concatenation)."""
        obs = torch.empty((row.shape[0], self.obs_dim), dtype=self._windows.dtype, device=self.device)
        torch.index_select(self._windows, 0, row - self._first, out=obs.narrow(1, 0, self._width))
        obs.narrow(1, self._width, self.obs_dim - self._width).copy_(weights)
        return obs

    def _reset_rows(
        self, s: dict[str, torch.Tensor], where: torch.Tensor | None, starts: torch.Tensor
    ) -> None:
        """Start new episodes in the envs ``where`` is true (all of them when ``None``)."""
        init = float(self.config.initial_cash)
        fresh = {
            "row": starts,
            "steps": torch.zeros_like(s["steps"]),
            "weights": self._cash.expand_as(s["weights"]),
            "value": torch.full_like(s["value"], init),
            "peak": torch.full_like(s["peak"], init),
        }
        for name in _STATE:
            new = fresh.get(name, torch.zeros_like(s[name]))
            if where is None:
                s[name] = new.clone()
            else:
                mask = where[:, None] if s[name].dim() == 2 else where
                s[name] = torch.where(mask, new, s[name])

    def _step(self, actions: Any) -> tuple[Any, ...]:
        """One step of every env: obs, reward, terminated, truncated, final_obs, done, and the
        info values (equity, weights, turnover, cost)."""
        if self.obs is None:
            raise RuntimeError("call reset() before step()")
        c, s = self.config, self._state
        actions = as_actions(actions, self.num_envs, self.device)
        _check_actions(actions, self.num_envs, self.single_action_space, self.device)
        target = target_weights(
            actions, c.actions, scale=c.simplex_scale, leverage=c.leverage, table=self._table, dtype=self._acc
        )
        keep = hold_mask(actions, c.actions, self.num_assets)
        row, value = s["row"], s["value"]
        o1 = self.data.open[row + 1] if c.fill == "next_open" else None
        growth = fill_growth(c, self.data.close[row], self.data.close[row + 1], o1)
        weights, _, _, v_next, traded, ruined, paid = settle(
            c, s["weights"], value, target, keep, growth, self._cash
        )
        reward64 = torch.log(v_next / value)
        equity = v_next / c.initial_cash
        peak = torch.maximum(s["peak"], v_next)
        drawdown = 1.0 - v_next / peak
        steps, row = s["steps"] + 1, row + 1
        self._state = s = {
            "row": row,
            "steps": steps,
            "weights": weights,
            "value": v_next,
            "peak": peak,
            "max_drawdown": torch.maximum(s["max_drawdown"], drawdown),
            "turnover": s["turnover"] + traded,
            "costs": s["costs"] + paid,
        }
        truncated = steps >= self._max_steps
        terminated = (drawdown > self._dd_limit) | ruined
        done = truncated | terminated
        final_obs = self._observe(row, weights)
        done_f = done.to(self._acc)
        log_equity = torch.log(equity)
        self._sums += torch.stack(
            (
                done_f,
                done_f * log_equity,
                done_f * steps.to(self._acc),
                done_f * equity,
                done_f * s["max_drawdown"],
                done_f * s["turnover"],
                done_f * s["costs"],
            )
        ).sum(1)
        info = (equity, weights, traded, paid)
        starts = self._starts()
        self._reset_rows(s, done, starts)
        obs = self._observe(s["row"], s["weights"])  # the reset rows where an episode ended
        self.obs = obs
        self.vector_steps += 1
        return obs, reward64.to(torch.float32), terminated, truncated, final_obs, done, info

    # ------------------------------------------------------------------------------- gymnasium API

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Start a new episode in every env (``seed`` reseeds the start rows first); ``(obs, {})``."""
        if seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, int):
                raise ValueError(f"seed must be an int, got {seed!r}")
            self.generator.manual_seed(seed)
        self._sums.zero_()
        self._reset_rows(self._state, None, self._starts())
        self.obs = self._observe(self._state["row"], self._state["weights"])
        return self.obs, {}

    def step(
        self, actions: Any
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Step every env; ended ones reset.

        Returns:
            ``(obs, reward, terminated, truncated, info)``; ``info`` holds ``final_obs``,
            ``_final_obs`` ``[E]`` bool, ``equity`` ``[E]`` (over the initial), ``weights``
            ``[E, N + 1]`` held after the step, ``turnover`` ``[E]`` (traded fraction) and
            ``cost`` ``[E]`` (paid, a fraction of equity), in the accounting dtype.

        Raises:
            RuntimeError: before `reset`.
            ValueError: actions of the wrong shape, dtype or device.
        """
        obs, reward, terminated, truncated, final_obs, done, values = self._step(actions)
        equity, weights, turnover, cost = values
        info = {
            "final_obs": final_obs,
            "_final_obs": done,
            "equity": equity,
            "weights": weights,
            "turnover": turnover,
            "cost": cost,
        }
        return obs, reward, terminated, truncated, info

    def step_transition(self, actions: Any) -> Transition:
        """`step` as a `Transition` (``next_obs`` the true next observation)."""
        obs, reward, terminated, truncated, final_obs, _, _ = self._step(actions)
        return Transition(
            obs=obs, reward=reward, next_obs=final_obs, terminated=terminated, truncated=truncated
        )

    def episode_stats(self) -> dict[str, float]:
        """The episodes finished since the last call (one sync; cleared): ``{"episodes": n}`` and,
        when ``n > 0``, ``mean_return`` (log), ``mean_length``, ``mean_equity``,
        ``mean_max_drawdown``, ``mean_turnover``, ``mean_costs``."""
        values = self._sums.tolist()
        self._sums.zero_()
        n = values[0]
        out = {"episodes": n}
        if n > 0:
            out.update({f"mean_{name}": v / n for name, v in zip(_STATS, values[1:], strict=True)})
        return out

    # ------------------------------------------------------------------------------- exact resume

    def get_state(self) -> dict[str, Any]:
        """Everything needed to continue exactly (copies on the env's device)."""
        return {
            "env_id": self.env_id,
            "num_envs": self.num_envs,
            "rows": len(self.data),
            "config": self.config.to_dict(),
            "vector_steps": self.vector_steps,
            "state": {k: v.clone() for k, v in self._state.items()},
            "accumulators": self._sums.clone(),
            "generator": self.generator.get_state(),
            "obs": None if self.obs is None else self.obs.clone(),
        }

    def check_state(self, state: dict[str, Any]) -> bool:
        """Raise ``ValueError`` unless ``state`` is a `get_state` of an env like this one;
        whether its generator state fits this device (else `set_state` reseeds)."""
        check_state_header(state, _STATE_KEYS, (self.env_id, self.num_envs, len(self.data)), self.config)
        tensors = state["state"]
        if not isinstance(tensors, dict) or set(tensors) != set(_STATE):
            raise ValueError(f"env state 'state' must hold exactly {sorted(_STATE)}")
        for name in _STATE:
            t, ref = tensors[name], self._state[name]
            if not isinstance(t, torch.Tensor) or t.dtype != ref.dtype or t.shape != ref.shape:
                raise ValueError(
                    f"env state {name!r} is not a {ref.dtype} tensor of shape {tuple(ref.shape)}"
                )
        value, peak = tensors["value"], tensors["peak"]
        if not all(bool(torch.isfinite(tensors[k]).all()) for k in _STATE if tensors[k].is_floating_point()):
            raise ValueError("env state holds a non-finite number")
        if bool(((value <= 0) | (peak < value)).any()):
            raise ValueError("env state holds an equity that is not positive or is above its peak")
        row, st = tensors["row"], tensors["steps"]
        start = row - st
        if bool(
            ((st < 0) | (st >= self._max_steps) | (start < self._first) | (start > self._last_start)).any()
        ):
            raise ValueError("env state rows and steps do not fit this data's decision rows")
        acc = state["accumulators"]
        if not isinstance(acc, torch.Tensor) or acc.shape != self._sums.shape:
            raise ValueError(f"env state accumulators are not a tensor of shape {tuple(self._sums.shape)}")
        obs = state["obs"]
        if obs is not None and (
            not isinstance(obs, torch.Tensor) or tuple(obs.shape) != (self.num_envs, self.obs_dim)
        ):
            raise ValueError(f"env state 'obs' is not a tensor of shape {(self.num_envs, self.obs_dim)}")
        return generator_state_fits(state["generator"], self.device)

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a `get_state` (every part checked before anything changes).

        Raises:
            ValueError: another env id, number of envs, data length or config, or damaged parts.
        """
        fits = self.check_state(state)
        self._state = {k: v.to(self.device).clone() for k, v in state["state"].items()}
        self._sums = state["accumulators"].to(self.device, self._acc).clone()
        self.vector_steps = state["vector_steps"]
        if fits:
            self.generator.set_state(state["generator"].cpu())
        else:
            reseed(self.generator, self.seed, self.vector_steps)
        obs = state["obs"]
        self.obs = None if obs is None else obs.to(self.device, self._windows.dtype).clone()


class Settlement(NamedTuple):
    """One decision's fill (`settle`), ``[E]`` or ``[E, N + 1]`` in the accounting dtype."""

    weights: torch.Tensor
    """Held after the fill and the drift to the next close (all cash after ruin)."""
    value_before: torch.Tensor
    """Equity at the fill, before the trade."""
    value_after: torch.Tensor
    """Equity right after the trade (every cost paid)."""
    value: torch.Tensor
    """Equity at the next close (floored at ruin)."""
    traded: torch.Tensor
    """``sum_i |target_i - held_i|`` over the assets."""
    ruined: torch.Tensor
    """Equity reached ruin (``[E]`` bool)."""
    cost: torch.Tensor
    """The costs paid, a fraction of ``value_before`` (from the amount paid: no cancellation)."""


def fill_growth(
    config: PortfolioEnvConfig, close0: torch.Tensor, close1: torch.Tensor, open1: torch.Tensor | None
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The assets' price ratios ``[E, N]`` from the close of the decision row (``close0``) to the
    fill, and from the fill to the next close (``close1``), under ``config.fill`` (``None``: no
    move); ``open1`` is read for ``"next_open"`` only."""
    if config.fill == "close" and config.actions == "finrl":  # FinRL stores its price relatives in f32
        return None, (close1 / close0).to(torch.float32).to(close0.dtype)
    if config.fill == "close":
        return None, close1 / close0
    if config.fill == "next_close":
        return close1 / close0, None
    assert open1 is not None
    return open1 / close0, close1 / open1


def settle(
    config: PortfolioEnvConfig,
    weights: torch.Tensor,
    value: torch.Tensor,
    target: torch.Tensor,
    keep: torch.Tensor | None,
    growth: tuple[torch.Tensor | None, torch.Tensor | None],
    cash: torch.Tensor,
) -> Settlement:
    """The book of one decision, as `PortfolioEnv` steps it: ``weights [E, N + 1]`` of equity
    ``value [E]`` drift to the fill (``growth``: `fill_growth`), are rebalanced to ``target``
    (``keep [E]`` true: the drifted weights are held, nothing traded) at the costs of
    ``config.cost_model``, then drift to the next close; ``cash [N + 1]`` is the all-cash row."""
    held, v_a = _drift(weights, value, growth[0])
    if keep is not None:  # NaN rows: hold (the drifted weights are the target: nothing traded)
        target = torch.where(keep[:, None], held, target)
    after, v_b, traded, paid = _trade(config, held, v_a, target)
    # FinRL's close fill drifts its f32 target weights in f32 (not the f64 ones wvm trades to)
    finrl = config.fill == "close" and config.actions == "finrl" and config.cost_model != "finrl_wvm"
    drift = _finrl_drift if finrl else _drift
    after, v_next = drift(after, v_b.clamp_min(value * _RUIN), growth[1])
    ruined = v_next <= config.initial_cash * _RUIN  # e.g. a short that outgrew the equity: all lost
    v_next = v_next.clamp_min(config.initial_cash * _RUIN)
    weights = torch.where(ruined[:, None], cash, after)
    return Settlement(weights, v_a, v_b, v_next, traded, ruined, paid / v_a)


def _trade(
    config: PortfolioEnvConfig, held: torch.Tensor, value: torch.Tensor, target: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rebalance ``held [E, K]`` weights of equity ``value [E]`` to ``target``: the weights and
    equity after the trade, the traded fraction ``sum_i |target_i - held_i|`` (assets) and the
    amount paid."""
    delta = (target - held)[:, 1:]
    traded = delta.abs().sum(1)
    c = config
    if c.cost_model == "proportional":
        paid = value * traded * (c.cost + c.slippage_bps * 1e-4)
        if c.fixed_fee:
            paid = paid + c.fixed_fee * (delta.abs() > 1e-9).sum(1).to(value.dtype)
        if c.borrow_cost:
            paid = paid + value * c.borrow_cost * target[:, 1:].clamp_max(0.0).abs().sum(1)
        return target, value - paid, traded, paid
    if c.cost_model == "finrl_wvm":
        fees = (delta * value[:, None]).abs().sum(1)
        ok = fees <= target[:, 0] * value
        book = target * value[:, None]
        book[:, 0] -= fees
        after = book.sum(1)
        weights = torch.where(ok[:, None], book / after[:, None], held)
        zero = torch.zeros_like(traded)
        return (
            weights,
            torch.where(ok, after, value),
            torch.where(ok, traded, zero),
            torch.where(ok, fees, zero),
        )
    after = value * _trf_mu(held, target, c.cost)
    return target, after, traded, value - after


def _drift(
    weights: torch.Tensor, value: torch.Tensor, growth: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Holdings ``weights * value`` after the assets' price ratios ``growth [E, N]`` (cash
    unchanged): the new weights and equity (``growth=None``: unchanged)."""
    if growth is None:
        return weights, value
    book = weights * value[:, None]
    book = torch.cat((book[:, :1], book[:, 1:] * growth), dim=1)
    after = book.sum(1)
    return book / after[:, None], after


def _finrl_drift(
    weights: torch.Tensor, value: torch.Tensor, growth: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """`_drift` as FinRL computes it: ``value * (w * g)`` with the product ``w * g`` of its f32
    target weights and f32 price relatives rounded to f32."""
    assert growth is not None
    w = weights.to(torch.float32)
    held = torch.cat((w[:, :1], w[:, 1:] * growth.to(torch.float32)), dim=1).to(weights.dtype)
    book = value[:, None] * held
    after = book.sum(1)
    return book / after[:, None], after


def _trf_mu(held: torch.Tensor, target: torch.Tensor, fee: float) -> torch.Tensor:
    """FinRL's transaction remainder factor, iterated per env as its env does (to 1e-10), with its
    f32 term ``1 - fee * target_cash`` (NumPy >= 2 keeps a Python float times an f32 in f32)."""
    mu = torch.full_like(held[:, 0], 1 - 2 * fee + fee**2)
    last = torch.ones_like(mu)
    denom = (1.0 - target[:, 0].to(torch.float32) * float(np.float32(fee))).to(mu.dtype)
    for _ in range(10_000):
        live = (mu - last).abs() > 1e-10
        if not bool(live.any()):
            break
        nxt = (
            denom - (2 * fee - fee**2) * (held[:, 1:] - mu[:, None] * target[:, 1:]).clamp_min(0).sum(1)
        ) / denom
        last = torch.where(live, mu, last)
        mu = torch.where(live, nxt, mu)
    return mu


def _zero_state(e: int, n: int, dtype: torch.dtype, device: torch.device) -> dict[str, torch.Tensor]:
    out = {name: torch.zeros(e, dtype=dtype, device=device) for name in _STATE}
    out["row"] = torch.zeros(e, dtype=torch.int64, device=device)
    out["steps"] = torch.zeros(e, dtype=torch.int64, device=device)
    out["weights"] = torch.zeros(e, n + 1, dtype=dtype, device=device)
    return out


def _action_space(config: PortfolioEnvConfig, n: int) -> spaces.Space:
    if config.actions == "discrete":
        return spaces.Discrete(n + 3)
    if config.actions == "long_short":
        return spaces.Box(-1.0, 1.0, (n,), np.float32)
    if config.actions in ("weights", "finrl"):
        return spaces.Box(0.0, 1.0, (n + 1,), np.float32)
    return spaces.Box(-1.0, 1.0, (n + 1,), np.float32)


def _check_actions(actions: torch.Tensor, e: int, space: spaces.Space, device: torch.device) -> None:
    """Raise ``ValueError`` for actions of the wrong shape, kind or device (values never read)."""
    if actions.device != device:
        raise ValueError(f"actions are on {actions.device}, the env on {device}")
    if isinstance(space, spaces.Discrete):
        if (
            actions.dtype.is_floating_point
            or actions.dtype == torch.bool
            or actions.reshape(-1).shape != (e,)
        ):
            raise ValueError(f"actions must be {e} integers, got {actions.dtype} {tuple(actions.shape)}")
        return
    assert isinstance(space, spaces.Box)
    shape = (e, *space.shape)
    if not actions.dtype.is_floating_point or tuple(actions.shape) != shape:
        raise ValueError(
            f"actions must be a float tensor of shape {shape}, got {actions.dtype} {tuple(actions.shape)}"
        )


def _check_data(data: PanelData) -> None:
    """Raise ``ValueError`` unless ``data`` has the shapes, dtypes and one device the env needs."""
    if not isinstance(data, PanelData):
        raise ValueError(f"data must be a PanelData, got {type(data).__name__}")
    f = data.features
    if f.dim() != 3 or not f.dtype.is_floating_point:
        raise ValueError(f"data.features must be a float [T, N, F] tensor, got {f.dtype} {tuple(f.shape)}")
    for name in ("open", "close"):
        p = getattr(data, name)
        if tuple(p.shape) != tuple(f.shape[:2]) or p.device != f.device or not p.dtype.is_floating_point:
            raise ValueError(f"data.{name} must be a float {tuple(f.shape[:2])} tensor on {f.device}")
