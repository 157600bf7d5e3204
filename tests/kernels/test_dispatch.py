"""Dispatch rules of tritonrl.kernels.backend: forced backends, missing triton, fallback on failure."""

from __future__ import annotations

import warnings

import pytest
import torch
from tritonrl.kernels import backend
from tritonrl.kernels.backend import KernelFallbackWarning, KernelOp


def _ref(x: torch.Tensor) -> torch.Tensor:
    return x + 1


_calls: list[str] = []


def _triton_ok(x: torch.Tensor) -> torch.Tensor:
    _calls.append("triton")
    return x + 1


def _triton_broken(x: torch.Tensor) -> torch.Tensor:
    raise RuntimeError("PassManager::run failed (simulated compile failure)\nmore detail")


OK = KernelOp("test_dispatch_ok", torch_impl=_ref, triton_impl=_triton_ok)
BROKEN = KernelOp("test_dispatch_broken", torch_impl=_ref, triton_impl=_triton_broken)


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("TRITONRL_BACKEND", raising=False)
    OK.reset()
    BROKEN.reset()
    _calls.clear()
    yield
    for op in backend.registry().values():  # failures on cuda:0 and selections stay in this file
        op.reset()


def test_registry_lists_ops() -> None:
    assert backend.registry()["test_dispatch_ok"] is OK
    with pytest.raises(ValueError, match="registered twice"):
        KernelOp("test_dispatch_ok", torch_impl=_ref, triton_impl=_triton_ok)


def test_cpu_auto_uses_torch() -> None:
    sel = OK.select("cpu")
    assert sel.backend == "torch" and "cpu" in sel.reason
    x = torch.zeros(3)
    assert torch.equal(OK(x.device, x), torch.ones(3))
    assert OK.last_backend == "torch" and OK.counts["torch"] == 1 and not _calls


def test_cuda_auto_uses_triton() -> None:
    # select() never queries CUDA, so the rule is testable on a CPU-only machine.
    assert OK.select("cuda:0").backend == "triton"
    x = torch.zeros(2)
    OK("cuda:0", x)
    assert OK.last_backend == "triton" and _calls == ["triton"]


def test_forced_torch_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONRL_BACKEND", "torch")
    assert OK.select("cuda:0") == backend.Selection("torch", "forced by TRITONRL_BACKEND=torch")
    OK("cuda:0", torch.zeros(1))
    assert OK.last_backend == "torch" and not _calls


def test_forced_triton_on_cpu_needs_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONRL_BACKEND", "triton")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="TRITON_INTERPRET"):
        OK.select("cpu")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    if backend.triton_available():
        assert OK.select("cpu").backend == "triton"


def test_cached_selection_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # select() caches its answer per (device, TRITONRL_BACKEND, TRITON_INTERPRET): a variable set
    # after a cached answer takes effect at the next call, and unsetting it restores the default.
    assert OK.select("cuda:0").backend == "triton"
    monkeypatch.setenv("TRITONRL_BACKEND", "torch")
    assert OK.select("cuda:0").backend == "torch"
    monkeypatch.setenv("TRITONRL_BACKEND", "bogus")
    for _ in range(2):  # errors are never cached
        with pytest.raises(ValueError, match="bogus"):
            OK.select("cuda:0")
    monkeypatch.delenv("TRITONRL_BACKEND")
    assert OK.select("cuda:0").backend == "triton"


def test_environment_read_follows_every_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """select() reads the two variables through os.environ's encoded dict: the values it sees
    change exactly when os.environ's do (set, changed, non-ASCII, unset), and a plain mapping put
    in os.environ's place is read too."""
    import os

    from tritonrl.kernels.backend import _environ_state

    def seen() -> tuple[bool, bool]:
        return tuple(v is not None for v in _environ_state())  # type: ignore[return-value]

    monkeypatch.delenv("TRITONRL_BACKEND", raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    states = {_environ_state()}
    assert seen() == (False, True)
    for value in ("torch", "triton", " Torch ", "é"):
        monkeypatch.setenv("TRITONRL_BACKEND", value)
        states.add(_environ_state())
        assert seen() == (True, True)
    assert len(states) == 5, "each value must be a different cache key"
    monkeypatch.delenv("TRITON_INTERPRET")
    assert seen() == (True, False)
    monkeypatch.setenv("TRITONRL_BACKEND", "torch")
    assert OK.select("cuda:0").backend == "torch"
    monkeypatch.setattr(os, "environ", {"TRITONRL_BACKEND": "bogus"})
    with pytest.raises(ValueError, match="bogus"):
        OK.select("cuda:0")
    monkeypatch.setattr(os, "environ", {})
    assert OK.select("cuda:0").backend == "triton"


def test_bad_backend_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONRL_BACKEND", "cuda")
    with pytest.raises(ValueError, match="auto, triton, torch"):
        OK.select("cpu")


def test_missing_triton_warns_once_and_uses_torch(
    monkeypatch: pytest.MonkeyPatch, triton_missing: None
) -> None:
    OK.reset()  # no selection cached while triton imported
    with pytest.warns(KernelFallbackWarning, match="triton is not available"):
        assert OK.select("cuda:0").backend == "torch"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second warning would raise here
        assert OK.select("cuda:0").reason == "triton is not installed"
        OK("cuda:0", torch.zeros(1))
    assert OK.last_backend == "torch" and not _calls
    monkeypatch.setenv("TRITONRL_BACKEND", "triton")
    with pytest.raises(ValueError, match="cannot be imported"):
        OK.select("cuda:0")


def test_compile_failure_falls_back_once() -> None:
    x = torch.zeros(2)
    with pytest.warns(KernelFallbackWarning, match="test_dispatch_broken.*PassManager"):
        y = BROKEN("cuda:0", x)
    assert torch.equal(y, torch.ones(2)) and BROKEN.last_backend == "torch"
    assert "PassManager" in BROKEN.failed["cuda:0"]
    # From now on that device selects torch without trying again, and without warning again.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sel = BROKEN.select("cuda:0")
        assert sel.backend == "torch" and "failed on cuda:0 earlier" in sel.reason
        BROKEN("cuda:0", x)
    # Another device is tried on its own.
    assert BROKEN.select("cuda:1").backend == "triton"


def test_compile_failure_raises_when_triton_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONRL_BACKEND", "triton")
    with pytest.raises(RuntimeError, match="PassManager"):
        BROKEN("cuda:0", torch.zeros(1))
    assert not BROKEN.failed


def test_failure_on_cpu_is_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    # Under the interpreter a failing kernel is a bug to see, never a silent fallback.
    with pytest.raises(RuntimeError):
        BROKEN.guard("cpu", lambda: _triton_broken(torch.zeros(1)), lambda: torch.zeros(1))


def test_lazy_triton_impl_resolves_module_path() -> None:
    op = KernelOp("test_dispatch_lazy", torch_impl=_ref, triton_impl="math:fabs")
    import math

    assert op.triton_impl is math.fabs


# ----------------------------------------------------------------------------- what falls back


def _out_of_resources(x: torch.Tensor) -> torch.Tensor:
    from triton.runtime.errors import OutOfResources

    raise OutOfResources(262144, 232448, "shared memory")


def _host_bug(x: torch.Tensor) -> torch.Tensor:
    raise ValueError("grid must be a tuple (a host-side bug in the launcher)")


def _type_bug(x: torch.Tensor) -> torch.Tensor:
    raise TypeError("noisy_linear_fwd() got an unexpected keyword argument 'relu_'")


OOR = KernelOp("test_dispatch_out_of_resources", torch_impl=_ref, triton_impl=_out_of_resources)
HOST_BUG = KernelOp("test_dispatch_host_bug", torch_impl=_ref, triton_impl=_host_bug)
TYPE_BUG = KernelOp("test_dispatch_type_bug", torch_impl=_ref, triton_impl=_type_bug)


def test_resource_error_falls_back_with_one_warning() -> None:
    pytest.importorskip("triton")
    OOR.reset()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        y = OOR("cuda:0", torch.zeros(2))
        OOR("cuda:0", torch.zeros(2))  # selects torch now: no second attempt, no second warning
    fallback = [w for w in seen if issubclass(w.category, KernelFallbackWarning)]
    assert len(fallback) == 1 and "OutOfResources" in str(fallback[0].message)
    assert torch.equal(y, torch.ones(2)) and OOR.last_backend == "torch"
    assert OOR.counts == {"torch": 2}


@pytest.mark.parametrize("op, exc", [(HOST_BUG, ValueError), (TYPE_BUG, TypeError)], ids=["value", "type"])
def test_host_side_bug_in_launcher_propagates(op: KernelOp, exc: type[Exception]) -> None:
    op.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no fallback warning either
        with pytest.raises(exc):
            op("cuda:0", torch.zeros(2))
    assert not op.failed and op.counts["torch"] == 0
    assert op.select("cuda:0").backend == "triton"  # the next call tries the kernel again


def test_host_side_bug_in_backward_propagates() -> None:
    # the backward guard sees the same rule: a bug in the Triton backward's host code surfaces
    def bad_backward() -> torch.Tensor:
        raise IndexError("tuple index out of range")

    with pytest.raises(IndexError):
        OK.guard("cuda:0", bad_backward, lambda: torch.zeros(1))
    assert not OK.failed


@pytest.mark.parametrize(
    "exc, expected",
    [
        (RuntimeError("PassManager::run failed"), True),
        (RuntimeError("Triton Error [CUDA]: invalid argument"), True),
        (RuntimeError("CUDA error: an illegal memory access was encountered"), True),
        (RuntimeError("shape '[4, 3]' is invalid for input of size 10"), False),
        (ValueError("PassManager::run failed"), False),  # the marker counts on RuntimeError only
        (KeyError("x"), False),
        (ZeroDivisionError(), False),
    ],
)
def test_is_device_failure(exc: Exception, expected: bool) -> None:
    assert backend.is_device_failure(exc) is expected


def test_triton_and_accelerator_errors_are_device_failures() -> None:
    triton_errors = pytest.importorskip("triton.runtime.errors")
    from triton.compiler.errors import CompilationError
    from triton.errors import TritonError

    assert backend.is_device_failure(triton_errors.OutOfResources(1, 0, "shared memory"))
    assert backend.is_device_failure(triton_errors.PTXASError("ptxas fatal"))
    assert issubclass(CompilationError, TritonError)
    if hasattr(torch, "AcceleratorError"):
        assert backend.is_device_failure(torch.AcceleratorError("CUDA error: misaligned address"))
