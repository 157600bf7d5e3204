"""Compile every Triton kernel ahead of time for real GPUs, without a GPU.

The launchers run as they do on CUDA, but on CPU tensors and with two stand-ins: a Triton
driver that reports the chosen GPU target, and Triton's ``jit_cache_hook`` that records each
launch's specialization (signature, constexprs, alignment attributes, num_warps / num_stages
and the other options, exactly as Triton's own binder derives them from the launch arguments)
and skips the compile and the launch. Dispatch is steered to the Triton path. Each distinct
specialization is then compiled with ``triton.compile`` for sm_90 and sm_80, and the f32
variants (no bf16 operand) for sm_75 too, in a fresh Triton cache so that ptxas runs every time
and reports registers and spills.

Fails (exit status 1) on any compile error and on shared memory above the target's per-block
limit (sm_90: 227 KiB, sm_80: 163 KiB, sm_75: 64 KiB).

Cases: the GPU shapes of benchmarks/noisy_dueling.py, benchmarks/mamba2_scan.py,
benchmarks/replay.py and benchmarks/frame_stack.py, plus small ones (acting batches, the
actor-critic's Mamba2 block, every optional input switched on). ``--quick`` takes a subset that
still reaches every kernel and every launch-config branch (what tests/kernels/test_aot_compile.py
runs in CI). ``--cases MODULE:FUNCTION`` adds the cases of kernels outside the package (the test
passes the tests' toy op).

Run without ``TRITON_INTERPRET`` (under the interpreter ``@triton.jit`` makes no compilable
kernels)::

    .venv/bin/python tools/aot_compile.py                # the full set, all targets
    .venv/bin/python tools/aot_compile.py --quick -j 2 --targets 90,80,75
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Per-block shared memory limits (opt-in maximum), bytes.
SMEM_LIMIT = {90: 227 * 1024, 80: 163 * 1024, 75: 64 * 1024, 70: 96 * 1024}
# Targets that only get the f32 variants (bf16 kernels need Ampere).
F32_ONLY = (75, 70)


def known_over_limit(kernel: str, cc: int, bf16: bool, constexprs: dict[str, Any]) -> str | None:
    """Why a specialization may need more shared memory than ``cc`` has, if that is known.

    Such a launch raises OutOfResources on that GPU and dispatch runs the op's torch reference
    there (kernels/backend.py, rule 3); it is reported, not failed. Anything else over the
    limit fails."""
    if kernel.startswith("_mamba2_chunk_") and not bf16 and cc < 90 and constexprs.get("BN", 0) >= 64:
        # f32 [BT, BN] tiles of C and B (32 KiB each at BT=64, BN=128) and their dot operands;
        # BT is the chunk size and BP is at its floor (16) for most of these, so no launch
        # config fits them: sm_75 over from d_state 64, sm_80 (Triton 3.6 backward) at 128.
        return "f32 Mamba2 chunk at d_state >= 64: the torch reference runs on this GPU"
    return None


@dataclass
class Spec:
    """One launch specialization of one kernel, recorded for one target."""

    kernel: str
    case: str
    cc: int
    fn: Any  # triton.runtime.jit.JITFunction
    signature: dict
    constexprs: dict
    attrs: dict
    options: dict
    cases: list[str] = field(default_factory=list)  # every case that launched it

    @property
    def bf16(self) -> bool:
        return any("bf16" in str(t) for t in self.signature.values())

    def key(self) -> str:
        return repr(
            (
                self.kernel,
                self.cc,
                sorted(self.signature.items()),
                sorted((k, repr(v)) for k, v in self.constexprs.items()),
                sorted((k, repr(v)) for k, v in self.attrs.items()),
                sorted((k, repr(v)) for k, v in self.options.items()),
            )
        )

    def named_constexprs(self) -> dict[str, Any]:
        names = list(self.fn.arg_names)
        return {names[path[0]]: v for path, v in self.constexprs.items()}

    def config(self) -> str:
        """The constexprs that are sizes (ints), then warps and stages: what picks the code."""
        names = list(self.fn.arg_names)
        sizes, flags = [], []
        for path, v in self.constexprs.items():
            name = names[path[0]]
            if v is True and name != "INTERPRET":
                flags.append(name)
            elif isinstance(v, int) and not isinstance(v, bool):
                sizes.append(f"{name}={v}")
        dtype = "bf16" if self.bf16 else "f32"
        return (
            f"{dtype} {' '.join(sizes)} w{self.options.get('num_warps')}"
            f"s{self.options.get('num_stages')} [{','.join(flags)}]"
        )


# ---- recording ---------------------------------------------------------------------------------


class _Driver:
    """Enough of a Triton driver for ``JITFunction.run`` to bind, specialize and call the hook.

    The device id is the compute capability, so the per-device binder caches of a kernel hold
    one binder (with its target's options) per target."""

    def __init__(self, cc: int) -> None:
        from triton.backends.compiler import GPUTarget

        self.cc = cc
        self.target = GPUTarget("cuda", cc, 32)

    def is_active(self) -> bool:
        return True

    def get_current_target(self) -> Any:
        return self.target

    def get_current_device(self) -> int:
        return self.cc

    def get_current_stream(self, device: int | None = None) -> int:
        return 0


@contextlib.contextmanager
def _triton_dispatch() -> Iterator[None]:
    """Every KernelOp picks its Triton implementation, whatever the tensors' device."""
    from tritonrl.kernels.backend import KernelOp, Selection

    saved = KernelOp.select
    KernelOp.select = lambda self, device: Selection("triton", "ahead-of-time compile check")  # type: ignore[method-assign]
    try:
        yield
    finally:
        KernelOp.select = saved  # type: ignore[method-assign]


def record(cc: int, cases: list[tuple[str, Callable[[], None]]]) -> list[Spec]:
    """Run each case's launchers for target ``cc``; the distinct specializations they launched."""
    import triton
    from triton.runtime.driver import driver

    specs: dict[str, Spec] = {}
    current = [""]

    def hook(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
        opts = json.loads(compile["specialization_data"])["options"]
        opts = {k: tuple(v) if isinstance(v, list) else v for k, v in opts.items()}
        spec = Spec(
            fn.name,
            current[0],
            cc,
            fn.jit_function,
            dict(compile["signature"]),
            dict(compile["constants"]),
            dict(compile["configs"][0]),
            opts,
        )
        spec = specs.setdefault(spec.key(), spec)
        spec.cases.append(current[0])
        return True  # skip compile and launch

    driver.set_active(_Driver(cc))
    saved_hook = triton.knobs.runtime.jit_cache_hook
    triton.knobs.runtime.jit_cache_hook = hook
    try:
        with _triton_dispatch():
            for name, run in cases:
                current[0] = name
                run()
    finally:
        triton.knobs.runtime.jit_cache_hook = saved_hook
    return list(specs.values())


# ---- cases: the launchers as the library calls them ---------------------------------------------


def _noisy_head(
    b: int,
    hid: int,
    a: int,
    z: int,
    dtype,
    *,
    backward: bool,
    train: bool = True,
    support: bool = False,
    dueling: bool = True,
) -> Callable[[], None]:
    def run() -> None:
        import torch
        from tritonrl.agents.nets.heads import DuelingHead

        torch.manual_seed(0)
        head = DuelingHead(hid, a, atoms=z, hidden=hid, dueling=dueling, device="cpu", dtype=dtype)
        head.train(train)
        h = torch.zeros(b, hid, dtype=dtype, requires_grad=backward)
        sup = torch.linspace(-10, 10, z) if support else None
        with torch.set_grad_enabled(backward):
            out = head(h, sup) if support else head(h)
        if backward:
            outs = out if isinstance(out, tuple) else (out,)
            torch.autograd.backward(outs, [torch.zeros_like(o) for o in outs])

    return run


def _mamba2_scan(
    b: int,
    L: int,
    H: int,
    P: int,
    N: int,
    dtype,
    *,
    backward: bool,
    resets: bool = False,
    full: bool = False,
    G: int = 1,
    chunk: int = 64,
) -> Callable[[], None]:
    def run() -> None:
        import torch
        from tritonrl.kernels.mamba2 import mamba2_scan

        kw: dict[str, Any] = {
            "D": torch.zeros(H, P) if full else torch.zeros(H),
            "dt_bias": torch.zeros(H),
            "chunk_size": chunk,
        }
        if resets:
            kw["resets"] = torch.zeros(b, L, dtype=torch.bool)
        if full:
            kw["z"] = torch.zeros(b, L, H, P, dtype=dtype, requires_grad=backward)
            kw["initial_states"] = torch.zeros(b, H, P, N, requires_grad=backward)
            kw["return_final_states"] = True
            kw["dt_limit"] = (1e-3, 10.0)
        x = torch.zeros(b, L, H, P, dtype=dtype, requires_grad=backward)
        dt = torch.zeros(b, L, H, dtype=dtype, requires_grad=backward)
        A = torch.full((H,), -1.0, requires_grad=backward)
        Bm = torch.zeros(b, L, G, N, dtype=dtype, requires_grad=backward)
        Cm = torch.zeros(b, L, G, N, dtype=dtype, requires_grad=backward)
        with torch.set_grad_enabled(backward):
            out = mamba2_scan(x, dt, A, Bm, Cm, **kw)
        if backward:
            outs = out if isinstance(out, tuple) else (out,)
            torch.autograd.backward(outs, [torch.zeros_like(o) for o in outs])

    return run


def _mamba2_step(b: int, H: int, P: int, N: int, dtype, *, full: bool = False) -> Callable[[], None]:
    def run() -> None:
        import torch
        from tritonrl.kernels.mamba2 import mamba2_step

        kw: dict[str, Any] = {"D": torch.zeros(H), "dt_bias": torch.zeros(H)}
        if full:
            kw.update(
                D=torch.zeros(H, P),
                z=torch.zeros(b, H, P, dtype=dtype),
                reset=torch.zeros(b, dtype=torch.bool),
            )
        state, x = torch.zeros(b, H, P, N), torch.zeros(b, H, P, dtype=dtype)
        dt = torch.zeros(b, H, dtype=dtype)
        Bm, Cm = torch.zeros(b, 1, N, dtype=dtype), torch.zeros(b, 1, N, dtype=dtype)
        mamba2_step(state, x, dt, torch.full((H,), -1.0), Bm, Cm, **kw)

    return run


def _sumtree(
    capacity: int, *, sample: int = 0, update: int = 0, insert: int = 0, td_dtype=None
) -> Callable[[], None]:
    def run() -> None:
        import torch
        from tritonrl.kernels.sumtree import new_sumtree, per_insert, per_sample, per_update

        tree = new_sumtree(capacity)
        if insert:
            per_insert(tree, 0, insert, alpha=0.6)
        if sample:
            per_sample(tree, torch.zeros(sample), 0.4, capacity)
        if update:
            td = torch.zeros(update, dtype=td_dtype or torch.float32)
            per_update(tree, torch.zeros(update, dtype=torch.int64), td, alpha=0.6, eps=1e-6, size=capacity)

    return run


def _frame_stack(b: int, P: int, stack: int, dtype) -> Callable[[], None]:
    def run() -> None:
        import torch
        from tritonrl.kernels.frame_stack import frame_stack_sample

        ring = 1000
        frames = torch.zeros(4 * ring, P, dtype=torch.uint8)
        depth = torch.ones(4 * ring, dtype=torch.int32)
        rows = torch.zeros(2 * b, dtype=torch.int64)  # a batch's obs and next obs
        frame_stack_sample(frames, depth, rows, ring=ring, stack=stack, dtype=dtype)

    return run


def cases(quick: bool) -> list[tuple[str, Callable[[], None]]]:
    """(name, run) of every case; ``quick``: the CI subset (every kernel, every config branch)."""
    import torch

    out: list[tuple[str, Callable[[], None]]] = []
    dtypes = {"bf16": torch.bfloat16, "f32": torch.float32}
    # benchmarks/noisy_dueling.py (GPU): batch {32, 256, 4096} x hidden {256, 512} x actions {4, 18}
    # x atoms {1, 51}, fwd (no_grad) and fwd+bwd, bf16 and f32.
    heads = [(b, h, a, z) for b in (32, 256, 4096) for h in (256, 512) for a in (4, 18) for z in (1, 51)]
    if quick:  # batch buckets <= 16 / > 16, one and several action tiles, split and direct dW
        heads = [(32, 256, 4, 1), (4096, 512, 18, 51)]
    for tag, dt in dtypes.items():
        for b, h, a, z in heads:
            for bwd in (False, True):
                out.append(
                    (
                        f"noisy_dueling b{b} h{h} a{a} z{z} {tag} {'fwd+bwd' if bwd else 'fwd'}",
                        _noisy_head(b, h, a, z, dt, backward=bwd),
                    )
                )
        # acting (batch 1, noise off), C51 with support, a plain (non-dueling) head
        out.append(
            (
                f"noisy_dueling act b1 a18 z51 eval {tag}",
                _noisy_head(1, 512, 18, 51, dt, backward=False, train=False),
            )
        )
        if not quick:
            out.append(
                (
                    f"noisy_dueling b8 a6 z51 support {tag}",
                    _noisy_head(8, 64, 6, 51, dt, backward=True, support=True),
                )
            )
            out.append(
                (
                    f"noisy_dueling b64 a4 z1 plain {tag}",
                    _noisy_head(64, 128, 4, 1, dt, backward=True, dueling=False),
                )
            )
    # benchmarks/mamba2_scan.py GPU_CASES (B, L, H, P, N), chunk 64; fwd, fwd+bwd, with resets.
    scans = [(8, 1024, 8, 64, 64), (32, 256, 8, 64, 128), (1, 8192, 16, 64, 128)]
    for tag, dt in dtypes.items():
        # quick: one bf16 benchmark shape, fwd+bwd with resets (f32 at d_state 128 compiles slowly)
        for shape in [] if quick and tag == "f32" else scans[-1:] if quick else scans:
            for bwd in (True,) if quick else (False, True):
                for rs in (True,) if quick else (False, True):
                    name = f"mamba2_scan {shape} {tag} {'fwd+bwd' if bwd else 'fwd'}{' resets' if rs else ''}"
                    out.append((name, _mamba2_scan(*shape, dt, backward=bwd, resets=rs)))
        # the actor-critic's block (d_state 16, headdim 16), every optional input, 2 groups
        out.append(
            (
                f"mamba2_scan actor-critic full {tag}",
                _mamba2_scan(8, 128, 8, 16, 16, dt, backward=True, resets=True, full=True, G=2),
            )
        )
        if not quick:
            out.append(
                (
                    f"mamba2_scan L37 chunk32 {tag}",
                    _mamba2_scan(2, 37, 4, 5, 3, dt, backward=True, full=True, G=2, chunk=32),
                )
            )
        for b, H, P, N in ((8, 8, 16, 16), (1, 16, 64, 128)):
            out.append((f"mamba2_step b{b} H{H} P{P} N{N} {tag}", _mamba2_step(b, H, P, N, dt, full=b == 8)))
    # benchmarks/replay.py: capacity 1M and 100k, extend 1024, sample / update 256 and 4096.
    for cap in (100_000,) if quick else (1_000_000, 100_000):
        for n in (256,) if quick else (256, 4096):
            out.append((f"sumtree cap{cap} sample{n} update{n}", _sumtree(cap, sample=n, update=n)))
        out.append((f"sumtree cap{cap} insert1024", _sumtree(cap, insert=1024)))
    out.append(
        ("sumtree cap1000 insert1 update bf16", _sumtree(1000, insert=1, update=32, td_dtype=torch.bfloat16))
    )
    # benchmarks/frame_stack.py: Atari frames (84 x 84, stack 4) at batch 32 and 256; MinAtar
    # (10 x 10 x C: blocks of 128, 512 and 1024 pixels at C = 1, 4, 10), bf16 and f32. Quick: every
    # block size (C = 10 shares the Atari frames' launch config).
    for tag, dt in dtypes.items():
        for b in (32,) if quick else (32, 256):
            out.append((f"frame_stack b{b} P7056 stack4 {tag}", _frame_stack(b, 84 * 84, 4, dt)))
        for c in (1, 4) if quick else (1, 4, 10):
            out.append((f"frame_stack minatar b32 C{c} stack4 {tag}", _frame_stack(32, 100 * c, 4, dt)))
    return out


def extra_cases(specs: list[str]) -> list[tuple[str, Callable[[], None]]]:
    """The cases of each ``module:function`` in ``specs`` (``--cases``): an importable module's
    function that returns ``(name, run)`` pairs like :func:`cases`, for kernels outside the
    package (the tests' toy op: ``--cases toy_triton:aot_cases`` with ``tests/`` on the path).

    Raises:
        SystemExit: a spec without ``:``, or a module or function that does not exist (status 1).
    """
    import importlib

    out: list[tuple[str, Callable[[], None]]] = []
    for spec in specs:
        module, _, attr = spec.partition(":")
        try:
            fn = getattr(importlib.import_module(module), attr) if module and attr else None
        except (ImportError, AttributeError) as exc:
            raise SystemExit(f"--cases {spec}: {type(exc).__name__}: {exc}") from None
        if fn is None:
            raise SystemExit(f"--cases {spec}: expected module:function")
        out.extend(fn())
    return out


# ---- compiling ---------------------------------------------------------------------------------


_REGS = re.compile(r"Used (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")

_SPECS: list[Spec] = []  # the work list, inherited by forked workers


def compile_one(i: int) -> dict[str, Any]:
    """Compile ``_SPECS[i]``; a row of the report (error text on failure)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    s = _SPECS[i]
    row: dict[str, Any] = {
        "kernel": s.kernel,
        "cc": s.cc,
        "config": s.config(),
        "case": s.case,
        "n_cases": len(s.cases),
        "error": None,
    }
    log = io.StringIO()
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(log):  # TRITON_DUMP_PTXAS_LOG: ptxas -v output
            c = triton.compile(
                ASTSource(s.fn, s.signature, s.constexprs, s.attrs),
                target=GPUTarget("cuda", s.cc, 32),
                options=dict(s.options),
            )
        row["shared"] = int(c.metadata.shared)
        regs = _REGS.findall(log.getvalue())
        spills = _SPILLS.findall(log.getvalue())
        row["regs"] = int(regs[-1]) if regs else None
        row["spills"] = sum(int(a) + int(b) for a, b in spills) if spills else None
        if row["shared"] > SMEM_LIMIT[s.cc]:
            over = f"shared memory {row['shared']} B > sm_{s.cc} limit {SMEM_LIMIT[s.cc]} B"
            known = known_over_limit(s.kernel, s.cc, s.bf16, s.named_constexprs())
            if known:
                row["known_over"] = f"{over}: known, {known}"
            else:
                row["error"] = over
    except Exception as exc:  # report every failure, not just the first
        row["error"] = f"{type(exc).__name__}: {str(exc).strip()[-2000:]}"
    row["seconds"] = round(time.perf_counter() - t0, 2)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="90,80,75", help="compute capabilities, comma separated")
    ap.add_argument("--quick", action="store_true", help="the CI subset of cases")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="compile processes")
    ap.add_argument("-k", dest="only", default="", help="only kernels whose name contains this")
    ap.add_argument("--json", default="", help="write the rows to this file")
    ap.add_argument(
        "--cases",
        action="append",
        default=[],
        metavar="MODULE:FUNCTION",
        help="also the cases FUNCTION() of an importable MODULE returns (repeatable)",
    )
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("unset TRITON_INTERPRET: the interpreter makes no compilable kernels", file=sys.stderr)
        return 2
    targets = [int(t) for t in args.targets.split(",") if t]
    unknown = [t for t in targets if t not in SMEM_LIMIT]
    if unknown:
        ap.error(f"--targets: no shared memory limit known for {unknown}")
    # a fresh cache: every specialization really compiles and ptxas reports registers and spills
    cache = tempfile.TemporaryDirectory(prefix="tritonrl-aot-")
    os.environ["TRITON_CACHE_DIR"] = cache.name
    os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"
    import torch
    import triton

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    all_cases = cases(args.quick) + extra_cases(args.cases)
    for cc in targets:
        specs = record(cc, all_cases)
        if cc in F32_ONLY:
            specs = [s for s in specs if not s.bf16]
        if args.quick:  # one specialization per config: drop those differing only in int divisibility
            specs = list({(s.kernel, s.config()): s for s in reversed(specs)}.values())[::-1]
        _SPECS.extend(s for s in specs if args.only in s.kernel)
    t_rec = time.perf_counter() - t0
    print(
        f"triton {triton.__version__}: {len(all_cases)} cases, {len(_SPECS)} specializations "
        f"for sm_{', sm_'.join(map(str, targets))} (recorded in {t_rec:.1f} s)",
        flush=True,
    )
    if args.jobs > 1:
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            rows = pool.map(compile_one, range(len(_SPECS)), chunksize=1)
    else:
        rows = [compile_one(i) for i in range(len(_SPECS))]
    cache.cleanup()
    rows.sort(key=lambda r: (r["kernel"], -r["cc"], r["config"]))
    print(f"{'kernel':34} {'sm':>3} {'smem B':>7} {'regs':>4} {'spill':>5} {'s':>5}  config / first case")
    for r in rows:
        regs = "?" if r.get("regs") is None else r["regs"]
        spills = "?" if r.get("spills") is None else r["spills"]
        more = f" (+{r['n_cases'] - 1})" if r["n_cases"] > 1 else ""
        print(
            f"{r['kernel']:34} {r['cc']:>3} {r.get('shared', '-'):>7} {regs:>4} {spills:>5} "
            f"{r['seconds']:>5}  {r['config']} / {r['case']}{more}"
        )
    for r in rows:
        if r.get("known_over"):
            print(f"\nover the limit {r['kernel']} sm_{r['cc']} {r['config']} ({r['case']}):")
            print(r["known_over"])
    failed = [r for r in rows if r["error"]]
    for r in failed:
        print(f"\nFAILED {r['kernel']} sm_{r['cc']} {r['config']} ({r['case']}):\n{r['error']}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    n_ok = len(rows) - len(failed)
    print(f"\n{n_ok}/{len(rows)} compiled within limits (or known over) in {time.perf_counter() - t0:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
