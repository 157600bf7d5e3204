"""The noisy-head ops as torch custom ops (design: `tritonrl.kernels.library`).

``torch.ops.tritonrl.noisy_linear`` / ``noisy_dueling`` and their backward ops, called by the
public functions under ``torch.compile``. A layer's `NoisyParams` are six tensor
arguments; the noise vectors and the support take no gradient. Imports no triton.
"""

from __future__ import annotations

from typing import Any

import torch
from tritonrl.kernels.library import (
    absent,
    fake_grads,
    needed_grads,
    place_grads,
    reference_grads_in_op,
    run_backward,
)
from tritonrl.kernels.noisy_head.api import NOISY_DUELING, NOISY_LINEAR
from tritonrl.kernels.noisy_head.reference import NoisyParams, noisy_dueling_ref, noisy_linear_ref

__all__ = [
    "noisy_dueling_backward_op",
    "noisy_dueling_op",
    "noisy_linear_backward_op",
    "noisy_linear_op",
]

Tensor = torch.Tensor
# a layer's tensors after its weight_mu, with the argument prefix {p}
_LAYER = (
    "Tensor? {p}weight_sigma, Tensor? {p}bias_mu, Tensor? {p}bias_sigma, Tensor? {p}eps_in, "
    "Tensor? {p}eps_out"
)


# ---- noisy_linear --------------------------------------------------------------------------------


@torch.library.custom_op(
    "tritonrl::noisy_linear",
    mutates_args=(),
    schema=f"(Tensor x, Tensor weight_mu, {_LAYER.format(p='')}, bool noise, bool relu) -> Tensor",
)
def noisy_linear_op(
    x: Tensor,
    weight_mu: Tensor,
    weight_sigma: Tensor | None,
    bias_mu: Tensor | None,
    bias_sigma: Tensor | None,
    eps_in: Tensor | None,
    eps_out: Tensor | None,
    noise: bool,
    relu: bool,
) -> Tensor:
    """`noisy_linear` as an op: ``[B, O]`` (``[B, G, O]``), x's dtype."""
    args = (x, weight_mu, weight_sigma, bias_mu, bias_sigma, eps_in, eps_out, noise, relu)

    def triton() -> Tensor:
        from tritonrl.kernels.noisy_head.fused_linear import noisy_linear_fwd

        return noisy_linear_fwd(*args)

    return NOISY_LINEAR.dispatch(x.device, triton, lambda: noisy_linear_ref(*args)).contiguous()


@noisy_linear_op.register_fake
def _(x: Tensor, weight_mu: Tensor, *_rest: Any) -> Tensor:
    lead = (weight_mu.shape[0],) if weight_mu.dim() == 3 else ()
    return x.new_empty((x.shape[0], *lead, weight_mu.shape[-2]))


@torch.library.custom_op(
    "tritonrl::noisy_linear_backward",
    mutates_args=(),
    schema=(
        f"(Tensor grad, Tensor x, Tensor? y, Tensor weight_mu, {_LAYER.format(p='')}, bool noise, "
        "bool relu, bool[] needs) -> Tensor[]"
    ),
)
def noisy_linear_backward_op(
    grad: Tensor,
    x: Tensor,
    y: Tensor | None,
    weight_mu: Tensor,
    weight_sigma: Tensor | None,
    bias_mu: Tensor | None,
    bias_sigma: Tensor | None,
    eps_in: Tensor | None,
    eps_out: Tensor | None,
    noise: bool,
    relu: bool,
    needs: list[bool],
) -> list[Tensor]:
    """Gradients of `noisy_linear_op` for the inputs ``needs`` flags among
    ``(x, weight_mu, weight_sigma, bias_mu, bias_sigma)``; ``y`` is read only with ``relu``."""
    inputs = (x, weight_mu, weight_sigma, bias_mu, bias_sigma)

    def triton() -> tuple[Tensor | None, ...]:
        from tritonrl.kernels.noisy_head.fused_linear import noisy_linear_bwd

        return noisy_linear_bwd(
            grad,
            x,
            y,
            weight_mu,
            weight_sigma,
            eps_in,
            eps_out,
            noise=noise,
            relu=relu,
            has_bias=bias_mu is not None,
            need_dx=needs[0],
            need_dw=any(needs[1:]),
        )

    def reference() -> tuple[Tensor | None, ...]:
        def fn(*t: Tensor) -> Tensor:
            return noisy_linear_ref(*t, noise=noise, relu=relu)

        return reference_grads_in_op(fn, (*inputs, eps_in, eps_out), (*needs, False, False), (grad,))[:5]

    return needed_grads(run_backward(NOISY_LINEAR, x.device, triton, reference), inputs, needs)


@noisy_linear_backward_op.register_fake
def _(grad: Tensor, x: Tensor, y: Tensor | None, *rest: Any) -> list[Tensor]:
    return fake_grads((x, *rest[:4]), rest[-1])


def _linear_setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    x, w_mu, w_sigma, b_mu, b_sigma, eps_in, eps_out, noise, relu = inputs
    ctx.noise, ctx.relu = noise, relu
    ctx.save_for_backward(x, w_mu, w_sigma, b_mu, b_sigma, eps_in, eps_out, output if relu else None)


def _linear_backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
    x, w_mu, w_sigma, b_mu, b_sigma, eps_in, eps_out, y = ctx.saved_tensors
    needs = list(ctx.needs_input_grad[:5])
    if not any(needs):
        return (None,) * 9
    flat = torch.ops.tritonrl.noisy_linear_backward(
        grad, x, y, w_mu, w_sigma, b_mu, b_sigma, eps_in, eps_out, ctx.noise, ctx.relu, needs
    )
    return (*place_grads(flat, needs), None, None, None, None)


noisy_linear_op.register_autograd(_linear_backward, setup_context=_linear_setup)


# ---- noisy_dueling -------------------------------------------------------------------------------


@torch.library.custom_op(
    "tritonrl::noisy_dueling",
    mutates_args=(),
    schema=(
        f"(Tensor x, Tensor a_weight_mu, {_LAYER.format(p='a_')}, Tensor? v_weight_mu, "
        f"{_LAYER.format(p='v_')}, Tensor? support, int num_actions, int atoms, bool noise, "
        "bool log_softmax) -> (Tensor, Tensor)"
    ),
)
def noisy_dueling_op(
    x: Tensor,
    a_weight_mu: Tensor,
    a_weight_sigma: Tensor | None,
    a_bias_mu: Tensor | None,
    a_bias_sigma: Tensor | None,
    a_eps_in: Tensor | None,
    a_eps_out: Tensor | None,
    v_weight_mu: Tensor | None,
    v_weight_sigma: Tensor | None,
    v_bias_mu: Tensor | None,
    v_bias_sigma: Tensor | None,
    v_eps_in: Tensor | None,
    v_eps_out: Tensor | None,
    support: Tensor | None,
    num_actions: int,
    atoms: int,
    noise: bool,
    log_softmax: bool,
) -> tuple[Tensor, Tensor]:
    """`noisy_dueling` as an op: ``(out [B, A, Z] f32,
    q [B, A] f32)``; without ``support``, ``q`` is an empty f32 ``[0]``."""
    adv = NoisyParams(a_weight_mu, a_weight_sigma, a_bias_mu, a_bias_sigma, a_eps_in, a_eps_out)
    val = None
    if v_weight_mu is not None:
        val = NoisyParams(v_weight_mu, v_weight_sigma, v_bias_mu, v_bias_sigma, v_eps_in, v_eps_out)
    args = (x, adv, val, num_actions, atoms, noise, log_softmax, support)

    def triton() -> tuple[Tensor, Tensor | None]:
        from tritonrl.kernels.noisy_head.fused_dueling import noisy_dueling_fwd

        return noisy_dueling_fwd(*args)

    def reference() -> tuple[Tensor, Tensor | None]:
        res = noisy_dueling_ref(*args)
        return res if isinstance(res, tuple) else (res, None)

    out, q = NOISY_DUELING.dispatch(x.device, triton, reference)
    return out.contiguous(), (absent(x) if q is None else q.contiguous())


@noisy_dueling_op.register_fake
def _(x: Tensor, *rest: Any) -> tuple[Tensor, Tensor]:
    support, num_actions, atoms = rest[12], rest[13], rest[14]
    out = x.new_empty((x.shape[0], num_actions, atoms), dtype=torch.float32)
    q = x.new_empty((x.shape[0], num_actions) if support is not None else (0,), dtype=torch.float32)
    return out, q


@torch.library.custom_op(
    "tritonrl::noisy_dueling_backward",
    mutates_args=(),
    schema=(
        f"(Tensor grad_out, Tensor? grad_q, Tensor x, Tensor out, Tensor a_weight_mu, "
        f"{_LAYER.format(p='a_')}, Tensor? v_weight_mu, {_LAYER.format(p='v_')}, Tensor? support, "
        "int num_actions, int atoms, bool noise, bool log_softmax, bool[] needs) -> Tensor[]"
    ),
)
def noisy_dueling_backward_op(
    grad_out: Tensor,
    grad_q: Tensor | None,
    x: Tensor,
    out: Tensor,
    a_weight_mu: Tensor,
    a_weight_sigma: Tensor | None,
    a_bias_mu: Tensor | None,
    a_bias_sigma: Tensor | None,
    a_eps_in: Tensor | None,
    a_eps_out: Tensor | None,
    v_weight_mu: Tensor | None,
    v_weight_sigma: Tensor | None,
    v_bias_mu: Tensor | None,
    v_bias_sigma: Tensor | None,
    v_eps_in: Tensor | None,
    v_eps_out: Tensor | None,
    support: Tensor | None,
    num_actions: int,
    atoms: int,
    noise: bool,
    log_softmax: bool,
    needs: list[bool],
) -> list[Tensor]:
    """Gradients of `noisy_dueling_op` for the inputs ``needs`` flags, in argument order;
    ``grad_q`` is ``None`` without ``support``."""
    adv = NoisyParams(a_weight_mu, a_weight_sigma, a_bias_mu, a_bias_sigma, a_eps_in, a_eps_out)
    val = NoisyParams(v_weight_mu, v_weight_sigma, v_bias_mu, v_bias_sigma, v_eps_in, v_eps_out)
    dueling = v_weight_mu is not None
    inputs = (x, *adv[:4], *val[:4])

    def triton() -> tuple[Tensor | None, ...]:
        from tritonrl.kernels.noisy_head.fused_dueling import noisy_dueling_bwd

        dx, g_adv, g_val = noisy_dueling_bwd(
            grad_out,
            grad_q,
            x,
            out,
            support,
            adv,
            val if dueling else None,
            num_actions,
            atoms,
            noise,
            log_softmax,
            need_dx=needs[0],
            need_adv=any(needs[1:5]),
            need_val=any(needs[5:9]),
        )
        return (dx, *g_adv, *g_val)

    def reference() -> tuple[Tensor | None, ...]:
        def fn(x_: Tensor, *f: Tensor) -> Tensor | tuple[Tensor, Tensor]:
            v = NoisyParams(*f[6:]) if f[6] is not None else None
            return noisy_dueling_ref(
                x_, NoisyParams(*f[:6]), v, num_actions, atoms, noise, log_softmax, support
            )

        grads_out = (grad_out,) if support is None else (grad_out, grad_q)
        flat_needs = (needs[0], *needs[1:5], False, False, *needs[5:9], False, False)
        g = reference_grads_in_op(fn, (x, *adv, *val), flat_needs, grads_out)
        return (g[0], *g[1:5], *g[7:11])

    return needed_grads(run_backward(NOISY_DUELING, x.device, triton, reference), inputs, needs)


@noisy_dueling_backward_op.register_fake
def _(grad_out: Tensor, grad_q: Tensor | None, x: Tensor, out: Tensor, *rest: Any) -> list[Tensor]:
    return fake_grads((x, *rest[0:4], *rest[6:10]), rest[-1])


def _dueling_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    x, *flat = inputs[:13]
    support, num_actions, atoms, noise, log_softmax = inputs[13:]
    out, q = output
    ctx.cfg = (num_actions, atoms, noise, log_softmax)
    if support is None:
        ctx.mark_non_differentiable(q)
    ctx.save_for_backward(x, out, support, *flat)


def _dueling_backward(ctx: Any, grad_out: Tensor | None, grad_q: Tensor | None) -> tuple[Tensor | None, ...]:
    x, out, support, *flat = ctx.saved_tensors
    n = ctx.needs_input_grad
    needs = [n[0], *n[1:5], *n[7:11]]  # x and the weights and biases; noise and support take none
    if not any(needs):
        return (None,) * 18
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    flat_grads = torch.ops.tritonrl.noisy_dueling_backward(
        grad_out, grad_q if support is not None else None, x, out, *flat, support, *ctx.cfg, needs
    )
    g = place_grads(flat_grads, needs)
    return (g[0], *g[1:5], None, None, *g[5:9], None, None, None, None, None, None, None)


noisy_dueling_op.register_autograd(_dueling_backward, setup_context=_dueling_setup)
