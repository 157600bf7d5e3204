"""MarketEnv's preallocated step against the allocating step it replaced, bit for bit, and its buffers.

:func:`reference_step` is the earlier eager step (every temporary and every output a new tensor),
kept here as the specification: it runs on one env, the env's own step on a twin built alike, and
every output, info value, state tensor, accumulator and generator state must have the same bits
(NaN payloads and signed zeros included) after every step, through autoresets, for every action
space, action dtype and config option. Then: the outputs come from reused buffers only when
nobody holds them (held tensors are never written), and a step allocates no tensor at all.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

gym = pytest.importorskip("gymnasium")

from test_env import make_data  # noqa: E402
from tritonrl.toolkit.envs.market import MarketEnv, MarketEnvConfig  # noqa: E402
from tritonrl.toolkit.envs.market.actions import as_actions  # noqa: E402
from tritonrl.toolkit.envs.market.env import _R, _RESET  # noqa: E402


def reference_position(env: MarketEnv, actions: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The earlier ``_position_after`` (allocating)."""
    actions = as_actions(actions, env.num_envs, env.device)
    e, position = env.num_envs, env._row["final_position"]
    if env.config.actions == "discrete":
        if actions.dtype not in (torch.int64, torch.int32):
            actions = actions.to(torch.int64)
        index = actions.clamp(0, 2)
        torch.index_select(env._position_of, 0, index, out=position)
        borrow = env._borrow_of.index_select(0, index) if env.config.borrow_cost else None
        return position, borrow
    torch.clamp(actions.reshape(e).to(torch.float32), -1.0, 1.0, out=position)
    if not env.config.borrow_cost:
        return position, None
    return position, position.neg().clamp_(min=0.0).mul_(env._borrow)


def reference_step(env: MarketEnv, actions: Any, info: bool) -> tuple[Any, ...]:
    """The earlier ``MarketEnv._step``: ``(obs, reward, terminated, truncated, final_obs, done,
    info values)``, on ``env``'s state."""
    r, rows, e = env._row, env._rows, env.num_envs
    position, borrow = reference_position(env, actions)
    held = r["position"]
    torch.add(rows[1], env._one_row, out=rows[0])
    change = (position - held).abs_()
    reward = position * env._returns.index_select(0, rows[0])
    reward.sub_(change * env._cost)
    if borrow is not None:
        reward.sub_(borrow)
    held.copy_(position)
    log_equity, peak, steps = r["log_equity"].add_(reward), r["peak"], r["steps"].add_(env._one)
    r["turnover"].add_(change)
    torch.maximum(peak, log_equity, out=peak)
    drawdown = (log_equity - peak).expm1_().neg_()
    torch.maximum(r["max_drawdown"], drawdown, out=r["max_drawdown"])
    mean, m2 = r["reward_mean"], r["reward_m2"]
    delta = reward - mean
    mean.addcdiv_(delta, steps)
    m2.add_(delta.mul_(reward - mean))
    sharpe = mean / (m2 / steps).sqrt_()
    torch.where(m2 > env._zero, sharpe.mul_(env._sqrt_ppy), env._zero, out=r["sharpe"])
    torch.exp(log_equity, out=r["equity"])
    terminated = drawdown > env._ends_limits[1]  # the f32 limit (inf for max_drawdown 1.0)
    truncated = steps >= float(env._max_steps)  # (whole numbers, exact in f32)
    done = terminated | truncated
    env._acc.add_(torch.mv(env._finished, r["done"].copy_(done)))
    values: tuple[torch.Tensor, ...] = ()
    if info:
        block = env._block.clone()
        values = tuple(block[_R[k]] for k in ("equity", "sharpe", "max_drawdown", "turnover"))
        values += (block[_R["final_position"]],)
    kept = ~done
    env._block.view(torch.int32)[_RESET].mul_(kept)
    held.view(torch.int32).mul_(kept)  # the next decision's position: 0 where an episode ended
    if env._num_starts > 1:
        torch.where(done, env._draw_starts(), rows[0], out=rows[1])
    else:
        torch.mul(rows[0], kept, out=rows[1])
    both = torch.empty((2 * e, env.obs_dim), dtype=env._windows.dtype, device=env.device)
    torch.index_select(env._windows, 0, env._rows_flat, out=both.narrow(1, 0, env._width))
    both.select(1, env._width).copy_(env._columns)
    final_obs, obs = both[:e], both[e:]
    env.obs = obs
    env.vector_steps += 1
    return obs, reward, terminated, truncated, final_obs, done, values


def same_bits(a: Any, b: Any) -> bool:
    """Equal dtypes, shapes and bits (floats compared as integers: NaNs and -0.0 count)."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_bits(a[k], b[k]) for k in a)
    if not isinstance(a, torch.Tensor):
        return bool(a == b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.is_floating_point:
        bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return torch.equal(a.contiguous().view(bits), b.contiguous().view(bits))
    return torch.equal(a, b)


# (config, features dtype, action maker): every action space, start rule, cost and drawdown
# option; discrete actions of three integer dtypes with out-of-range values; continuous ones in
# f32 and f64, beyond [-1, 1], with NaNs.
CASES = {
    "discrete": (dict(episode_length=7, max_drawdown=0.05), torch.float32, "int64"),
    "discrete-int32-borrow": (
        dict(episode_length=9, borrow_cost=3e-3, max_drawdown=0.1),
        torch.float32,
        "int32",
    ),
    "discrete-uint8-one-start": (
        dict(episode_length=500, random_start=False, max_drawdown=1.0),
        torch.float32,
        "uint8",
    ),
    "continuous-f32-bf16": (
        dict(actions="continuous", episode_length=6, max_drawdown=0.04),
        torch.bfloat16,
        "f32",
    ),
    "continuous-f64-borrow": (
        dict(actions="continuous", episode_length=11, borrow_cost=1e-3, cost=0.0),
        torch.float32,
        "f64",
    ),
    "continuous-nan-one-start": (
        dict(actions="continuous", episode_length=5, random_start=False, max_drawdown=1.0),
        torch.float32,
        "f32-nan",
    ),
}


def make_actions(kind: str, n: int, g: torch.Generator) -> torch.Tensor:
    if kind in ("int64", "int32", "uint8"):
        a = torch.randint(-1, 5, (n,), generator=g)  # some beyond {0, 1, 2}: clamped
        return a.clamp(min=0).to(torch.uint8) if kind == "uint8" else a.to(getattr(torch, kind))
    a = torch.rand(n, 1, generator=g, dtype=torch.float64) * 3.0 - 1.5
    if kind == "f32-nan":
        a[torch.rand(n, 1, generator=g) < 0.05] = float("nan")
    return a if kind == "f64" else a.float()


@pytest.mark.parametrize("case", list(CASES))
def test_the_step_keeps_every_bit_of_the_reference_step(case: str) -> None:
    overrides, dtype, kind = CASES[case]
    data = make_data(80, 3, vol=0.05, dtype=dtype, seed=3)
    config = dataclasses.replace(MarketEnvConfig(window=4), **overrides)
    ours, ref = MarketEnv(data, 13, config, seed=5), MarketEnv(data, 13, config, seed=5)
    assert same_bits(ours.reset(seed=2)[0], ref.reset(seed=2)[0])
    g = torch.Generator().manual_seed(7)
    ended = torch.zeros(13, dtype=torch.int64)
    for t in range(120):
        actions = make_actions(kind, 13, g)
        info = t % 3 != 2  # step() and step_transition() (no info values) both
        got = ours._step(actions.clone(), info=info)
        want = reference_step(ref, actions.clone(), info=info)
        for name, a, b in zip(
            ("obs", "reward", "term", "trunc", "final_obs", "done"), got, want, strict=False
        ):
            assert same_bits(a, b), f"{name} differs at step {t}"
        assert len(got[6]) == len(want[6]) and all(map(same_bits, got[6], want[6])), f"info at {t}"
        assert same_bits(ours.obs, ref.obs)
        ended += want[5]
        if t % 10 == 0:
            a, b = ours.get_state(), ref.get_state()
            assert same_bits(a["state"], b["state"]) and same_bits(a["accumulators"], b["accumulators"])
            assert torch.equal(a["generator"], b["generator"])
    assert bool((ended >= 1).all())  # every env went through an autoreset
    a, b = ours.episode_stats(), ref.episode_stats()
    assert a.keys() == b.keys() and np.array_equal(list(a.values()), list(b.values()), equal_nan=True)


def test_outputs_reuse_two_buffers_when_only_the_latest_are_kept() -> None:
    env = MarketEnv(make_data(80, 3), 8, MarketEnvConfig(window=4, episode_length=5), seed=0)
    env.reset(seed=0)
    g = torch.Generator().manual_seed(0)
    pointers = set()
    for _ in range(12):
        obs, reward, terminated, _, info = env.step(torch.randint(0, 3, (8,), generator=g))
        pointers.add((obs.data_ptr(), reward.data_ptr(), terminated.data_ptr(), info["equity"].data_ptr()))
    assert len(pointers) == 2  # the one the env (and this loop) holds, and the one written next


@pytest.mark.parametrize("keep", ["obs", "final_obs", "row view", "numpy", "reward", "equity", "done"])
def test_a_held_output_is_never_written(keep: str) -> None:
    """Whatever part of a step's outputs a caller keeps (the tensor, a view of it, a numpy array
    over it), later steps leave it as it was."""
    env = MarketEnv(make_data(80, 3), 8, MarketEnvConfig(window=4, episode_length=5), seed=0)
    env.reset(seed=0)
    g = torch.Generator().manual_seed(1)
    kept: list[tuple[Any, torch.Tensor]] = []
    for _ in range(6):
        obs, reward, _, _, info = env.step(torch.randint(0, 3, (8,), generator=g))
        held = {
            "obs": obs,
            "final_obs": info["final_obs"],
            "row view": obs[3],
            "numpy": obs.numpy(),
            "reward": reward,
            "equity": info["equity"],
            "done": info["_final_obs"],
        }[keep]
        kept.append((held, torch.as_tensor(held).clone()))
        del obs, reward, info
    for _ in range(10):
        env.step(torch.randint(0, 3, (8,), generator=g))
    for held, copy in kept:
        assert torch.equal(torch.as_tensor(held), copy)


@pytest.mark.parametrize("actions", ["discrete", "continuous"])
def test_a_step_allocates_no_tensor(actions: str) -> None:
    """Once two output sets exist, ``step`` and ``step_transition`` allocate nothing (the
    profiler records every CPU allocation; borrow costs and f64 actions take the longest paths)."""
    config = MarketEnvConfig(window=4, episode_length=5, actions=actions, borrow_cost=1e-3)  # type: ignore[arg-type]
    env = MarketEnv(make_data(80, 3), 8, config, seed=0)
    env.reset(seed=0)
    g = torch.Generator().manual_seed(0)
    if actions == "discrete":
        pool = [torch.randint(0, 3, (8,), generator=g) for _ in range(4)]
    else:
        pool = [torch.rand(8, 1, generator=g, dtype=torch.float64) for _ in range(4)]
    for a in pool:
        env.step(a)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for a in pool:
            env.step(a)
            env.step_transition(a)
    allocations = [e.name for e in prof.events() if e.cpu_memory_usage > 0]
    assert allocations == []
