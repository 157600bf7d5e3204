"""Portfolio environments side by side in one process: ``PortfolioEnv`` vs FinRL's
``PortfolioOptimizationEnv``.

Env steps per second (``num_envs`` over the time of one vector step), stepping only: actions drawn
once before the timing (a pool of 16 action vectors, cycled), three runs per case (the table gives
the median run, the range beside it), on the same data: ``synthetic_panel(288, assets=8)``, window
32, FinRL's trf commission model at a 0.25 % fee, one episode of ``288 - 32`` decisions from row 31.

- ``PortfolioEnv``: tritonrl's batched env in FinRL's mode (``actions="finrl"``, ``fill="close"``,
  ``cost_model="finrl_trf"``), stepped through gymnasium's ``step`` (info dict included), at 1, 64
  and 4,096 envs;
- the peer: FinRL 0.3.7's file, unmodified (``bash benchmarks/fetch-finrl.sh``), each env in a
  gymnasium adapter (its ``new_gym_api`` step; reset without arguments) inside gymnasium's
  ``SyncVectorEnv``, at 1, 16 and 64 envs. A ``SyncVectorEnv`` steps its envs one after another,
  so its throughput is flat in the number of envs (the 16 and 64 rows measure it); 4,096 FinRL envs
  (minutes per vector step) are not run: ``PortfolioEnv``'s 4,096 row is compared with FinRL's
  largest measured row, the note says so. A FinRL run stays inside its episode (its terminal step
  writes plots and a report).

``ratio`` is speed relative to FinRL. On CPU torch runs one thread (the notes say so). Where CUDA is
available ``PortfolioEnv`` also runs on the GPU (blocks of steps ending in a synchronize). Where
FinRL's file, pandas or gymnasium is missing, the peer rows are skipped with the reason.
``run(quick=True)``: fewer steps, no 4,096 row.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tritonrl.cli.bench import Row, format_table, one_cpu_thread

REQUIRES = ("gymnasium",)  # where it is missing, `tritonrl bench` skips this file in one line

NAME = "portfolio_env"
ROWS, ASSETS, WINDOW, FEE, CASH = 288, 8, 32, 0.0025, 1_000_000.0
SIZES = (1, 64, 4096)
PEER_SIZES = (1, 16, 64)
POOL = 16
RUNS = 3


def _cycle(pool: list[Any]) -> Callable[[], Any]:
    state = {"i": 0}

    def nxt() -> Any:
        state["i"] = (state["i"] + 1) % len(pool)
        return pool[state["i"]]

    return nxt


def _time_runs(
    step: Callable[[], object], steps: int, device: str, before: Callable[[], object]
) -> list[float]:
    """``RUNS`` times ``before()`` then ``steps`` calls of ``step``: seconds per call, each run."""
    out = []
    for _ in range(RUNS):
        before()
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        if device == "cuda":
            torch.cuda.synchronize()
        out.append((time.perf_counter() - start) / steps)
    return out


def _ours(panel: Any, n: int, device: str, steps: int) -> list[float]:
    from tritonrl.toolkit.bars.paneldata import upload_panel
    from tritonrl.toolkit.envs.portfolio import PortfolioEnv, PortfolioEnvConfig

    config = PortfolioEnvConfig(
        window=WINDOW,
        episode_length=ROWS - WINDOW,
        actions="finrl",
        fill="close",
        cost_model="finrl_trf",
        cost=FEE,
        random_start=False,
        initial_cash=CASH,
    )
    env = PortfolioEnv(upload_panel(panel, device, dtype=torch.float32), n, config)
    env.reset(seed=0)
    gen = torch.Generator(device=device).manual_seed(0)
    nxt = _cycle([torch.rand(n, ASSETS + 1, device=device, generator=gen) for _ in range(POOL)])
    for _ in range(3):  # warm-up
        env.step(nxt())
    return _time_runs(lambda: env.step(nxt()), steps, device, lambda: None)


def _finrl_class() -> type:
    path = Path(__file__).resolve().parent / "_peers_finrl.py"
    spec = importlib.util.spec_from_file_location("_peers_finrl", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.load_finrl_env()


def _frame(panel: Any) -> Any:
    """The long frame FinRL reads: date, tic, close, high, low."""
    import pandas as pd

    t, n = panel.close.shape
    return pd.DataFrame(
        {
            "date": np.repeat(panel.time.astype("datetime64[D]").astype(str), n),
            "tic": np.tile(np.asarray(panel.symbols), t),
            "close": panel.close.reshape(-1),
            "high": panel.high.reshape(-1),
            "low": panel.low.reshape(-1),
        }
    )


def _peer(finrl_env: type, df: Any, n: int, steps: int, folder: str) -> list[float]:
    """FinRL's env x ``n`` in a SyncVectorEnv: seconds per vector step, each run."""
    import gymnasium as gym

    class Adapter(gym.Env):
        """FinRL's env under gymnasium's reset signature (its step already has the new API)."""

        def __init__(self) -> None:
            with contextlib.redirect_stdout(io.StringIO()):
                self.env = finrl_env(
                    df,
                    CASH,
                    comission_fee_model="trf",
                    comission_fee_pct=FEE,
                    time_window=WINDOW,
                    cwd=folder,
                    new_gym_api=True,
                )
            self.observation_space = self.env.observation_space
            self.action_space = self.env.action_space

        def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
            return self.env.reset()

        def step(self, action: Any) -> Any:
            return self.env.step(action)

    vec = gym.vector.SyncVectorEnv([Adapter for _ in range(n)])
    rng = np.random.default_rng(0)
    nxt = _cycle([rng.random((n, ASSETS + 1), dtype=np.float32) for _ in range(POOL)])
    try:
        return _time_runs(lambda: vec.step(nxt()), steps, "cpu", lambda: vec.reset(seed=0))
    finally:
        vec.close()


def _row(case: str, impl: str, times: list[float], n: int, note: str) -> Row:
    rates = sorted(n / t for t in times)
    low, mid, high = rates[0], statistics.median(rates), rates[-1]
    return Row(
        NAME,
        case,
        impl,
        mid,
        "env steps/s",
        None,
        f"{note}; {RUNS} runs {low:.4g}-{high:.4g}",
        {"min": low, "max": high},
    )


def run(quick: bool = False) -> list[Row]:
    """One Row per (implementation, number of envs, device); see the module docstring."""
    with one_cpu_thread():
        return _run(quick)


def _run(quick: bool) -> list[Row]:
    from tritonrl.toolkit.bars.panel_sources import synthetic_panel

    panel = synthetic_panel(ROWS, assets=ASSETS, seed=0)
    nthreads = torch.get_num_threads()
    threads = f"{nthreads} torch thread{'s' if nthreads > 1 else ''}"
    sizes = SIZES[:-1] if quick else SIZES
    rows: list[Row] = []
    peer: dict[int, float] = {}
    try:
        import pandas  # noqa: F401

        finrl_env = _finrl_class()
    except (ImportError, FileNotFoundError, ValueError) as exc:
        why = f"FinRL's env not loaded ({str(exc)[:60]})"
        print(f"{NAME} benchmark: FinRL rows skipped: {exc}", file=sys.stderr)
        rows.append(Row(NAME, "skipped", "FinRL", float("nan"), "", None, why))
    else:
        df = _frame(panel)
        with tempfile.TemporaryDirectory() as folder:
            for n in PEER_SIZES[:2] if quick else PEER_SIZES:
                times = _peer(finrl_env, df, n, 2 if quick else max(2, 64 // n), folder)
                peer[n] = n / statistics.median(times)
                note = f"PortfolioOptimizationEnv x SyncVectorEnv, {threads}"
                rows.append(_row(f"{n} envs", "FinRL", times, n, note))
                rows[-1].ratio = 1.0
    largest = max(peer) if peer else None
    devices = (["cuda"] if torch.cuda.is_available() else []) + ["cpu"]
    for device in devices:
        for n in sizes:
            times = _ours(panel, n, device, 20 if quick else 100)
            where = threads if device == "cpu" else torch.cuda.get_device_name(0)
            label = "PortfolioEnv" if device == "cpu" else f"PortfolioEnv ({device})"
            row = _row(f"{n} envs", label, times, n, f"FinRL mode (trf), {where}")
            if largest is not None:
                base = n if n in peer else largest
                row.ratio = row.value / peer[base]
                if base != n:
                    row.note += f"; ratio vs FinRL at {base} envs (flat in envs)"
            rows.append(row)
    return rows


if __name__ == "__main__":
    print(format_table(run(quick="--quick" in sys.argv)))
