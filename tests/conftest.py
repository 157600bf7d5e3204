"""Test harness.

- ``pytest``: torch-path tests, plus the Triton kernels under the Triton interpreter on CPU
  (tests marked ``interpret``). ``TRITON_INTERPRET=1`` is set here, before anything imports
  triton, unless the caller set it already.
- ``pytest --gpu``: adds the tests marked ``gpu`` (compiled kernels on CUDA, realistic sizes) and
  turns the interpreter off; without CUDA it stops with an error instead of skipping everything.
  ``pytest --gpu -m gpu`` runs the parity suite alone.

Every test runs with poisoned fresh outputs (:func:`_poison_kernel_allocations`): the kernel
launchers in ``tritonrl.kernels`` allocate through module-level ``empty`` / ``empty_like``
(``from torch import empty``), which this file replaces with allocators that fill NaN (integers:
their minimum), so an element a kernel never writes fails the parity tests. The ``triton_missing``
fixture plays a machine without triton (the backend's import probe and one-time warning reset).
"""

from __future__ import annotations

import os

# One thread for every BLAS/OpenMP pool, here and in each subprocess a test starts (they inherit
# the environment): on a 2-core CI machine whose OS reports more CPUs than its quota allows, the
# default pools oversubscribe and the suite slows several-fold. Set before numpy or torch loads.
for _pool in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_pool, "1")

import pytest  # noqa: E402  (the pools above must be set before numpy or torch loads)
from hypothesis import HealthCheck, settings  # noqa: E402

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
    # the tests of minutes first (stable order otherwise): with pytest-xdist's workers (`make test`)
    # the short tests then fill the end of the run on every worker instead of one worker ending on
    # a learning test while the other idles
    items.sort(key=lambda item: not ("learning" in item.keywords or "heavy" in item.keywords))


_EMPTY = None  # the real allocators, captured before any patch


def _poison(t):
    """Fill a fresh tensor with a value no kernel writes: NaN, or an integer dtype's minimum."""
    import torch

    if t.is_floating_point() or t.is_complex():
        return t.fill_(float("nan"))
    if t.dtype != torch.bool:
        return t.fill_(torch.iinfo(t.dtype).min)
    return t


def _poisoned_allocators() -> dict:
    global _EMPTY
    import torch

    if _EMPTY is None:
        _EMPTY = {"empty": torch.empty, "empty_like": torch.empty_like}
    real_empty, real_empty_like = _EMPTY["empty"], _EMPTY["empty_like"]

    def empty(*size, **kwargs):
        return _poison(real_empty(*size, **kwargs))

    def empty_like(t, **kwargs):
        return _poison(real_empty_like(t, **kwargs))

    return {"empty": empty, "empty_like": empty_like}


_LAUNCHER_MODULES: list | None = None


def _launcher_modules() -> list:
    """Every ``tritonrl.kernels`` module that binds ``torch.empty`` / ``torch.empty_like`` at module
    level (the Triton launchers). Imports the package's modules once; none when triton is missing
    (nothing launches a kernel then)."""
    global _LAUNCHER_MODULES
    if _LAUNCHER_MODULES is None:
        import importlib
        import pkgutil

        import torch
        import tritonrl.kernels

        _LAUNCHER_MODULES = []
        if _triton_importable():
            for info in pkgutil.walk_packages(tritonrl.kernels.__path__, "tritonrl.kernels."):
                mod = importlib.import_module(info.name)
                if any(vars(mod).get(n) is getattr(torch, n) for n in ("empty", "empty_like")):
                    _LAUNCHER_MODULES.append(mod)
    return _LAUNCHER_MODULES


@pytest.fixture(autouse=True)
def _poison_kernel_allocations(monkeypatch: pytest.MonkeyPatch):
    """Fresh kernel outputs start as NaN in every test (FLA ``tests/conftest.py``; STYLE 8, 17)."""
    import torch

    allocators = _poisoned_allocators()
    for mod in _launcher_modules():
        for name, fn in allocators.items():
            if vars(mod).get(name) is getattr(torch, name):
                monkeypatch.setattr(mod, name, fn)
    yield


@pytest.fixture(autouse=True)
def _one_metrics_row_per_step(request: pytest.FixtureRequest):
    """After every test that uses ``tmp_path``: each ``metrics.csv`` under it has one row per step."""
    from pathlib import Path

    folder: Path | None = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if folder is None:
        return
    from helpers import assert_one_row_per_step

    for path in sorted(folder.rglob("metrics.csv")):
        if path.is_file():
            assert_one_row_per_step(path)


@pytest.fixture
def triton_missing(monkeypatch: pytest.MonkeyPatch):
    """``import triton`` fails inside the test, as on a machine without it.

    The backend's cached import probe is cleared and its one-time warning re-armed, so the test
    sees the first call of a fresh process; afterwards the probe is cleared again and every op
    reset, so no selection made without triton outlives the test. (A test hook that lives here,
    never in ``tritonrl.kernels``.)
    """
    import sys

    from tritonrl.kernels import backend

    monkeypatch.setitem(sys.modules, "triton", None)  # makes `import triton` raise ImportError
    monkeypatch.setattr(backend, "_warned_missing", False)  # restored after the test
    backend._triton_import_error.cache_clear()
    yield
    backend._triton_import_error.cache_clear()
    for op in backend.registry().values():
        op.reset()


@pytest.fixture(autouse=True)
def _seeded_global_rngs():
    """Every test starts from the same global RNG states (torch's and Python's; numpy's legacy
    global is unused, ruff's NPY002): what a test draws without a generator of its own (a
    module's initial weights, say) then does not depend on which tests ran before it in the
    worker, an order that ``make test``'s scheduling changes from run to run."""
    import random

    import torch

    torch.manual_seed(0)
    random.seed(0)
    yield


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
