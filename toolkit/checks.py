"""Validation shared by every agent family: config field ranges, memory budgets, per-step inputs.

[`check_config`][tritonrl.toolkit.checks.check_config],
[`check_memory`][tritonrl.toolkit.checks.check_memory], [`StepShapes`][tritonrl.toolkit.checks.StepShapes]
(metadata only) and [`InputGuard`][tritonrl.toolkit.checks.InputGuard] (NaN/inf and out-of-range inputs;
deferred to a device flag on an accelerator). A core module. Guide: docs/pages/agent-inputs.md.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from tritonrl.kernels.validate import check_field

__all__ = [
    "MAX_SEED",
    "ActionRule",
    "InputGuard",
    "StepShapes",
    "available_memory",
    "check_config",
    "check_image_bytes",
    "check_memory",
    "format_bytes",
]

MAX_SEED = 2**32 - 1
"""Largest seed: numpy's global seed takes 32 bits, gymnasium refuses negative seeds (torch takes 64)."""

# ----------------------------------------------------------------------------- config ranges


@functools.cache
def _field_types(cls: type) -> dict[str, tuple[type, bool, bool]]:
    """``{field: (element type, optional, is_tuple)}`` for int/float/bool fields (others skipped)."""
    out: dict[str, tuple[type, bool, bool]] = {}
    for name, tp in typing.get_type_hints(cls).items():
        optional = False
        if typing.get_origin(tp) in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            optional = len(args) < len(typing.get_args(tp))
            if len(args) != 1:
                continue
            tp = args[0]
        is_tuple = typing.get_origin(tp) is tuple
        if is_tuple:
            args = list(typing.get_args(tp))
            if not args:
                continue
            tp = args[0]
        if tp in (int, float, bool):
            out[name] = (tp, optional, is_tuple)
    return out


@functools.cache
def _choice_fields(cls: type) -> dict[str, tuple[Any, ...]]:
    """``{field: allowed values}`` for the ``Literal[...]`` fields of a config dataclass."""
    return {
        name: typing.get_args(tp)
        for name, tp in typing.get_type_hints(cls).items()
        if typing.get_origin(tp) is typing.Literal
    }


def numeric_fields(cls: type) -> list[str]:
    """The int and float fields (plain, optional or tuples of them) of a config dataclass."""
    return [k for k, (tp, _, _) in _field_types(cls).items() if tp is not bool]


def check_config(config: Any, ranges: Mapping[str, str]) -> None:
    """Check the types of a config's int/float/bool fields, each numeric range, each ``Literal`` field's
    value.

    Args:
        ranges: ``{field: interval}`` such as ``"(0, 1]"``, ``"[1, inf)"`` for every int/float field (tuples:
            each item).

    Raises:
        ValueError: one line naming the field and value: wrong type, NaN or inf, out of range, not a
            ``Literal`` value.
        KeyError: a numeric field has no range (a programming error in the config class).
    """
    cls: type = type(config)
    for name, allowed in _choice_fields(cls).items():
        value = getattr(config, name)
        if not any(type(value) is type(a) and value == a for a in allowed):
            raise ValueError(f"{name}={value!r} is not one of {allowed}")
    for name, (tp, optional, is_tuple) in _field_types(cls).items():
        value = getattr(config, name)
        if value is None and optional:
            continue
        if is_tuple and not isinstance(value, (tuple, list)):
            raise ValueError(f"{name}={value!r} must be a tuple of {tp.__name__}s")
        if tp is bool:
            items: Sequence[Any] = value if is_tuple else (value,)
            if not all(isinstance(item, (bool, np.bool_)) for item in items):
                raise ValueError(f"{name}={value!r} must be true or false")
        elif not is_tuple or value:
            check_field(name, value, ranges[name], integer=tp is int, each=is_tuple)


# ----------------------------------------------------------------------------- memory


def format_bytes(n: float) -> str:
    """``3.2e12`` -> ``"3.2 TB"`` (decimal units)."""
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def available_memory(device: torch.device | str) -> int | None:
    """Bytes that can still be allocated on ``device``, or ``None`` when unknown."""
    dev = torch.device(device)
    if dev.type == "cuda":
        try:
            index = dev.index if dev.index is not None else torch.cuda.current_device()
            return int(torch.cuda.mem_get_info(index)[0])
        except (RuntimeError, AssertionError, ValueError):  # no CUDA, or a bad index: unknown
            return None
    if dev.type != "cpu":
        return None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_AVPHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(what: str, parts: Mapping[str, int], device: torch.device | str) -> None:
    """Refuse an allocation of ``sum(parts)`` bytes that cannot fit in ``device``'s free memory.

    Args:
        what: the setting responsible, e.g. ``"buffer_size=100000000000"``.
        parts: bytes per component, e.g. ``{"observations": ..., "actions": ...}``.

    Raises:
        ValueError: ``"buffer_size=... needs 3.2 TB (...) on cpu; this machine has 24.1 GB available"``.
    """
    need = sum(parts.values())
    free = available_memory(device)
    if free is None or need <= free:
        return
    dev = torch.device(device)
    where = "this machine" if dev.type == "cpu" else str(dev)
    detail = ", ".join(f"{k} {format_bytes(v)}" for k, v in parts.items() if v)
    raise ValueError(
        f"{what} needs {format_bytes(need)} ({detail}) on {dev.type}; {where} has "
        f"{format_bytes(free)} available"
    )


# ----------------------------------------------------------------------------- per-step inputs


def _shape(x: Any) -> tuple[int, ...]:
    """The shape of a tensor, array, list or number (metadata; a list is converted)."""
    return tuple(x.shape) if isinstance(x, (torch.Tensor, np.ndarray)) else np.shape(x)


def _dtype(x: Any) -> tuple[str, Any]:
    """The dtype of a tensor, array, list or number, and its numpy kind letter."""
    if isinstance(x, torch.Tensor):
        d = x.dtype
        return ("b" if d == torch.bool else "f" if d.is_floating_point else "c" if d.is_complex else "i"), d
    dt = x.dtype if isinstance(x, np.ndarray) else np.asarray(x).dtype
    return dt.kind, dt


_BOOL = torch.bool


def check_image_bytes(owner: str, call: str, x: Any, name: str = "obs") -> None:
    """Refuse image observations that are not uint8 bytes, before any tensor op (metadata only).

    Raises:
        TypeError: ``"<owner>.<call>: image <name> must be uint8 (the environment's bytes), got ..."``.
    """
    dtype = x.dtype if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x)).dtype
    if dtype != torch.uint8:
        raise TypeError(f"{owner}.{call}: image {name} must be uint8 (the environment's bytes), got {dtype}")


class StepShapes:
    """The shapes and dtypes an agent's ``act`` and ``observe`` take, checked before any tensor op.

    Args:
        owner: how messages name the agent (``"DQNAgent"``).
        num_envs: the leading dim of every argument.
        obs_shape: the shape of one observation.
        action_shape: the shape of one action.
    """

    def __init__(
        self, owner: str, num_envs: int, obs_shape: tuple[int, ...], action_shape: tuple[int, ...]
    ) -> None:
        self.owner = owner
        self.obs = torch.Size((num_envs, *obs_shape))
        self.action = torch.Size((num_envs, *action_shape))
        self.vector = torch.Size((num_envs,))

    def _rows(self, call: str, name: str, x: Any, expected: torch.Size) -> None:
        shape = _shape(x)
        if shape != tuple(expected):
            raise ValueError(
                f"{self.owner}.{call}: {name} has shape {shape}, expected {tuple(expected)} (one per "
                f"environment, num_envs={expected[0]})"
            )

    def _fast(
        self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any, truncated: Any
    ) -> bool:
        """The common, well-formed cases cheaply; ``False``: let the general checks speak."""
        T, N, full = torch.Tensor, np.ndarray, self.obs
        if not (type(obs) in (T, N) and type(next_obs) in (T, N) and type(action) in (T, N)):
            return False
        if obs.shape != full or next_obs.shape != full or action.shape != self.action:
            return False
        vec = self.vector
        if type(reward) is T and type(terminated) is T and type(truncated) is T:
            rd = reward.dtype
            return (
                reward.shape == vec
                and terminated.shape == vec
                and truncated.shape == vec
                and terminated.dtype is _BOOL
                and truncated.dtype is _BOOL
                and rd is not _BOOL
                and not rd.is_complex
            )
        if type(reward) is N and type(terminated) is N and type(truncated) is N:
            return (
                reward.shape == vec
                and terminated.shape == vec
                and truncated.shape == vec
                and terminated.dtype.kind == "b"
                and truncated.dtype.kind == "b"
                and reward.dtype.kind in "iuf"
            )
        return False

    def act(self, obs: Any) -> None:
        """``obs`` has shape ``[num_envs, *obs_shape]``.

        Raises:
            ValueError: ``"DQNAgent.act: obs has shape (3, 4), expected (4, 4) (one per environment,
                num_envs=4)"``.
        """
        if type(obs) is not torch.Tensor or obs.shape != self.obs:
            self._rows("act", "obs", obs, self.obs)

    def observe(
        self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any, truncated: Any
    ) -> None:
        """``observe``'s arguments: shapes ``[num_envs, ...]``, boolean ``terminated``/``truncated`` (float
        flags refused, not cast), real ``reward``.

        Raises:
            ValueError: a wrong shape (as [`act`][tritonrl.toolkit.checks.StepShapes.act]).
            TypeError: a flag that is not boolean or a reward that is not real.
        """
        if self._fast(obs, action, reward, next_obs, terminated, truncated):
            return
        fields = (
            ("obs", obs, self.obs),
            ("action", action, self.action),
            ("reward", reward, self.vector),
            ("next_obs", next_obs, self.obs),
            ("terminated", terminated, self.vector),
            ("truncated", truncated, self.vector),
        )
        for name, x, expected in fields:
            self._rows("observe", name, x, expected)
        where = f"{self.owner}.observe"
        kind, dtype = _dtype(reward)
        if kind not in ("i", "u", "f"):
            raise TypeError(f"{where}: reward must be real numbers, got dtype {dtype}")
        for name, x in (("terminated", terminated), ("truncated", truncated)):
            kind, dtype = _dtype(x)
            if kind != "b":
                raise TypeError(f"{where}: {name} must be boolean, got dtype {dtype}")


@dataclasses.dataclass(frozen=True)
class ActionRule:
    """What a valid action is, for `InputGuard`.

    Attributes:
        kind: ``"discrete"``, ``"multidiscrete"`` or ``"box"`` (finite floats).
        nvec: ``(n,)`` for discrete, the per-dimension counts for multidiscrete; ``()`` for box.
        low: box lower bounds (used when ``bounded``).
        high: box upper bounds.
        bounded: box actions must lie in ``[low, high]`` (tanh-squashed policies).
        text: how the space reads in messages, e.g. ``"Discrete(2)"``.
    """

    kind: str
    nvec: tuple[int, ...] = ()
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()
    bounded: bool = False
    text: str = ""

    @classmethod
    def discrete(cls, n: int) -> ActionRule:
        return cls("discrete", (int(n),), text=f"Discrete({int(n)})")

    @classmethod
    def multidiscrete(cls, nvec: Sequence[int]) -> ActionRule:
        nv = tuple(int(v) for v in nvec)
        return cls("multidiscrete", nv, text=f"MultiDiscrete({list(nv)})")

    @classmethod
    def box(cls, low: Any, high: Any, *, bounded: bool) -> ActionRule:
        lo = tuple(float(v) for v in np.asarray(low, dtype=np.float64).reshape(-1))
        hi = tuple(float(v) for v in np.asarray(high, dtype=np.float64).reshape(-1))
        return cls("box", (), lo, hi, bounded, text=f"Box({len(lo)},)")


_EAGER, _DEFERRED = "eager", "deferred"
_SMALL = 64  # at most this many entries: checked through tolist() (see InputGuard._finite)
MODES = ("auto", _EAGER, _DEFERRED)


def _index(idx: Sequence[int]) -> str:
    return ", ".join(str(int(i)) for i in idx)


class InputGuard:
    """Rejects NaN/inf observations and rewards and out-of-range actions at an agent's boundary, before any
    state changes.

    Args:
        owner: how messages name the checked object (``"DQNAgent"``, ``"ReplayBuffer"``).
        actions: the valid actions; ``None``: [`action`][tritonrl.toolkit.checks.InputGuard.action] checks
            nothing.
        where: how messages name this guard's ``mode`` (``"agent.inputs"``).

    Attributes:
        mode: ``"auto"`` (host inputs at once, accelerator tensors deferred), ``"eager"`` or ``"deferred"``.
        check_at_update: ``update()`` reads the deferred flags first, so nothing is learned from bad data.

    Modes and costs: docs/pages/agent-inputs.md.
    """

    def __init__(
        self,
        owner: str,
        actions: ActionRule | None,
        *,
        mode: str = "auto",
        check_at_update: bool = False,
        where: str = "agent.inputs",
    ) -> None:
        self.owner = owner
        self.rule = actions
        self.where = where
        self.mode = mode
        self.check_at_update = check_at_update
        # (call, argument) -> 0-dim bool tensor on the input's device: all inputs so far were valid
        self._flags: dict[tuple[str, str, str], torch.Tensor] = {}
        # (call, argument, device) -> (0-dim bool: every row matched so far, what, fix) of same()
        self._matches: dict[tuple[str, str, str], tuple[torch.Tensor, str, str]] = {}
        self.pending = False  # deferred checks were queued since the last check()
        self._seen: tuple[torch.Tensor, int] | None = None  # last observation checked
        self._acted: tuple[torch.Tensor, int] | None = None  # last action returned by act
        self._bounds: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
        self._nvec: dict[torch.device, torch.Tensor] = {}

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        if value not in MODES:
            raise ValueError(f"input check mode={value!r} is not one of {MODES}")
        self._mode = value

    # ---- helpers

    def _deferred(self, t: torch.Tensor) -> bool:
        mode = self._mode
        return mode == _DEFERRED or (mode == "auto" and not t.is_cpu)

    def _flag(self, call: str, name: str, ok: torch.Tensor) -> None:
        key = (call, name, str(ok.device))
        flag = self._flags.get(key)
        if flag is None:
            self._flags[key] = ok.clone()
        else:
            flag.logical_and_(ok)
        self.pending = True

    def _fail(self, call: str, name: str, t: torch.Tensor, bad: torch.Tensor, why: str) -> None:
        idx = bad.nonzero()[0].tolist()
        value = t[tuple(idx)].item()
        raise ValueError(f"{self.owner}.{call}: {name}[{_index(idx)}] = {value!r} {why}")

    # ---- checks

    def obs(self, call: str, name: str, x: Any) -> None:
        """Check that every entry of the observation ``x`` (tensor, array or nested list) is finite.

        Raises:
            ValueError: a NaN or inf entry (at once for host inputs).
        """
        if not isinstance(x, torch.Tensor):
            self._host_finite(call, name, x)
            return
        seen = self._seen
        if seen is not None and seen[0] is x and seen[1] == x._version:
            return
        self._finite(call, name, x)
        self._seen = (x, x._version)

    def reward(self, call: str, x: Any) -> None:
        """Check that every reward in ``x`` is finite (see `obs`)."""
        if isinstance(x, torch.Tensor):
            self._finite(call, "reward", x)
        else:
            self._host_finite(call, "reward", x)

    def _host_finite(self, call: str, name: str, x: Any) -> None:
        """numpy arrays, lists and scalars: checked with numpy (no tensor is made)."""
        if self._mode == _DEFERRED:  # forced deferral: treat as a tensor
            self._finite(call, name, torch.as_tensor(np.asarray(x)))
            return
        a = np.asarray(x)
        if a.dtype.kind != "f":
            return
        if a.ndim <= 2 and a.size <= _SMALL:  # as in _finite
            v = a.tolist()
            finite = math.isfinite(sum(map(sum, v)) if a.ndim == 2 else sum(v) if a.ndim == 1 else v)
        else:
            finite = bool(np.isfinite(a).all())
        ok = np.isfinite(a) if not finite else None
        if ok is not None and not ok.all():
            idx = np.argwhere(~ok)[0]
            value = a[tuple(idx)].item()
            raise ValueError(f"{self.owner}.{call}: {name}[{_index(idx)}] = {value!r} is not finite")

    def _finite(self, call: str, name: str, t: torch.Tensor) -> None:
        if not t.dtype.is_floating_point:
            return
        mode = self._mode  # (self._deferred(t), inlined: this runs twice per step)
        if mode == _DEFERRED or (mode == "auto" and not t.is_cpu):
            self._flag(call, name, torch.isfinite(t).all())
            return
        # One reduction: NaN and inf survive a sum. A finite sum proves every entry finite; a
        # non-finite one (possibly an overflow of large finite values) is checked entry by entry.
        # Small tensors (a few environments) are summed in Python: one tolist() costs less than
        # launching a reduction and reading its result back.
        dim = t.dim()
        if dim <= 2 and t.numel() <= _SMALL:
            v: Any = t.tolist()  # a number, a list or a list of lists
            s = sum(map(sum, v)) if dim == 2 else sum(v) if dim == 1 else v
        else:
            s = t.sum().item()
        if not math.isfinite(s):
            bad = ~torch.isfinite(t)
            if bool(bad.any()):
                self._fail(call, name, t, bad, "is not finite")

    def action(self, call: str, x: Any) -> None:
        """Check that the action ``x`` lies in the space (an action `acted` recorded passes).

        Raises:
            ValueError: an entry outside the space or not finite (eager path).
        """
        rule = self.rule
        if rule is None:
            return
        if isinstance(x, torch.Tensor):
            t = x
        else:
            a = np.asarray(x)
            if not (a.flags.c_contiguous and a.flags.writeable):  # torch.from_numpy needs both
                a = np.array(a, order="C")
            t = torch.from_numpy(a) if a.dtype.kind in "biuf" else torch.as_tensor(a)
        acted = self._acted
        if acted is not None and acted[0] is t and acted[1] == t._version:
            return
        if rule.kind == "box":
            self._box(call, t, rule)
            return
        if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
            raise ValueError(
                f"{self.owner}.{call}: action has dtype {t.dtype}; {rule.text} actions are integers"
            )
        if rule.kind == "discrete":
            n = rule.nvec[0]
            if self._deferred(t):
                self._flag(call, "action", ((t >= 0) & (t < n)).all())
                return
            if t.dim() == 1 and t.numel() <= _SMALL:  # see _finite
                v = t.tolist()
                outside = bool(v) and (min(v) < 0 or max(v) >= n)
            elif t.numel():
                lo, hi = torch.aminmax(t)
                outside = int(lo) < 0 or int(hi) >= n
            else:
                outside = False
            if outside:
                self._fail(call, "action", t, (t < 0) | (t >= n), f"is outside {rule.text} (0 <= a < {n})")
            return
        nvec = self._nvec.get(t.device)
        if nvec is None:  # made once per device: a host-to-device copy per call would sync
            nvec = self._nvec[t.device] = torch.tensor(rule.nvec, device=t.device)
        if t.shape[-1:] != nvec.shape:
            raise ValueError(
                f"{self.owner}.{call}: action has shape {tuple(t.shape)}; {rule.text} needs a "
                f"last dim of {len(rule.nvec)}"
            )
        bad = (t < 0) | (t >= nvec)
        if self._deferred(t):
            self._flag(call, "action", ~bad.any())
        elif bool(bad.any()):
            idx = bad.nonzero()[0].tolist()
            self._fail(
                call,
                "action",
                t,
                bad,
                f"is outside {rule.text} (0 <= a[..., {idx[-1]}] < {rule.nvec[idx[-1]]})",
            )

    def _box(self, call: str, t: torch.Tensor, rule: ActionRule) -> None:
        if not t.dtype.is_floating_point:
            t = t.float()
        if not rule.bounded:
            self._finite(call, "action", t)
            return
        bounds = self._bounds.get(t.device)
        if bounds is None:  # widened by a rounding margin: center + scale * tanh(u) may round past a bound
            low = torch.tensor(rule.low, dtype=torch.float64)
            high = torch.tensor(rule.high, dtype=torch.float64)
            margin = 1e-5 * torch.maximum(torch.ones_like(low), torch.maximum(low.abs(), high.abs()))
            bounds = ((low - margin).to(t.device, torch.float32), (high + margin).to(t.device, torch.float32))
            self._bounds[t.device] = bounds
        low, high = bounds
        ok = (t >= low) & (t <= high)  # False for NaN
        if self._deferred(t):
            self._flag(call, "action", ok.all())
        elif not bool(ok.all()):
            idx = (~ok).nonzero()[0].tolist()
            d = idx[-1]
            value = t[tuple(idx)].item()
            why = (
                "is not finite"
                if not math.isfinite(value)
                else f"is outside the bounds [{rule.low[d]:g}, {rule.high[d]:g}] of dimension {d}"
            )
            raise ValueError(
                f"{self.owner}.{call}: action[{_index(idx)}] = {value!r} {why} (this policy "
                f"squashes its actions into the bounds of {rule.text})"
            )

    def same(self, call: str, name: str, given: Any, expected: torch.Tensor, what: str, fix: str) -> None:
        """Check that ``given`` equals ``expected`` (``[E, ...]``) row by row (deferred on an accelerator).

        Raises:
            ValueError: ``"PPOAgent.observe: action differs in rows [1] from <what>; <fix>"`` (eager path).
        """
        if isinstance(given, torch.Tensor):
            acted = self._acted
            if acted is not None and acted[0] is given and acted[1] == given._version:
                return
        deferred = self._deferred(expected)
        if not deferred and expected.is_cpu:
            # host memory on both sides: numpy compares a few entries for a fraction of torch's cost
            if isinstance(given, torch.Tensor):
                a = given.numpy() if given.is_cpu and given.dtype == expected.dtype else None
            else:
                a = np.asarray(given)
            if a is not None and np.array_equal(a, expected.numpy()):
                return
        if isinstance(given, torch.Tensor):
            g = given.to(expected.device)
        else:
            g = torch.as_tensor(np.asarray(given), device=expected.device)
        differs = (g != expected).reshape(expected.shape[0], -1).any(-1)
        if deferred:
            key = (call, name, str(expected.device))
            entry = self._matches.get(key)
            if entry is None:
                self._matches[key] = (~differs.any(), what, fix)
            else:
                entry[0].logical_and_(~differs.any())
            self.pending = True
            return
        rows = differs.nonzero().flatten().tolist()
        if rows:
            shown = _index(rows[:8]) + (f", ... ({len(rows)} rows)" if len(rows) > 8 else "")
            raise ValueError(f"{self.owner}.{call}: {name} differs in rows [{shown}] from {what}; {fix}")

    def acted(self, action: torch.Tensor) -> None:
        """Remember the action ``act`` returned: passed back unchanged, it needs no check."""
        self._acted = (action, action._version)

    def check(self) -> None:
        """Raise if a deferred check failed since the agent was built (one host sync when pending).

        Raises:
            ValueError: the call and argument that held NaN/inf or differed; a failed check stays failed.
        """
        if not self.pending:
            return
        self.pending = False
        rule = self.rule
        for (call, name, device), flag in self._flags.items():
            if not bool(flag):
                self.pending = True  # stays failed: the bad data may be stored
                what = "NaN or inf"
                if name == "action" and rule is not None and (rule.kind != "box" or rule.bounded):
                    what = f"an action outside {rule.text}"
                raise ValueError(
                    f"{self.owner}.{call}: {name} held {what} at a step since the last "
                    f"check (deferred check on {device}, without a per-step sync; set "
                    f"{self.where}.mode = 'eager' to find the entry)"
                )
        for (call, name, device), (flag, what, fix) in self._matches.items():
            if not bool(flag):
                self.pending = True  # stays failed, as above
                raise ValueError(
                    f"{self.owner}.{call}: {name} differed from {what} at a step since the last check "
                    f"(deferred check on {device}, without a per-step sync; set {self.where}.mode = "
                    f"'eager' to find the rows); {fix}"
                )
