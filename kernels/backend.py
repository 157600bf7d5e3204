"""Kernel dispatch: which implementation of an op runs for given tensors.

Every op in :mod:`kernels` owns one :class:`KernelOp`. The rules, in order:

1. ``TRITONRL_BACKEND=torch`` forces the torch reference everywhere.
2. Triton not importable: the torch reference runs (one warning per process); forcing
   ``triton`` then raises ``ValueError``.
3. CUDA tensors: the Triton kernel (its bf16 or f32 variant follows the tensors' dtype). If it
   fails on a device (pre-Ampere GPUs are outside Triton's official support), that op falls back
   to its torch reference on that device for the rest of the process and warns once with the
   reason; with ``TRITONRL_BACKEND=triton`` the failure is raised instead. Only compile, resource
   and driver errors fall back (:func:`is_device_failure`); any other exception is a bug and
   propagates.
4. CPU tensors: the torch reference, unless ``TRITONRL_BACKEND=triton`` and the Triton interpreter
   is on (``TRITON_INTERPRET=1`` set before triton is imported): that is how kernel parity is
   tested without a GPU. Forcing ``triton`` for CPU tensors without the interpreter raises
   ``ValueError``.

The variable is validated in one function, :func:`backend_override`, which dispatch and the agents'
constructors (hence the command line, before training) call.

``op.select(device)`` answers which implementation would run and why; ``op.last_backend`` and
``op.counts`` record what actually ran (``op.reset()`` zeroes them and forgets failures), so a
caller, and the tests, can see the path. Nothing here imports triton or queries CUDA at import time.
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

    Dispatch (:meth:`KernelOp.select`) calls it for each new (device, environment) pair; agents
    call it when they are built and so the command line refuses a bad value before training
    (one ``error:`` line, exit status 2). Reads ``os.environ`` on every call (never cached).

    Args:
        device: where the tensors live; ``None`` checks the value and Triton's import only.

    Returns:
        ``"auto"``, ``"triton"`` or ``"torch"``.

    Raises:
        ValueError: the variable holds anything but auto, triton or torch; or it says ``triton``
            where Triton cannot run: triton does not import, or ``device`` is not CUDA and not a
            CPU under the Triton interpreter (``TRITON_INTERPRET=1``).
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
    """Whether ``exc`` says a Triton kernel cannot run on its device (so falling back is right).

    True for Triton's own errors (``triton.errors.TritonError``: ``CompilationError``,
    ``OutOfResources``, ``PTXASError``...), CUDA driver / runtime errors
    (``torch.AcceleratorError``), and plain ``RuntimeError``s whose message names a compiler pass
    or driver failure. False for everything else, a host-side bug first of all. Imports triton
    lazily (only when asked, after a failure).
    """
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
"""How many :func:`references_only` blocks are open (a list: one mutable cell, no ``global``)."""


@contextlib.contextmanager
def references_only() -> Iterator[None]:
    """Inside the block every op selects its torch reference on every device, eager calls and
    traced ones alike (``torch.export`` then records the reference's aten ops, never a
    ``tritonrl::`` custom op): how a policy is exported (:mod:`tritonrl.toolkit.export`), so that
    its artifact runs where tritonrl is not installed. Nests; not thread-local (export holds it
    for the length of one trace)."""
    _REFERENCES_ONLY[0] += 1
    try:
        yield
    finally:
        _REFERENCES_ONLY[0] -= 1


def references_forced() -> bool:
    """Whether a :func:`references_only` block is open."""
    return _REFERENCES_ONLY[0] > 0


# [the os.environ the names were encoded for, (encoded TRITONRL_BACKEND, encoded TRITON_INTERPRET)]
_ENV_KEYS: list[Any] = [None, None]


def _environ_state() -> tuple[Any, Any]:
    """The values of ``TRITONRL_BACKEND`` and ``TRITON_INTERPRET`` in ``os.environ`` now (``None``
    when unset), as a cache key: raw, not decoded. Read on every call.

    CPython's ``os.environ`` keeps its items encoded in a dict (``_data``), which every write
    through ``os.environ`` (``monkeypatch.setenv`` included) updates; looking the encoded names up
    there skips the ``KeyError`` that ``os.environ.get`` raises and catches for an unset variable
    (about 1.1 -> 0.3 us for both). Any other mapping in ``os.environ``'s place is read with ``get``.
    """
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
        triton_impl: the Triton host function, or ``"module:attr"`` imported on first use so
            that triton is only imported when a Triton path actually runs.

    Both implementations take the same arguments and return the same kind of result.

    Attributes:
        counts: calls run per backend (``{"triton": n, "torch": m}``) since import or :meth:`reset`;
            a reference traced inline into a compiled graph is not counted.
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
        """Return the op to its state at import: no device failures, zero counters, no cached selection.

        A debugging aid: call it before a piece of code to read from :attr:`counts` and
        :attr:`last_backend` which implementation that code ran, or to try Triton again on a
        device where it failed (the next call compiles anew and, if it fails again, warns again).
        """
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

        The answer is cached per ``(device, TRITONRL_BACKEND, TRITON_INTERPRET)`` and whether a
        :func:`references_only` block is open (both variables are read on every call, so changing
        them takes effect at once); a Triton failure on a
        device and :meth:`reset` clear the cache. Errors are never cached.

        Raises:
            ValueError: ``TRITONRL_BACKEND`` holds an unknown value, or says ``triton`` where
                Triton cannot run (see :func:`backend_override`).
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
        """Run ``triton_call`` or ``torch_call`` by the rule of :meth:`select`, Triton through
        :meth:`guard`; recorded in ``counts`` / ``last_backend`` like :meth:`__call__`.

        :meth:`__call__` with calls of the caller's choosing: the torch custom ops
        (:mod:`tritonrl.kernels.library`) run the host launchers directly (no autograd.Function
        below the op) and their own backward through it.
        """
        if self.select(device).backend == "torch":
            return self._ran("torch", torch_call())
        return self.guard(device, triton_call, torch_call)

    def guard(self, device: torch.device | str, triton_call: Callable[[], T], fallback: Callable[[], T]) -> T:
        """Run ``triton_call``; if it fails on CUDA in auto mode with a compile, resource or driver
        error (see :func:`is_device_failure`), warn once and run ``fallback``.

        Any other exception (a ``ValueError`` or ``TypeError`` from host code, an ``IndexError``...)
        is a bug and propagates, as does every failure on CPU or with ``TRITONRL_BACKEND=triton``.
        Ops use this for their Triton backward too, with a fallback through the reference
        (:func:`tritonrl.kernels.fallback.reference_grads`).
        """
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
