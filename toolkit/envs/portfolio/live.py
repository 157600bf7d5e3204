"""Several assets on a live bar stream, decided exactly as the backtest did: `PortfolioTrader`.

Fed one bar per asset at a time, the trader keeps every bar since the first (the features' running
sums start at a series' first bar: only the whole history gives the backtest's numbers bit for bit),
builds `PortfolioEnv`'s observation, asks the policy, and books each decision with the env's own
`settle` when the next bar arrives. `portfolio_sidecar` / `portfolio_from_sidecar` write and read
an export sidecar's ``portfolio`` entry. See docs/pages/using-policies.md ("Several assets").
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TextIO

import numpy as np
import torch
from tritonrl.toolkit.bars.features import FEATURE_WARMUP, compute_features
from tritonrl.toolkit.bars.panel import Panel
from tritonrl.toolkit.bars.paneldata import PANEL_FEATURES
from tritonrl.toolkit.bars.types import Bars
from tritonrl.toolkit.envs.market.actions import as_actions
from tritonrl.toolkit.envs.market.live import as_time
from tritonrl.toolkit.envs.portfolio.env import (
    PortfolioEnvConfig,
    _action_space,
    _check_actions,
    fill_growth,
    settle,
)
from tritonrl.toolkit.envs.portfolio.weights import discrete_portfolios, hold_mask, target_weights
from tritonrl.toolkit.precision import dtype_or_default

__all__ = [
    "PortfolioRow",
    "PortfolioSpec",
    "PortfolioTrader",
    "iter_panel",
    "portfolio_from_sidecar",
    "portfolio_sidecar",
    "trade_columns",
]

_F64 = torch.float64


class PortfolioRow(NamedTuple):
    """What one bar from ``start`` on gives: the decision taken at its close and the book there.

    ``action`` and ``target`` (``[N + 1]`` f64 weights, cash first; NaN: hold) are ``None`` once
    the book has ended. ``weights`` ``[N + 1]`` are held at this close, after the previous
    decision's fill and drift; ``equity`` (over the initial), ``turnover`` and ``cost`` (a fraction
    of equity) are that fill's: ``run_period``'s ``equity[k]``, ``weights[k-1]``, ``turnover[k-1]``
    and ``costs[k-1]`` at the ``k``-th row (the first row: 1, all cash, 0, 0).
    """

    time: np.datetime64
    action: int | np.ndarray | None
    target: np.ndarray | None
    weights: np.ndarray
    equity: float
    turnover: float
    cost: float


@dataclass(frozen=True)
class PortfolioSpec:
    """What an export sidecar's ``portfolio`` entry says (`portfolio_from_sidecar`)."""

    source: str
    env_config: PortfolioEnvConfig
    num_assets: int
    symbols: tuple[str, ...] | None = None
    """The assets in the policy's order (``None``: a sidecar that names none)."""


def portfolio_sidecar(
    source: str, env_config: PortfolioEnvConfig, symbols: Sequence[str] | None
) -> dict[str, Any]:
    """The ``portfolio`` entry of an export sidecar (JSON values); raises ``ValueError`` unless
    ``env_config`` is a `PortfolioEnvConfig`."""
    if not isinstance(env_config, PortfolioEnvConfig):
        raise ValueError(f"env_config must be a PortfolioEnvConfig, got {type(env_config).__name__}")
    return {
        "env": str(source),
        "env_config": env_config.to_dict(),
        "symbols": None if symbols is None else [str(s) for s in symbols],
        "features": list(PANEL_FEATURES),
        "observation": "features [W, N, F] of rows t-W+1..t flattened (PANEL_FEATURES), then the held "
        "weights [N + 1], cash first",
    }


def portfolio_from_sidecar(sidecar: Mapping[str, Any]) -> PortfolioSpec:
    """The env config, the number of assets and the symbols of a sidecar's ``portfolio`` entry.

    Raises:
        ValueError: no ``portfolio`` entry, a malformed one, other features than
            ``PANEL_FEATURES``, or an observation shape that is not ``[W * N * F + N + 1]``.
    """
    if not isinstance(sidecar, Mapping) or not sidecar.get("portfolio"):
        raise ValueError(
            "this policy was not trained on several assets: its sidecar has no 'portfolio' entry"
        )
    entry = sidecar["portfolio"]
    try:
        config = PortfolioEnvConfig.from_dict(entry["env_config"])
        names = list(entry.get("features", PANEL_FEATURES))
        raw = entry.get("symbols")
        symbols = None if raw is None else tuple(str(s) for s in raw)
        source = str(entry.get("env", "portfolio"))
    except (KeyError, TypeError, ValueError) as exc:
        detail = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ValueError(f"the sidecar's 'portfolio' entry is malformed: {detail}") from None
    if names != list(PANEL_FEATURES):
        raise ValueError(
            f"the policy was trained on the features {names}; this tritonrl computes {list(PANEL_FEATURES)}"
        )
    per_asset = config.window * len(PANEL_FEATURES) + 1
    obs = sidecar.get("observation")
    shape = list(obs.get("shape", [])) if isinstance(obs, Mapping) else []
    if symbols is not None:
        n = len(symbols)
        if shape and shape != [n * per_asset + 1]:
            raise ValueError(
                f"the sidecar's observation shape {shape} is not W * N * F + N + 1 = {n * per_asset + 1} "
                f"for its {n} symbols"
            )
    elif len(shape) == 1 and shape[0] > 1 and (shape[0] - 1) % per_asset == 0:
        n = (shape[0] - 1) // per_asset
    else:
        raise ValueError(
            f"the sidecar names no symbols and its observation shape {shape} is not W * N * F + N + 1"
        )
    return PortfolioSpec(source, config, n, symbols)


def trade_columns(symbols: Sequence[str]) -> tuple[str, ...]:
    """The columns of a portfolio trade CSV: ``time, equity, turnover, cost``, the held weights
    ``held:cash, held:<symbol>...`` and the target ones ``target:cash, target:<symbol>...``."""
    names = ("cash", *symbols)
    return (
        "time",
        "equity",
        "turnover",
        "cost",
        *(f"held:{s}" for s in names),
        *(f"target:{s}" for s in names),
    )


def iter_panel(panel: Panel) -> Iterator[tuple[np.datetime64, dict[str, tuple[float, ...] | None]]]:
    """``(time, {symbol: (open, high, low, close, volume) or None})`` for each row of ``panel``,
    oldest first; a bar ``load_panel(fill=True)`` carried forward is ``None`` (a missing bar,
    which a ``fill=True`` trader carries forward the same way)."""
    for j in range(len(panel)):
        yield (
            panel.time[j],
            {
                s: None
                if panel.filled[j, i]
                else (
                    float(panel.open[j, i]),
                    float(panel.high[j, i]),
                    float(panel.low[j, i]),
                    float(panel.close[j, i]),
                    float(panel.volume[j, i]),
                )
                for i, s in enumerate(panel.symbols)
            },
        )


def _iso(seconds: int) -> str:
    return str(np.datetime64(int(seconds), "s"))


def _values(where: str, bar: Any) -> tuple[float, ...]:
    """``(open, high, low, close, volume)`` of a bar-like (attributes, or a 5-sequence)."""
    if hasattr(bar, "close"):
        parts = (bar.open, bar.high, bar.low, bar.close, getattr(bar, "volume", 0.0))
    else:
        parts = tuple(bar)
        if len(parts) != 5:
            raise ValueError(f"{where}: a bar is (open, high, low, close, volume), got {len(parts)} values")
    try:
        o, h, lo, c, v = (float(x) for x in parts)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: prices and volume must be numbers, got {parts}") from None
    for name, x in (("open", o), ("high", h), ("low", lo), ("close", c)):
        if not (math.isfinite(x) and x > 0):
            raise ValueError(f"{where}: {name} {x!r} is not a finite positive price")
    if not (math.isfinite(v) and v >= 0):
        raise ValueError(f"{where}: volume {v!r} is not a finite number >= 0")
    return o, h, lo, c, v


class PortfolioTrader:
    """Feed one bar per asset at a time; decide and book as `PortfolioEnv` does.

    Args:
        policy: memoryless ``policy(obs [1, W*N*F + N + 1]) -> action`` (``[1]`` int for
            ``"discrete"``, else ``[1, K]`` float): an exported program, ``agent.eval_policy()``.
        env_config: the rules the policy was trained under (``episode_length`` and
            ``random_start`` do not apply: the stream has no end).
        symbols: the ``N`` assets in the policy's order.
        out: a new trade CSV (`trade_columns`), one flushed row per bar from ``start``; ``None``: no file.
        start: the first bar to decide at (earlier bars are history; the features read them all);
            ``None``: the ``W``-th bar, as ``run_period`` decides from row ``W - 1``.
        fill: carry a missing asset's last close forward (flagged in the features), as
            ``load_panel(fill=True)``; ``False`` refuses a missing bar.
        device: where observations are built and the policy runs (the book is f64 on the CPU).
        feature_dtype: the one cast of the features, as `upload_panel`'s (default
            ``training_dtype(device)``).
        obs_dtype: the dtype the policy takes (an artifact's sidecar ``observation`` ``dtype``).

    Raises:
        ValueError: a bad argument, a recurrent policy, or an ``out`` that exists already.
        OSError: ``out`` cannot be written.
    """

    def __init__(
        self,
        policy: Callable[[torch.Tensor], Any],
        env_config: PortfolioEnvConfig,
        symbols: Sequence[str],
        out: str | os.PathLike | None = None,
        *,
        start: Any = None,
        fill: bool = False,
        device: torch.device | str = "cpu",
        feature_dtype: torch.dtype | None = None,
        obs_dtype: torch.dtype = torch.float32,
    ) -> None:
        if not callable(policy):
            raise ValueError(f"policy must be callable, got {type(policy).__name__}")
        inner = getattr(policy, "policy", None)
        if getattr(policy, "recurrent", False) or getattr(inner, "recurrent", False):
            raise ValueError("a recurrent policy cannot trade live: its memory would not survive a restart")
        if not isinstance(env_config, PortfolioEnvConfig):
            raise ValueError(f"env_config must be a PortfolioEnvConfig, got {type(env_config).__name__}")
        names = tuple(symbols) if not isinstance(symbols, str) else ()
        if not names or len(set(names)) != len(names) or not all(isinstance(s, str) and s for s in names):
            raise ValueError(f"symbols must be distinct non-empty names, got {symbols!r}")
        self.policy, self.env_config, self.symbols = policy, env_config, names
        self.start = None if start is None else int(as_time(start).astype(np.int64))
        self.fill = bool(fill)
        self.device, self.obs_dtype = torch.device(device), obs_dtype
        self.feature_dtype = dtype_or_default(feature_dtype, self.device)
        n = len(names)
        self._space = _action_space(env_config, n)
        self._table = discrete_portfolios(n, dtype=_F64)
        self._cash = torch.zeros(n + 1, dtype=_F64)
        self._cash[0] = 1.0
        self._dd_limit = env_config.max_drawdown if env_config.max_drawdown < 1.0 else math.inf
        # the history: int64 seconds, f64 (open, high, low, close, volume) per asset, filled flags
        self._n = 0
        self._time = np.empty(256, dtype=np.int64)
        self._cols = np.empty((5, 256, n), dtype=np.float64)
        self._filled = np.zeros((256, n), dtype=bool)
        self._live = False
        # the book: held weights [1, N + 1], equity [1] and its peak (f64), the decision pending a fill
        init = float(env_config.initial_cash)
        self._weights = self._cash[None].clone()
        self._value = torch.tensor([init], dtype=_F64)
        self._peak = self._value.clone()
        self._pending: tuple[torch.Tensor, torch.Tensor | None] | None = None
        self.ended: str | None = None
        self.decisions = 0
        self.path = None if out is None else Path(out)
        self._file: TextIO | None = None
        if self.path is not None:
            try:
                self._file = open(self.path, "x", encoding="utf-8", newline="")
            except FileExistsError:
                raise ValueError(
                    f"{self.path} exists: a portfolio trade CSV is written new (name another)"
                ) from None
            self._file.write(",".join(trade_columns(names)) + "\n")
            self._file.flush()

    def close(self) -> None:
        """Close the trade CSV (every row is on disk already)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> PortfolioTrader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def equity(self) -> float:
        """Equity over the initial: 1 at the start."""
        return float(self._value[0]) / float(self.env_config.initial_cash)

    @property
    def weights(self) -> np.ndarray:
        """``[N + 1]`` f64 weights held now (cash first)."""
        return self._weights[0].numpy().copy()

    @property
    def last_time(self) -> np.datetime64 | None:
        """The time of the last bar (``None`` before the first)."""
        return None if self._n == 0 else np.datetime64(int(self._time[self._n - 1]), "s")

    @property
    def bars(self) -> int:
        """Bars in the history."""
        return self._n

    # ------------------------------------------------------------------ feeding

    def run(self, bars: Panel | Iterable[tuple[Any, Any]]) -> list[PortfolioRow]:
        """Feed every row of ``bars`` (a `Panel`, or ``(time, bars)`` pairs) until the book ends;
        the rows it gave."""
        source = iter_panel(bars) if isinstance(bars, Panel) else bars
        rows = []
        for time, row in source:
            if self.ended is not None:
                break
            got = self.feed(time, row)
            if got is not None:
                rows.append(got)
        return rows

    def feed(self, time: Any, bars: Mapping[str, Any] | Sequence[Any]) -> PortfolioRow | None:
        """Take the bars of every asset at ``time``: history before ``start``; from there, book the
        previous decision's fill, decide, and return (and write) the row.

        Args:
            bars: ``{symbol: bar}`` or ``N`` bars in ``symbols`` order; a bar is ``(open, high, low,
                close, volume)`` or has those attributes; ``None`` or an absent symbol is a missing bar.

        Raises:
            ValueError: a bar not after the previous one, unknown or missing symbols (without
                ``fill``), bad prices, a book that has ended, a policy output of the wrong shape.
        """
        t = int(as_time(time).astype(np.int64))
        if self.ended is not None:
            raise ValueError(f"bar at {_iso(t)}: the book has ended ({self.ended})")
        if self._n and t <= int(self._time[self._n - 1]):
            last = _iso(int(self._time[self._n - 1]))
            raise ValueError(
                f"bar at {_iso(t)} is not after the previous bar at {last}: out of order or repeated"
            )
        values, filled = self._read(t, bars)
        if not self._is_live(t):
            self._append(t, values, filled)
            return None
        self._append(t, values, filled)
        try:
            return self._advance(t)
        except BaseException:
            self._n -= 1  # the bar was not taken: it may come again
            raise

    def _read(self, t: int, bars: Mapping[str, Any] | Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        """``[5, N]`` values and ``[N]`` filled flags of the bars at ``t``."""
        where = f"bar at {_iso(t)}"
        if isinstance(bars, Mapping):
            unknown = sorted(str(k) for k in bars if k not in self.symbols)
            if unknown:
                raise ValueError(
                    f"{where}: unknown symbol(s) {', '.join(unknown)}; the policy's: "
                    f"{', '.join(self.symbols)}"
                )
            given = [bars.get(s) for s in self.symbols]
        else:
            given = list(bars)
            if len(given) != len(self.symbols):
                raise ValueError(
                    f"{where}: {len(given)} bars for the {len(self.symbols)} symbols "
                    f"{', '.join(self.symbols)}"
                )
        values = np.empty((5, len(self.symbols)), dtype=np.float64)
        filled = np.zeros(len(self.symbols), dtype=bool)
        for i, (symbol, bar) in enumerate(zip(self.symbols, given, strict=True)):
            if bar is not None:
                values[:, i] = _values(f"{where}, {symbol!r}", bar)
                continue
            if not self.fill or not self._n:
                why = ", before its first bar" if self.fill else " (fill=True carries its last close)"
                raise ValueError(f"{where}: no bar of {symbol!r}{why}")
            close = self._cols[3, self._n - 1, i]
            values[:, i] = (close, close, close, close, 0.0)
            filled[i] = True
        return values, filled

    def _append(self, t: int, values: np.ndarray, filled: np.ndarray) -> None:
        if self._n == self._time.shape[0]:
            self._time = np.concatenate([self._time, np.empty_like(self._time)])
            self._cols = np.concatenate([self._cols, np.empty_like(self._cols)], axis=1)
            self._filled = np.concatenate([self._filled, np.zeros_like(self._filled)])
        self._time[self._n] = t
        self._cols[:, self._n] = values
        self._filled[self._n] = filled
        self._n += 1

    def _is_live(self, t: int) -> bool:
        """Whether the bar at ``t`` is decided at; raises ``ValueError`` if its window is not full."""
        if self._live:
            return True
        need = self.env_config.window - 1
        if self.start is None:
            self._live = self._n >= need
        elif t >= self.start:
            if self._n < need:
                raise ValueError(
                    f"bar at {_iso(t)} is at or after start {_iso(self.start)} with {self._n} bars before "
                    f"it: the first decision needs window - 1 = {need}"
                )
            self._live = True
        return self._live

    # ------------------------------------------------------------------ one live bar

    def _advance(self, t: int) -> PortfolioRow:
        """Book the pending decision's fill into the last bar, then decide there."""
        turnover = cost = 0.0
        if self._pending is not None:
            turnover, cost = self._settle()
        action: int | np.ndarray | None = None
        target: np.ndarray | None = None
        if self.ended is None:
            action, target = self._decide(t)
            self.decisions += 1
        row = PortfolioRow(
            np.datetime64(t, "s"),
            action,
            target,
            self.weights,
            float((self._value / self.env_config.initial_cash)[0]),
            turnover,
            cost,
        )
        if self._file is not None:
            self._file.write(_format(row, len(self.symbols)))
            self._file.flush()
        return row

    def _settle(self) -> tuple[float, float]:
        """The env's step from the bar before the last to the last: the weights, equity and peak;
        the turnover and cost; ``ended`` set on a drawdown beyond ``max_drawdown`` or ruin."""
        assert self._pending is not None
        target, keep = self._pending
        n, c = self._n, self.env_config
        close0 = torch.from_numpy(self._cols[3, n - 2][None].copy())
        close1 = torch.from_numpy(self._cols[3, n - 1][None].copy())
        open1 = torch.from_numpy(self._cols[0, n - 1][None].copy()) if c.fill == "next_open" else None
        book = settle(
            c, self._weights, self._value, target, keep, fill_growth(c, close0, close1, open1), self._cash
        )
        self._peak = torch.maximum(self._peak, book.value)
        drawdown = 1.0 - book.value / self._peak
        self._weights, self._value, self._pending = book.weights, book.value, None
        if bool(book.ruined[0]):
            self.ended = f"ruin at {_iso(int(self._time[n - 1]))}"
        elif float(drawdown[0]) > self._dd_limit:
            when = _iso(int(self._time[n - 1]))
            self.ended = f"drawdown {float(drawdown[0]):.4g} beyond max_drawdown {c.max_drawdown} at {when}"
        cost = book.cost
        return float(book.traded[0]), float(cost[0])

    def _observation(self) -> torch.Tensor:
        """``[1, W*N*F + N + 1]`` in `obs_dtype` on `device`: the last ``W`` feature rows of every
        asset (`compute_features` over its whole history, then the filled flag) and the held weights."""
        n, w, k = self._n, self.env_config.window, len(self.symbols)
        rows = np.zeros((w, k, len(PANEL_FEATURES)), dtype=np.float32)
        c = self._cols[:, :n]
        time = self._time[:n].astype("datetime64[s]")
        for i, symbol in enumerate(self.symbols):
            if n <= FEATURE_WARMUP:  # the warm-up: zeros, as compute_features writes them
                break
            bars = Bars(symbol, time, c[0, :, i], c[1, :, i], c[2, :, i], c[3, :, i], c[4, :, i])
            rows[:, i, :-1] = compute_features(bars)[n - w :]
        rows[:, :, -1] = self._filled[n - w : n]
        window = torch.from_numpy(rows.reshape(1, -1)).to(
            device=self.device, dtype=self.feature_dtype
        )  # upload's cast
        obs = torch.cat((window, self._weights.to(self.device).to(window.dtype)), dim=1)
        return obs.to(self.obs_dtype)

    def _decide(self, t: int) -> tuple[int | np.ndarray, np.ndarray]:
        """The policy's action at the bar at ``t``; its target weights become the pending decision."""
        with torch.no_grad():
            out = self.policy(self._observation())
        if isinstance(out, tuple):
            raise ValueError(f"bar at {_iso(t)}: the policy returned {len(out)} outputs, not one action")
        cpu = torch.device("cpu")
        action = as_actions(out, 1, cpu).detach().to(cpu)
        try:
            _check_actions(action, 1, self._space, cpu)
        except ValueError as exc:
            raise ValueError(f"bar at {_iso(t)}: the policy's {exc}") from None
        c = self.env_config
        target = target_weights(
            action, c.actions, scale=c.simplex_scale, leverage=c.leverage, table=self._table, dtype=_F64
        )
        keep = hold_mask(action, c.actions, len(self.symbols))
        self._pending = (target, keep)
        shown = target[0].numpy().copy()
        if keep is not None and bool(keep[0]):
            shown[:] = np.nan  # hold: the drifted weights at the fill
        value = int(action.reshape(-1)[0]) if c.actions == "discrete" else action[0].double().numpy().copy()
        return value, shown


def _format(row: PortfolioRow, n: int) -> str:
    target = [""] * (n + 1) if row.target is None else [repr(float(x)) for x in row.target]
    cells = [
        str(row.time),
        repr(row.equity),
        repr(row.turnover),
        repr(row.cost),
        *(repr(float(x)) for x in row.weights),
        *target,
    ]
    return ",".join(cells) + "\n"
