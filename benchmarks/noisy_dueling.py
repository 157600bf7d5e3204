"""Rainbow Q head (noisy hidden streams -> noisy value / advantage -> dueling -> log-softmax).

Implementations of the same head, same parameters:

- ``triton``: :class:`tritonrl.agents.nets.heads.DuelingHead` on CUDA: two fused launches forward.
- ``eager``: the torch reference ops (:mod:`tritonrl.kernels.noisy_head.reference`), the CPU path.
- ``compile``: ``torch.compile`` of that reference function (on CUDA: bf16, hidden 512, 18 actions,
  while the run is under 90 s; on a CPU: one case of full runs).

Cases: batch {32, 256, 4096} x hidden {256, 512} (torso features = per-stream hidden width) x
actions {4, 18} x atoms {1, 51}; ``fwd`` (under ``no_grad``, as when acting or computing
targets) and ``fwd+bwd`` (random upstream gradient, gradients of every parameter and of the
input). ``ratio`` is speed against eager in the same dtype (``> 1``: faster). On CUDA each case
first checks the Triton output against the f32 reference (bf16: within 2x torch-bf16's own error)
and reports no ratio if that fails; rows also carry the peak extra memory of one call.

On a CPU only the torch path runs (one thread): eager f32, and ``torch.compile`` for one case
when the time budget allows (its first compile takes tens of seconds on a cold cache).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from tritonrl.agents.nets.heads import DuelingHead
from tritonrl.cli.bench import Row, one_cpu_thread, time_fn
from tritonrl.kernels.noisy_head.reference import noisy_dueling_ref, noisy_linear_ref

NAME = "noisy_dueling"


def _reference_head(a: int, z: int) -> Callable[..., torch.Tensor]:
    def head(h: torch.Tensor, hidden, advantage, value) -> torch.Tensor:
        x = noisy_linear_ref(h, *hidden, noise=True, relu=True)
        return noisy_dueling_ref(x, advantage, value, a, z, True, True, None)  # type: ignore[return-value]

    return head


def _cases(quick: bool, cuda: bool) -> list[tuple[int, int, int, int]]:
    if quick:
        batches = (32, 4096) if cuda else (32, 256)
        return [(b, 512 if cuda else 256, 18, z) for b in batches for z in (1, 51)]
    return [(b, h, a, z) for b in (32, 256, 4096) for h in (256, 512) for a in (4, 18) for z in (1, 51)]


def _peak_extra_mib(fn: Callable[[], object]) -> float:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def _parity_ok(got: torch.Tensor, ref32: torch.Tensor, torch_same_dtype: torch.Tensor, dtype) -> bool:
    """The tests' criterion: f32 within 1e-4 of the scale; bf16 within 2x torch-bf16's error."""
    got, ref, base = (t.float().reshape(ref32.shape[0], -1) for t in (got, ref32, torch_same_dtype))
    scale = max(1.0, ref.abs().max().item())
    err = (got - ref).abs().max().item()
    if dtype == torch.float32:
        return err <= 1e-4 * scale
    return err <= 2 * (base - ref).abs().max().item() + 1e-3 * scale


def run(quick: bool = False) -> list[Row]:
    """Time the head's implementations side by side; see the module docstring."""
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    start = time.perf_counter()
    compile_budget = 90.0 if cuda else 300.0  # seconds since start after which no new compiles
    rows: list[Row] = []
    with one_cpu_thread(enabled=not cuda):
        for b, hid, a, z in _cases(quick, cuda):
            rows += _run_case(b, hid, a, z, device, quick, start, compile_budget)
    return rows


def _run_case(b, hid, a, z, device, quick, start, compile_budget) -> list[Row]:
    cuda = device == "cuda"
    rows: list[Row] = []
    for dtype in (torch.bfloat16, torch.float32) if cuda else (torch.float32,):
        if cuda:  # the GPU's training dtype, the widest head: keeps the run inside a few minutes
            want_compile = dtype == torch.bfloat16 and hid == 512 and a == 18
        else:  # one case, and not in quick runs: the first CPU compile takes tens of seconds
            want_compile = not quick and (b, hid, a, z) == (256, 256, 18, 51)
        compile_ok = want_compile and time.perf_counter() - start < compile_budget
        rows += _run_dtype(b, hid, a, z, device, dtype, quick, compile_ok)
    return rows


def _run_dtype(b, hid, a, z, device, dtype, quick, with_compile) -> list[Row]:
    cuda = device == "cuda"
    tag = "bf16" if dtype == torch.bfloat16 else "f32"
    ref_fn = _reference_head(a, z)
    torch.manual_seed(0)
    head = DuelingHead(hid, a, atoms=z, hidden=hid, device=device, dtype=dtype)
    h = torch.randn(b, hid, device=device, dtype=dtype, requires_grad=True)
    params = list(head.parameters())
    layers = (head.hidden.params(), head.advantage.params(), head.value.params())
    impls: dict[str, Callable[[], torch.Tensor]] = {"eager": lambda: ref_fn(h, *layers)}
    base_notes = (
        []
        if cuda
        else [
            "CPU: torch path only, 1 thread"
            + ("" if with_compile else "; torch.compile on one case of full runs only (slow first compile)")
        ]
    )
    parity_note = ""
    if cuda:
        impls["triton"] = lambda: head(h)
        with torch.no_grad():
            got = head(h)
            layers64 = tuple(tuple(None if t is None else t.double() for t in p) for p in layers)
            ref32 = ref_fn(h.double(), *layers64).float()
            ok = _parity_ok(got, ref32, ref_fn(h, *layers), dtype)
        parity_note = "" if ok else "PARITY FAILED: no speedup reported"
    if with_compile:
        compiled = torch.compile(ref_fn)
        impls["compile"] = lambda: compiled(h, *layers)
    rows: list[Row] = []
    up = torch.randn(b, a, z, device=device, dtype=torch.float32)
    for mode in ("fwd", "fwd+bwd"):
        case = f"B={b} H={hid} A={a} Z={z} {mode}"
        mode_rows: dict[str, Row] = {}
        for name, fn in impls.items():
            if mode == "fwd":

                def call(fn=fn):
                    with torch.no_grad():
                        return fn()
            else:

                def call(fn=fn):
                    out = fn()
                    return torch.autograd.grad(out, [h, *params], up.view(out.shape))

            notes = list(base_notes)
            try:
                t0 = time.perf_counter()
                call()  # the first call compiles (Triton JIT, torch.compile)
                first = time.perf_counter() - t0
                stats = time_fn(call, device, min_time=0.05 if quick else 0.2)
            except Exception as exc:  # torch.compile may be unavailable (no C++ compiler, ...)
                msg = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:80] if str(exc) else ''}"
                rows.append(Row(NAME, case, f"{name} {tag}", float("nan"), "ms", note=msg))
                continue
            extra = {"q1_ms": stats["q1"] * 1e3, "q3_ms": stats["q3"] * 1e3}
            if name == "compile":
                notes.append(f"first call {first:.1f} s")
            if cuda:
                extra["peak_extra_mib"] = _peak_extra_mib(call)
                notes.append(f"peak +{extra['peak_extra_mib']:.1f} MiB")
            if name == "triton" and parity_note:
                notes.append(parity_note)
            mode_rows[name] = Row(
                NAME, case, f"{name} {tag}", stats["median"] * 1e3, "ms", note="; ".join(notes), extra=extra
            )
        eager = mode_rows.get("eager")
        for name, row in mode_rows.items():
            if eager is not None and not (name == "triton" and parity_note):
                row.ratio = eager.value / row.value
        rows += mode_rows.values()
    return rows


if __name__ == "__main__":
    from tritonrl.cli.bench import env_header, format_table

    print(env_header())
    print(format_table(run(quick=True)))
