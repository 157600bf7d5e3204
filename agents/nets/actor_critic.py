"""Actor-critic networks of the PPO family: cores (feed-forward, LSTM, Mamba2) and action heads.

An :class:`ActorCritic` is a *core* that turns observations into features (and, if recurrent,
carries a memory), an *action head* that turns actor features into a distribution, and a linear
critic. Every module takes ``device`` and ``dtype`` (default ``training_dtype(device)``) and creates
its parameters there, in that dtype (CONTRIBUTING.md, "Precision": never built in f32 and cast afterwards).
The heads are the f32 boundary: network outputs are upcast once there and every log-prob,
entropy and value leaves in f32. What stays f32 in every training dtype, and why: the action
bounds of the squashing heads (buffers used on the f32 side of that boundary); the observation
statistics (owned by the agent) and Mamba2's SSM state (see :mod:`tritonrl.agents.nets.mamba2`).

Random draws: a head's ``sample`` (and the entropy estimate of the squashed heads' ``evaluate``)
draws from a ``generator``, or takes the same draw made beforehand as ``noise``
(:meth:`CategoricalHead.draw` and the others make it): that is how a compiled policy step gets its
randomness, since ``torch.compile`` cannot trace a call that takes a generator.

Action heads (each returns the *raw* action it samples, which is what PPO stores and scores):

- :class:`CategoricalHead`: ``Discrete(n)``; raw action = env action (int64).
- :class:`GaussianHead`: ``Box``; diagonal Gaussian with a state-independent log-std. With
  ``squash=True`` the sample ``u`` goes through ``tanh`` and an affine map onto ``[low, high]``,
  and the log-prob gets the change-of-variables correction
  ``- sum log(scale * (1 - tanh(u)^2))``; raw action = ``u``.
- :class:`FlowHead`: ``Box``; a RealNVP-style normalizing flow: a Gaussian base (mean from the
  features, state-independent log-std), then affine coupling layers whose scale and shift are
  computed from the observation features and the other half of the action, then the tanh squash.
  The log-prob is exact: base log-density minus the log-determinants. Raw action = the pre-tanh
  flow output.

Cores:

- :class:`FeedForwardCore`: separate actor and critic MLPs (tanh, orthogonal init), as in CleanRL;
  built by :class:`tritonrl.agents.nets.torsos.MLP`, the MLP builder DQN's torsos use too.
- :class:`LSTMCore`, :class:`GRUCore`: MLP encoder, ``LSTMCell``/``GRUCell`` memory shared by
  actor and critic; the memory resets where an observation starts an episode. Acting steps the
  cell; training splits the sequences at episode starts and runs torch's fused ``lstm``/``gru``
  once over all the pieces (:func:`subsequence_layout` sizes that layout).
- :class:`Mamba2Core`: linear encoder, :class:`tritonrl.agents.nets.mamba2.Mamba2Block` with resets at episode
  starts; sequences in training, the single-step form when acting.
"""

from __future__ import annotations

import abc
import math
from typing import Any, cast

import torch
from torch import nn
from tritonrl.agents.nets.mamba2 import Mamba2Block
from tritonrl.agents.nets.torsos import MLP, init_linear_, init_orthogonal_
from tritonrl.toolkit.precision import dtype_or_default

__all__ = [
    "ActorCritic",
    "CategoricalHead",
    "FeedForwardCore",
    "FlowHead",
    "GRUCore",
    "GaussianHead",
    "LSTMCore",
    "Mamba2Core",
    "squash_log_det",
    "subsequence_layout",
    "subsequence_stats",
]

State = Any  # a tuple of tensors with the batch as their first dimension, or None


def _up(t: torch.Tensor) -> torch.Tensor:
    """The heads' output boundary: upcast to f32 (f64 stays f64, so the maths can be tested exactly)."""
    return t if t.dtype == torch.float64 else t.float()


def _fk(device: torch.device | str | None, dtype: torch.dtype | None) -> dict[str, Any]:
    """Factory kwargs for parameters: ``device`` and ``dtype`` (default ``training_dtype(device)``)."""
    return {"device": device, "dtype": dtype_or_default(dtype, device)}


def _linear(n_in: int, n_out: int, gain: float, fk: dict[str, Any]) -> nn.Linear:
    """A linear layer created in ``fk``'s device and dtype, orthogonal weight with ``gain``, zero bias."""
    return init_linear_(nn.Linear(n_in, n_out, **fk), gain)


def _tanh_mlp(in_dim: int, hidden: tuple[int, ...], fk: dict[str, Any]) -> MLP:
    """PPO's MLPs: ``Linear -> tanh`` layers of sizes ``hidden``, orthogonal init with gain sqrt(2)."""
    return MLP(in_dim, hidden, activation="tanh", orthogonal_gain=math.sqrt(2), **fk)


def squash_log_det(u: torch.Tensor, log_scale: torch.Tensor) -> torch.Tensor:
    """``sum_i log(scale_i * (1 - tanh(u_i)^2))`` over the last dim, in a form stable for large ``|u|``.

    ``log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2u))``.
    """
    return (2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u)) + log_scale).sum(-1)


# ----------------------------------------------------------------------------- heads


def _rsample(
    normal: torch.distributions.Normal, generator: torch.Generator | None, noise: torch.Tensor | None = None
) -> torch.Tensor:
    """A reparameterised sample ``mean + std * eps``: ``eps`` is ``noise`` when given, else drawn
    from ``generator`` (the same draw as :func:`_normal_noise`)."""
    eps = noise if noise is not None else _normal_noise(normal.mean.shape, generator, normal.mean)
    return normal.mean + normal.stddev * eps


def _normal_noise(
    shape: torch.Size | tuple[int, ...], generator: torch.Generator | None, like: torch.Tensor
) -> torch.Tensor:
    """Standard normal draws of ``shape`` in ``like``'s dtype and device."""
    return torch.randn(shape, generator=generator, device=like.device, dtype=like.dtype)


def _f32_side(param: torch.Tensor) -> torch.Tensor:
    """A 0-d tensor with the dtype and device of the heads' f32 side for parameters like ``param``
    (what :func:`_up` makes of them), to draw noise in."""
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
        self.logits = _linear(feature_dim, n, 0.01, _fk(device, dtype))

    def log_probs(self, feat: torch.Tensor) -> torch.Tensor:
        """Normalised log-probabilities ``[..., n]`` f32 (``log_softmax`` of the logits).

        The distribution is written out in tensor ops rather than built as a
        ``torch.distributions.Categorical`` (the same distribution to rounding): at a few
        environments per step its construction, ``logsumexp`` and ``log_prob`` cost more than the
        network.
        """
        return torch.log_softmax(_up(self.logits(feat)), -1)

    def draw(self, shape: int | tuple[int, ...], generator: torch.Generator | None = None) -> torch.Tensor:
        """The noise :meth:`sample` draws for ``shape`` rows (an int: the batch): uniforms
        ``[*shape, n]`` f32 in ``[0, 1)``."""
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
        """``(env_action [B] int64, raw_action [B] int64, logprob [B] f32)`` (Gumbel-max sampling;
        ``noise``: the uniforms of :meth:`draw`, else drawn from ``generator``)."""
        logp = self.log_probs(feat)
        if deterministic:
            a = logp.argmax(-1)
        else:
            u = noise if noise is not None else self.draw(feat.shape[0], generator)
            u = u.clamp(1e-12, 1.0)
            a = (logp - torch.log(-torch.log(u))).argmax(-1)
        return a, a, logp.gather(-1, a.unsqueeze(-1)).squeeze(-1)

    entropy_noise = False
    """Whether :meth:`evaluate` draws noise (never: the entropy is exact)."""

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
    """Affine map from ``[-1, 1]`` onto ``[low, high]``.

    The buffers are f32 in every training dtype, on purpose: the map and its log-determinant act
    on the heads' f32 side (after the upcast), where the log-prob corrections are computed.
    """

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
        device: where the parameters live.
        dtype: the parameter dtype (default ``training_dtype(device)``).
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
        fk = _fk(device, dtype)
        self.mean = _linear(feature_dim, action_dim, 0.01, fk)
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
        """Whether :meth:`evaluate` draws noise (the squashed entropy estimate, with ``entropy_grad``)."""
        return self.squash

    def draw(self, shape: int | tuple[int, ...], generator: torch.Generator | None = None) -> torch.Tensor:
        """The noise :meth:`sample` (``shape`` = batch rows) or :meth:`evaluate` (``shape`` = the
        raw actions' leading dims) draws: standard normals ``[*shape, D]`` on the f32 side."""
        lead = (shape,) if isinstance(shape, int) else tuple(shape)
        return _normal_noise((*lead, self.log_std.shape[0]), generator, _f32_side(self.log_std))

    def sample(
        self,
        feat: torch.Tensor,
        deterministic: bool,
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(env_action [B, D] f32, raw_action u [B, D] f32, logprob [B] f32)`` (``noise``: the
        draw of :meth:`draw`, else drawn from ``generator``)."""
        normal = self._normal(feat)
        u = normal.mean if deterministic else _rsample(normal, generator, noise).detach()
        logp = normal.log_prob(u).sum(-1)
        if not self.squash:
            return u, u, logp
        return self.bounds.squash(u), u, logp - self.bounds.log_det(u)

    def evaluate(
        self,
        feat: torch.Tensor,
        raw: torch.Tensor,
        generator: torch.Generator | None = None,
        entropy_grad: bool = True,
        noise: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logprob, entropy)`` of raw actions, f32. Squashed: no closed form; the entropy is a
        one-sample estimate ``-log pi`` of a reparameterised fresh sample (``noise``: its draw,
        :meth:`draw` of ``raw``'s leading dims, else drawn from ``generator``), or, with
        ``entropy_grad=False`` (no entropy bonus), the cheap detached ``-log pi`` of ``raw``."""
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
            _linear(feature_dim + len(idx_a), hidden, math.sqrt(2), fk),
            nn.Tanh(),
            _linear(hidden, 2 * len(idx_b), 0.0, fk),
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
    conditioned on the features; the split alternates), ``a = center + scale * tanh(y)``::

        log pi(a) = log N(z) - sum_k log|det J_k| - sum_i log(scale_i * (1 - tanh(y_i)^2))

    With ``D = 1`` nothing can be split and each coupling is an affine map conditioned on the
    features only (the policy is then a tanh-squashed, state-dependent Gaussian).

    Args:
        feature_dim: conditioning features.
        action_dim: ``D``.
        low: finite ``[D]`` lower action bounds.
        high: finite ``[D]`` upper action bounds.
        layers: number of coupling layers ``K``.
        hidden: width of each coupling network.
        log_std_init: initial log-std of the base.
        max_log_scale: soft bound on each coupling's log-scale (``max * tanh(s / max)``).
        device: where the parameters live.
        dtype: the parameter dtype (default ``training_dtype(device)``).
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
        fk = _fk(device, dtype)
        self.base_mean = _linear(feature_dim, action_dim, 0.01, fk)
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
    """Whether :meth:`evaluate` draws noise (the entropy estimate, with ``entropy_grad``)."""

    def draw(self, shape: int | tuple[int, ...], generator: torch.Generator | None = None) -> torch.Tensor:
        """The noise :meth:`sample` or :meth:`evaluate` draws (see :meth:`GaussianHead.draw`)."""
        lead = (shape,) if isinstance(shape, int) else tuple(shape)
        return _normal_noise((*lead, self.log_std.shape[0]), generator, _f32_side(self.log_std))

    def sample(
        self,
        feat: torch.Tensor,
        deterministic: bool,
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(env_action [B, D] f32, raw y [B, D] f32, logprob [B] f32)`` (``noise``: the draw of
        :meth:`draw`, else drawn from ``generator``).

        Deterministic: the base mean pushed through the flow (not the exact mode of the flow).
        """
        base = self._base(feat)
        z = base.mean if deterministic else _rsample(base, generator, noise)
        y, log_det = self._forward_flow(feat, z)
        logp = base.log_prob(z).sum(-1) - log_det - self.bounds.log_det(y)
        return self.bounds.squash(y), y, logp

    def evaluate(
        self,
        feat: torch.Tensor,
        raw: torch.Tensor,
        generator: torch.Generator | None = None,
        entropy_grad: bool = True,
        noise: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logprob, entropy)``: exact log-prob of stored ``y``; the entropy is estimated as ``-log pi``
        of a reparameterised fresh sample (``noise``: its draw, else drawn from ``generator``), or,
        with ``entropy_grad=False``, the detached ``-log pi(raw)``."""
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


# ----------------------------------------------------------------------------- cores


class FeedForwardCore(nn.Module):
    """Separate actor and critic MLPs over the observation (tanh, orthogonal init; identity for
    ``hidden=()``).

    Raises:
        ValueError: a layer size below 1.
    """

    recurrent = False

    def __init__(
        self,
        obs_dim: int,
        hidden: tuple[int, ...],
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        fk = _fk(device, dtype)
        self.actor = _tanh_mlp(obs_dim, hidden, fk)
        self.critic = _tanh_mlp(obs_dim, hidden, fk)
        self.feature_dim = hidden[-1] if hidden else obs_dim

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [..., obs_dim]`` -> ``(actor features, critic features)``."""
        return self.actor(x), self.critic(x)


def _mask_state(state: tuple[torch.Tensor, ...], starts: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Zero the memory of batch rows where ``starts`` ([B] bool) is set."""
    return tuple(torch.where(starts.view(-1, *([1] * (s.dim() - 1))), torch.zeros_like(s), s) for s in state)


def _pieces(starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``starts [B, L]`` bool cut into sub-sequences (row ``b`` splits at every ``t > 0`` where
    ``starts[b, t]``): ``(count [B]: sub-sequences per row, piece [B, L]: the index of each step's
    sub-sequence within its row, tau [B, L]: its position within that sub-sequence)``, int64,
    computed with cumulative sums (nothing read on the host)."""
    t = torch.arange(starts.shape[1], device=starts.device)
    begins = torch.cat([torch.ones_like(starts[:, :1]), starts[:, 1:]], 1)  # [B, L]
    piece = begins.cumsum(1) - 1
    tau = t - torch.where(begins, t, 0).cummax(1).values  # steps since the sub-sequence began
    return piece[:, -1] + 1, piece, tau


def subsequence_stats(starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of ``starts [S, L]`` bool: ``(count [S], longest [S])`` int64, the number of
    sub-sequences the row is split into at its episode starts after step 0 and the length of the
    longest one (device tensors: nothing read on the host). A batch of rows needs the layout
    ``(count.sum(), longest.max())`` in :meth:`LSTMCore.sequence`.

    Raises:
        ValueError: ``starts`` is not 2-d bool with at least one step.
    """
    if starts.dim() != 2 or starts.dtype != torch.bool or starts.shape[1] < 1:
        raise ValueError(f"starts must be [S, L >= 1] bool, got {tuple(starts.shape)} {starts.dtype}")
    count, _, tau = _pieces(starts)
    return count, tau.amax(1) + 1


def subsequence_layout(starts: torch.Tensor) -> tuple[int, int]:
    """``(rows, length)`` of the padded layout of ``starts [B, L]``'s sub-sequences (see
    :meth:`LSTMCore.sequence`): how many there are, and the longest one's length.

    Reads two integers on the host in one transfer: free on a CPU, a device synchronisation on
    CUDA. :class:`tritonrl.agents.ppo.PPOAgent` does not call this per minibatch: it reads the
    layouts of all the minibatches of an update at once (one read per update).

    Raises:
        ValueError: ``starts`` is not 2-d bool with at least one step.
    """
    count, longest = subsequence_stats(starts)
    rows, length = torch.stack([count.sum(), longest.amax()]).tolist()
    return int(rows), int(length)


class _RecurrentCore(nn.Module, abc.ABC):
    """``obs -> MLP encoder -> recurrent cell``; features shared by actor and critic.

    The shared code of :class:`LSTMCore` and :class:`GRUCore`. Acting steps the cell once per
    call (:meth:`step`); training runs whole sequences through the fused multi-step op
    (:meth:`sequence`), split exactly at episode starts; :meth:`sequence_stepwise` is the
    step-by-step computation it equals (the reference of the tests).
    """

    recurrent = True
    supports_initial_state = True  # sequences may start from a stored memory
    splits_at_starts = True  # sequence() takes a ``layout`` (see subsequence_layout)
    cell: nn.LSTMCell | nn.GRUCell
    state_tensors: int  # tensors in the state: (h, c) or (h,)

    def __init__(
        self,
        obs_dim: int,
        hidden: tuple[int, ...],
        size: int,
        cell: type[nn.LSTMCell] | type[nn.GRUCell],
        fk: dict[str, Any],
    ) -> None:
        super().__init__()
        self.encoder = _tanh_mlp(obs_dim, hidden, fk)
        self.cell = cell(hidden[-1] if hidden else obs_dim, size, **fk)
        for name, p in self.cell.named_parameters():
            if "bias" in name:
                nn.init.zeros_(p)
            else:
                init_orthogonal_(p, 1.0)
        self.size = size
        self.feature_dim = size

    # the two things an LSTM and a GRU do differently

    @abc.abstractmethod
    def _cell_step(self, x: torch.Tensor, state: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """One cell step: ``x [B, D]``, state -> new state (its first tensor is the output ``h``)."""

    @abc.abstractmethod
    def _fused(self, x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """The cell run over ``x [R, L, D]`` (batch first) from ``state [n, R, size]`` (the state's
        tensors stacked): outputs ``[R, L, size]``, by torch's fused op with the cell's own weights."""

    def _weights(self) -> list[torch.Tensor]:
        c = self.cell
        return [c.weight_ih, c.weight_hh, c.bias_ih, c.bias_hh]

    # shared

    def initial_state(self, batch: int) -> tuple[torch.Tensor, ...]:
        """Zero memory for ``batch`` rows (``[batch, size]`` each, in the parameters' dtype)."""
        w = self.cell.weight_hh
        return tuple(
            torch.zeros(batch, self.size, dtype=w.dtype, device=w.device) for _ in range(self.state_tensors)
        )

    def step(
        self, x: torch.Tensor, state: tuple[torch.Tensor, ...], starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
        """One step: ``x [B, obs_dim]``, ``starts [B]`` bool (memory reset first where set) ->
        ``(actor feat, critic feat, new state)``, features ``[B, size]``."""
        state = self._cell_step(self.encoder(x), _mask_state(state, starts))
        return state[0], state[0], state

    def sequence(
        self,
        x: torch.Tensor,
        starts: torch.Tensor,
        state: tuple[torch.Tensor, ...],
        layout: tuple[int, int] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Features of whole sequences, memory reset at episode starts, in one fused recurrence.

        ``x [B, L, obs_dim]``, ``starts [B, L]`` bool, ``state`` the memory before step 0 (``[B,
        size]`` each) -> features ``[B, L, size]`` (twice: actor and critic share them). Equals
        :meth:`sequence_stepwise` up to f32 rounding (the fused op sums the gates' matrix products
        in another order: ~1e-6 relative), gradients included.

        Each row is split at its starts after step 0 into sub-sequences: the first one starts from
        ``state`` (from zero if ``starts[b, 0]``), later ones from zero. They become the rows of a
        right-padded ``[rows, length, D]`` tensor (a recurrence is causal: the padding after a
        sub-sequence never reaches its outputs), the fused op runs once over all of them, and the
        outputs go back to their places. Where each step goes is computed with tensor ops; the
        layout's size must be known on the host: ``layout = (rows, length)``, the number of
        sub-sequences and the longest one's length (:func:`subsequence_stats` gives them per row;
        larger values only add zero padding), or ``None`` to measure it here
        (:func:`subsequence_layout`: one host read, a device synchronisation on CUDA). A layout
        smaller than the data is an error of the caller (an index error; a device assert on CUDA).

        Under ``torch.compile`` this part runs eagerly (a graph break): the layout's size changes
        with the data, and a graph per size would recompile without end. (PPO calls it outside its
        compiled loss and passes the features in.)
        """
        return _run_split(self, self.encoder(x), starts, tuple(state), layout)

    def sequence_stepwise(
        self, x: torch.Tensor, starts: torch.Tensor, state: tuple[torch.Tensor, ...]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`sequence` computed one step at a time, masking the memory where ``starts``
        (the reference it is tested against; slow: one cell call per step)."""
        enc = self.encoder(x)
        out = []
        s = tuple(state)
        for t in range(x.shape[1]):
            s = self._cell_step(enc[:, t], _mask_state(s, starts[:, t]))
            out.append(s[0])
        feat = torch.stack(out, 1)
        return feat, feat


@torch.compiler.disable
def _run_split(
    core: _RecurrentCore,
    enc: torch.Tensor,
    starts: torch.Tensor,
    state: tuple[torch.Tensor, ...],
    layout: tuple[int, int] | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:meth:`_RecurrentCore.sequence` after the encoder: split, pad, one fused run, scatter back."""
    B, L, D = enc.shape
    rows, length = layout if layout is not None else subsequence_layout(starts)
    count, piece, tau = _pieces(starts)
    first = count.cumsum(0) - count  # [B]: layout row of each row's first sub-sequence
    flat = ((first[:, None] + piece) * length + tau).reshape(-1)  # [B * L] into [rows * length]
    x = enc.new_zeros(rows * length, D).index_copy(0, flat, enc.reshape(B * L, D)).view(rows, length, D)
    # the first sub-sequence of a row continues the stored memory (zero where the row starts an
    # episode); later ones start from zero
    stored = torch.stack(state).masked_fill(starts[None, :, :1], 0)  # [n, B, size]
    init = stored.new_zeros(len(state), rows, stored.shape[2]).index_copy(1, first, stored)
    y = core._fused(x, init)  # [rows, length, size]
    feat = y.reshape(rows * length, -1).index_select(0, flat).view(B, L, -1)
    return feat, feat


class LSTMCore(_RecurrentCore):
    """``obs -> MLP encoder -> LSTMCell``; features shared by actor and critic.

    State: ``(h, c)``, each ``[B, size]`` in the parameters' dtype. Acting steps the
    ``LSTMCell`` (checkpoint keys ``cell.weight_ih`` ...); training runs the same weights
    through ``torch.lstm`` (cuDNN on CUDA) over sequences split at episode starts (see
    :meth:`sequence`).

    Raises:
        ValueError: a layer size below 1.
    """

    state_tensors = 2

    def __init__(
        self,
        obs_dim: int,
        hidden: tuple[int, ...],
        size: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(obs_dim, hidden, size, nn.LSTMCell, _fk(device, dtype))

    def _cell_step(self, x: torch.Tensor, state: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        h, c = state
        return tuple(self.cell(x, (h, c)))

    def _fused(self, x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        hx = (state[0:1], state[1:2])  # [num_layers = 1, R, size] each
        # (input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
        return torch.lstm(x, hx, self._weights(), True, 1, 0.0, torch.is_grad_enabled(), False, True)[0]


class GRUCore(_RecurrentCore):
    """``obs -> MLP encoder -> GRUCell``; features shared by actor and critic.

    State: ``(h,)``, ``[B, size]`` in the parameters' dtype. Acting steps the ``GRUCell``;
    training runs the same weights through ``torch.gru`` (cuDNN on CUDA) over sequences split at
    episode starts (see :meth:`LSTMCore.sequence`).

    Raises:
        ValueError: a layer size below 1.
    """

    state_tensors = 1

    def __init__(
        self,
        obs_dim: int,
        hidden: tuple[int, ...],
        size: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(obs_dim, hidden, size, nn.GRUCell, _fk(device, dtype))

    def _cell_step(self, x: torch.Tensor, state: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        return (self.cell(x, state[0]),)

    def _fused(self, x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        # (input, hx [num_layers = 1, R, size], params, has_biases, num_layers, dropout, train,
        # bidirectional, batch_first)
        return torch.gru(x, state, self._weights(), True, 1, 0.0, torch.is_grad_enabled(), False, True)[0]


class Mamba2Core(nn.Module):
    """``obs -> Linear -> Mamba2Block (+ residual) -> LayerNorm``; features shared by actor and critic.

    Trains on whole sequences with resets at episode starts (the chunked scan), each sequence
    starting from the memory stored when it was collected, and acts with the block's single-step
    form. State: :class:`tritonrl.agents.nets.mamba2.Mamba2State` (conv window, f32 SSM state).
    """

    recurrent = True
    supports_initial_state = True

    def __init__(
        self,
        obs_dim: int,
        d_model: int,
        *,
        d_state: int = 16,
        d_conv: int = 4,
        expand: int = 2,
        headdim: int = 16,
        chunk_size: int = 64,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        fk = _fk(device, dtype)
        self.encoder = _linear(obs_dim, d_model, math.sqrt(2), fk)
        self.block = Mamba2Block(
            d_model,
            d_state=d_state,
            d_conv=d_conv,
            expand=expand,
            headdim=headdim,
            chunk_size=chunk_size,
            **fk,
        )
        self.norm = nn.LayerNorm(d_model, **fk)
        self.feature_dim = d_model

    def initial_state(self, batch: int) -> Any:
        """The block's zero state for ``batch`` rows."""
        return self.block.initial_state(batch)

    def step(
        self, x: torch.Tensor, state: Any, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """One step with memory reset where ``starts``: ``x [B, obs_dim]`` -> ``(feat, feat, state)``."""
        u = torch.tanh(self.encoder(x))
        y, state = self.block.step(u, state, starts)
        feat = self.norm(u + y)
        return feat, feat, state

    def sequence(
        self, x: torch.Tensor, starts: torch.Tensor, state: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [B, L, obs_dim]``, ``starts [B, L]``, memory at step 0 -> features ``[B, L, d_model]``
        (twice: actor and critic share them)."""
        u = torch.tanh(self.encoder(x))
        feat = self.norm(u + self.block(u, starts, state=state))
        return feat, feat


# ----------------------------------------------------------------------------- actor-critic


class ActorCritic(nn.Module):
    """A core, an action head and a linear critic (see the module docstring).

    ``device`` and ``dtype`` (default ``training_dtype(device)``) are the critic's; pass the ones
    the core and the head were created with.
    """

    def __init__(
        self,
        core: FeedForwardCore | LSTMCore | GRUCore | Mamba2Core,
        head: CategoricalHead | GaussianHead | FlowHead,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        # Any: only recurrent cores (LSTMCore, GRUCore, Mamba2Core) have step/sequence/initial_state, and the
        # ``recurrent`` flag, not the class, picks those calls; no one static type fits every core.
        self.core: Any = core
        self.head: CategoricalHead | GaussianHead | FlowHead = head  # sample/evaluate/to_raw on all three
        self.critic = _linear(core.feature_dim, 1, 1.0, _fk(device, dtype))

    @property
    def recurrent(self) -> bool:
        """Whether the core carries a memory."""
        return bool(getattr(self.core, "recurrent", False))

    def initial_state(self, batch: int) -> State:
        """Zero memory for ``batch`` rows (``None`` for feed-forward cores)."""
        return self.core.initial_state(batch) if self.recurrent else None

    def _features(self, x: torch.Tensor, state: State, starts: torch.Tensor | None):
        if self.recurrent:
            return self.core.step(x, state, starts)
        a, c = self.core(x)
        return a, c, None

    def act(
        self,
        x: torch.Tensor,
        state: State,
        starts: torch.Tensor | None,
        deterministic: bool,
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
    ):
        """``x [B, obs_dim]`` -> ``(env_action, raw_action, logprob f32, value f32 [B], new_state)``
        (``noise``: the head's draw for ``B`` rows, ``head.draw(B)``, else drawn from ``generator``)."""
        fa, fc, state = self._features(x, state, starts)
        env_a, raw, logp = self.head.sample(fa, deterministic, generator, noise)
        return env_a, raw, logp, self.critic(fc).float().squeeze(-1), state

    def value(self, x: torch.Tensor, state: State, starts: torch.Tensor | None) -> torch.Tensor:
        """``V(x)`` ``[B]`` f32 after one step from ``state`` (the state itself is not advanced)."""
        _, fc, _ = self._features(x, state, starts)
        return self.critic(fc).float().squeeze(-1)

    def evaluate(
        self,
        x: torch.Tensor,
        raw: torch.Tensor,
        starts: torch.Tensor | None = None,
        state: State = None,
        generator: torch.Generator | None = None,
        entropy_grad: bool = True,
        noise: torch.Tensor | None = None,
        layout: tuple[int, int] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(logprob, entropy, value)`` (f32) of stored raw actions.

        Feed-forward: ``x [N, obs_dim]``, ``raw [N, ...]`` -> ``[N]`` each. Recurrent: sequences
        ``x [B, L, obs_dim]``, ``raw [B, L, ...]``, ``starts [B, L]``, ``state`` at step 0 ->
        ``[B, L]`` each. ``entropy_grad=False`` lets sample-based heads return a cheap detached
        estimate (when no entropy bonus is trained). ``noise``: the entropy estimate's draw
        (``head.draw(raw.shape[:-1])`` where ``head.entropy_noise``), else drawn from ``generator``.
        ``layout``: see :meth:`features`.
        """
        fa, fc = self.features(x, starts, state, layout)
        return self.evaluate_features(fa, fc, raw, generator, entropy_grad, noise)

    def features(
        self,
        x: torch.Tensor,
        starts: torch.Tensor | None = None,
        state: State = None,
        layout: tuple[int, int] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(actor features, critic features)`` of ``x`` (shapes as in :meth:`evaluate`).
        ``layout``: for cores that split sequences at episode starts (``core.splits_at_starts``:
        LSTM, GRU), the size of their padded layout (see :meth:`LSTMCore.sequence`); ``None``:
        measured by the core (one host read)."""
        if not self.recurrent:
            return self.core(x)
        if layout is not None:
            return self.core.sequence(x, starts, state, layout=layout)
        return self.core.sequence(x, starts, state)

    def evaluate_features(
        self,
        fa: torch.Tensor,
        fc: torch.Tensor,
        raw: torch.Tensor,
        generator: torch.Generator | None = None,
        entropy_grad: bool = True,
        noise: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`evaluate` from the features of :meth:`features`: ``(logprob, entropy, value)`` f32."""
        logp, entropy = self.head.evaluate(fa, raw, generator, entropy_grad, noise)
        return logp, entropy, self.critic(fc).float().squeeze(-1)
