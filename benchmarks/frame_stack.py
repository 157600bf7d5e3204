"""The frame-stack gather of pixel replay, side by side: ``frame_stack_sample`` against the torch code
a user would write over the same frame store, and against stacked storage.

Cases: Atari frames (84 x 84 bytes, stack 4), a sampled batch of ``B`` = 32 and 256 transitions,
each needing its observation and its next observation (``2 B`` stacked rows, ``[2B, 4, 7056]``
out), in f32 and bf16 (scaled by 1/255). Implementations:

- ``frame_stack_sample``: a frame store (``N`` uint8 frames kept once, per-env rings, episode
  depths), one call for the ``2 B`` rows (CPU: the torch reference; CUDA: the Triton kernel);
- ``naive torch``: the same frame store read the way a user writes it: one gather per stack
  position, ``torch.where`` on the episode mask, ``torch.stack``, ``.to(dtype) / 255``;
- ``stacked storage``: the SB3 / CleanRL layout, ``[N, 4, 84, 84]`` uint8 stacked observations and
  the same again for the next observations (8 times the frame store's bytes), ``B`` rows gathered
  from each and converted with ``.to(dtype) / 255``.

On CPU, torch runs one thread; each case runs ``ROUNDS`` rounds, the implementations in turn, and
the rows give the median round with the range over rounds in the note. ``ratio`` is relative to
the naive torch path (``> 1``: faster). On CUDA (where available) the frame store's two paths run
on the GPU (``triton.testing.do_bench``), with the achieved bandwidth (bytes read + written) and,
for known GPUs, its fraction of the HBM peak. ``run(quick=True)``: a small store, short timings.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable

import torch
from tritonrl.cli.bench import Row, format_table, one_cpu_thread, time_fn
from tritonrl.kernels.frame_stack import FRAME_STACK_SAMPLE, frame_stack_sample, stack_rows

P, STACK, ENVS = 84 * 84, 4, 8
FRAMES = 50_000  # frame store: 50k x 7056 B = 0.35 GB; stacked storage: 8 x that (2.8 GB)
ROUNDS = 3
SCALE = 1.0 / 255.0
# HBM peak bandwidth (GB/s) of GPUs by name (vendor data sheets), for the fraction of peak.
HBM_PEAK = {"H200": 4800.0, "H100": 3350.0, "A100-SXM4-80GB": 2039.0, "A100": 1555.0, "L4": 300.0}


def _store(frames: int, device: str) -> tuple[torch.Tensor, torch.Tensor, int]:
    """A full frame store: random bytes, an episode start at about 1% of the slots."""
    g = torch.Generator().manual_seed(0)
    ring = frames // ENVS
    data = torch.randint(0, 256, (ENVS * ring, P), dtype=torch.uint8, generator=g)
    starts = (torch.rand(ENVS * ring, generator=g) < 0.01).tolist()
    depth = []
    for i, start in enumerate(starts):
        # the ring's first slot continues an older episode
        depth.append(1 if start else 200 if i % ring == 0 else depth[-1] + 1)
    return data.to(device), torch.tensor(depth, dtype=torch.int32, device=device), ring


def naive(frames: torch.Tensor, depth: torch.Tensor, rows: torch.Tensor, ring: int, dtype: torch.dtype):
    """The frame store read as a user writes it (per stack position, then mask, stack, convert)."""
    base, slot = rows // ring * ring, rows % ring
    d = depth[rows]
    out = []
    for back in range(STACK - 1, -1, -1):
        f = frames[base + (slot - back) % ring]
        out.append(torch.where((back < d)[:, None], f, 0))
    return torch.stack(out, 1).to(dtype) / 255


def _stacked(frames: torch.Tensor, depth: torch.Tensor, ring: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stacked storage of the same transitions: obs ``[N, 4, 84, 84]`` and next obs, uint8."""
    n = frames.shape[0]
    every = torch.arange(n, device=frames.device)
    back = torch.arange(STACK - 1, -1, -1, device=frames.device)
    out = []
    for rows in (every, every // ring * ring + (every + 1) % ring):
        store = torch.empty(n, STACK, 84, 84, dtype=torch.uint8, device=frames.device)
        for lo in range(0, n, 4096):
            r = rows[lo : lo + 4096]
            keep = (back < depth[r][:, None]).to(torch.uint8)
            store[lo : lo + 4096] = (frames[stack_rows(r, ring, STACK)] * keep[:, :, None]).view(
                -1, STACK, 84, 84
            )
        out.append(store)
    return out[0], out[1]


def _gbs(m: int, dtype: torch.dtype, seconds: float) -> float:
    """Bytes of one call (the gathered frames read once, the output written once) per second."""
    out_bytes = m * STACK * P * torch.empty(0, dtype=dtype).element_size()
    return (m * STACK * P + out_bytes) / seconds / 1e9


def _peak(device: str) -> float | None:
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in HBM_PEAK.items() if k in name), None)


def run(quick: bool = False) -> list[Row]:
    """One Row per (case, implementation); see the module docstring."""
    with one_cpu_thread():
        return _run(quick)


def _impls(
    frames: torch.Tensor,
    depth: torch.Tensor,
    ring: int,
    idx: torch.Tensor,
    stacked: tuple[torch.Tensor, torch.Tensor] | None,
    dtype: torch.dtype,
) -> dict[str, Callable[[], object]]:
    """The calls that sample the obs and next obs of the transitions ``idx``, by implementation."""
    both = torch.cat([idx, idx // ring * ring + (idx + 1) % ring])
    impls: dict[str, Callable[[], object]] = {
        "frame_stack_sample": lambda: frame_stack_sample(
            frames, depth, both, ring=ring, stack=STACK, dtype=dtype
        ),
        "naive torch": lambda: naive(frames, depth, both, ring, dtype),
    }
    if stacked is not None:
        obs, next_obs = stacked
        impls["stacked storage"] = lambda: (obs[idx].to(dtype) / 255, next_obs[idx].to(dtype) / 255)
    return impls


def _device_rows(device: str, quick: bool) -> list[Row]:
    rows: list[Row] = []
    min_time = 0.05 if quick else 0.5
    frames, depth, ring = _store(4_000 if quick else FRAMES, device)
    stacked = _stacked(frames, depth, ring) if device == "cpu" else None
    g = torch.Generator().manual_seed(1)
    for b in (32, 256):
        idx = torch.randint(0, frames.shape[0], (b,), generator=g).to(device)
        for dtype, tag in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
            impls = _impls(frames, depth, ring, idx, stacked, dtype)
            ours, ref = impls["frame_stack_sample"](), impls["naive torch"]()
            assert torch.allclose(ours.float(), ref.float(), rtol=2**-7, atol=0), "the paths disagree"
            times: dict[str, list[float]] = {k: [] for k in impls}
            for _ in range(ROUNDS):  # the implementations in turn: load bursts hit them alike
                for name, fn in impls.items():
                    times[name].append(time_fn(fn, device, min_time=min_time / ROUNDS)["median"])
            base = statistics.median(times["naive torch"])
            case = f"{device} B={b} [{2 * b},4,7056] {tag}"
            for name, ts in times.items():
                t = statistics.median(ts)
                note = f"{min(ts) * 1e3:.3g}..{max(ts) * 1e3:.3g} ms over {ROUNDS} rounds"
                extra = {"seconds": t}
                if device == "cpu":
                    note += "; 1 torch thread"
                else:
                    extra["GB/s"] = gbs = _gbs(2 * b, dtype, t)
                    peak = _peak(device)
                    note += f"; {gbs:.0f} GB/s" + (f" ({gbs / peak:.0%} of HBM peak)" if peak else "")
                if name == "frame_stack_sample":
                    note += f"; {FRAME_STACK_SAMPLE.last_backend}"
                rows.append(Row("frame_stack", case, name, t * 1e3, "ms", base / t, note, extra))
    return rows


def _run(quick: bool) -> list[Row]:
    rows = _device_rows("cpu", quick)
    if torch.cuda.is_available():
        rows += _device_rows("cuda", quick)
    return rows


if __name__ == "__main__":
    print(f"frame_stack: {FRAMES if '--quick' not in sys.argv else 4000} frames, CPU at 1 torch thread")
    print(format_table(run(quick="--quick" in sys.argv)))
