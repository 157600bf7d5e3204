"""Trading environments, side by side in one process: ``MarketEnv`` vs gym-anytrading's ``StocksEnv``.

Env steps per second (``num_envs`` / the median time of one vector step) at 1, 64, 1,024 and
16,384 envs, random actions drawn before the timing (a pool of 64 action vectors, cycled), on the
same data (the GOOGL daily bars gym-anytrading ships, read by ``anytrading_bars("googl")``) with
the same window (30 bars, ``stocks-v0``'s):

- ``MarketEnv``: tritonrl's batched env (``MarketEnvConfig(window=30)``, other fields at their
  defaults: discrete {short, flat, long}, 256-decision episodes from random starts, autoreset on
  the device), features from ``market.data.upload`` (``F = 6`` columns, observation
  ``30 * 6 + 1``), stepped through gymnasium's ``step`` (info dict included);
- ``AnyTradingEnv``: tritonrl's reproduction of ``StocksEnv`` (same observation ``[30, 2]``, same
  episodes, same rewards and profits), batched the same way;
- the peer: ``StocksEnv`` (``gym.make("stocks-v0", df=...)``: the registered env, all copies
  sharing one DataFrame so that 16,384 of them fit in memory) in gymnasium's ``SyncVectorEnv``,
  stepped with numpy actions, as a gym-anytrading user runs it.

``ratio`` is speed relative to the peer at the same number of envs (the issue's goal: >= 100x for
``MarketEnv`` at 1,024 envs). ``MarketEnv`` is not ``StocksEnv`` (it computes more per step:
costs, equity, drawdown, a running Sharpe ratio, and a wider observation): its ratio compares a
trading env with the one users have. ``AnyTradingEnv`` is the same env, so its ratio is only
reported when a parity check passes first: 4 of its envs and 4 package envs, fed the same random
actions through a whole episode and into the next, must agree bit for bit (observations, rewards,
``total_reward``, ``total_profit``); otherwise its rows say ``PARITY FAILED`` and carry no ratio.

Where gym-anytrading is not installed (a bare GPU machine), the peer rows and the parity check are
skipped with the reason, and the tritonrl rows run on synthetic bars of GOOGL's length (2,335)
with no ratio. On CPU, torch runs one thread (tritonrl.cli.bench; the notes say so).

Where CUDA is available, ``MarketEnv`` and ``AnyTradingEnv`` also run on the GPU (measured and
listed first), against the same CPU peer. A GPU row's time is the wall time of blocks of 16 steps
ending in a ``torch.cuda.synchronize``, per step (``bench.time_loop``: the throughput a
collection loop sees, launch overhead included). ``run(quick=True)``: shorter timings and no
peer at 16,384 envs (about 0.2 s per vector step there, 4 s to build).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tritonrl.cli.bench import Row, format_table, one_cpu_thread, time_fn, time_loop

REQUIRES = ("gymnasium",)  # where it is missing, `tritonrl bench` skips this file in one line

NAME = "market_env"
WINDOW = 30  # stocks-v0's window_size
SIZES = (1, 64, 1024, 16384)
POOL = 64  # pre-drawn action vectors, cycled: no RNG inside the timed step
GOOGL_BARS = 2335  # the synthetic stand-in's length where gym-anytrading is missing
BLOCK = 16  # GPU rows: steps per timed block (one synchronize per block)
PARITY_ENVS = 4


def _cycle(pool: list[Any]) -> Callable[[], Any]:
    """A function returning the pool's items in turn."""
    state = {"i": 0}

    def nxt() -> Any:
        state["i"] = (state["i"] + 1) % len(pool)
        return pool[state["i"]]

    return nxt


def _market_env_step(data: Any, n: int, device: str) -> Callable[[], object]:
    from tritonrl.toolkit.envs.market.env import MarketEnv, MarketEnvConfig

    env = MarketEnv(data, n, MarketEnvConfig(window=WINDOW), seed=0)
    env.reset(seed=0)
    gen = torch.Generator(device=device).manual_seed(0)
    nxt = _cycle([torch.randint(0, 3, (n,), device=device, generator=gen) for _ in range(POOL)])
    return lambda: env.step(nxt())


def _anytrading_step(bars: Any, n: int, device: str) -> Callable[[], object]:
    from tritonrl.toolkit.envs.market.anytrading import AnyTradingEnv

    env = AnyTradingEnv.from_bars(bars, kind="stocks", window_size=WINDOW, num_envs=n, device=device)
    env.reset(seed=0)
    gen = torch.Generator(device=device).manual_seed(0)
    nxt = _cycle([torch.randint(0, 2, (n,), device=device, generator=gen) for _ in range(POOL)])
    return lambda: env.step(nxt())


def _peer_step(df: Any, n: int) -> tuple[Callable[[], object], Callable[[], None]]:
    """gym-anytrading's stocks-v0 x ``n`` in a SyncVectorEnv; returns (step, close)."""
    import gym_anytrading  # noqa: F401  (registers stocks-v0)
    import gymnasium as gym

    # disable_env_checker: the checker only looks at the first reset and step, and warns there.
    vec = gym.vector.SyncVectorEnv(
        [lambda: gym.make("stocks-v0", df=df, disable_env_checker=True) for _ in range(n)]
    )
    vec.reset(seed=0)
    rng = np.random.default_rng(0)
    nxt = _cycle([rng.integers(0, 2, n) for _ in range(POOL)])
    return (lambda: vec.step(nxt())), vec.close


def anytrading_parity(df: Any, bars: Any, device: str) -> str:
    """``""`` when ``AnyTradingEnv`` (built from ``bars``) and ``PARITY_ENVS`` package
    ``stocks-v0`` envs (on ``df``) agree bit for bit over one episode and 8 steps of the next,
    under the same random actions; else what differed first (step, env, field).

    Compared at each step: the last observation of the step (``final_obs``), reward,
    ``total_reward``, ``total_profit``, and the next observation (the package's after its reset).
    """
    import gym_anytrading  # noqa: F401  (registers stocks-v0)
    import gymnasium as gym
    from tritonrl.toolkit.envs.market.anytrading import AnyTradingEnv

    n = PARITY_ENVS
    ours = AnyTradingEnv.from_bars(bars, kind="stocks", window_size=WINDOW, num_envs=n, device=device)
    pkgs = [gym.make("stocks-v0", df=df, disable_env_checker=True) for _ in range(n)]
    obs, _ = ours.reset(seed=0)
    p_obs = [pkg.reset(seed=i)[0] for i, pkg in enumerate(pkgs)]
    if not all(np.array_equal(obs[i].cpu().numpy(), p_obs[i]) for i in range(n)):
        return "reset observation differs"
    steps = ours.end_tick - ours.start_tick + 8
    actions = np.random.default_rng(1).integers(0, 2, (steps, n))
    for t in range(steps):
        obs, reward, _, _, info = ours.step(torch.as_tensor(actions[t], device=device))
        got = {
            k: v.cpu().numpy()
            for k, v in (
                ("final_obs", info["final_obs"]),
                ("reward", reward),
                ("total_reward", info["total_reward"]),
                ("total_profit", info["total_profit"]),
                ("obs", obs),
            )
        }
        for i, pkg in enumerate(pkgs):
            o, r, _, truncated, p_info = pkg.step(int(actions[t, i]))
            want = {
                "final_obs": o,
                "reward": np.float32(r),
                "total_reward": np.float32(p_info["total_reward"]),
                "total_profit": np.float32(p_info["total_profit"]),
                "obs": pkg.reset()[0] if truncated else o,
            }
            for key, value in want.items():
                if not np.array_equal(got[key][i], value):
                    return f"{key} differs at step {t}, env {i}"
    for pkg in pkgs:
        pkg.close()
    return ""


def _data(device: str) -> tuple[Any, Any, str, Any]:
    """(bars, MarketData on ``device``, what they are, the package's DataFrame or None)."""
    from tritonrl.toolkit.bars import anytrading_bars, synthetic_bars, upload

    try:
        from gym_anytrading import datasets
    except ImportError:
        bars = synthetic_bars(GOOGL_BARS, seed=0)
        return bars, upload(bars, device), f"synthetic {GOOGL_BARS} bars", None
    bars = anytrading_bars("googl")
    return bars, upload(bars, device), "GOOGL", datasets.STOCKS_GOOGL


def run(quick: bool = False) -> list[Row]:
    """One Row per (implementation, number of envs, device); see the module docstring."""
    with one_cpu_thread():
        return _run(quick)


def _run(quick: bool) -> list[Row]:
    min_time = 0.05 if quick else 0.3
    nthreads = torch.get_num_threads()
    threads = f"{nthreads} torch thread{'s' if nthreads > 1 else ''}"
    devices = (["cuda"] if torch.cuda.is_available() else []) + ["cpu"]  # the GPU first
    ours: dict[str, dict[int, list[Row]]] = {d: {n: [] for n in SIZES} for d in devices}
    peer_rows: dict[int, Row] = {}
    peer: dict[int, float] = {}
    skipped: list[Row] = []
    parity: dict[str, str] = {}

    def time_ours(device: str) -> None:
        bars, data, what, df = _data(device)
        if df is not None:
            failure = anytrading_parity(df, bars, device)
            parity[device] = failure
            if failure:
                print(f"{NAME} benchmark: AnyTradingEnv ({device}) PARITY FAILED: {failure}", file=sys.stderr)
        makers: list[tuple[str, Callable[[int], Callable[[], object]]]] = [
            ("MarketEnv", lambda n: _market_env_step(data, n, device)),
            ("AnyTradingEnv", lambda n: _anytrading_step(bars, n, device)),
        ]
        for impl, make in makers:
            for n in SIZES:
                step = make(n)
                sps = n / time_loop(step, device, block=BLOCK, min_time=min_time)["median"]
                del step
                label = impl if device == "cpu" else f"{impl} ({device})"
                note = [what, threads if device == "cpu" else torch.cuda.get_device_name(0)]
                if impl == "AnyTradingEnv":
                    if device not in parity:
                        note.append("parity not checked (no gym-anytrading)")
                    elif parity[device]:
                        note.append("PARITY FAILED: no ratio")
                ours[device][n].append(
                    Row(NAME, f"{n} envs", label, sps, "env steps/s", None, ", ".join(note))
                )

    def time_peer() -> None:
        try:
            from gym_anytrading import datasets
        except ImportError as exc:
            why = f"gym-anytrading is not installed ({exc}): pip install 'tritonrl[market]'"
            print(f"{NAME} benchmark: gym-anytrading rows skipped ({why})", file=sys.stderr)
            skipped.append(Row(NAME, "skipped", "gym-anytrading", float("nan"), "", None, why[:80]))
            return
        for n in SIZES:
            if quick and n > 1024:
                peer_rows[n] = Row(
                    NAME, f"{n} envs", "gym-anytrading", float("nan"), "", None, "quick: not run"
                )
                continue
            step, close = _peer_step(datasets.STOCKS_GOOGL, n)
            peer[n] = n / time_fn(step, "cpu", min_time=min_time, warmup=1)["median"]
            close()
            note = f"StocksEnv x SyncVectorEnv, {threads}"
            peer_rows[n] = Row(NAME, f"{n} envs", "gym-anytrading", peer[n], "env steps/s", 1.0, note)

    if "cuda" in devices:
        time_ours("cuda")
    time_peer()
    time_ours("cpu")

    rows: list[Row] = []
    for device in devices:
        for n in SIZES:
            if device == "cpu" and n in peer_rows:
                rows.append(peer_rows[n])
            for row in ours[device][n]:
                if n in peer and not (row.impl.startswith("AnyTradingEnv") and parity.get(device)):
                    row.ratio = row.value / peer[n]
                rows.append(row)
    return rows + skipped


if __name__ == "__main__":
    print(format_table(run(quick="--quick" in sys.argv)))
