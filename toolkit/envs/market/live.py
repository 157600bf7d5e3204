"""A live bar stream that decides exactly as the backtest did: `LiveTrader`.

The trader is fed bars one at a time, computes the causal features of each over the history (the
same numbers as a full-series upload, bit for bit), builds the env's observation, decides, books
the env's reward with the same f32 operations in the same order, and appends one row per bar to a
trade CSV it can resume. `market_sidecar` / `market_from_sidecar` write and read an export
sidecar's ``market`` entry. See docs/pages/using-policies.md ("A live bar stream").
"""

from __future__ import annotations

import math
import os
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple, TextIO

import numpy as np
import torch
from tritonrl.toolkit.bars.features import FEATURE_WARMUP, FEATURES, compute_features
from tritonrl.toolkit.bars.types import Bars
from tritonrl.toolkit.envs.market.env import MarketEnvConfig
from tritonrl.toolkit.precision import dtype_or_default

try:
    import fcntl
except ImportError:  # not POSIX: no lock
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "GAP_MODES",
    "MAX_FILL",
    "SCALE_WINDOW",
    "TRADE_COLUMNS",
    "Bar",
    "FeatureParams",
    "LiveTrader",
    "MarketSpec",
    "TradeRow",
    "as_time",
    "iter_bars",
    "market_from_sidecar",
    "market_sidecar",
    "read_trades",
]

TRADE_COLUMNS = ("time", "close", "action", "position", "reward", "log_equity", "equity", "filled")
"""The columns of a trade CSV (see `TradeRow`)."""
GAP_MODES = ("refuse", "fill")
SCALE_WINDOW = 100
"""The ``scale_window`` of `compute_features` that `upload` uses (its default)."""
MAX_FILL = 100_000
"""The most flat bars ``gaps="fill"`` inserts into one gap (more is a feed error, not a gap)."""
_HEADER = ",".join(TRADE_COLUMNS) + "\n"


class Bar(NamedTuple):
    """One OHLCV bar (any object with these attributes, or a 6-tuple in this order, will do)."""

    time: Any
    open: float
    high: float
    low: float
    close: float
    volume: float


class TradeRow(NamedTuple):
    """One row of a trade CSV: ``action`` as the policy returned it (``None`` on a filled bar),
    ``position`` held after the bar, ``reward`` realised at this bar, ``log_equity`` (the sum of
    the rewards), ``equity`` (its exp) and ``filled`` (inserted into a gap)."""

    time: np.datetime64
    close: float
    action: int | float | None
    position: float
    reward: float
    log_equity: float
    equity: float
    filled: bool


@dataclass(frozen=True)
class FeatureParams:
    """The arguments of `compute_features` a policy was trained with."""

    window: int = FEATURE_WARMUP
    """The rolling window of the features (the warm-up of zero rows)."""
    scale_window: int = SCALE_WINDOW
    """The longest window of the return scale."""

    def __post_init__(self) -> None:
        if not 2 <= self.window <= self.scale_window:
            raise ValueError(
                f"features window={self.window}, scale_window={self.scale_window}: "
                "need 2 <= window <= scale_window"
            )


@dataclass(frozen=True)
class MarketSpec:
    """What an export sidecar's ``market`` entry says (`market_from_sidecar`)."""

    source: str
    env_config: MarketEnvConfig
    features: FeatureParams = field(default_factory=FeatureParams)
    periods_per_year: float | None = None


def market_sidecar(
    source: str, env_config: MarketEnvConfig, periods_per_year: float | None
) -> dict[str, Any]:
    """The ``market`` entry of an export sidecar (JSON values); raises ``ValueError`` unless
    ``env_config`` is a [`MarketEnvConfig`][tritonrl.toolkit.envs.market.live.MarketEnvConfig]."""
    if not isinstance(env_config, MarketEnvConfig):
        raise ValueError(f"env_config must be a MarketEnvConfig, got {type(env_config).__name__}")
    return {
        "source": str(source),
        "env": env_config.to_dict(),
        "features": {"names": list(FEATURES), "warmup": FEATURE_WARMUP, "scale_window": SCALE_WINDOW},
        "periods_per_year": None if periods_per_year is None else float(periods_per_year),
    }


def market_from_sidecar(sidecar: Mapping[str, Any]) -> MarketSpec:
    """The env config and feature parameters of a sidecar's ``market`` entry (a whole sidecar dict).

    Raises:
        ValueError: no ``market`` entry, a malformed one, other features than
            [`FEATURES`][tritonrl.toolkit.envs.market.live.FEATURES], or an observation shape that is not
            ``[window * F + 1]``.
    """
    if not isinstance(sidecar, Mapping) or not sidecar.get("market"):
        raise ValueError("this policy was not trained on market data: its sidecar has no 'market' entry")
    entry = sidecar["market"]
    try:
        env_config = MarketEnvConfig.from_dict(entry["env"])
        feats = entry["features"]
        names = list(feats["names"])
        params = FeatureParams(int(feats["warmup"]), int(feats["scale_window"]))
        ppy = entry.get("periods_per_year")
        spec = MarketSpec(str(entry["source"]), env_config, params, None if ppy is None else float(ppy))
    except (KeyError, TypeError, ValueError) as exc:
        detail = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ValueError(f"the sidecar's 'market' entry is malformed: {detail}") from None
    if names != list(FEATURES):
        raise ValueError(
            f"the policy was trained on the features {names}; this tritonrl computes {list(FEATURES)}"
        )
    obs = sidecar.get("observation")
    want = [env_config.window * len(FEATURES) + 1]
    if isinstance(obs, Mapping) and list(obs.get("shape", want)) != want:
        raise ValueError(
            f"the sidecar's observation shape {obs.get('shape')} is not window * features + 1 = {want}"
        )
    return spec


def as_time(value: Any) -> np.datetime64:
    """``value`` (a ``datetime64``, a ``datetime``, an ISO 8601 string) as ``datetime64[s]`` (aware
    times converted to UTC); raises ``ValueError`` for anything else."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(
                f"{value!r} is not an ISO 8601 time (2017-01-31 or 2017-01-31T22:00:00)"
            ) from None
    if isinstance(value, datetime) and value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    try:
        out = np.datetime64(value, "s")
    except (TypeError, ValueError):
        raise ValueError(f"{value!r} is not a time") from None
    if np.isnat(out):
        raise ValueError(f"{value!r} is not a time (NaT)")
    return out


def iter_bars(bars: Bars) -> Iterator[Bar]:
    """The bars of ``bars`` one at a time, oldest first."""
    for i in range(len(bars)):
        yield Bar(
            bars.time[i],
            float(bars.open[i]),
            float(bars.high[i]),
            float(bars.low[i]),
            float(bars.close[i]),
            float(bars.volume[i]),
        )


def _iso(seconds: int) -> str:
    return str(np.datetime64(int(seconds), "s"))


def _span(seconds: float) -> str:
    """``seconds`` in words: ``"3 days"``, ``"1 hour"``, ``"90 seconds"``."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return f"{seconds:g} seconds"


def _read_bar(bar: Any) -> tuple[int, float, float, float, float, float]:
    """``(time in seconds, open, high, low, close, volume)`` of a `Bar`-like ``bar``; raises
    ``ValueError`` for a malformed bar or bad values."""
    if hasattr(bar, "close"):
        parts = (bar.time, bar.open, bar.high, bar.low, bar.close, bar.volume)
    else:
        parts = tuple(bar)
        if len(parts) != 6:
            raise ValueError(f"a bar is (time, open, high, low, close, volume), got {len(parts)} values")
    seconds = int(as_time(parts[0]).astype(np.int64))
    try:
        values = [float(v) for v in parts[1:]]
    except (TypeError, ValueError):
        raise ValueError(
            f"bar at {_iso(seconds)}: prices and volume must be numbers, got {parts[1:]}"
        ) from None
    for name, v in zip(("open", "high", "low", "close"), values, strict=False):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"bar at {_iso(seconds)}: {name} {v!r} is not a finite positive price")
    if not (math.isfinite(values[4]) and values[4] >= 0):
        raise ValueError(f"bar at {_iso(seconds)}: volume {values[4]!r} is not a finite number >= 0")
    o, h, lo, c, v = values
    return seconds, o, h, lo, c, v


def _exp(log_equity: float) -> float:
    """``exp`` through numpy's array loop, the one the report's ``np.exp(log_equity)`` runs
    (``math.exp`` is libm's and may differ in the last bit)."""
    return float(np.exp(np.array([log_equity], dtype=np.float64))[0])


def _is_recurrent(policy: Any) -> bool:
    inner = getattr(policy, "policy", None)  # a GreedyActor's module
    return bool(getattr(policy, "recurrent", False) or getattr(inner, "recurrent", False))


class LiveTrader:
    """Feed bars one at a time; decide as the env does; write a trade CSV.

    Args:
        policy: greedy, memoryless ``policy(obs [1, W*F + 1]) -> action`` (``[1]`` int or
            ``[1, 1]`` float): an [`ExportedPolicy`][tritonrl.toolkit.export.ExportedPolicy] or
            ``agent.eval_policy()``.
        env_config: the rules the policy was trained under.
        out: the trade CSV (an existing one is resumed); ``None``: no file.
        start: the first bar to decide at (earlier bars are history); ``None``: the ``W``-th bar.
        gaps: ``"refuse"`` a gap, or ``"fill"`` it with flat bars at the history's most common
            spacing, holding the position.
        max_gap: the largest spacing in seconds that is not a gap; ``None``: the largest spacing
            of the history bars.
        device: where observations are built and the policy runs (rewards are booked on the CPU).
        feature_dtype: the one cast of the features, as the env's (default ``training_dtype(device)``).
        obs_dtype: the dtype the policy takes (an artifact's sidecar ``observation`` ``dtype``).

    Raises:
        ValueError: a bad argument, a recurrent policy, or an ``out`` that is not a trade CSV or
            does not match ``env_config``'s actions.
        OSError: ``out`` cannot be read or written.
    """

    def __init__(
        self,
        policy: Callable[[torch.Tensor], Any],
        env_config: MarketEnvConfig,
        out: str | os.PathLike | None = None,
        *,
        features: FeatureParams | None = None,
        start: Any = None,
        gaps: str = "refuse",
        max_gap: float | None = None,
        device: torch.device | str = "cpu",
        feature_dtype: torch.dtype | None = None,
        obs_dtype: torch.dtype = torch.float32,
    ) -> None:
        if not callable(policy):
            raise ValueError(f"policy must be callable, got {type(policy).__name__}")
        if _is_recurrent(policy):
            raise ValueError("a recurrent policy cannot trade live: its memory would not survive a restart")
        if not isinstance(env_config, MarketEnvConfig):
            raise ValueError(f"env_config must be a MarketEnvConfig, got {type(env_config).__name__}")
        if gaps not in GAP_MODES:
            raise ValueError(f"gaps must be one of {GAP_MODES}, got {gaps!r}")
        if max_gap is not None and not (
            isinstance(max_gap, (int, float)) and math.isfinite(max_gap) and max_gap > 0
        ):
            raise ValueError(f"max_gap must be a positive number of seconds, got {max_gap!r}")
        self.policy, self.env_config = policy, env_config
        self.features = features if features is not None else FeatureParams()
        self.start = None if start is None else int(as_time(start).astype(np.int64))
        self.gaps, self.max_gap = gaps, max_gap
        self.device, self.obs_dtype = torch.device(device), obs_dtype
        self.feature_dtype = dtype_or_default(feature_dtype, self.device)
        self.discrete = env_config.actions == "discrete"
        self.window = env_config.window
        f32 = torch.float32
        self._cost = torch.tensor(env_config.cost, dtype=f32)
        self._borrow = torch.tensor(env_config.borrow_cost, dtype=f32)
        self._position_of = torch.tensor([-1.0, 0.0, 1.0], dtype=f32)
        self._no_borrow = torch.tensor(0.0, dtype=f32)
        # the history: int64 seconds and f64 prices, grown by doubling
        self._n = 0
        self._cols = np.empty((5, 1024), dtype=np.float64)  # open, high, low, close, volume
        self._time = np.empty(1024, dtype=np.int64)
        self._spacings: Counter[int] = Counter()
        self._live = False
        self._limit: float | None = None
        self._step: int | None = None
        # the position state: p_{t-1} (held now) and p_{t-2} (held before it), f32
        self._position = torch.zeros(1, dtype=f32)
        self._held = torch.zeros(1, dtype=f32)
        self.log_equity = 0.0
        self.decisions = self.filled = 0
        self._replay: deque[tuple[int, bool]] = deque()
        self.resumed = 0
        self.path = None if out is None else Path(out)
        self._file: TextIO | None = None
        if self.path is not None:
            self._file = self._open(self.path)

    # ------------------------------------------------------------------ the CSV

    def _open(self, path: Path) -> TextIO:
        """Open the trade CSV for appending under an exclusive lock, resuming its rows."""
        existed = path.exists()
        file = open(path, "a+", encoding="utf-8", newline="")
        locked = fcntl is None
        try:
            if fcntl is not None:
                try:
                    fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise ValueError(f"{path}: another trader is writing it") from None
                locked = True
            rows, keep = read_trades(path)
            kinds = {type(r.action) for r in rows if not r.filled}
            if kinds - {int if self.discrete else float}:
                raise ValueError(f"{path}: its actions are not {self.env_config.actions}: another policy's")
            if keep < os.fstat(file.fileno()).st_size:
                file.truncate(keep)  # a line cut by a kill (or a cut header): written again
            if keep == 0:
                file.write(_HEADER)
                file.flush()
        except BaseException:
            file.close()
            if locked and not existed:  # (never another trader's new file)
                path.unlink(missing_ok=True)
            raise
        if rows:
            self._restore(rows)
        return file

    def _restore(self, rows: list[TradeRow]) -> None:
        """Continue from the last rows: the position, the one before it, the log-equity."""
        last = rows[-1]
        self._position = torch.tensor([last.position], dtype=torch.float32)
        before = rows[-2].position if len(rows) > 1 else 0.0
        self._held = torch.tensor([before], dtype=torch.float32)
        self.log_equity = last.log_equity
        self.decisions = sum(not r.filled for r in rows)
        self.filled = len(rows) - self.decisions
        self._replay.extend((int(r.time.astype(np.int64)), r.filled) for r in rows)
        self.resumed = len(rows)

    def close(self) -> None:
        """Close the trade CSV (every row is on disk already)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> LiveTrader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ state

    @property
    def position(self) -> float:
        """The position held now (after the last bar)."""
        return float(self._position[0])

    @property
    def equity(self) -> float:
        """``exp(log_equity)``: 1 at the start."""
        return _exp(self.log_equity)

    @property
    def last_time(self) -> np.datetime64 | None:
        """The time of the last bar of the history (``None`` before the first)."""
        return None if self._n == 0 else np.datetime64(int(self._time[self._n - 1]), "s")

    @property
    def bars(self) -> int:
        """Bars in the history, filled ones included."""
        return self._n

    # ------------------------------------------------------------------ feeding

    def run(self, bars: Bars | Iterable[Any]) -> int:
        """Feed every bar of ``bars`` (a `Bars` or an iterable of bars); the rows written."""
        source = iter_bars(bars) if isinstance(bars, Bars) else bars
        return sum(len(self.feed(bar)) for bar in source)

    def feed(self, bar: Any) -> list[TradeRow]:
        """Take one bar: history before ``start``, a decision from there; the rows it wrote.

        Raises:
            ValueError: a malformed bar; one out of order, repeated, or after a gap; a policy
                output that is not one finite action; bars that do not match a resumed CSV.
        """
        t, o, h, lo, c, v = _read_bar(bar)
        if self._n:
            last = int(self._time[self._n - 1])
            if t == last:
                raise ValueError(f"bar at {_iso(t)} repeats the previous bar's time {_iso(last)}")
            if t < last:
                raise ValueError(
                    f"bar at {_iso(t)} is older than the previous bar at {_iso(last)}: out of order"
                )
        if not self._is_live(t):
            if self._n:
                self._spacings[t - int(self._time[self._n - 1])] += 1
            self._append(t, (o, h, lo, c, v))
            return []
        rows: list[TradeRow] = []
        for fill in self._fills(t):
            close = float(self._cols[3, self._n - 1])
            self._append(fill, (close, close, close, close, 0.0))
            rows += self._advance(filled=True)
        self._append(t, (o, h, lo, c, v))
        rows += self._advance(filled=False)
        return rows

    def _append(self, t: int, values: tuple[float, ...]) -> None:
        if self._n == self._time.shape[0]:
            self._time = np.concatenate([self._time, np.empty_like(self._time)])
            self._cols = np.concatenate([self._cols, np.empty_like(self._cols)], axis=1)
        self._time[self._n] = t
        self._cols[:, self._n] = values
        self._n += 1

    def _is_live(self, t: int) -> bool:
        """Whether the bar at ``t`` is decided at; raises ``ValueError`` if its window is not full."""
        if self._live:
            return True
        need = self.window - 1
        if self.start is None:
            live = self._n >= need
        elif t >= self.start:
            if self._n < need:
                raise ValueError(
                    f"bar at {_iso(t)} is at or after start {_iso(self.start)} with {self._n} bars before "
                    f"it: the first decision needs window - 1 = {need}"
                )
            live = True
        else:
            live = False
        if live:
            self._begin()
        return live

    def _begin(self) -> None:
        """Freeze the gap rule from the history's spacings; reset the policy's episode."""
        largest = max(self._spacings) if self._spacings else None
        self._limit = self.max_gap if self.max_gap is not None else largest
        if self._spacings:  # the most common spacing (the shortest of equally common ones)
            top = max(self._spacings.values())
            self._step = min(s for s, k in self._spacings.items() if k == top)
        if (
            self.gaps == "fill"
            and self._step is not None
            and self._limit is not None
            and self._step > self._limit
        ):
            raise ValueError(
                f"max_gap {_span(self._limit)} is shorter than the history's most common spacing "
                f"{_span(self._step)}: every bar would be a gap"
            )
        self._live = True
        reset = getattr(self.policy, "reset", None)
        if reset is not None:
            reset(torch.ones(1, dtype=torch.bool, device=self.device))

    def _fills(self, t: int) -> range:
        """The times of the flat bars to insert before the bar at ``t`` (empty without a gap).

        Raises:
            ValueError: a refused or unfillable gap, or more than
                [`MAX_FILL`][tritonrl.toolkit.envs.market.live.MAX_FILL] bars.
        """
        if not self._n or self._limit is None:
            return range(0)
        last = int(self._time[self._n - 1])
        if t - last <= self._limit:
            return range(0)
        what = "max_gap" if self.max_gap is not None else "the largest spacing of the history"
        where = f"bar at {_iso(t)} comes {_span(t - last)} after the bar at {_iso(last)}"
        if self.gaps == "refuse":
            raise ValueError(
                f"{where}, more than {what} ({_span(self._limit)}): a gap (gaps='fill' inserts flat "
                "bars; a larger max_gap accepts it)"
            )
        if self._step is None:
            raise ValueError(f"{where}: a gap, and the history has no spacing to fill it with")
        fills = range(last + self._step, t, self._step)
        if len(fills) > MAX_FILL:
            raise ValueError(
                f"{where}: a gap of {len(fills)} bars, more than the {MAX_FILL} gaps='fill' inserts"
            )
        return fills

    # ------------------------------------------------------------------ one live bar

    def _advance(self, *, filled: bool) -> list[TradeRow]:
        """Book the reward into the last bar, decide there (hold on a filled bar), write its row."""
        t = int(self._time[self._n - 1])
        if self._replay:
            want, was_filled = self._replay.popleft()
            if (want, was_filled) != (t, filled):
                kind = "a filled bar" if filled else "a bar"
                raise ValueError(
                    f"{self.path}: its row for {_iso(want)} (filled {was_filled}) does not match {kind} at "
                    f"{_iso(t)}: the CSV was written from other bars (feed them from the first one)"
                )
            return []
        reward = self._reward() if self.decisions else torch.zeros(1, dtype=torch.float32)
        action: int | float | None = None
        position = self._position
        if not filled:
            try:
                action, position = self._decide(t)
            except BaseException:
                self._n -= 1  # the bar was not taken: it may come again
                raise
        self._held, self._position = self._position, position
        self.log_equity += float(reward[0])
        if filled:
            self.filled += 1
        else:
            self.decisions += 1
        row = TradeRow(
            np.datetime64(t, "s"),
            float(self._cols[3, self._n - 1]),
            action,
            float(position[0]),
            float(reward[0]),
            self.log_equity,
            self.equity,
            filled,
        )
        if self._file is not None:
            self._file.write(_format(row))
            self._file.flush()
        return [row]

    def _reward(self) -> torch.Tensor:
        """``p * log_return - cost * |p - p_before| - borrow`` at the last bar, ``[1]`` f32: the
        env's operations in its order (`MarketEnv._step`)."""
        n = self._n
        log_close = np.log(self._cols[3, n - 2 : n])
        log_return = torch.from_numpy(np.diff(log_close).astype(np.float32))  # upload's f64 diff, then f32
        position, held = self._position, self._held
        change = torch.sub(position, held).abs_()
        reward = torch.mul(position, log_return)
        reward.sub_(torch.mul(change, self._cost))
        if self.env_config.borrow_cost:
            if self.discrete:  # the env's per-action lookup: borrow_cost when short, else 0
                borrow = self._borrow if float(position[0]) < 0 else self._no_borrow
            else:
                borrow = torch.neg(position).clamp_(min=0.0).mul_(self._borrow)
            reward.sub_(borrow)
        return reward

    def _observation(self) -> torch.Tensor:
        """``[1, W*F + 1]`` in `obs_dtype` on `device`: the last ``W`` feature rows and
        the position held."""
        n, w, f = self._n, self.window, len(FEATURES)
        if n <= self.features.window:  # the warm-up: zeros, as compute_features writes them
            rows = np.zeros((w, f), dtype=np.float32)
        else:
            c = self._cols[:, :n]
            bars = Bars("live", self._time[:n].astype("datetime64[s]"), c[0], c[1], c[2], c[3], c[4])
            rows = compute_features(
                bars, window=self.features.window, scale_window=self.features.scale_window
            )[n - w :]
        obs = torch.empty((1, w * f + 1), dtype=self.feature_dtype, device=self.device)
        obs[0, : w * f].copy_(torch.from_numpy(np.ascontiguousarray(rows).reshape(-1)))  # upload's cast
        obs[0, w * f :].copy_(self._position)  # the env's position column, in the features' dtype
        return obs.to(self.obs_dtype)

    def _decide(self, t: int) -> tuple[int | float, torch.Tensor]:
        """The policy's action at the bar at ``t`` and the position it takes (``[1]`` f32)."""
        out = self.policy(self._observation())
        action = torch.as_tensor(out).detach().cpu().reshape(-1)
        if action.numel() != 1:
            raise ValueError(
                f"bar at {_iso(t)}: the policy returned {action.numel()} actions for one observation"
            )
        if self.discrete:
            index = action.to(torch.long)
            return int(index[0]), self._position_of[index.clamp(0, 2)]
        value = action.to(torch.float32)
        if not math.isfinite(float(value[0])):
            raise ValueError(f"bar at {_iso(t)}: the policy returned the action {float(value[0])}")
        return float(value[0]), torch.clamp(value, -1.0, 1.0)


def _format(row: TradeRow) -> str:
    action = (
        "" if row.action is None else (str(row.action) if isinstance(row.action, int) else repr(row.action))
    )
    values = (row.close, row.position, row.reward, row.log_equity, row.equity)
    close, position, reward, log_equity, equity = (repr(float(v)) for v in values)
    return f"{row.time},{close},{action},{position},{reward},{log_equity},{equity},{int(row.filled)}\n"


def _parse(path: Path, number: int, line: str) -> TradeRow:
    cells = line.split(",")
    try:
        if len(cells) != len(TRADE_COLUMNS) or cells[7] not in ("0", "1"):
            raise ValueError
        action: int | float | None = None
        if cells[2]:
            action = int(cells[2]) if cells[2].lstrip("-").isdigit() else float(cells[2])
        time = np.datetime64(cells[0], "s")
        close, position, reward, log_equity, equity = (float(x) for x in cells[1:2] + cells[3:7])
    except ValueError:
        raise ValueError(f"{path}, line {number}: not a row of a trade CSV: {line[:80]!r}") from None
    return TradeRow(time, close, action, position, reward, log_equity, equity, cells[7] == "1")


def read_trades(path: str | os.PathLike) -> tuple[list[TradeRow], int]:
    """The rows of a trade CSV and the byte length of its complete lines (a missing file: none, 0).

    Raises:
        ValueError: not a trade CSV, or rows out of time order.
        OSError: the file cannot be read.
    """
    path = Path(path)
    if not path.exists():
        return [], 0
    data = path.read_bytes()
    keep = data.rfind(b"\n") + 1
    try:
        text = data[:keep].decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a trade CSV (not UTF-8 text)") from None
    lines = text.splitlines()
    if not lines:
        if not _HEADER.startswith(data.decode("utf-8", "replace")):
            raise ValueError(f"{path}: not a trade CSV (it starts {data[:40]!r})")
        return [], 0
    if lines[0] + "\n" != _HEADER:
        raise ValueError(f"{path}: not a trade CSV (header {lines[0][:80]!r}, expected {_HEADER.strip()!r})")
    rows = [_parse(path, i + 2, line) for i, line in enumerate(lines[1:])]
    for i in range(1, len(rows)):
        if rows[i].time <= rows[i - 1].time:
            raise ValueError(f"{path}, line {i + 2}: {rows[i].time} does not follow {rows[i - 1].time}")
    return rows, keep
