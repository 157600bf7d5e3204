"""Every Triton kernel compiles for real GPUs (sm_90, sm_80; f32 variants also sm_75), no GPU needed.

Runs tools/aot_compile.py --quick in a subprocess without TRITON_INTERPRET (this session has the
interpreter on, and under it ``@triton.jit`` makes no compilable kernels), with the tests' toy
kernel passed in (``--cases toy_triton:aot_cases``, ``tests/`` on its path: the tool imports
nothing from the tests by itself). The script records the launchers' exact specializations and
compiles each with ptxas; it exits non-zero on a compile error or on shared memory above a
target's limit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[2]

# Every @triton.jit kernel that a launcher starts (helpers such as `dot` are inlined into these).
KERNELS = {
    "_noisy_linear_fwd_kernel",
    "_noisy_linear_bwd_dx_kernel",
    "_noisy_linear_bwd_dw_kernel",
    "_noisy_linear_bwd_reduce_kernel",
    "_noisy_dueling_fwd_kernel",
    "_noisy_dueling_bwd_kernel",
    "_mamba2_chunk_fwd_kernel",
    "_mamba2_chunk_bwd_kernel",
    "_mamba2_step_kernel",
    "_per_sample_kernel",
    "_per_update_kernel",
    "_per_insert_kernel",
    "_frame_stack_sample_kernel",
    "_toy_linear_fwd_kernel",
}


@pytest.mark.heavy
def test_every_kernel_compiles_for_sm90_sm80_and_f32_for_sm75(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "tests"), env.get("PYTHONPATH")) if p)
    out = tmp_path / "rows.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "aot_compile.py"),
            "--quick",
            "-j",
            "2",
            "--targets",
            "90,80,75",
            "--json",
            str(out),
            "--cases",
            "toy_triton:aot_cases",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=1800,  # a hang guard only: on a 2-core machine beside other jobs it has taken over 600 s
    )
    report = proc.stdout[-6000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, report
    rows = json.loads(out.read_text())
    assert not [r for r in rows if r["error"]], report
    for cc in (90, 80):  # the recording reached every kernel, for each target
        assert {r["kernel"] for r in rows if r["cc"] == cc} == KERNELS, report
    sm75 = [r for r in rows if r["cc"] == 75]
    assert sm75 and all(r["config"].startswith("f32") for r in sm75), report
    # every f32 kernel has an sm_75 build (the sum tree is f32 only)
    assert {r["kernel"] for r in sm75} == KERNELS, report
    # ptxas ran for every build (a fresh cache), so registers were reported
    assert all(isinstance(r["regs"], int) and r["regs"] > 0 for r in rows), report
