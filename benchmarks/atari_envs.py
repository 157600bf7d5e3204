"""Atari env steps per second, side by side in one process: ``ALE/Breakout-v5`` (gymnasium and
ale-py, the preprocessing of ``tritonrl.toolkit.envs.pixels``) against ``envpool:Breakout-v5``
(envpool's C++ threads, ``tritonrl.toolkit.envs.pool``), both through ``make_vec_env`` with the
same interface: 84x84 grey, frame skip 4, 4 stacked frames, episodic life, clipped rewards.

Env steps per second = ``num_envs`` / the median time of one vector step, at 1 and 8 envs, random
actions drawn before the timing (a pool of 64 action vectors, cycled); ``ratio`` is envpool's speed
relative to ``ALE/`` at the same number of envs. The two envs are timed in turn over ``ROUNDS``
rounds. envpool steps its games in its own threads (its default count, bounded by the CPU count),
so on a machine with more cores its ratio grows with the number of envs; the ``ALE/`` vector env
steps its games one after the other in this process. torch runs one thread. Where envpool (or
ale-py) is missing, its rows say so and carry no value. ``run(quick=True)``: shorter timings.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from tritonrl.cli.bench import Row, format_table, one_cpu_thread, time_fn

REQUIRES = ("gymnasium", "ale_py")  # where one is missing, `tritonrl bench` skips this file in one line

NAME = "atari_envs"
GAME = "Breakout-v5"
SIZES = (1, 8)
POOL = 64
ROUNDS = 3


def _stepper(env: Any, n: int, seed: int) -> Callable[[], object]:
    rng = np.random.default_rng(seed)
    actions = [rng.integers(0, env.single_action_space.n, n) for _ in range(POOL)]
    state = {"i": 0}

    def step() -> object:
        state["i"] = (state["i"] + 1) % POOL
        return env.step(actions[state["i"]])

    return step


def run(quick: bool = False) -> list[Row]:
    """One Row per (number of envs, implementation); see the module docstring."""
    from tritonrl.toolkit.envs.vector import make_vec_env

    min_time = 0.3 if quick else 2.0
    rows: list[Row] = []
    with one_cpu_thread():
        for n in SIZES:
            envs: dict[str, Any] = {"ALE/": make_vec_env(f"ALE/{GAME}", n, seed=0)}
            try:
                envs["envpool:"] = make_vec_env(f"envpool:{GAME}", n, seed=0)
            except ValueError as exc:  # envpool is not installed
                missing = str(exc)
            times: dict[str, list[float]] = {k: [] for k in envs}
            steps = {k: _stepper(env, n, 1) for k, env in envs.items()}
            for _ in range(ROUNDS):
                for k, step in steps.items():
                    times[k].append(time_fn(step, "cpu", min_time=min_time / ROUNDS)["median"])
            base = statistics.median(times["ALE/"])
            for k in ("ALE/", "envpool:"):
                case = f"{n} env{'s' if n > 1 else ''}"
                if k not in times:
                    rows.append(Row(NAME, case, f"{k}{GAME}", float("nan"), "env steps/s", None, missing))
                    continue
                t = statistics.median(times[k])
                lo, hi = min(times[k]) * 1e3, max(times[k]) * 1e3
                note = f"{lo:.3g}..{hi:.3g} ms per vector step over {ROUNDS} rounds"
                note += "; 1 torch thread" + ("; envpool's own threads" if k == "envpool:" else "")
                ratio = base / t if k == "envpool:" else 1.0
                rows.append(Row(NAME, case, f"{k}{GAME}", n / t, "env steps/s", ratio, note, {"seconds": t}))
            for env in envs.values():
                env.close()
    return rows


if __name__ == "__main__":
    print(format_table(run(quick="--quick" in sys.argv)))
