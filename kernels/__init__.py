"""Pure ops: Triton kernels and their torch references.

Imports torch (and numpy) at package import; triton only when a Triton path first runs.
See [`tritonrl.kernels.backend`][tritonrl.kernels.backend] for how an op picks its implementation.
"""

from tritonrl.kernels.backend import (
    KernelFallbackWarning,
    KernelOp,
    Selection,
    backend_override,
    forced_backend,
    interpreting,
    registry,
    triton_available,
)

__all__ = [
    "KernelFallbackWarning",
    "KernelOp",
    "Selection",
    "backend_override",
    "forced_backend",
    "interpreting",
    "load_all",
    "registry",
    "triton_available",
]

# Modules that register ops; `load_all()` imports them so `registry()` is complete.
_OP_MODULES: tuple[str, ...] = (
    "tritonrl.kernels.noisy_head.api",
    "tritonrl.kernels.mamba2.api",
    "tritonrl.kernels.sumtree.api",
    "tritonrl.kernels.frame_stack.api",
)


def load_all() -> None:
    """Import every op module so that `registry` lists all ops."""
    import importlib

    for name in _OP_MODULES:
        importlib.import_module(name)
