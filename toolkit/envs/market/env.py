"""A batched trading environment: ``N`` environments over one series, stepped as tensor operations.

[`MarketEnv`][tritonrl.toolkit.envs.market.env.MarketEnv] is a gymnasium ``VectorEnv`` whose state,
observations, rewards and flags are tensors on the data's device. A step is a fixed sequence of fixed-shape
tensor operations: nothing is read by the host and nothing is allocated. See docs/pages/market.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector.utils import batch_space
from tritonrl.toolkit.bars.types import MarketData
from tritonrl.toolkit.checks import check_config
from tritonrl.toolkit.config import Config
from tritonrl.toolkit.envs.market.actions import as_actions
from tritonrl.toolkit.envs.market.outputs import OutputPool, OutputSet
from tritonrl.toolkit.envs.statecheck import check_state_header
from tritonrl.toolkit.envs.vector import Transition
from tritonrl.toolkit.runstate import generator_state_fits
from tritonrl.toolkit.seeding import reseed

__all__ = ["MarketEnv", "MarketEnvConfig"]


@dataclass(frozen=True)
class MarketEnvConfig(Config):
    """The trading rules of `MarketEnv` (immutable; copy with ``dataclasses.replace``)."""

    window: int = 32
    """``W``: bars per observation (the rows ``t - W + 1 .. t`` of the features)."""
    episode_length: int = 256
    """Decisions per episode; the episode is truncated after the last one."""
    actions: Literal["discrete", "continuous"] = "discrete"
    """``"discrete"``: ``Discrete(3)``, ``{0: short, 1: flat, 2: long}`` -> position -1 / 0 / +1;
    ``"continuous"``: ``Box(-1, 1, (1,))``, the target position (clipped to [-1, 1])."""
    cost: float = 1e-4
    """Transaction cost per unit of ``|position change|``, in log-return units."""
    borrow_cost: float = 0.0
    """Cost per step per unit of short position, in log-return units."""
    max_drawdown: float = 0.5
    """Terminate when equity falls below ``(1 - max_drawdown) * peak equity``; 1.0: never."""
    random_start: bool = True
    """Episodes start at a uniform row of the data (every episode fits in it); ``False``: at the
    first decision row ``W - 1`` every time (evaluation over a whole period)."""

    def __post_init__(self) -> None:
        check_config(self, _RANGES)


_RANGES = {
    "window": "[1, inf)",
    "episode_length": "[1, inf)",
    "cost": "[0, inf)",
    "borrow_cost": "[0, inf)",
    "max_drawdown": "(0, 1]",
}

# Accumulated per finished episode, in this order (episode_stats names the means).
_STATS = ("return", "length", "equity", "sharpe", "max_drawdown", "turnover")

# The per-env state: name -> dtype (saved, checked and restored by get_state / set_state).
_STATE: dict[str, torch.dtype] = {
    "row": torch.int64,  # decision row t
    "position": torch.float32,  # p_{t-1}: held going into the decision
    "log_equity": torch.float32,  # sum of this episode's rewards
    "peak": torch.float32,  # max log-equity of this episode (0 at the start)
    "max_drawdown": torch.float32,  # worst drawdown of this episode so far
    "turnover": torch.float32,  # sum of |position changes|
    "steps": torch.int64,  # decisions made in this episode
    "reward_mean": torch.float32,  # running mean of this episode's rewards (Welford)
    "reward_m2": torch.float32,  # running sum of squared deviations (Welford)
}

# Inside, the f32 state is one [len(_ROWS), E] tensor updated in place (few, larger tensor
# operations: a step's cost is mostly per-operation overhead), its rows in this order:
# - the block the autoreset zeroes where an episode ended: "peak", "reward_mean", "reward_m2",
#   "done" (f32 0/1), and the finished episode's figures in the order of the accumulators (count
#   first: "done" * "done" is the count in the one matrix-vector product that sums them);
# - "final_position": p_t, the position after the step (the final observation's column, the
#   info's "position": the info values are the rows "equity" .. "final_position", one copy);
# - "position": p_{t-1} of the next decision (the next observation's column, after
#   "final_position" so that one copy writes both columns): "final_position" where no episode
#   ended, 0 where one did (written by the autoreset);
# - "drawdown": this step's drawdown (a temporary, never reset), a row so that one comparison of
#   the rows "steps" and "drawdown" (a strided view of both) gives truncated and terminated.
# The step count is f32 ("steps": exact up to 2**24, hence the limit on episode lengths).
_ROWS = (
    "peak",
    "reward_mean",
    "reward_m2",
    "done",
    "log_equity",
    "steps",
    "equity",
    "sharpe",
    "max_drawdown",
    "turnover",
    "final_position",
    "position",
    "drawdown",
)
_R = {name: i for i, name in enumerate(_ROWS)}
_RESET = slice(0, _R["turnover"] + 1)  # zeroed where an episode ended (and "position", written so)
_ACC = slice(_R["done"], _R["turnover"] + 1)  # done, then _STATS' figures, in order
_MAX_STEPS = 2**24  # f32 counts steps exactly up to here
# The info values of a step (the episode as it stood after it), copied from these state rows.
_INFO = ("equity", "sharpe", "max_drawdown", "turnover", "final_position")

# _step's result: obs, reward, terminated, truncated, final_obs, done, and the info values
# (equity, sharpe, max_drawdown, turnover, position).
_StepOut = tuple[
    torch.Tensor,
    torch.Tensor,
    torch.Tensor,
    torch.Tensor,
    torch.Tensor,
    torch.Tensor,
    tuple[torch.Tensor, ...],
]

# The entries of get_state().
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


def _checked(
    data: MarketData, num_envs: Any, config: MarketEnvConfig | None, seed: Any
) -> tuple[MarketEnvConfig, int]:
    """The config and the decisions before truncation of a `MarketEnv`; raises as it does."""
    config = MarketEnvConfig() if config is None else config
    if not isinstance(config, MarketEnvConfig):
        raise ValueError(f"config must be a MarketEnvConfig, got {type(config).__name__}")
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    _check_data(data)
    w, length, t_rows = config.window, config.episode_length, len(data)
    need = w + length if config.random_start else w + 1
    if t_rows < need:
        what = "window + episode_length" if config.random_start else "window + 1"
        raise ValueError(
            f"market data {data.name!r} has {t_rows} rows, fewer than {what} = {need}"
            + (" (random_start: every episode must fit in the data)" if config.random_start else "")
        )
    # decisions before truncation: the episode length, or the data's end from the first row
    # (from a random start the episode always fits: its length comes first)
    max_steps = min(length, t_rows - w)
    if max_steps > _MAX_STEPS:
        raise ValueError(
            f"episodes of {max_steps} decisions are longer than {_MAX_STEPS} (2**24): the env "
            "counts steps in f32, exact up to there"
        )
    return config, max_steps


class MarketEnv(gym.vector.VectorEnv):
    """``num_envs`` trading environments over ``data``, as tensor operations on ``data.device``.

    At decision row ``t`` an env observes ``features[t - W + 1 .. t]`` flattened and its held
    position ``p_{t-1}``, chooses ``p_t`` (discrete ``{0, 1, 2}`` -> -1, 0, +1; continuous clipped
    to ``[-1, 1]``) and earns, in f32 log-return units, ``p_t * log_return[t + 1] - cost * |p_t -
    p_{t-1}| - borrow_cost * max(-p_t, 0)``. It terminates when the drawdown exceeds
    ``max_drawdown``, truncates after ``episode_length`` decisions or at the data's end, and
    resets in the same step (``info["final_obs"]`` holds the true next observation). Start rows
    come from `generator`, drawn for every env at every step so shapes never vary.

    Observations are ``[E, W * F + 1]`` in ``data.features.dtype``, rewards ``[E]`` f32, flags
    ``[E]`` bool. Outputs are never written again while anything still refers to them.
    """

    metadata: dict[str, Any] = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
    metric_prefix: str = "market"
    """The family name the training loop logs `episode_stats` under (``market/sharpe``, ...)."""

    def __init__(
        self, data: MarketData, num_envs: int, config: MarketEnvConfig | None = None, *, seed: int = 0
    ) -> None:
        """Build the environments (they start after `reset`).

        Args:
            data: features ``[T, F]`` (any float dtype, used as they are) and f32 log returns
                ``[T]``, on one device.
            seed: seeds the start-row generator.

        Raises:
            ValueError: ``num_envs < 1``, a wrong config type, malformed data, data too short for
                one episode, or episodes of more than ``2**24`` decisions (counted in f32).
        """
        config, max_steps = _checked(data, num_envs, config, seed)
        self.data = data
        self.config = config
        self.num_envs = num_envs
        self.seed = seed
        self.device = data.device
        self.env_id = "market:" + data.name
        self._width = config.window * data.num_features
        self.obs_dim = self._width + 1
        self.single_observation_space = spaces.Box(-np.inf, np.inf, (self.obs_dim,), np.float32)
        self.single_action_space: spaces.Space
        if config.actions == "discrete":
            self.single_action_space = spaces.Discrete(3)
        else:
            self.single_action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._init_rows(max_steps)
        self._init_constants(max_steps)
        self._init_state()
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)
        self.vector_steps = 0  # steps taken since construction (reseeds a generator across devices)
        self.obs: torch.Tensor | None = None

    def _init_rows(self, max_steps: int) -> None:
        """The windows to observe (a strided view of the features) and the rows an episode may use."""
        data, w, t_rows = self.data, self.config.window, len(self.data)
        # Row i of the windows is features[i .. i + W - 1] flattened: a strided view, no copy
        # (one contiguous copy, never a cast, if the features are not contiguous).
        features = data.features if data.features.is_contiguous() else data.features.contiguous()
        self._windows = features.as_strided((t_rows - w + 1, self._width), (data.num_features, 1))
        self._first = w - 1  # the first decision row
        self._last_start = t_rows - 1 - self.config.episode_length if self.config.random_start else w - 1
        self._last_row = t_rows - 1
        self._max_steps = max_steps
        # Rows are kept as window indices (row - first): the window to observe, and the index of
        # the return earned moving to that row in log_return[first:].
        self._returns = data.log_return[self._first :]
        self._num_starts = self._last_start - self._first + 1

    def _init_constants(self, max_steps: int) -> None:
        """The rules' numbers as device tensors."""
        config, dev = self.config, self.device
        f32: dict[str, Any] = {"dtype": torch.float32, "device": dev}
        self._acc_dtype = torch.float32 if dev.type == "mps" else torch.float64
        self._cost = torch.tensor(config.cost, **f32)
        # max_drawdown 1.0 means never: compared with inf, as a drawdown 1 - exp(x) can round to 1.0
        dd_limit = config.max_drawdown if config.max_drawdown < 1.0 else math.inf
        # truncated, terminated: steps > max_steps - 1 (steps >= max_steps: whole f32 numbers, exact
        # below 2**24) and drawdown > the limit, in one comparison of the [steps; drawdown] rows
        self._ends_limits = torch.tensor([[float(max_steps - 1)], [dd_limit]], **f32)
        self._sqrt_ppy = torch.tensor(math.sqrt(self.data.periods_per_year), **f32)
        self._zero = torch.tensor(0.0, **f32)
        self._one = torch.tensor(1.0, **f32)
        self._one_row = torch.tensor(1, dtype=torch.int64, device=dev)
        self._one_int = torch.tensor(1, dtype=torch.int32, device=dev)
        self._zero_row = torch.tensor(0, dtype=torch.int64, device=dev)
        # discrete action a (clamped to {0, 1, 2}) -> position a - 1, and its borrow cost per step
        self._position_of = torch.tensor([-1.0, 0.0, 1.0], **f32)
        self._borrow_of = torch.tensor([config.borrow_cost, 0.0, 0.0], **f32)
        self._borrow = torch.tensor(config.borrow_cost, **f32)

    def _init_state(self) -> None:
        """The per-env state (see ``_ROWS``) and the episode statistics' accumulator, zeroed."""
        dev, e = self.device, self.num_envs
        # one f32 block with a view per row, the rows as window indices: [0] after the step (the
        # final observation's), [1] the current one (the next observation's)
        self._block = torch.zeros(len(_ROWS), e, dtype=torch.float32, device=dev)
        self._row = dict(zip(_ROWS, self._block.unbind(0), strict=True))
        # zeroed where an episode ended: its bits AND-ed with a mask (0 where done, all ones
        # elsewhere): +0.0 where done, every other value kept bit for bit (NaNs and -0.0 included)
        self._reset_bits = self._block[_RESET].view(torch.int32)
        self._final_bits = self._row["final_position"].view(torch.int32)
        self._held_bits = self._row["position"].view(torch.int32)
        self._keep = torch.empty(e, dtype=torch.int32, device=dev)
        # the rows [steps; drawdown] as one [2, E] view (compared in one operation)
        s, d = _R["steps"], _R["drawdown"]
        self._ends = self._block.as_strided((2, e), ((d - s) * e, 1), self._block.storage_offset() + s * e)
        self._finished = self._block[_ACC]
        self._columns = self._block[_R["final_position"] : _R["position"] + 1].view(-1)
        self._info = self._block[_R["equity"] : _R["final_position"] + 1]  # _INFO's rows, in order
        self._rows = torch.zeros(2, e, dtype=torch.int64, device=dev)
        self._rows_flat = self._rows.view(-1)
        self._rows_next, self._rows_now = self._rows.unbind(0)  # (views: no select in the step)
        self._acc = torch.zeros(1 + len(_STATS), dtype=self._acc_dtype, device=dev)
        # every per-step temporary, preallocated (a step allocates nothing; see _make_outputs)
        self._scratch = torch.empty(3, e, dtype=torch.float32, device=dev)
        self._change, self._gathered, self._tmp = self._scratch.unbind(0)
        self._positive = torch.empty(e, dtype=torch.bool, device=dev)
        self._index, self._starts = torch.empty(2, e, dtype=torch.int64, device=dev).unbind(0)
        self._summed = torch.zeros(1 + len(_STATS), dtype=torch.float32, device=dev)
        self._summed_acc = torch.zeros(1 + len(_STATS), dtype=self._acc_dtype, device=dev)  # (exact)
        # the row views a step updates (one tuple: no dict look-ups in the step)
        self._views = tuple(self._row[k] for k in _ROWS)
        self._equity_steps = self._block[_R["log_equity"] : _R["steps"] + 1]
        self._outputs = OutputPool(self._make_outputs)

    def _make_outputs(self) -> OutputSet:
        """One set of step outputs: observations ``[2E, D]`` (final, then next), f32 ``[7, E]``
        (reward, ones, the `_INFO` values) and bool ``[3, E]`` (truncated, terminated, done)."""
        dev, e = self.device, self.num_envs
        both = torch.empty((2 * e, self.obs_dim), dtype=self._windows.dtype, device=dev)
        f32 = torch.empty((2 + len(_INFO), e), dtype=torch.float32, device=dev)
        f32[1].fill_(1.0)
        flags = torch.empty((3, e), dtype=torch.bool, device=dev)
        ends = flags.unbind(0)  # truncated, terminated, done
        out = (both[e:], both[:e], f32[0], ends[1], ends[0], ends[2], *f32[2:].unbind(0))
        del ends  # (the set counts the references to its views: none may be left here)
        parts = (both.narrow(1, 0, self._width), both.select(1, self._width), f32[:2], f32[2:], flags[:2])
        return OutputSet((both, f32, flags), out, parts)

    # ------------------------------------------------------------------------------- internals

    def _draw_starts(self) -> torch.Tensor:
        """``[E]`` int64 start rows as window indices, uniform over the allowed starts."""
        return torch.randint(
            0, self._num_starts, (self.num_envs,), generator=self.generator, device=self.device
        )

    def _position_after(self, actions: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Check ``actions`` (never their values), write their positions into the ``final_position``
        row and return it with the borrow costs (``None`` when ``borrow_cost`` is 0)."""
        actions = as_actions(actions, self.num_envs, self.device)
        e, position = self.num_envs, self._views[_R["final_position"]]
        if actions.device != self.device:
            raise ValueError(f"actions are on {actions.device}, the env on {self.device}")
        if self.config.actions == "discrete":
            if actions.dtype.is_floating_point or actions.dtype.is_complex or actions.dtype == torch.bool:
                raise ValueError(f"discrete actions must be integers (int64), got {actions.dtype}")
            if tuple(actions.shape) != (e,):
                raise ValueError(f"discrete actions must have shape ({e},), got {tuple(actions.shape)}")
            if actions.dtype == torch.int64:
                index = torch.clamp(actions, 0, 2, out=self._index)
            else:  # the cast first (exact), as .to(int64) would, into the row
                index = self._index.copy_(actions).clamp_(0, 2)
            torch.index_select(self._position_of, 0, index, out=position)
            if not self.config.borrow_cost:
                return position, None
            return position, torch.index_select(self._borrow_of, 0, index, out=self._tmp)
        if not actions.dtype.is_floating_point:
            raise ValueError(f"continuous actions must be floating point, got {actions.dtype}")
        if tuple(actions.shape) != (e, 1):
            raise ValueError(f"continuous actions must have shape ({e}, 1), got {tuple(actions.shape)}")
        if actions.dtype == torch.float32:
            torch.clamp(actions.view(e), -1.0, 1.0, out=position)
        else:  # the cast first, as .to(float32) would, into the row
            position.copy_(actions.view(e)).clamp_(-1.0, 1.0)
        if not self.config.borrow_cost:
            return position, None
        return position, torch.neg(position, out=self._tmp).clamp_(min=0.0).mul_(self._borrow)

    def _step(self, actions: Any, info: bool) -> _StepOut:
        """One step of every env: ``(obs, reward, terminated, truncated, final_obs, done, info
        values)`` (the info values ``()`` unless ``info``), written into a free output set."""
        if self.obs is None:
            raise RuntimeError("MarketEnv.step called before reset()")
        rows_next, rows_now = self._rows_next, self._rows_now
        position, borrow = self._position_after(actions)  # p_t, in its row
        o = self._outputs.take()
        obs, final_obs, reward, terminated, truncated, done = o.out[:6]
        features, column, reward_one, info_values, ends = o.parts
        (peak, mean, m2, done_f, log_equity, steps, equity, sharpe, max_dd, turnover, _, held, drawdown) = (
            self._views
        )
        change, gathered, tmp = self._change, self._gathered, self._tmp
        torch.add(rows_now, self._one_row, out=rows_next)  # t + 1
        torch.sub(position, held, out=change).abs_()
        torch.mul(position, torch.index_select(self._returns, 0, rows_next, out=gathered), out=reward)
        if borrow is not None:  # tmp holds the borrow costs: the cost term goes into gathered
            reward.sub_(torch.mul(change, self._cost, out=gathered)).sub_(borrow)
        else:
            reward.sub_(torch.mul(change, self._cost, out=tmp))
        self._equity_steps.add_(reward_one)  # log-equity += reward, steps += 1
        turnover.add_(change)
        torch.maximum(peak, log_equity, out=peak)
        torch.sub(log_equity, peak, out=drawdown).expm1_().neg_()  # 1 - equity / peak
        torch.maximum(max_dd, drawdown, out=max_dd)
        # Welford's running mean and squared deviations (exact 0 for a constant reward)
        delta = torch.sub(reward, mean, out=change)  # change is spent (turnover holds it)
        mean.addcdiv_(delta, steps)
        m2.add_(delta.mul_(torch.sub(reward, mean, out=tmp)))  # (addcmul_ may fuse the product: other bits)
        torch.div(m2, steps, out=tmp).sqrt_()
        torch.div(mean, tmp, out=tmp).mul_(self._sqrt_ppy)
        torch.where(torch.gt(m2, self._zero, out=self._positive), tmp, self._zero, out=sharpe)
        torch.exp(log_equity, out=equity)
        torch.gt(self._ends, self._ends_limits, out=ends)  # truncated, terminated
        torch.bitwise_or(terminated, truncated, out=done)
        # the finished episodes' figures, summed: [1 + len(_STATS), E] @ [E] (done * done counts)
        done_f.copy_(done)
        # (cast into a buffer first: an add_ of another dtype allocates the cast)
        self._acc.add_(self._summed_acc.copy_(torch.mv(self._finished, done_f, out=self._summed)))
        values: tuple[torch.Tensor, ...] = ()
        if info:  # the episode as it stood after this step, before the autoreset
            info_values.copy_(self._info)
            values = o.out[6:]
        # same-step autoreset (a start is drawn for every env; used where done): the state's
        # block zeroed where done (+0.0 bits), its bits AND-ed with keep: 1 - 1 = 0 where done,
        # 0 - 1 = all ones elsewhere (cheaper than a masked_fill_ broadcast over rows)
        keep = self._keep.copy_(done).sub_(self._one_int)
        self._reset_bits.bitwise_and_(keep)
        torch.bitwise_and(self._final_bits, keep, out=self._held_bits)  # p_t, or 0 where done
        if self._num_starts > 1:  # (torch.randint(..., out=) is this random_ after a resize)
            starts = self._starts.random_(0, self._num_starts, generator=self.generator)
            torch.where(done, starts, rows_next, out=rows_now)
        else:  # the one start is window 0
            torch.where(done, self._zero_row, rows_next, out=rows_now)
        # both observations in one gather: the true next ones, then the next episode's where done
        torch.index_select(self._windows, 0, self._rows_flat, out=features)
        column.copy_(self._columns)  # [2E] f32 written in the features' dtype
        self.obs = obs
        self.vector_steps += 1
        return obs, reward, terminated, truncated, final_obs, done, values

    # ------------------------------------------------------------------------------- gymnasium API

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Start a new episode in every env (``seed`` reseeds the start rows first); ``(obs, {})``."""
        if seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, int):
                raise ValueError(f"seed must be an int, got {seed!r}")
            self.generator.manual_seed(seed)
        self._block.zero_()
        if self._num_starts > 1:
            self._rows[1].copy_(self._draw_starts())
        else:
            self._rows[1].zero_()
        obs = torch.empty((self.num_envs, self.obs_dim), dtype=self._windows.dtype, device=self.device)
        torch.index_select(self._windows, 0, self._rows[1], out=obs.narrow(1, 0, self._width))
        obs.select(1, self._width).zero_()  # flat
        self.obs = obs
        return obs, {}

    def step(
        self, actions: Any
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Step every env with ``[E]`` integer or ``[E, 1]`` float ``actions``; ended ones reset.

        Returns:
            ``(obs, reward, terminated, truncated, info)``; ``info`` holds ``final_obs`` ``[E, D]``,
            ``_final_obs`` ``[E]`` bool and, f32 ``[E]``, ``equity``, ``sharpe``,
            ``max_drawdown``, ``turnover``, ``position`` after this step.

        Raises:
            RuntimeError: before [`reset`][tritonrl.toolkit.envs.market.env.MarketEnv.reset].
            ValueError: actions of the wrong shape, dtype or device (values are never read).
        """
        obs, reward, terminated, truncated, final_obs, done, values = self._step(actions, info=True)
        equity, sharpe, max_drawdown, turnover, position = values
        info = {
            "final_obs": final_obs,
            "_final_obs": done,
            "equity": equity,
            "sharpe": sharpe,
            "max_drawdown": max_drawdown,
            "turnover": turnover,
            "position": position,
        }
        return obs, reward, terminated, truncated, info

    # ------------------------------------------------------------------------------- tritonrl's loop

    def step_transition(self, actions: Any) -> Transition:
        """`step` as a `Transition` (``next_obs`` the true
        next observation; finished episodes are counted by `episode_stats`)."""
        obs, reward, terminated, truncated, final_obs, _, _ = self._step(actions, info=False)
        return Transition(
            obs=obs, reward=reward, next_obs=final_obs, terminated=terminated, truncated=truncated
        )

    def episode_stats(self) -> dict[str, float]:
        """The episodes finished since the last call (one sync; cleared): ``{"episodes": n}`` and,
        when ``n > 0``, ``mean_return``, ``mean_length``, ``mean_equity``, ``mean_sharpe``,
        ``mean_max_drawdown``, ``mean_turnover``."""
        values = self._acc.tolist()
        self._acc.zero_()
        n = values[0]
        out = {"episodes": n}
        if n > 0:
            out.update({f"mean_{name}": v / n for name, v in zip(_STATS, values[1:], strict=True)})
        return out

    def get_state(self) -> dict[str, Any]:
        """Everything needed to continue exactly (copies, on the env's device), with the identity
        checked on restore."""
        return {
            "env_id": self.env_id,
            "num_envs": self.num_envs,
            "rows": len(self.data),
            "config": self.config.to_dict(),
            "vector_steps": self.vector_steps,
            "state": self._state_tensors(),
            "accumulators": self._acc.clone(),
            "generator": self.generator.get_state(),
            "obs": None if self.obs is None else self.obs.clone(),
        }

    def _state_tensors(self) -> dict[str, torch.Tensor]:
        """The per-env state as `_STATE` names it (copies, on the env's device)."""
        out = {}
        for name, dtype in _STATE.items():
            if name == "row":
                out[name] = self._rows[1] + self._first
            elif name == "steps":
                out[name] = self._row[name].to(dtype)
            else:
                out[name] = self._row[name].clone()
        return out

    def check_state(self, state: dict[str, Any]) -> bool:
        """Raise ``ValueError`` unless ``state`` is a `get_state` of an env like this one.

        Returns:
            whether the saved generator state fits this device (else
                [`set_state`][tritonrl.toolkit.envs.market.env.MarketEnv.set_state] reseeds).
        """
        check_state_header(state, _STATE_KEYS, (self.env_id, self.num_envs, len(self.data)), self.config)
        tensors = state["state"]
        if not isinstance(tensors, dict) or set(tensors) != set(_STATE):
            raise ValueError(f"env state 'state' must hold exactly {sorted(_STATE)}")
        for name, dtype in _STATE.items():
            t = tensors[name]
            if not isinstance(t, torch.Tensor) or t.dtype != dtype or tuple(t.shape) != (self.num_envs,):
                raise ValueError(f"env state {name!r} is not a {dtype} tensor of shape ({self.num_envs},)")
        row = tensors["row"]
        lo, hi = self._first, self._last_row - 1
        if bool(((row < lo) | (row > hi)).any()):
            raise ValueError(f"env state rows lie outside the decision rows [{lo}, {hi}] of this data")
        # every env is `steps` decisions into an episode that started at an allowed start row
        # (truncation counts the steps alone: it relies on this)
        steps, start = tensors["steps"], row - tensors["steps"]
        if bool(((steps < 0) | (steps >= self._max_steps) | (start < lo) | (start > self._last_start)).any()):
            raise ValueError(
                f"env state steps do not fit its rows: each must be in [0, {self._max_steps}) with "
                f"row - steps a start row in [{lo}, {self._last_start}]"
            )
        acc = state["accumulators"]
        if (
            not isinstance(acc, torch.Tensor)
            or tuple(acc.shape) != tuple(self._acc.shape)
            or not acc.is_floating_point()
        ):
            raise ValueError(
                f"env state accumulators are not a float tensor of shape {tuple(self._acc.shape)}"
            )
        obs = state["obs"]
        shape = (self.num_envs, self.obs_dim)
        if obs is not None and (not isinstance(obs, torch.Tensor) or tuple(obs.shape) != shape):
            raise ValueError(f"env state 'obs' is not a tensor of shape {shape}")
        return generator_state_fits(state["generator"], self.device)

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a `get_state` (every part checked before anything changes).

        Raises:
            ValueError: another env id, number of envs, data length or config, or damaged parts.
        """
        fits = self.check_state(state)
        dev = self.device
        saved = state["state"]
        self._block.zero_()
        for name in _STATE:
            if name not in ("row", "steps"):
                self._row[name].copy_(saved[name])
        self._row["steps"].copy_(saved["steps"])  # exact: fewer than 2**24 (checked)
        self._rows[1].copy_(saved["row"].to(dev) - self._first)
        self._acc = state["accumulators"].to(dev, self._acc_dtype).clone()
        self.vector_steps = state["vector_steps"]
        if fits:
            self.generator.set_state(state["generator"].cpu())
        else:
            reseed(self.generator, self.seed, self.vector_steps)
        dtype = self._windows.dtype
        self.obs = None if state["obs"] is None else state["obs"].to(dev, dtype).clone()


def _check_data(data: MarketData) -> None:
    """Raise ``ValueError`` unless ``data`` has the shapes, dtypes and one device the env needs."""
    if not isinstance(data, MarketData):
        raise ValueError(f"data must be a MarketData, got {type(data).__name__}")
    f, r = data.features, data.log_return
    if f.dim() != 2 or f.shape[1] < 1 or not f.dtype.is_floating_point:
        raise ValueError(f"data.features must be a float [T, F] tensor, got {f.dtype} {tuple(f.shape)}")
    if tuple(r.shape) != (f.shape[0],) or r.dtype != torch.float32:
        raise ValueError(f"data.log_return must be f32 [{f.shape[0]}], got {r.dtype} {tuple(r.shape)}")
    if r.device != f.device:
        raise ValueError(f"data.log_return is on {r.device}, the features on {f.device}")
    ppy = data.periods_per_year
    if not (isinstance(ppy, (int, float)) and math.isfinite(ppy) and ppy > 0):
        raise ValueError(f"data.periods_per_year must be a positive number, got {ppy!r}")
