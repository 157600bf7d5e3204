"""Torch references of the noisy-linear and noisy dueling head ops: specification, CPU path, oracle.

In 16-bit dtypes the sigma term is a second product, as in the kernels (a noisy weight rounded to
bf16 would lose precision); in f32 / f64 the noisy weight is built and one product taken
(docs/pages/noisy-head.md).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

__all__ = ["NoisyParams", "noisy_dueling_ref", "noisy_linear_ref"]


class NoisyParams(NamedTuple):
    """One noisy layer's tensors (``[G, ...]`` leading dims for G layers sharing an input).

    Attributes:
        weight_mu: ``[O, I]`` (or ``[G, O, I]``).
        weight_sigma: like ``weight_mu``; ``None`` for a layer without noise.
        bias_mu: ``[O]`` (or ``[G, O]``), or ``None`` for a layer without bias.
        bias_sigma: like ``bias_mu``; ``None`` without bias or without noise.
        eps_in: ``[I]`` (or ``[G, I]``) input noise, already ``sign(u) sqrt(|u|)``; ``None`` without noise.
        eps_out: ``[O]`` (or ``[G, O]``) output noise, likewise.
    """

    weight_mu: torch.Tensor
    weight_sigma: torch.Tensor | None = None
    bias_mu: torch.Tensor | None = None
    bias_sigma: torch.Tensor | None = None
    eps_in: torch.Tensor | None = None
    eps_out: torch.Tensor | None = None


def noisy_linear_ref(
    x: torch.Tensor,
    weight_mu: torch.Tensor,
    weight_sigma: torch.Tensor | None,
    bias_mu: torch.Tensor | None,
    bias_sigma: torch.Tensor | None,
    eps_in: torch.Tensor | None,
    eps_out: torch.Tensor | None,
    noise: bool = True,
    relu: bool = False,
) -> torch.Tensor:
    """``y = x @ W_mu.T + b_mu + ((x * eps_in) @ W_sigma.T + b_sigma) * eps_out`` (optional ReLU):
    x ``[B, I]`` -> ``[B, O]`` (``[B, G, O]`` for ``[G, O, I]`` weights), the inputs' dtype."""
    if weight_mu.dim() == 3:

        def pick(t: torch.Tensor | None, g: int) -> torch.Tensor | None:
            return None if t is None else t[g]

        params = (weight_mu, weight_sigma, bias_mu, bias_sigma, eps_in, eps_out)
        outs = [
            noisy_linear_ref(x, *(pick(t, g) for t in params), noise=noise, relu=relu)  # type: ignore[misc]
            for g in range(weight_mu.shape[0])
        ]
        return torch.stack(outs, dim=1)
    if not noise:
        y = F.linear(x, weight_mu, bias_mu)
    elif x.dtype in _BUILD_DTYPES:  # the noisy weight, then one product (see the module doc)
        w = torch.addcmul(weight_mu, weight_sigma, torch.outer(eps_out, eps_in))
        b = None if bias_mu is None else torch.addcmul(bias_mu, bias_sigma, eps_out)
        y = F.linear(x, w, b)
    else:
        y = F.linear(x, weight_mu, bias_mu) + F.linear(x * eps_in, weight_sigma, bias_sigma) * eps_out
    return torch.relu(y) if relu else y


_BUILD_DTYPES = (torch.float32, torch.float64)


def noisy_dueling_ref(
    x: torch.Tensor,
    advantage: NoisyParams,
    value: NoisyParams | None,
    num_actions: int,
    atoms: int,
    noise: bool,
    log_softmax: bool,
    support: torch.Tensor | None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The last layer of a dueling / distributional head and its combine: ``x [B, I]`` or
    ``[B, 2, I]`` -> ``[B, A, Z]`` f32 (and ``q [B, A]`` f32 with ``support``)."""
    b = x.shape[0]
    xv, xa = (x[:, 0], x[:, 1]) if x.dim() == 3 else (x, x)
    adv = noisy_linear_ref(xa, *advantage, noise=noise).float().view(b, num_actions, atoms)
    if value is not None:
        val = noisy_linear_ref(xv, *value, noise=noise).float().view(b, 1, atoms)
        q = val + adv - adv.mean(dim=1, keepdim=True)
    else:
        q = adv
    if log_softmax and atoms > 1:
        q = torch.log_softmax(q, dim=-1)
    if support is None:
        return q
    return q, (q.exp() * support.float()).sum(dim=-1)
