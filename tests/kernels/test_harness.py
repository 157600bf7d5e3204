"""The harness itself: a test-only Triton kernel against its torch reference."""

from __future__ import annotations

import pytest
import torch
from helpers import assert_bf16_close
from toy_op import TOY_LINEAR, toy_linear, toy_linear_ref


@pytest.mark.parametrize("shape", [(1, 1, 1), (5, 7, 3), (33, 17, 40)])
@pytest.mark.parametrize("relu", [False, True])
def test_toy_f32_parity(kernel_device: str, shape: tuple[int, int, int], relu: bool) -> None:
    M, K, N = shape
    g = torch.Generator().manual_seed(0)
    x = torch.randn(M, K, generator=g).to(kernel_device)
    w = torch.randn(N, K, generator=g).to(kernel_device)
    b = torch.randn(N, generator=g).to(kernel_device)
    TOY_LINEAR.reset()
    y = toy_linear(x, w, b, relu)
    assert TOY_LINEAR.last_backend == "triton"
    ref = toy_linear_ref(x.double(), w.double(), b.double(), relu)
    # f32 with IEEE products: error is a few ulps of the K-term sum.
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(5, 7, 3), (33, 17, 40)])
def test_toy_bf16_storage_parity(kernel_device: str, shape: tuple[int, int, int]) -> None:
    M, K, N = shape
    g = torch.Generator().manual_seed(1)
    x, w, b = (torch.randn(*s, generator=g) for s in ((M, K), (N, K), (N,)))
    xb, wb, bb = (t.to(kernel_device, torch.bfloat16) for t in (x, w, b))
    y = toy_linear(xb, wb, bb, True)
    assert y.dtype == torch.bfloat16
    assert TOY_LINEAR.last_backend == "triton"
    ref = toy_linear_ref(xb.double(), wb.double(), bb.double(), True)
    assert_bf16_close(y, ref, toy_linear_ref(xb, wb, bb, True), k=2.0, atol=1e-2)


def test_toy_cpu_auto_runs_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITONRL_BACKEND", raising=False)
    x, w, b = torch.randn(3, 4), torch.randn(2, 4), torch.randn(2)
    TOY_LINEAR.reset()
    y = toy_linear(x, w, b)
    assert TOY_LINEAR.last_backend == "torch"
    torch.testing.assert_close(y, toy_linear_ref(x, w, b, False))


def test_gpu_flag_without_cuda_fails_loudly() -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: --gpu is valid here")
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--gpu",
            "-q",
            "-p",
            "no:cacheprovider",
            str(root / "tests" / "toolkit" / "test_precision.py"),
        ],
        capture_output=True,
        text=True,
        cwd=root,
        env=env,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "CUDA is not available" in proc.stdout + proc.stderr


# ----------------------------------------------------------------------------- NaN poisoning


class _DropLastProgramRow:
    """Stands in for a Triton kernel and launches it without the last row of its grid, so the
    outputs that row would store are never written (a store disabled on purpose)."""

    def __init__(self, kernel) -> None:
        self.kernel = kernel

    def __getitem__(self, grid):
        return self.kernel[(grid[0] - 1, *grid[1:])]


def test_fresh_kernel_outputs_are_poisoned() -> None:
    pytest.importorskip("triton")
    import conftest
    from tritonrl.kernels.mamba2 import chunk, step
    from tritonrl.kernels.noisy_head import fused_dueling, fused_linear
    from tritonrl.kernels.sumtree import fused

    mods = conftest._launcher_modules()
    for mod in (fused_linear, fused_dueling, chunk, step, fused):
        assert mod in mods, f"{mod.__name__} does not allocate through a module-level `empty`"
        assert mod.empty is not torch.empty
    assert torch.isnan(step.empty((2, 3))).all()
    assert (fused.empty(4, dtype=torch.int64) == torch.iinfo(torch.int64).min).all()


def test_poisoning_catches_an_unwritten_output(kernel_device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the last (batch, head) program of the Mamba2 step dropped, exactly its outputs are NaN:
    the conftest poisoning turns an unwritten element into a failure a parity test sees."""
    from tritonrl.kernels.mamba2 import MAMBA2_STEP, mamba2_step, step

    g = torch.Generator().manual_seed(0)
    b, h, p, n = 2, 2, 4, 8
    state = torch.zeros(b, h, p, n, device=kernel_device)
    x = torch.randn(b, h, p, generator=g).to(kernel_device)
    dt = torch.randn(b, h, generator=g).to(kernel_device)
    A = -torch.rand(h, generator=g).to(kernel_device)
    B, C = (torch.randn(b, 1, n, generator=g).to(kernel_device) for _ in range(2))
    MAMBA2_STEP.reset()
    y = mamba2_step(state.clone(), x, dt, A, B, C)
    assert MAMBA2_STEP.last_backend == "triton" and not torch.isnan(y).any()
    monkeypatch.setattr(step, "_mamba2_step_kernel", _DropLastProgramRow(step._mamba2_step_kernel))
    y = mamba2_step(state.clone(), x, dt, A, B, C)
    assert torch.isnan(y[b - 1, h - 1]).all()
    assert not torch.isnan(y.flatten(0, 1)[:-1]).any()
