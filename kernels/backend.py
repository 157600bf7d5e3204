"""Kernel dispatch: which implementation of an op runs for given tensors.

Every op owns one [`KernelOp`][tritonrl.kernels.backend.KernelOp] (Triton on CUDA, the torch reference on CPU,
``TRITONRL_BACKEND`` overrides). Imports torch only, never triton or CUDA at import time.
The rules: docs/pages/kernels.md.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import os
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

__all__ = [
    "BACKEND_ENV",
    "KernelFallbackWarning",
    "KernelOp",
    "Selection",
    "backend_override",
    "forced_backend",
    "references_forced",
    "references_only",
    "interpreting",
    "is_device_failure",
    "registry",
    "triton_available",
]

BACKEND_ENV = "TRITONRL_BACKEND"
_BACKENDS = ("auto", "triton", "torch")
_log = logging.getLogger("tritonrl.kernels")
T = TypeVar("T")


class KernelFallbackWarning(RuntimeWarning):
    """A Triton path could not run and the torch reference ran instead."""


def forced_backend() -> str:
    """The value of ``TRITONRL_BACKEND`` (``auto`` when unset).

    Raises:
        ValueError: the variable holds anything but auto, triton or torch.
    """
    raw = os.environ.get(BACKEND_ENV, "auto")
    value = raw.strip().lower() or "auto"
    if value not in _BACKENDS:
        raise ValueError(f"{BACKEND_ENV}={raw!r} is not a backend; allowed values: {', '.join(_BACKENDS)}")
    return value


def backend_override(device: torch.device | str | None = None) -> str:
    """The validated ``TRITONRL_BACKEND`` for tensors on ``device``: the one check of the variable.

    Dispatch and the agents' constructors call it, so the command line refuses a bad value
    before training. Reads ``os.environ`` on every call.

    Args:
        device: where the tensors live; ``None`` checks the value and Triton's import only.

    Returns:
        ``"auto"``, ``"triton"`` or ``"torch"``.

    Raises:
        ValueError: the variable holds anything but auto, triton or torch; or it says ``triton``
            where Triton cannot run (no triton, or ``device`` neither CUDA nor a CPU under
            ``TRITON_INTERPRET=1``).
    """
    forced = forced_backend()
    if forced != "triton":
        return forced
    if _triton_import_error() is not None:
        raise ValueError(
            f"{BACKEND_ENV}=triton but triton cannot be imported ({_triton_import_error()}); "
            f"install triton or use {BACKEND_ENV}=auto or torch"
        )
    if device is not None:
        dev = torch.device(device)
        if dev.type != "cuda" and not (dev.type == "cpu" and interpreting()):
            raise ValueError(
                f"{BACKEND_ENV}=triton but tensors live on {dev.type}; Triton runs on CUDA, or on "
                f"CPU only under its interpreter (TRITON_INTERPRET=1 set before triton is "
                f"imported); use {BACKEND_ENV}=auto or torch"
            )
    return forced


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on")


@functools.lru_cache(maxsize=1)
def _triton_import_error() -> str | None:
    try:
        import triton
        import triton.language  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install
        return f"{type(exc).__name__}: {exc}"
    return None


_warned_missing = False


def triton_available() -> bool:
    """Whether triton imports. The first negative answer warns once per process."""
    global _warned_missing
    err = _triton_import_error()
    if err is not None and not _warned_missing:
        _warned_missing = True
        warnings.warn(
            f"triton is not available ({err}); every op runs its torch reference",
            KernelFallbackWarning,
            stacklevel=3,
        )
    return err is None


# RuntimeErrors without a class of their own that still mean "this device cannot run the kernel":
# MLIR pass failures while compiling, and launch / driver errors reported by Triton's CUDA driver
# or by torch builds that predate torch.AcceleratorError.
_DEVICE_FAILURE_MARKERS = ("PassManager::run failed", "Triton Error [CUDA]", "CUDA error", "ptxas")


def is_device_failure(exc: BaseException) -> bool:
    """Whether ``exc`` says a Triton kernel cannot run on its device (Triton, CUDA driver or compiler
    errors; not a host-side bug), so falling back is right."""
    try:
        from triton.errors import TritonError
    except Exception:  # triton missing or broken: nothing can be a Triton error
        TritonError = ()  # type: ignore[assignment]
    if isinstance(exc, TritonError):
        return True
    accelerator_error = getattr(torch, "AcceleratorError", None)
    if accelerator_error is not None and isinstance(exc, accelerator_error):
        return True
    if type(exc) is RuntimeError:
        text = str(exc)
        return any(marker in text for marker in _DEVICE_FAILURE_MARKERS)
    return False


_REFERENCES_ONLY = [0]
"""How many `references_only` blocks are open (a list: one mutable cell, no ``global``)."""


@contextlib.contextmanager
def references_only() -> Iterator[None]:
    """Inside the block every op selects its torch reference, traced calls too: how a policy is
    exported ([`tritonrl.toolkit.export`][tritonrl.toolkit.export]). Nests; not thread-local."""
    _REFERENCES_ONLY[0] += 1
    try:
        yield
    finally:
        _REFERENCES_ONLY[0] -= 1


def references_forced() -> bool:
    """Whether a `references_only` block is open."""
    return _REFERENCES_ONLY[0] > 0


# [the os.environ the names were encoded for, (encoded TRITONRL_BACKEND, encoded TRITON_INTERPRET)]
_ENV_KEYS: list[Any] = [None, None]


def _environ_state() -> tuple[Any, Any]:
    """The raw ``TRITONRL_BACKEND`` and ``TRITON_INTERPRET`` (``None`` when unset), read from
    ``os.environ._data`` where it exists (no ``KeyError`` raised and caught when unset)."""
    env = os.environ
    data = getattr(env, "_data", None)
    if type(data) is not dict:
        return env.get(BACKEND_ENV), env.get("TRITON_INTERPRET")
    cached = _ENV_KEYS
    if cached[0] is not env:
        encode = env.encodekey  # type: ignore[attr-defined]
        cached[1] = (encode(BACKEND_ENV), encode("TRITON_INTERPRET"))
        cached[0] = env
    backend_key, interpret_key = cached[1]
    return data.get(backend_key), data.get(interpret_key)


@dataclass(frozen=True)
class Selection:
    """Which implementation an op uses on a device, and why."""

    backend: str  # "triton" or "torch"
    reason: str


_REGISTRY: dict[str, KernelOp] = {}


def registry() -> dict[str, KernelOp]:
    """All ops registered so far, by name (ops register when their module is imported)."""
    return dict(_REGISTRY)


class KernelOp:
    """One op's implementations and the rule that picks one.

    Args:
        name: the op's public name (unique).
        torch_impl: the torch reference: the CPU path and the test oracle.
        triton_impl: the Triton host function, or ``"module:attr"`` imported on first use.

    Attributes:
        counts: calls run per backend (``{"triton": n, "torch": m}``) since import or
            [`reset`][tritonrl.kernels.backend.KernelOp.reset].
        last_backend: the backend of the latest call (``None`` before the first).
        failed: device -> why Triton failed there (that device runs the reference from then on).
    """

    def __init__(
        self,
        name: str,
        torch_impl: Callable[..., Any],
        triton_impl: Callable[..., Any] | str,
    ) -> None:
        if name in _REGISTRY:
            raise ValueError(f"kernel op {name!r} is registered twice")
        self.name = name
        self.torch_impl = torch_impl
        self._triton_impl = triton_impl
        self.failed: dict[str, str] = {}
        self.last_backend: str | None = None
        self.counts: Counter[str] = Counter()
        # select() answers, keyed by (device, TRITONRL_BACKEND, TRITON_INTERPRET) as read from
        # os.environ on each call (_environ_state): a changed variable (monkeypatch.setenv
        # included) is a new key.
        self._selections: dict[tuple[Any, Any, Any], Selection] = {}
        _REGISTRY[name] = self

    def reset(self) -> None:
        """Forget device failures, counters and cached selections (a debugging aid)."""
        self.failed.clear()
        self._selections.clear()
        self.counts.clear()
        self.last_backend = None

    @property
    def triton_impl(self) -> Callable[..., Any]:
        impl = self._triton_impl
        if isinstance(impl, str):
            module, _, attr = impl.partition(":")
            impl = getattr(importlib.import_module(module), attr)
            self._triton_impl = impl
        return impl

    def select(self, device: torch.device | str) -> Selection:
        """Which implementation runs for tensors on ``device``, and why.

        Cached per device, environment and [`references_only`][tritonrl.kernels.backend.references_only]
        state; a Triton failure and [`reset`][tritonrl.kernels.backend.KernelOp.reset] clear the cache.

        Raises:
            ValueError: ``TRITONRL_BACKEND`` is unknown or says ``triton`` where Triton cannot run.
        """
        key = (device, *_environ_state(), _REFERENCES_ONLY[0] > 0)
        sel = self._selections.get(key)
        if sel is None:
            sel = self._select(device)
            self._selections[key] = sel
        return sel

    def _select(self, device: torch.device | str) -> Selection:
        dev = torch.device(device)
        forced = backend_override(dev)  # raises for a value that cannot run here
        if _REFERENCES_ONLY[0]:
            return Selection("torch", "references_only() (an export trace)")
        if forced == "torch":
            return Selection("torch", f"forced by {BACKEND_ENV}=torch")
        if not triton_available():
            return Selection("torch", "triton is not installed")
        if dev.type == "cuda":
            key = str(dev)
            if key in self.failed and forced != "triton":
                return Selection("torch", f"Triton failed on {key} earlier: {self.failed[key]}")
            return Selection("triton", "CUDA device" + (" (forced)" if forced == "triton" else ""))
        if forced == "triton":
            return Selection("triton", "forced, CPU tensors under the Triton interpreter")
        return Selection("torch", f"{dev.type} device: torch reference")

    def __call__(self, device: torch.device | str, *args: Any, **kwargs: Any) -> Any:
        """Run the implementation selected for ``device`` on ``args``/``kwargs``."""
        sel = self.select(device)
        if sel.backend == "torch":
            return self._ran("torch", self.torch_impl(*args, **kwargs))
        return self.guard(
            device,
            lambda: self.triton_impl(*args, **kwargs),
            lambda: self.torch_impl(*args, **kwargs),
        )

    def dispatch(
        self, device: torch.device | str, triton_call: Callable[[], T], torch_call: Callable[[], T]
    ) -> T:
        """`__call__` with calls of the caller's choosing (the custom ops' host launchers), counted
        the same way."""
        if self.select(device).backend == "torch":
            return self._ran("torch", torch_call())
        return self.guard(device, triton_call, torch_call)

    def guard(self, device: torch.device | str, triton_call: Callable[[], T], fallback: Callable[[], T]) -> T:
        """Run ``triton_call``; on a device failure (`is_device_failure`) in auto mode on CUDA,
        warn once and run ``fallback``. Any other exception propagates."""
        try:
            return self._ran("triton", triton_call())
        except Exception as exc:
            dev = torch.device(device)
            if forced_backend() == "triton" or dev.type != "cuda" or not is_device_failure(exc):
                raise
            key = str(dev)
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            if key not in self.failed:
                self.failed[key] = reason
                self._selections.clear()
                msg = (
                    f"Triton kernel {self.name!r} failed on {key} ({reason}); using the torch "
                    f"reference on that device from now on"
                )
                _log.warning(msg)
                warnings.warn(msg, KernelFallbackWarning, stacklevel=3)
            return self._ran("torch", fallback())

    def _ran(self, backend: str, result: T) -> T:
        self.last_backend = backend
        self.counts[backend] += 1
        return result

    def __repr__(self) -> str:
        return f"KernelOp({self.name!r})"
