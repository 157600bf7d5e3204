"""The backward every Triton op falls back to: torch autograd through the op's reference.

Used by [`tritonrl.kernels.backend.KernelOp.guard`][tritonrl.kernels.backend.KernelOp.guard] when a Triton
backward fails on a device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

__all__ = ["reference_grads"]


def reference_grads(
    fn: Callable[..., torch.Tensor | tuple[torch.Tensor, ...]],
    inputs: Sequence[torch.Tensor | None],
    needs: Sequence[bool],
    grad_outputs: Sequence[torch.Tensor | None],
) -> tuple[torch.Tensor | None, ...]:
    """Gradients of ``fn(*inputs)`` by torch autograd: the fallback of a Triton backward.

    Args:
        fn: the reference, called on detached copies of ``inputs`` (``None`` entries kept).
        inputs: the forward's tensor inputs.
        needs: per input, whether its gradient is wanted (``ctx.needs_input_grad``).
        grad_outputs: one upstream gradient per output of ``fn`` (``None``: none).

    Returns:
        Per input, its gradient where wanted and defined, else ``None`` (read as zero).
    """
    with torch.enable_grad():
        leaves = [
            None if t is None else t.detach().requires_grad_(bool(n) and t.is_floating_point())
            for t, n in zip(inputs, needs, strict=True)
        ]
        outs = fn(*leaves)
        outs = outs if isinstance(outs, tuple) else (outs,)
        pairs = [(o, g) for o, g in zip(outs, grad_outputs, strict=True) if g is not None]
        wanted = [t for t in leaves if t is not None and t.requires_grad]
        grads = iter(
            torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True)
            if wanted and pairs
            else [None] * len(wanted)
        )
    return tuple(next(grads) if (t is not None and t.requires_grad) else None for t in leaves)
