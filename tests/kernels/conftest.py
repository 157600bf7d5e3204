"""Fixtures of the kernel tests: test hooks live here, never in ``tritonrl.kernels`` (STYLE 17)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture
def triton_missing(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``import triton`` fails inside the test, as on a machine without it.

    The backend's cached import probe is cleared and its one-time warning re-armed, so the test
    sees the first call of a fresh process; afterwards the probe is cleared again and every op
    reset, so no selection made without triton outlives the test.
    """
    from tritonrl.kernels import backend

    monkeypatch.setitem(sys.modules, "triton", None)  # makes `import triton` raise ImportError
    monkeypatch.setattr(backend, "_warned_missing", False)  # restored after the test
    backend._triton_import_error.cache_clear()
    yield
    backend._triton_import_error.cache_clear()
    for op in backend.registry().values():
        op.reset()
