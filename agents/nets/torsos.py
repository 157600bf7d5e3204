"""Torso building blocks: observation -> feature vector, and the one MLP builder of both families.

Parameters in the dtype given, no cast in ``forward``. See docs/pages/dqn.md ("Torsos").
"""

from __future__ import annotations

import math
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.module import _global_forward_hooks, _global_forward_pre_hooks
from tritonrl.agents.nets.tcn import TCNEncoder
from tritonrl.toolkit.precision import dtype_or_default

__all__ = [
    "ACTIVATIONS",
    "MLP",
    "AttentionTorso",
    "MLPTorso",
    "ResidualMLPTorso",
    "SequenceTorso",
    "SpectralLinear",
    "TORSO_KINDS",
    "build_torso",
    "init_linear_",
    "init_orthogonal_",
]

TORSO_KINDS = ("mlp", "resmlp", "attention", "tcn")
NORMS = ("none", "rmsnorm")
ACTIVATIONS = {"relu": torch.relu, "tanh": torch.tanh}
_LinearT = TypeVar("_LinearT", bound="nn.Linear | SpectralLinear")


def init_orthogonal_(weight: torch.Tensor, gain: float = 1.0) -> torch.Tensor:
    """Fill ``weight`` with a (semi-)orthogonal matrix times ``gain``, in place; bf16 weights get the
    f32 matrix rounded once (QR has no bf16 kernel)."""
    with torch.no_grad():
        if weight.dtype in (torch.float32, torch.float64):
            return nn.init.orthogonal_(weight, gain)
        full = torch.empty(weight.shape, device=weight.device, dtype=torch.float32)
        return weight.copy_(nn.init.orthogonal_(full, gain))


def init_linear_(layer: _LinearT, gain: float) -> _LinearT:
    """Orthogonal weight with ``gain`` and zero bias for a linear ``layer`` (in place); returns it."""
    init_orthogonal_(layer.weight, gain)
    bias = getattr(layer, "bias", None)
    if bias is not None:
        nn.init.zeros_(bias)
    return layer


class SpectralLinear(nn.Module):
    """``y = x W^T / sigma(W) + b``, ``sigma`` the largest singular value of ``W``: ``[..., in] ->
    [..., out]``.

    One power-iteration step per training forward with gradients (``u`` a buffer); gradients
    flow through ``sigma``, not the iteration.
    """

    weight: torch.Tensor  # nn.Parameters (taken from an nn.Linear, whose attributes torch types as Tensor)
    bias: torch.Tensor | None
    u: torch.Tensor  # buffer: the left singular vector estimate [out_features]

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        bias: bool = True,
        eps: float = 1e-6,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        dtype = dtype_or_default(dtype, device)
        lin = nn.Linear(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.weight = lin.weight
        self.bias = lin.bias
        self.eps = eps
        u = torch.randn(out_features, device=device, dtype=torch.float32)
        self.register_buffer("u", F.normalize(u, dim=0, eps=eps).to(self.weight.dtype))
        self.in_features, self.out_features = in_features, out_features

    def sigma(self) -> torch.Tensor:
        """The current estimate of the largest singular value (a 0-d tensor with grad to W)."""
        w = self.weight
        if self.training and torch.is_grad_enabled():
            with torch.no_grad():
                v = F.normalize(w.t() @ self.u, dim=0, eps=self.eps)
                self.u.copy_(F.normalize(w @ v, dim=0, eps=self.eps))
        u = self.u.clone()  # a later call updates the buffer in place; this graph keeps its own u
        v = F.normalize(w.t() @ u, dim=0, eps=self.eps).detach()
        return torch.dot(u, w @ v)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight / self.sigma(), self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


def _linear(
    n_in: int, n_out: int, spectral: bool, device: torch.device | str | None, dtype: torch.dtype | None
) -> nn.Linear | SpectralLinear:
    if spectral:
        return SpectralLinear(n_in, n_out, device=device, dtype=dtype)
    return nn.Linear(n_in, n_out, device=device, dtype=dtype)


def _norm(kind: str, width: int, device, dtype) -> nn.Module:
    if kind == "rmsnorm":
        return nn.RMSNorm(width, eps=1e-6, device=device, dtype=dtype)
    return nn.Identity()


class MLP(nn.Module):
    """``Linear -> [RMSNorm] -> activation`` for each size in ``hidden``: the MLP of both families.

    ``x [..., in_features] -> [..., out_features]`` in the parameter dtype (``x`` itself for
    ``hidden=()``). The loop is written out: acting calls it once per environment step.

    Args:
        in_features: input features.
        hidden: the layer sizes, e.g. ``(64, 64)``.
        activation: ``"relu"`` (DQN torsos) or ``"tanh"`` (PPO, as in CleanRL).
        norm: ``"none"`` or ``"rmsnorm"`` (after each linear layer, before the activation).
        spectral_norm: `SpectralLinear` layers.
        orthogonal_gain: ``None``: PyTorch's default init (DQN); a number: orthogonal weights
            with that gain and zero biases (PPO).

    Raises:
        ValueError: a size below 1, an unknown ``activation`` or ``norm``.
    """

    def __init__(
        self,
        in_features: int,
        hidden: tuple[int, ...],
        *,
        activation: str = "relu",
        norm: str = "none",
        spectral_norm: bool = False,
        orthogonal_gain: float | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        hidden = tuple(hidden)
        if any(int(h) < 1 for h in hidden):
            raise ValueError(f"hidden={hidden!r}: layer sizes must be >= 1")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation={activation!r} is unknown; choose one of {', '.join(ACTIVATIONS)}")
        if norm not in NORMS:
            raise ValueError(f"norm={norm!r} is unknown; choose one of {', '.join(NORMS)}")
        dtype = dtype_or_default(dtype, device)
        sizes = [in_features, *hidden]
        layers = []
        for i in range(len(hidden)):
            layer = _linear(sizes[i], sizes[i + 1], spectral_norm, device, dtype)
            layers.append(layer if orthogonal_gain is None else init_linear_(layer, orthogonal_gain))
        self.layers = nn.ModuleList(layers)
        norms = [_norm(norm, h, device, dtype) for h in hidden]
        self.norms = nn.ModuleList(norms) if norm != "none" else None
        self.activation = ACTIVATIONS[activation]
        self.out_features = sizes[-1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Plain nn.Linear layers without hooks run as F.linear on their own parameters: the
        # same op as Linear.forward without the module-call machinery, which at one environment
        # per step costs more than the matmul.
        direct = not (_global_forward_hooks or _global_forward_pre_hooks)
        norms, activation = self.norms, self.activation
        for i, layer in enumerate(self.layers):
            if direct and type(layer) is nn.Linear and not (layer._forward_hooks or layer._forward_pre_hooks):
                x = F.linear(x, layer.weight, layer.bias)
            else:
                x = layer(x)
            if norms is not None:
                x = norms[i](x)
            x = activation(x)
        return x


class MLPTorso(MLP):
    """DQN's ``"mlp"`` torso: an `MLP` (ReLU) of ``depth`` x ``width`` or ``hidden`` on the
    flattened observation, ``[B, *obs_shape] -> [B, out_features]``.

    Raises:
        ValueError: ``hidden`` empty or a size below 1.
    """

    def __init__(
        self,
        in_features: int,
        *,
        width: int = 128,
        depth: int = 2,
        hidden: tuple[int, ...] | None = None,
        norm: str = "none",
        spectral_norm: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        if hidden is not None and not tuple(hidden):
            raise ValueError("hidden=() has no layer: give at least one size, or None for width x depth")
        super().__init__(
            in_features,
            (width,) * depth if hidden is None else tuple(hidden),
            activation="relu",
            norm=norm,
            spectral_norm=spectral_norm,
            device=device,
            dtype=dtype,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.flatten(1))


class _ResidualBlock(nn.Module):
    """``x + W2 relu(W1 norm(x))``: a pre-norm residual MLP block; ``W2`` starts at zero scale."""

    def __init__(self, width: int, norm: str, spectral: bool, device, dtype) -> None:
        super().__init__()
        self.norm = _norm(norm, width, device, dtype)
        self.fc1 = _linear(width, width, spectral, device, dtype)
        self.fc2 = _linear(width, width, spectral, device, dtype)
        if not spectral:  # identity at init: the block starts as a skip connection
            with torch.no_grad():
                self.fc2.weight.mul_(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.relu(self.fc1(self.norm(x))))


class ResidualMLPTorso(nn.Module):
    """Input projection to ``width``, ``depth`` residual blocks, final norm and ReLU:
    ``[B, *obs_shape] -> [B, width]``."""

    def __init__(
        self,
        in_features: int,
        *,
        width: int = 128,
        depth: int = 2,
        norm: str = "rmsnorm",
        spectral_norm: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        dtype = dtype_or_default(dtype, device)
        self.flatten = nn.Flatten(1)
        self.proj = _linear(in_features, width, spectral_norm, device, dtype)
        self.blocks = nn.Sequential(
            *[_ResidualBlock(width, norm, spectral_norm, device, dtype) for _ in range(depth)]
        )
        self.out_norm = _norm(norm, width, device, dtype)
        self.out_features = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.out_norm(self.blocks(self.proj(self.flatten(x)))))


class AttentionBlock(nn.Module):
    """Pre-norm multi-head self-attention (causal unless ``causal=False``), then a pre-norm MLP,
    both residual; also used by the attention forecasters."""

    def __init__(
        self, width: int, heads: int, norm: str, spectral: bool, device, dtype, *, causal: bool = True
    ) -> None:
        super().__init__()
        self.heads = heads
        self.causal = causal
        # RMSNorm is the transformer norm here even with norm="none": attention needs it.
        self.norm1 = _norm("rmsnorm" if norm == "none" else norm, width, device, dtype)
        self.qkv = _linear(width, 3 * width, spectral, device, dtype)
        self.out = _linear(width, width, spectral, device, dtype)
        self.norm2 = _norm("rmsnorm" if norm == "none" else norm, width, device, dtype)
        self.fc1 = _linear(width, 2 * width, spectral, device, dtype)
        self.fc2 = _linear(2 * width, width, spectral, device, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [B, K, W]
        b, k, w = x.shape
        q, key, v = self.qkv(self.norm1(x)).view(b, k, 3, self.heads, w // self.heads).unbind(2)
        # [B, H, K, W/H] each; causal: step t only sees steps <= t
        att = F.scaled_dot_product_attention(
            q.transpose(1, 2), key.transpose(1, 2), v.transpose(1, 2), is_causal=self.causal
        )
        x = x + self.out(att.transpose(1, 2).reshape(b, k, w))
        return x + self.fc2(F.relu(self.fc1(self.norm2(x))))


class AttentionTorso(nn.Module):
    """Self-attention over the last ``K`` observations ``[B, K, D]``, oldest first -> ``[B, width]``.

    Embedding plus learned position, ``depth`` causal pre-norm blocks, the newest step's features.

    Raises:
        ValueError: ``width`` is not divisible by ``heads``.
    """

    def __init__(
        self,
        history: int,
        obs_features: int,
        *,
        width: int = 64,
        depth: int = 1,
        heads: int = 2,
        norm: str = "rmsnorm",
        spectral_norm: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        dtype = dtype_or_default(dtype, device)
        if width % heads:
            raise ValueError(f"attention width={width} must be divisible by heads={heads}")
        self.embed = _linear(obs_features, width, spectral_norm, device, dtype)
        self.pos = nn.Parameter(torch.randn(history, width, device=device, dtype=dtype) / math.sqrt(width))
        self.blocks = nn.Sequential(
            *[AttentionBlock(width, heads, norm, spectral_norm, device, dtype) for _ in range(depth)]
        )
        self.out_norm = _norm("rmsnorm" if norm == "none" else norm, width, device, dtype)
        self.out_features = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [B, K, D]
        h = self.blocks(self.embed(x) + self.pos)
        return F.relu(self.out_norm(h[:, -1]))


class SequenceTorso(nn.Module):
    """A forecaster's causal encoder (the same module) as a torso over a window ``[B, K, D]``:
    the newest step's features ``[B, features]``, RMSNorm-ed for ``norm="rmsnorm"``."""

    def __init__(self, encoder: nn.Module, features: int, norm: str, device, dtype) -> None:
        super().__init__()
        self.encoder = encoder
        self.out_features = features
        self.out_norm = _norm(norm, self.out_features, device, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [B, K, D]
        return self.out_norm(self.encoder(x)[:, -1])


def build_torso(
    obs_shape: tuple[int, ...],
    kind: str = "mlp",
    *,
    width: int = 128,
    depth: int = 2,
    hidden: tuple[int, ...] | None = None,
    norm: str = "none",
    spectral_norm: bool = False,
    heads: int = 2,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> MLPTorso | ResidualMLPTorso | AttentionTorso | SequenceTorso:
    """A torso for observations of shape ``obs_shape``; its feature size is ``.out_features``.

    ``hidden`` (``"mlp"`` only): the layer sizes instead of ``depth`` x ``width``.

    Raises:
        ValueError: unknown ``kind`` or ``norm``; ``"attention"`` or ``"tcn"`` without a ``[K, D]``
            observation; ``spectral_norm`` with ``"tcn"``; a non-positive width, depth or head
            count; ``hidden`` with another kind, empty or with a size below 1.
    """
    if kind not in TORSO_KINDS:
        raise ValueError(f"torso kind={kind!r} is unknown; choose one of {', '.join(TORSO_KINDS)}")
    if norm not in NORMS:
        raise ValueError(f"torso norm={norm!r} is unknown; choose one of {', '.join(NORMS)}")
    if width < 1 or depth < 1:
        raise ValueError(f"torso width={width} and depth={depth} must be >= 1")
    if hidden is not None and kind != "mlp":
        raise ValueError(f"torso hidden={tuple(hidden)} is for the mlp torso, not {kind!r}")
    if kind == "attention" and heads < 1:
        raise ValueError(f"attention heads={heads} must be >= 1")
    if kind in ("attention", "tcn") and len(obs_shape) != 2:
        raise ValueError(
            f"the {kind} torso needs observations of shape [history, features], got "
            f"obs_shape={tuple(obs_shape)} (stack past observations, e.g. FrameStackObservation)"
        )
    if kind == "tcn":
        if spectral_norm:
            raise ValueError(
                "spectral_norm is not available with the tcn torso (its layers are convolutions)"
            )
        dtype = dtype_or_default(dtype, device)
        encoder = TCNEncoder(obs_shape[1], width=width, depth=depth, device=device, dtype=dtype)
        return SequenceTorso(encoder, encoder.out_features, norm, device, dtype)
    if kind == "attention":
        return AttentionTorso(
            obs_shape[0],
            obs_shape[1],
            width=width,
            depth=depth,
            heads=heads,
            norm=norm,
            spectral_norm=spectral_norm,
            device=device,
            dtype=dtype,
        )
    n_in = math.prod(obs_shape)
    if kind == "mlp":
        return MLPTorso(
            n_in,
            width=width,
            depth=depth,
            hidden=hidden,
            norm=norm,
            spectral_norm=spectral_norm,
            device=device,
            dtype=dtype,
        )
    return ResidualMLPTorso(
        n_in, width=width, depth=depth, norm=norm, spectral_norm=spectral_norm, device=device, dtype=dtype
    )
