"""Q-network heads: NoisyNet linear layers and the dueling / distributional (Rainbow) head.

Both run on the fused ops of `tritonrl.kernels.noisy_head`; parameters in ``dtype``, output f32
from the op's epilogue, so no forward casts. See docs/pages/noisy-head.md ("Modules").
"""

from __future__ import annotations

import math
from typing import Any, cast

import torch
from torch import nn
from tritonrl.kernels.noisy_head import NoisyParams, expected_q, linear_q, noisy_dueling, noisy_linear
from tritonrl.kernels.validate import check_int
from tritonrl.toolkit.precision import dtype_or_default

__all__ = ["DuelingHead", "NoisyLinear", "scaled_noise"]


def scaled_noise(
    shape: tuple[int, ...], generator: torch.Generator | None = None, device: torch.device | str | None = None
) -> torch.Tensor:
    """``f(u) = sign(u) * sqrt(|u|)`` of standard normal ``u`` (f32), drawn on the generator's device."""
    dev = generator.device if generator is not None else device
    u = torch.randn(shape, generator=generator, device=dev, dtype=torch.float32)
    return u.sign() * u.abs().sqrt()


class NoisyLinear(nn.Module):
    """Linear layer with factorised Gaussian noise (NoisyNet), on the fused `noisy_linear` op.

    Noise is on in ``train()``, off in ``eval()``;
    [`reset_noise`][tritonrl.agents.nets.heads.NoisyLinear.reset_noise] draws new noise.

    Args:
        in_features: I.
        out_features: O.
        sigma0: initial noise scale.
        bias: learn ``b_mu``, ``b_sigma``.
        activation: ``None`` or ``"relu"`` (fused into the op).
        groups: G layers reading the same input: weights ``[G, O, I]``, output ``[B, G, O]``.
        noisy: ``False`` gives a plain linear layer (no sigma parameters, same op).

    Forward: x ``[B, I]`` in the parameters' dtype and device -> ``[B, O]`` (``[B, G, O]``).
    """

    # registered in __init__ (None where ``bias`` or ``noisy`` is off)
    weight_sigma: torch.Tensor | None
    bias_mu: torch.Tensor | None
    bias_sigma: torch.Tensor | None
    eps_in: torch.Tensor | None
    eps_out: torch.Tensor | None

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        sigma0: float = 0.5,
        bias: bool = True,
        activation: str | None = None,
        groups: int = 1,
        noisy: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        for name, v in (("in_features", in_features), ("out_features", out_features), ("groups", groups)):
            check_int(name, v, low=1)
        if activation not in (None, "relu"):
            raise ValueError(f"activation must be None or 'relu', got {activation!r}")
        self.in_features, self.out_features, self.groups = in_features, out_features, groups
        self.sigma0, self.activation, self.noisy = float(sigma0), activation, noisy
        kw: dict[str, Any] = {"device": device, "dtype": dtype_or_default(dtype, device)}
        lead = (groups,) if groups > 1 else ()
        self.weight_mu = nn.Parameter(torch.empty(*lead, out_features, in_features, **kw))
        w_sigma = nn.Parameter(torch.empty_like(self.weight_mu)) if noisy else None
        b_mu = nn.Parameter(torch.empty(*lead, out_features, **kw)) if bias else None
        b_sigma = nn.Parameter(torch.empty(*lead, out_features, **kw)) if (bias and noisy) else None
        self.register_parameter("weight_sigma", w_sigma)
        self.register_parameter("bias_mu", b_mu)
        self.register_parameter("bias_sigma", b_sigma)
        self.register_buffer("eps_in", torch.zeros(*lead, in_features, **kw) if noisy else None)
        self.register_buffer("eps_out", torch.zeros(*lead, out_features, **kw) if noisy else None)
        self.reset_parameters()
        self.reset_noise()

    def reset_parameters(self) -> None:
        """NoisyNet init: ``mu ~ U[-1/sqrt(I), 1/sqrt(I)]``, ``sigma = sigma0 / sqrt(I)``."""
        bound = 1.0 / math.sqrt(self.in_features)
        with torch.no_grad():
            for p in (self.weight_mu, self.bias_mu):
                if p is not None:
                    p.uniform_(-bound, bound)
            for p in (self.weight_sigma, self.bias_sigma):
                if p is not None:
                    p.fill_(self.sigma0 * bound)

    @torch.no_grad()
    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """Draw new noise ``eps_in``, ``eps_out`` from ``generator`` (any device); nothing if not noisy."""
        if not self.noisy:
            return
        for buf in (self.eps_in, self.eps_out):
            assert buf is not None  # registered as tensors when noisy
            buf.copy_(scaled_noise(tuple(buf.shape), generator, buf.device))

    def params(self) -> NoisyParams:
        """The layer's tensors in the order the ops take them."""
        if type(self) is NoisyLinear:  # read the registries directly: module __getattr__ is slow
            p, b = self._parameters, self._buffers  # and this runs per layer per step
            return NoisyParams(
                cast(torch.Tensor, p["weight_mu"]),
                p["weight_sigma"],
                p["bias_mu"],
                p["bias_sigma"],
                b["eps_in"],
                b["eps_out"],
            )
        # a subclass (e.g. parametrised) may compute its tensors: go through attribute access
        return NoisyParams(
            self.weight_mu, self.weight_sigma, self.bias_mu, self.bias_sigma, self.eps_in, self.eps_out
        )

    @property
    def noise_on(self) -> bool:
        """Whether the sigma terms are added now (noisy layer in training mode)."""
        return self.noisy and self.training

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return noisy_linear(x, *self.params(), noise=self.noise_on, activation=self.activation)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, groups={self.groups}, "
            f"noisy={self.noisy}, sigma0={self.sigma0}, bias={self.bias_mu is not None}, "
            f"activation={self.activation}, dtype={self.weight_mu.dtype}"
        )


class DuelingHead(nn.Module):
    """Dueling / distributional Q head (Rainbow) on noisy layers: at most two launches forward.

    Args:
        in_features: width of the input features h.
        num_actions: A.
        atoms: Z (1: scalar Q; >1: C51 distributions or QR quantiles).
        hidden: optional per-stream hidden width (noisy layer + fused ReLU).
        noisy: NoisyNet layers (``False``: plain linear layers through the same ops).
        dueling: value and advantage streams (``False``: Q straight from one stream).
        log_softmax: for ``atoms > 1``, log-probabilities over atoms (C51); ``False``: raw values
            (QR-DQN quantiles).
        sigma0: initial noise scale of every noisy layer.

    Forward: ``h [B, in_features]`` -> f32 ``Q [B, A]`` (``atoms == 1``), else ``[B, A, Z]``.
    """

    def __init__(
        self,
        in_features: int,
        num_actions: int,
        *,
        atoms: int = 1,
        hidden: int | None = None,
        noisy: bool = True,
        dueling: bool = True,
        log_softmax: bool = True,
        sigma0: float = 0.5,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_int("atoms", atoms, low=1)
        check_int("num_actions", num_actions, low=1)
        self.in_features, self.num_actions, self.atoms = in_features, num_actions, atoms
        self.noisy, self.dueling, self.log_softmax = noisy, dueling, log_softmax
        kw: dict[str, Any] = {
            "sigma0": sigma0,
            "noisy": noisy,
            "device": device,
            "dtype": dtype_or_default(dtype, device),
        }
        self.hidden = (
            NoisyLinear(in_features, hidden, groups=2 if dueling else 1, activation="relu", **kw)
            if hidden is not None
            else None
        )
        width = hidden if hidden is not None else in_features
        self.value = NoisyLinear(width, atoms, **kw) if dueling else None
        self.advantage = NoisyLinear(width, num_actions * atoms, **kw)
        self.plain = not noisy and not dueling and hidden is None and atoms == 1
        """One plain linear layer (DQN's head): the forward takes `linear_q` where it can."""

    def forward(
        self, h: torch.Tensor, support: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Q ``[B, A]``, or ``[B, A, Z]`` log-probabilities / raw values, f32.

        With ``support`` ``[Z]`` f32 (needs ``atoms > 1`` and ``log_softmax``): returns
        ``(log_probs, expected_q [B, A])``, from the same launch.

        Raises:
            TypeError, ValueError: from
                [`tritonrl.kernels.noisy_head.noisy_dueling`][tritonrl.kernels.noisy_head.noisy_dueling].
        """
        adv = self.advantage
        if self.plain and support is None and type(adv) is NoisyLinear:  # DQN: one plain layer
            params = adv._parameters  # (its tensors straight from the registry, as params() reads them)
            q = linear_q(h, cast(torch.Tensor, params["weight_mu"]), params["bias_mu"])
            if q is not None:
                return q
        x = self.hidden(h) if self.hidden is not None else h
        res = noisy_dueling(
            x,
            self.advantage.params(),
            self.value.params() if self.value is not None else None,
            num_actions=self.num_actions,
            atoms=self.atoms,
            noise=self.noisy and self.training,
            log_softmax=self.log_softmax,
            support=support,
        )
        if self.atoms == 1:
            assert isinstance(res, torch.Tensor)
            return res.view(res.shape[0], self.num_actions)
        return res

    def expected_q(self, log_probs: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
        """``[B, A]`` f32 expected Q-values ``sum_z exp(log_probs) * support`` of a C51 output."""
        return expected_q(log_probs, support)

    @torch.no_grad()
    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """New noise in every noisy layer (hidden, value, advantage, in that order)."""
        for layer in (self.hidden, self.value, self.advantage):
            if layer is not None:
                layer.reset_noise(generator)
