"""The action heads of the PPO family: categorical, diagonal Gaussian, normalizing flow.

Heads are the f32 boundary; their draws come from a ``generator`` or as ``noise`` made by
``draw`` (how a compiled step takes them). See docs/pages/ppo.md.
"""

from __future__ import annotations

import math
from typing import Any, cast

import torch
from torch import nn
from tritonrl.agents.nets._layers import factory_kwargs, orthogonal_linear

__all__ = ["CategoricalHead", "FlowHead", "GaussianHead", "squash_log_det"]


def _up(t: torch.Tensor) -> torch.Tensor:
    """The heads' output boundary: upcast to f32 (f64 stays f64, so the maths can be tested exactly)."""
    return t if t.dtype == torch.float64 else t.float()


def squash_log_det(u: torch.Tensor, log_scale: torch.Tensor) -> torch.Tensor:
    """``sum_i log(scale_i * (1 - tanh(u_i)^2))`` over the last dim, stable for large ``|u|``."""
    return (2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u)) + log_scale).sum(-1)


def _rsample(
    normal: torch.distributions.Normal, generator: torch.Generator | None, noise: torch.Tensor | None = None
) -> torch.Tensor:
    """``mean + std * eps``, ``eps`` from ``noise`` or drawn from ``generator``."""
    eps = noise if noise is not None else _normal_noise(normal.mean.shape, generator, normal.mean)
    return normal.mean + normal.stddev * eps


def _normal_noise(
    shape: torch.Size | tuple[int, ...], generator: torch.Generator | None, like: torch.Tensor
) -> torch.Tensor:
    """Standard normal draws of ``shape`` in ``like``'s dtype and device."""
    return torch.randn(shape, generator=generator, device=like.device, dtype=like.dtype)


def _f32_side(param: torch.Tensor) -> torch.Tensor:
    """A 0-d tensor of the heads' f32-side dtype and device for ``param``, to draw noise in."""
    return torch.empty((), dtype=_up(param[:0]).dtype, device=param.device)


class CategoricalHead(nn.Module):
    """Logits from features; categorical distribution over ``n`` actions (f32)."""

    def __init__(
        self,
        feature_dim: int,
        n: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.logits = orthogonal_linear(feature_dim, n, 0.01, factory_kwargs(device, dtype))

    def log_probs(self, feat: torch.Tensor) -> torch.Tensor:
        """Normalised log-probabilities ``[..., n]`` f32, in tensor ops (``torch.distributions`` costs
        more than the network at a few environments)."""
        return torch.log_softmax(_up(self.logits(feat)), -1)

    def draw(self, shape: int | tuple[int, ...], generator: torch.Generator | None = None) -> torch.Tensor:
        """The noise `sample` draws for ``shape`` rows: uniforms ``[*shape, n]`` f32 in ``[0, 1)``."""
        lead = (shape,) if isinstance(shape, int) else tuple(shape)
        w = self.logits.weight
        return torch.rand((*lead, w.shape[0]), generator=generator, device=w.device)

    def sample(
        self,
        feat: torch.Tensor,
        deterministic: bool,
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(env_action [B] int64, raw_action [B] int64, logprob [B] f32)`` by Gumbel-max."""
        logp = self.log_probs(feat)
        if deterministic:
            a = logp.argmax(-1)
        else:
            u = noise if noise is not None else self.draw(feat.shape[0], generator)
            u = u.clamp(1e-12, 1.0)
            a = (logp - torch.log(-torch.log(u))).argmax(-1)
        return a, a, logp.gather(-1, a.unsqueeze(-1)).squeeze(-1)

    def greedy(self, feat: torch.Tensor) -> torch.Tensor:
        """The mode: ``[B]`` int64, the env action of ``sample(feat, deterministic=True)``."""
        return self.log_probs(feat).argmax(-1)

    def distribution_params(self, feat: torch.Tensor) -> torch.Tensor:
        """The normalised logits (log-probabilities) ``[B, n]`` f32."""
        return self.log_probs(feat)

    entropy_noise = False
    """Whether `evaluate` draws noise (never: the entropy is exact)."""

    def evaluate(
        self,
        feat: torch.Tensor,
        raw: torch.Tensor,
        generator: torch.Generator | None = None,
        entropy_grad: bool = True,
        noise: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logprob, entropy)`` of stored actions, f32 (exact entropy)."""
        logp = self.log_probs(feat)
        chosen = logp.gather(-1, raw.long().unsqueeze(-1)).squeeze(-1)
        # -sum p log p, with log p clamped to the dtype's lowest value so that 0 * -inf counts as 0
        floor = torch.finfo(logp.dtype).min
        return chosen, -(logp.clamp(min=floor) * logp.softmax(-1)).sum(-1)

    def to_raw(self, action: torch.Tensor) -> torch.Tensor:
        """The raw action behind an env action (identity here)."""
        return action.long()


class _Bounds(nn.Module):
    """Affine map from ``[-1, 1]`` onto ``[low, high]``; f32 buffers in every training dtype (the
    heads' f32 side)."""

    center: torch.Tensor  # buffers, f32 [D]
    scale: torch.Tensor

    def __init__(
        self, low: torch.Tensor, high: torch.Tensor, device: torch.device | str | None = None
    ) -> None:
        super().__init__()
        low = torch.as_tensor(low, dtype=torch.float32, device=device)
        high = torch.as_tensor(high, dtype=torch.float32, device=device)
        self.register_buffer("center", (high + low) / 2, persistent=False)
        self.register_buffer("scale", (high - low) / 2, persistent=False)

    def squash(self, u: torch.Tensor) -> torch.Tensor:
        return self.center + self.scale * torch.tanh(u)

    def unsquash(self, a: torch.Tensor) -> torch.Tensor:
        y = ((_up(a) - self.center) / self.scale).clamp(-1 + 1e-6, 1 - 1e-6)
        return torch.atanh(y)

    def log_det(self, u: torch.Tensor) -> torch.Tensor:
        return squash_log_det(u, torch.log(self.scale))


class GaussianHead(nn.Module):
    """Diagonal Gaussian with state-independent log-std; optional tanh squash onto ``[low, high]``.

    Args:
        feature_dim: input features.
        action_dim: ``D``.
        low: ``[D]`` lower action bounds (needed, and finite, when ``squash``).
        high: ``[D]`` upper action bounds.
        squash: apply ``tanh`` and the affine map, with the log-prob correction.
        log_std_init: initial log standard deviation.
    """

    def __init__(
        self,
        feature_dim: int,
        action_dim: int,
        low: torch.Tensor,
        high: torch.Tensor,
        *,
        squash: bool = False,
        log_std_init: float = 0.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        fk = factory_kwargs(device, dtype)
        self.mean = orthogonal_linear(feature_dim, action_dim, 0.01, fk)
        # The log-std is a parameter like the others, in the training dtype (its f32 master copy
        # lives in the optimizer); it is read through the f32 boundary, so the std is computed in f32.
        self.log_std = nn.Parameter(torch.full((action_dim,), float(log_std_init), **fk))
        self.squash = squash
        self.bounds = _Bounds(low, high, device)

    def _normal(self, feat: torch.Tensor) -> torch.distributions.Normal:
        mean = _up(self.mean(feat))
        return torch.distributions.Normal(mean, _up(self.log_std).exp().expand_as(mean), validate_args=False)

    @property
    def entropy_noise(self) -> bool:
        """Whether `evaluate` draws noise (the squashed entropy estimate, with ``entropy_grad``)."""
        return self.squash

    def draw(self, shape: int | tuple[int, ...], generator: torch.Generator | None = None) -> torch.Tensor:
        """Standard normals ``[*shape, D]`` on the f32 side, for `sample` or `evaluate`."""
        lead = (shape,) if isinstance(shape, int) else tuple(shape)
        return _normal_noise((*lead, self.log_std.shape[0]), generator, _f32_side(self.log_std))

    def sample(
        self,
        feat: torch.Tensor,
        deterministic: bool,
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(env_action [B, D] f32, raw_action u [B, D] f32, logprob [B] f32)``."""
        normal = self._normal(feat)
        u = normal.mean if deterministic else _rsample(normal, generator, noise).detach()
        logp = normal.log_prob(u).sum(-1)
        if not self.squash:
            return u, u, logp
        return self.bounds.squash(u), u, logp - self.bounds.log_det(u)

    def greedy(self, feat: torch.Tensor) -> torch.Tensor:
        """The deterministic env action ``[B, D]`` f32: the mean, squashed where the head squashes."""
        u = _up(self.mean(feat))
        return self.bounds.squash(u) if self.squash else u

    def distribution_params(self, feat: torch.Tensor) -> torch.Tensor:
        """The Gaussian's mean ``[B, D]`` f32 (before any squash)."""
        return _up(self.mean(feat))

    def evaluate(
        self,
        feat: torch.Tensor,
        raw: torch.Tensor,
        generator: torch.Generator | None = None,
        entropy_grad: bool = True,
        noise: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logprob, entropy)`` of raw actions, f32. Squashed: the entropy is a one-sample estimate
        ``-log pi`` of a fresh reparameterised sample, or with ``entropy_grad=False`` the
        detached ``-log pi`` of ``raw``."""
        normal = self._normal(feat)
        logp = normal.log_prob(raw).sum(-1)
        if not self.squash:
            return logp, normal.entropy().sum(-1)
        logp = logp - self.bounds.log_det(raw)
        if not entropy_grad:
            return logp, -logp.detach()
        u = _rsample(normal, generator, noise)
        entropy = -(normal.log_prob(u).sum(-1) - self.bounds.log_det(u))
        return logp, entropy

    def to_raw(self, action: torch.Tensor) -> torch.Tensor:
        """The raw sample behind an env action (``atanh`` of the normalised action when squashed)."""
        return self.bounds.unsquash(action) if self.squash else _up(action)


class _Coupling(nn.Module):
    """One affine coupling layer: ``y_b = x_b * exp(s) + t``, ``(s, t) = net(features, x_a)``."""

    idx_a: torch.Tensor  # buffers, int64: the conditioning and transformed halves, and their inverse order
    idx_b: torch.Tensor
    unperm: torch.Tensor

    def __init__(
        self,
        feature_dim: int,
        idx_a: list[int],
        idx_b: list[int],
        hidden: int,
        max_log_scale: float,
        fk: dict[str, Any],
    ) -> None:
        super().__init__()
        dev = fk["device"]
        self.register_buffer("idx_a", torch.tensor(idx_a, dtype=torch.long, device=dev), persistent=False)
        self.register_buffer("idx_b", torch.tensor(idx_b, dtype=torch.long, device=dev), persistent=False)
        # cat([x_a, x_b])[..., unperm] puts the halves back in place
        order = torch.tensor(idx_a + idx_b, dtype=torch.long, device=dev)
        self.register_buffer("unperm", torch.argsort(order), persistent=False)
        self.split = bool(idx_a)
        self.net = nn.Sequential(
            orthogonal_linear(feature_dim + len(idx_a), hidden, math.sqrt(2), fk),
            nn.Tanh(),
            orthogonal_linear(hidden, 2 * len(idx_b), 0.0, fk),
        )  # identity at init
        self.max_log_scale = max_log_scale

    def _scale_shift(self, feat: torch.Tensor, x_a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # Action halves enter the network here, once, in its dtype; the affine math stays f32.
        inp = torch.cat([feat, x_a.to(feat.dtype)], -1) if x_a.shape[-1] else feat
        s, t = _up(self.net(inp)).chunk(2, -1)
        return self.max_log_scale * torch.tanh(s / self.max_log_scale), t

    def forward(self, feat: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(y, log|det dy/dx|)``; ``x`` f32 ``[..., D]``."""
        if not self.split:
            s, t = self._scale_shift(feat, x[..., :0])
            return x * s.exp() + t, s.sum(-1)
        x_a = x[..., self.idx_a]
        s, t = self._scale_shift(feat, x_a)
        y_b = x[..., self.idx_b] * s.exp() + t
        return torch.cat([x_a, y_b], -1)[..., self.unperm], s.sum(-1)

    def inverse(self, feat: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x, log|det dy/dx|)`` (the forward log-determinant, at the recovered ``x``)."""
        if not self.split:
            s, t = self._scale_shift(feat, y[..., :0])
            return (y - t) * (-s).exp(), s.sum(-1)
        y_a = y[..., self.idx_a]
        s, t = self._scale_shift(feat, y_a)
        x_b = (y[..., self.idx_b] - t) * (-s).exp()
        return torch.cat([y_a, x_b], -1)[..., self.unperm], s.sum(-1)


class FlowHead(nn.Module):
    """Conditional normalizing flow policy over a Gaussian base, with a final tanh squash.

    ``z ~ N(mu(features), diag(sigma^2))``, ``y = f_K o ... o f_1(z)`` (affine couplings
    conditioned on the features), ``a = center + scale * tanh(y)``; the log-prob is exact.
    With ``D = 1`` each coupling is an affine map of the features only.

    Args:
        feature_dim: conditioning features.
        action_dim: ``D``.
        low: finite ``[D]`` lower action bounds.
        high: finite ``[D]`` upper action bounds.
        layers: number of coupling layers ``K``.
        hidden: width of each coupling network.
        log_std_init: initial log-std of the base.
        max_log_scale: soft bound on each coupling's log-scale (``max * tanh(s / max)``).
    """

    def __init__(
        self,
        feature_dim: int,
        action_dim: int,
        low: torch.Tensor,
        high: torch.Tensor,
        *,
        layers: int = 4,
        hidden: int = 64,
        log_std_init: float = 0.0,
        max_log_scale: float = 2.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        fk = factory_kwargs(device, dtype)
        self.base_mean = orthogonal_linear(feature_dim, action_dim, 0.01, fk)
        # In the training dtype, read through the f32 boundary (as GaussianHead.log_std).
        self.log_std = nn.Parameter(torch.full((action_dim,), float(log_std_init), **fk))
        half = action_dim // 2
        first, second = list(range(half)), list(range(half, action_dim))
        couplings = []
        for k in range(layers):
            a, b = (first, second) if k % 2 == 0 else (second, first)
            if not b:  # D == 1: transform the only dimension, conditioned on features alone
                a, b = [], list(range(action_dim))
            couplings.append(_Coupling(feature_dim, a, b, hidden, max_log_scale, fk))
        self.couplings = nn.ModuleList(couplings)
        self.bounds = _Bounds(low, high, device)

    def _base(self, feat: torch.Tensor) -> torch.distributions.Normal:
        mean = _up(self.base_mean(feat))
        return torch.distributions.Normal(mean, _up(self.log_std).exp().expand_as(mean), validate_args=False)

    def _forward_flow(self, feat: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_det = torch.zeros(z.shape[:-1], dtype=z.dtype, device=z.device)
        for c in self.couplings:
            z, ld = c(feat, z)
            log_det = log_det + ld
        return z, log_det

    def log_prob_raw(self, feat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Log-density of the pre-squash flow output ``y`` ``[B, D]`` (f32)."""
        x = _up(y)
        log_det = torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)
        for c in reversed(self.couplings):
            # self.couplings holds only _Coupling layers (built above); ModuleList is not generic
            x, ld = cast(_Coupling, c).inverse(feat, x)
            log_det = log_det + ld
        return self._base(feat).log_prob(x).sum(-1) - log_det

    entropy_noise = True
    """Whether `evaluate` draws noise (the entropy estimate, with ``entropy_grad``)."""

    def draw(self, shape: int | tuple[int, ...], generator: torch.Generator | None = None) -> torch.Tensor:
        """The noise `sample` or `evaluate` draws (see `GaussianHead.draw`)."""
        lead = (shape,) if isinstance(shape, int) else tuple(shape)
        return _normal_noise((*lead, self.log_std.shape[0]), generator, _f32_side(self.log_std))

    def sample(
        self,
        feat: torch.Tensor,
        deterministic: bool,
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(env_action [B, D] f32, raw y [B, D] f32, logprob [B] f32)``; deterministic: the base
        mean through the flow."""
        base = self._base(feat)
        z = base.mean if deterministic else _rsample(base, generator, noise)
        y, log_det = self._forward_flow(feat, z)
        logp = base.log_prob(z).sum(-1) - log_det - self.bounds.log_det(y)
        return self.bounds.squash(y), y, logp

    def greedy(self, feat: torch.Tensor) -> torch.Tensor:
        """The deterministic env action ``[B, D]`` f32: the base mean through the flow, squashed."""
        y, _ = self._forward_flow(feat, _up(self.base_mean(feat)))
        return self.bounds.squash(y)

    def distribution_params(self, feat: torch.Tensor) -> torch.Tensor:
        """The base Gaussian's mean ``[B, D]`` f32."""
        return _up(self.base_mean(feat))

    def evaluate(
        self,
        feat: torch.Tensor,
        raw: torch.Tensor,
        generator: torch.Generator | None = None,
        entropy_grad: bool = True,
        noise: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logprob, entropy)``: exact log-prob of stored ``y``; entropy estimated as in
        [`GaussianHead.evaluate`][tritonrl.agents.nets.policy_heads.GaussianHead.evaluate]."""
        logp = self.log_prob_raw(feat, raw) - self.bounds.log_det(_up(raw))
        if not entropy_grad:
            return logp, -logp.detach()
        base = self._base(feat)
        z = _rsample(base, generator, noise)
        y, log_det = self._forward_flow(feat, z)
        entropy = -(base.log_prob(z).sum(-1) - log_det - self.bounds.log_det(y))
        return logp, entropy

    def to_raw(self, action: torch.Tensor) -> torch.Tensor:
        """``y = atanh`` of the normalised env action."""
        return self.bounds.unsquash(action)
