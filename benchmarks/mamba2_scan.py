"""Mamba2 chunked scan: forward and forward+backward, tokens/s and achieved memory bandwidth.

Implementations of the same scan (dt_bias + softplus, D [H], no gate, no resets, chunk 64, G=1):

- ``triton``: :func:`tritonrl.kernels.mamba2.mamba2_scan` on CUDA (one program per (batch, head, P-block)
  walking its chunks in order);
- ``triton+resets``: the same with resets at random 2% of the steps (the price of resets);
- ``torch``: the chunked torch reference :func:`tritonrl.kernels.mamba2.reference.mamba2_scan_ref`
  (the CPU path), eager, with autograd for the backward;
- ``naive`` (CPU only): the sequential recurrence, one step after another (the test oracle);
- ``mamba_ssm``: ``mamba_chunk_scan_combined`` when the ``mamba_ssm`` package imports (benchmark
  only, never a dependency of the project).

Cases (B, L, H, P, N): (8, 1024, 8, 64, 64), (32, 256, 8, 64, 128), (1, 8192, 16, 64, 128), in
bf16 (the GPU training dtype). ``fwd`` runs under ``no_grad``; ``fwd+bwd`` adds the backward with
a random upstream gradient. ``value`` is tokens/s (B * L per second); ``extra`` holds the time and
the achieved bandwidth ``GB/s`` = the op's minimal I/O divided by the time: forward reads x, dt,
B, C and writes y; the backward also reads x, dt, B, C, dy and writes dx, ddt, dB, dC (internal
float32 partials and per-chunk states are not counted). ``ratio`` is speed against ``torch``.
On CUDA each case first checks the Triton output against the float32 reference and reports no
ratio if that fails. ``torch.compile`` of the reference is not timed: its Python loop over chunks
unrolls into a long first compile.

On a CPU only the torch reference and the sequential oracle run, with one thread, on small shapes
(``quick=True``: one small case; full: two; both well under a minute).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from tritonrl.cli.bench import Row, one_cpu_thread, time_fn
from tritonrl.kernels.mamba2 import mamba2_scan
from tritonrl.kernels.mamba2.naive import mamba2_scan_naive
from tritonrl.kernels.mamba2.reference import mamba2_scan_ref

NAME = "mamba2_scan"
GPU_CASES = [(8, 1024, 8, 64, 64), (32, 256, 8, 64, 128), (1, 8192, 16, 64, 128)]
CPU_CASES = [(2, 256, 4, 32, 32), (1, 1024, 4, 32, 64)]
CHUNK = 64


def _mamba_ssm() -> Callable | None:
    try:
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
    except Exception:
        return None
    return mamba_chunk_scan_combined


def _inputs(shape, device, dtype, resets: bool) -> dict:
    b, L, H, P, N = shape
    g = torch.Generator(device="cpu").manual_seed(0)
    kw = {
        "x": torch.randn(b, L, H, P, generator=g).to(device, dtype),
        "dt": torch.randn(b, L, H, generator=g).to(device, dtype),
        "A": (-0.1 - torch.rand(H, generator=g)).to(device, torch.float32),
        "B": (0.5 * torch.randn(b, L, 1, N, generator=g)).to(device, dtype),
        "C": (0.5 * torch.randn(b, L, 1, N, generator=g)).to(device, dtype),
        "D": torch.ones(H, device=device),
        "dt_bias": (0.5 * torch.randn(H, generator=g)).to(device),
    }
    if resets:
        kw["resets"] = (torch.rand(b, L, generator=g) < 0.02).to(device)
    return kw


def _io_bytes(shape, dtype, backward: bool) -> int:
    b, L, H, P, N = shape
    e = torch.finfo(dtype).bits // 8
    fwd = e * (2 * b * L * H * P + b * L * H + 2 * b * L * N)  # x, dt, B, C in; y out
    bwd = e * (2 * (b * L * H * P + b * L * H + 2 * b * L * N) + b * L * H * P)  # + dy in, grads out
    return fwd + (bwd if backward else 0)


def _impls(cuda: bool) -> dict[str, Callable[..., torch.Tensor]]:
    def ours(**k):
        return mamba2_scan(
            k["x"],
            k["dt"],
            k["A"],
            k["B"],
            k["C"],
            D=k["D"],
            dt_bias=k["dt_bias"],
            resets=k.get("resets"),
            chunk_size=CHUNK,
        )

    def ref(**k):
        return mamba2_scan_ref(
            k["x"],
            k["dt"],
            k["A"],
            k["B"],
            k["C"],
            k["D"],
            None,
            k["dt_bias"],
            True,
            (0.0, math.inf),
            None,
            k.get("resets"),
            CHUNK,
            False,
        )

    impls: dict[str, Callable[..., torch.Tensor]] = {"torch": ref}
    if not cuda:

        def naive(**k):
            return mamba2_scan_naive(
                k["x"],
                k["dt"],
                k["A"],
                k["B"],
                k["C"],
                D=k["D"],
                dt_bias=k["dt_bias"],
                resets=k.get("resets"),
            )

        impls["naive"] = naive
    if cuda:
        impls["triton"] = ours
        impls["triton+resets"] = ours
        ext = _mamba_ssm()
        if ext is not None:

            def theirs(**k):
                return ext(
                    k["x"],
                    k["dt"],
                    k["A"],
                    k["B"],
                    k["C"],
                    CHUNK,
                    D=k["D"],
                    dt_bias=k["dt_bias"],
                    dt_softplus=True,
                )

            impls["mamba_ssm"] = theirs
    return impls


def _parity(kw: dict, dtype: torch.dtype) -> tuple[bool, float]:
    """Triton vs the float32 reference on the same inputs: relative to max|ref|, 1e-3 in f32
    and 3e-2 in bf16 (looser than the tests: L up to 8192 here)."""
    with torch.no_grad():
        got = mamba2_scan(
            kw["x"], kw["dt"], kw["A"], kw["B"], kw["C"], D=kw["D"], dt_bias=kw["dt_bias"], chunk_size=CHUNK
        ).float()
        ref = mamba2_scan_ref(
            kw["x"].float(),
            kw["dt"].float(),
            kw["A"],
            kw["B"].float(),
            kw["C"].float(),
            kw["D"],
            None,
            kw["dt_bias"],
            True,
            (0.0, math.inf),
            None,
            None,
            CHUNK,
            False,
        )
    rel = ((got - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()
    return rel <= (1e-3 if dtype == torch.float32 else 3e-2), rel


def run(quick: bool = False) -> list[Row]:
    """Time the implementations side by side; see the module docstring."""
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    rows: list[Row] = []
    with one_cpu_thread(enabled=not cuda):
        if cuda:
            cases = GPU_CASES[:1] if quick else GPU_CASES
            dtype = torch.bfloat16
        else:
            cases = CPU_CASES[:1] if quick else CPU_CASES
            dtype = torch.float32
        for shape in cases:
            rows += _run_case(shape, device, dtype)
    return rows


def _run_case(shape, device: str, dtype: torch.dtype) -> list[Row]:
    cuda = device == "cuda"
    b, L, H, P, N = shape
    case = f"B{b} L{L} H{H} P{P} N{N} {'bf16' if dtype == torch.bfloat16 else 'f32'}"
    notes = [] if cuda else ["CPU: torch paths only, 1 thread"]
    ok, rel = True, 0.0
    if cuda:
        ok, rel = _parity(_inputs(shape, device, dtype, False), dtype)
        notes.append(f"parity rel err {rel:.1e}" + ("" if ok else " FAILED: no ratios"))
    rows: list[Row] = []
    for mode in ("fwd", "fwd+bwd"):
        backward = mode == "fwd+bwd"
        timings: dict[str, float] = {}
        for name, fn in _impls(cuda).items():
            kw = _inputs(shape, device, dtype, resets=name == "triton+resets")
            if backward:
                for k in ("x", "dt", "B", "C"):
                    kw[k].requires_grad_(True)
                dy = torch.randn(b, L, H, P, device=device, dtype=dtype)

                def call(fn=fn, kw=kw, dy=dy):
                    y = fn(**kw)
                    torch.autograd.grad(y, [kw[k] for k in ("x", "dt", "B", "C")], dy)
            else:

                def call(fn=fn, kw=kw):
                    with torch.no_grad():
                        fn(**kw)

            try:
                t = time_fn(call, device)["median"]
            except Exception as exc:  # an optional external package failing must not sink the run
                rows.append(
                    Row(
                        NAME,
                        f"{case} {mode}",
                        name,
                        float("nan"),
                        "tok/s",
                        None,
                        f"failed: {type(exc).__name__}: {str(exc)[:80]}",
                    )
                )
                continue
            timings[name] = t
            gbs = _io_bytes(shape, dtype, backward) / t / 1e9
            rows.append(
                Row(
                    NAME,
                    f"{case} {mode}",
                    name,
                    b * L / t,
                    "tok/s",
                    None,
                    "; ".join(notes),
                    extra={"seconds": t, "GB/s": gbs},
                )
            )
        base = timings.get("torch")
        for r in rows:
            if r.case == f"{case} {mode}" and base and r.impl in timings and (ok or r.impl == "torch"):
                r.ratio = base / timings[r.impl]
            if r.case == f"{case} {mode}" and "seconds" in r.extra:
                r.note = "; ".join([*notes, f"{r.extra['GB/s']:.1f} GB/s"])
    return rows
