"""Test harness.

- ``pytest``: torch-path tests, plus the Triton kernels under the Triton interpreter on CPU
  (tests marked ``interpret``). ``TRITON_INTERPRET=1`` is set here, before anything imports
  triton, unless the caller set it already.
- ``pytest --gpu``: adds the tests marked ``gpu`` (compiled kernels on CUDA, realistic sizes) and
  turns the interpreter off; without CUDA it stops with an error instead of skipping everything.
  ``pytest --gpu -m gpu`` runs the parity suite alone.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    deadline=None,  # the interpreter and bf16-on-CPU are slow and jittery on 2 cores
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--gpu",
        action="store_true",
        default=False,
        help="run the compiled-kernel parity suite (tests marked gpu) on CUDA; fails without CUDA",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--gpu"):
        if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
            raise pytest.UsageError("--gpu runs compiled kernels: unset TRITON_INTERPRET")
        import torch

        if not torch.cuda.is_available():
            raise pytest.UsageError(
                "--gpu was given but CUDA is not available (torch.cuda.is_available() is False): "
                "the GPU parity suite cannot run on this machine"
            )
    else:
        # Must happen before triton is imported anywhere in this process.
        os.environ.setdefault("TRITON_INTERPRET", "1")
        import torch

        # Two-core machines: torch's thread pool collapses beside any other busy process.
        # Every CPU test (learning tests included) runs with one torch thread.
        torch.set_num_threads(1)


def pytest_report_header(config: pytest.Config) -> list[str]:
    import torch

    lines = [
        f"torch {torch.__version__}, TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')}, "
        f"torch threads {torch.get_num_threads()}"
    ]
    if config.getoption("--gpu"):
        lines.append(f"GPU: {torch.cuda.get_device_name(0)}")
    return lines


def _triton_importable() -> bool:
    from tritonrl.kernels.backend import triton_available

    return triton_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from tritonrl.kernels.backend import interpreting

    gpu = config.getoption("--gpu")
    skip_gpu = pytest.mark.skip(reason="compiled-kernel parity: run with --gpu on a CUDA machine")
    skip_interp = pytest.mark.skip(
        reason="needs the Triton interpreter (TRITON_INTERPRET=1, triton installed, no --gpu)"
    )
    interp_ok = (not gpu) and interpreting() and _triton_importable()
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(skip_gpu)
        if "interpret" in item.keywords and not interp_ok:
            item.add_marker(skip_interp)


@pytest.fixture(autouse=True)
def _fresh_policy_caches():
    """Each test sees a fresh precision cache (tests mock CUDA queries and set env vars)."""
    from tritonrl.toolkit.precision import training_dtype

    training_dtype.cache_clear()
    yield
    training_dtype.cache_clear()


@pytest.fixture(
    params=[
        pytest.param("cpu", marks=pytest.mark.interpret, id="interpret"),
        pytest.param("cuda", marks=pytest.mark.gpu, id="cuda"),
    ]
)
def kernel_device(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Where a Triton kernel runs in a parity test: CPU under the interpreter, or CUDA.

    Forces ``TRITONRL_BACKEND=triton`` so a test cannot pass on the reference by accident.
    """
    monkeypatch.setenv("TRITONRL_BACKEND", "triton")
    return request.param
