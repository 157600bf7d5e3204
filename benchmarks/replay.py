"""Prioritized replay, side by side in one process: tritonrl vs TorchRL, cpprb and naive torch.

Cases (obs dim 64, alpha 0.6, beta 0.4, IS weights included in every sample): capacity 1M
(1,000,000) and 100k, ``extend`` 1024 transitions, ``sample`` 256 / 4096, ``update`` 256 / 4096
priorities, and the training step ``sample 256 + update 256``. Buffers are full and every
library holds the same priorities, ``|N(0, 1)| + 1e-3``. It measures what the independent
side-by-side PER benchmark measures (the same data sizes, priorities, cases and timing), which
is what a training loop pays: ``update n`` cycles through 16 batches of random, unsorted indices
(repeats included) and their priorities, ``step`` updates the indices it sampled with priorities
from a pool of 16; every input is built outside the timed region, in each library's own format.

Timing on CPU: each implementation gets a call count that fills one repeat (a calibration run
first); a repeat is the mean time per call over that many calls in a row, after a
``gc.collect()``, so every call pays the cache misses the previous one left (the gathers of
``sample`` evict the tree) and every slow call (a collection, a refresh) counts. ``ROUNDS``
repeats run round-robin across the implementations (a burst of load from another process hits
them alike) and each keeps its median repeat. ``value`` is calls per second; ``ratio`` is
relative to the fastest of TorchRL and cpprb (the naive baseline where neither is installed),
so ``> 1`` means faster than the best library. On a shared machine the ratios move by tens of
percent from run to run: compare several runs.

TorchRL and cpprb come with the ``bench`` extra; a library that is missing or cannot run here
(TorchRL's sum tree is a C++ extension tied to the torch it was built for) is skipped with its
reason printed. On CPU, torch runs one thread (tritonrl.cli.bench). Where CUDA is available, this
buffer (Triton kernels) and the naive baseline also run on the GPU (timed with
``triton.testing.do_bench``). ``run(quick=True)``: 100k only, short repeats.
"""

from __future__ import annotations

import gc
import itertools
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tritonrl.cli.bench import Row, format_table, one_cpu_thread, time_fn

OBS_DIM = 64
ALPHA, BETA, EPS = 0.6, 0.4, 1e-6
CHUNK = 1024
POOL = 16  # index and priority batches cycled through by update and step
ROUNDS = 5  # interleaved timing repeats per case


def _priorities(capacity: int) -> np.ndarray:
    """The priorities every library starts from: ``|N(0, 1)| + 1e-3``, f32 ``[capacity]``."""
    g = torch.Generator().manual_seed(capacity + 1)
    return (torch.randn(capacity, generator=g).abs_() + 1e-3).numpy()


def _pool(capacity: int) -> dict[int, list[tuple[torch.Tensor, torch.Tensor]]]:
    """``POOL`` batches of ``n`` random indices (unsorted, repeats allowed) and priorities
    ``|N(0, 1)| + 1e-3`` per batch size, the same for every implementation of a capacity."""
    g = torch.Generator().manual_seed(capacity)
    return {
        n: [
            (torch.randint(0, capacity, (n,), generator=g), torch.randn(n, generator=g).abs_() + 1e-3)
            for _ in range(POOL)
        ]
        for n in (256, 4096)
    }


def _cycle(items: list[Any]) -> Callable[[], Any]:
    """A function returning ``items`` one after the other, round and round."""
    it = itertools.cycle(items)
    return lambda: next(it)


class _Impl:
    """One library behind a common interface: fill, extend, sample, update, step."""

    name = ""
    device = "cpu"

    def extend(self) -> None: ...
    def sample(self, n: int) -> Any: ...
    def update(self, n: int) -> None: ...
    def step(self) -> None: ...


class _Ours(_Impl):
    name = "tritonrl"

    def __init__(self, capacity: int, data: dict[str, np.ndarray], device: str = "cpu") -> None:
        from tritonrl.toolkit.replay import PrioritizedReplayBuffer

        self.device = device
        if device != "cpu":
            self.name = f"tritonrl ({device})"
        self.buf = PrioritizedReplayBuffer(
            capacity, (OBS_DIM,), alpha=ALPHA, beta=BETA, beta_final=BETA, eps=EPS, device=device
        )
        self.data = {k: v[:, None] for k, v in data.items()}  # [T, num_envs=1, ...]
        for _ in range(-(-capacity // CHUNK)):
            self.extend()
        prio = torch.from_numpy(_priorities(capacity))
        for lo in range(0, capacity, 65536):
            idx = torch.arange(lo, min(capacity, lo + 65536))
            self.buf.update_priorities(idx.to(device), prio[lo : lo + 65536].to(device))
        pool = _pool(capacity)
        self.batches = {n: _cycle([(i.to(device), p.to(device)) for i, p in b]) for n, b in pool.items()}
        self.prio = _cycle([p.to(device) for _, p in pool[256]])

    def extend(self) -> None:
        d = self.data
        self.buf.extend(d["obs"], d["act"], d["rew"], d["next_obs"], d["term"], d["trunc"])

    def sample(self, n: int) -> Any:
        return self.buf.sample(n)

    def update(self, n: int) -> None:
        self.buf.update_priorities(*self.batches[n]())

    def step(self) -> None:
        batch = self.buf.sample(256)
        self.buf.update_priorities(batch.indices, self.prio())


class _Naive(_Impl):
    """Plain torch: priorities ** alpha in a flat tensor, cumsum + searchsorted per sample."""

    name = "naive torch"

    def __init__(self, capacity: int, data: dict[str, np.ndarray], device: str = "cpu") -> None:
        self.device = device
        if device != "cpu":
            self.name = f"naive torch ({device})"
        self.C = capacity
        self.obs = torch.zeros(capacity, OBS_DIM, device=device)
        self.next_obs = torch.zeros(capacity, OBS_DIM, device=device)
        self.act = torch.zeros(capacity, dtype=torch.int64, device=device)
        self.rew = torch.zeros(capacity, device=device)
        self.done = torch.zeros(capacity, device=device)
        self.prio = torch.zeros(capacity, device=device)
        self.max_p = 1.0
        self.pos = 0
        self.size = 0
        self.data = {k: torch.from_numpy(v).to(device) for k, v in data.items()}
        for _ in range(-(-capacity // CHUNK)):
            self.extend()
        self.prio.copy_((torch.from_numpy(_priorities(capacity)) + EPS) ** ALPHA)
        pool = _pool(capacity)
        self.batches = {n: _cycle([(i.to(device), p.to(device)) for i, p in b]) for n, b in pool.items()}
        self.step_td = _cycle([p.to(device) for _, p in pool[256]])
        self.last: torch.Tensor | None = None

    def extend(self) -> None:
        d, n = self.data, CHUNK
        sl = torch.arange(self.pos, self.pos + n, device=self.device) % self.C
        self.obs[sl] = d["obs"]
        self.next_obs[sl] = d["next_obs"]
        self.act[sl] = d["act"]
        self.rew[sl] = d["rew"].float()
        self.done[sl] = d["term"].float()
        self.prio[sl] = self.max_p**ALPHA
        self.pos = (self.pos + n) % self.C
        self.size = min(self.C, self.size + n)

    def sample(self, n: int) -> Any:
        p = self.prio[: self.size]
        cs = torch.cumsum(p, 0)
        total = cs[-1]
        u = torch.rand(n, device=self.device)
        idx = torch.searchsorted(cs, u * total, right=True).clamp_max_(self.size - 1)
        w = (p[idx] / p.min()).pow(-BETA)
        self.last = idx
        return self.obs[idx], self.act[idx], self.rew[idx], self.next_obs[idx], self.done[idx], w

    def _set(self, idx: torch.Tensor, td: torch.Tensor) -> None:
        p = td.abs() + EPS
        self.max_p = max(self.max_p, float(p.max()))
        self.prio[idx] = p.pow(ALPHA)

    def update(self, n: int) -> None:
        self._set(*self.batches[n]())

    def step(self) -> None:
        self.sample(256)
        assert self.last is not None
        self._set(self.last, self.step_td())


class _Cpprb(_Impl):
    name = "cpprb"

    def __init__(self, capacity: int, data: dict[str, np.ndarray]) -> None:
        from cpprb import PrioritizedReplayBuffer

        env = {
            "obs": {"shape": OBS_DIM},
            "act": {"dtype": np.int64},
            "rew": {},
            "next_obs": {"shape": OBS_DIM},
            "done": {"dtype": np.bool_},
        }
        self.buf = PrioritizedReplayBuffer(capacity, env, alpha=ALPHA, eps=EPS)
        self.data = data
        for _ in range(-(-capacity // CHUNK)):
            self.extend()
        self.buf.update_priorities(np.arange(capacity, dtype=np.uint64), _priorities(capacity))
        pool = _pool(capacity)
        self.batches = {  # cpprb's own formats: uint64 indices, f32 priorities
            n: _cycle([(i.numpy().astype(np.uint64), p.numpy().copy()) for i, p in b])
            for n, b in pool.items()
        }
        self.prio = _cycle([p.numpy().copy() for _, p in pool[256]])

    def extend(self) -> None:
        d = self.data
        self.buf.add(obs=d["obs"], act=d["act"], rew=d["rew"], next_obs=d["next_obs"], done=d["term"])

    def sample(self, n: int) -> Any:
        return self.buf.sample(n, beta=BETA)

    def update(self, n: int) -> None:
        self.buf.update_priorities(*self.batches[n]())

    def step(self) -> None:
        s = self.buf.sample(256, beta=BETA)
        self.buf.update_priorities(s["indexes"], self.prio())


class _TorchRL(_Impl):
    name = "TorchRL"

    def __init__(self, capacity: int, data: dict[str, np.ndarray]) -> None:
        import warnings

        from tensordict import TensorDict
        from torchrl.data import LazyTensorStorage, PrioritizedReplayBuffer

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.buf = PrioritizedReplayBuffer(
                alpha=ALPHA, beta=BETA, eps=EPS, storage=LazyTensorStorage(capacity)
            )
        self.td_in = TensorDict(
            {k: torch.from_numpy(v) for k, v in data.items() if k != "trunc"}, batch_size=[CHUNK]
        )
        for _ in range(-(-capacity // CHUNK)):
            self.extend()
        self.buf.update_priority(torch.arange(capacity), torch.from_numpy(_priorities(capacity)))
        pool = _pool(capacity)
        self.batches = {n: _cycle(b) for n, b in pool.items()}
        self.prio = _cycle([p for _, p in pool[256]])

    def extend(self) -> None:
        self.buf.extend(self.td_in)

    def sample(self, n: int) -> Any:
        return self.buf.sample(n)

    def update(self, n: int) -> None:
        self.buf.update_priority(*self.batches[n]())

    def step(self) -> None:
        s = self.buf.sample(256)
        self.buf.update_priority(s["index"], self.prio())


def _data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "obs": rng.standard_normal((CHUNK, OBS_DIM), dtype=np.float32),
        "act": rng.integers(0, 4, CHUNK),
        "rew": rng.standard_normal(CHUNK, dtype=np.float32),
        "next_obs": rng.standard_normal((CHUNK, OBS_DIM), dtype=np.float32),
        "term": rng.random(CHUNK) < 0.01,
        "trunc": np.zeros(CHUNK, bool),
    }


def _build(
    cls: type[_Impl], capacity: int, data: dict[str, np.ndarray], skipped: dict[str, str], **kw: Any
) -> _Impl | None:
    try:
        return cls(capacity, data, **kw)
    except Exception as exc:  # a library missing or broken on this machine: say why, go on
        first = str(exc).splitlines()[0] if str(exc) else ""
        skipped[cls.name + (f" ({kw['device']})" if kw else "")] = f"{type(exc).__name__}: {first[:160]}"
        return None


def _calibrate(fn: Callable[[], object], target: float) -> int:
    """Calls of ``fn`` that take about ``target`` seconds in a row (at least 5)."""
    fn()  # warm-up
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        elapsed = time.perf_counter() - t0
        if elapsed >= 0.05 or n >= 4096:
            return max(5, round(target * n / elapsed))
        n *= 4


def _repeat(fn: Callable[[], object], calls: int) -> float:
    """One repeat on CPU: the mean time per call over ``calls`` calls in a row (after a collection)."""
    gc.collect()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def run(quick: bool = False) -> list[Row]:
    """Time every case for every available implementation; one Row per (case, impl)."""
    with one_cpu_thread():
        return _run(quick)


def _run(quick: bool) -> list[Row]:
    rows: list[Row] = []
    skipped: dict[str, str] = {}
    min_time = 0.1 if quick else 1.5  # seconds per case and implementation
    data = _data()
    for capacity in (100_000,) if quick else (1_000_000, 100_000):
        impls = [
            i for cls in (_Ours, _TorchRL, _Cpprb, _Naive) if (i := _build(cls, capacity, data, skipped))
        ]
        if torch.cuda.is_available():  # the Triton kernels, and plain torch on the same GPU
            impls += [
                i for cls in (_Ours, _Naive) if (i := _build(cls, capacity, data, skipped, device="cuda"))
            ]
        cases: list[tuple[str, Callable[[_Impl], Callable[[], object]]]] = [
            ("extend 1024", lambda i: i.extend),
            ("sample 256", lambda i: lambda: i.sample(256)),
            ("sample 4096", lambda i: lambda: i.sample(4096)),
            ("update 256", lambda i: lambda: i.update(256)),
            ("update 4096", lambda i: lambda: i.update(4096)),
            ("sample 256 + update 256", lambda i: i.step),
        ]
        cap = f"C={capacity // 1000}k" if capacity < 1_000_000 else f"C={capacity / 1e6:g}M"
        for case, make in cases:
            # ROUNDS repeats, the implementations in turn within each (a burst of load from another
            # process then hits every implementation's timings alike), the median repeat per impl
            fns = {i.name: make(i) for i in impls}
            calls = {i.name: _calibrate(fns[i.name], min_time / ROUNDS) for i in impls if i.device == "cpu"}
            times: dict[str, list[float]] = {i.name: [] for i in impls}
            for _ in range(ROUNDS):
                for i in impls:
                    fn = fns[i.name]
                    if i.device == "cpu":
                        times[i.name].append(_repeat(fn, calls[i.name]))
                    else:
                        times[i.name].append(time_fn(fn, i.device, min_time=min_time / ROUNDS)["median"])
            speeds = {name: 1.0 / statistics.median(t) for name, t in times.items()}
            libs = {k: v for k, v in speeds.items() if k in ("TorchRL", "cpprb")}
            base_name = max(libs, key=libs.get) if libs else "naive torch"
            base = speeds[base_name]
            for name, v in speeds.items():
                rows.append(Row("replay", f"{case} {cap}", name, v, "calls/s", v / base, f"vs {base_name}"))
        del impls
    for name, why in skipped.items():
        print(f"replay benchmark: {name} skipped ({why})", file=sys.stderr)
        rows.append(Row("replay", "skipped", name, float("nan"), "", None, why[:80]))
    return rows


if __name__ == "__main__":
    print(format_table(run(quick="--quick" in sys.argv)))
