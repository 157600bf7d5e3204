"""Layer helpers shared by the actor-critic modules (policy heads, cores, the critic)."""

from __future__ import annotations

import math
from typing import Any

from torch import nn
from tritonrl.agents.nets.torsos import MLP, init_linear_
from tritonrl.toolkit.precision import dtype_or_default


def factory_kwargs(device: Any, dtype: Any) -> dict[str, Any]:
    """Factory kwargs for parameters: ``device`` and ``dtype`` (default ``training_dtype(device)``)."""
    return {"device": device, "dtype": dtype_or_default(dtype, device)}


def orthogonal_linear(n_in: int, n_out: int, gain: float, fk: dict[str, Any]) -> nn.Linear:
    """A linear layer created in ``fk``'s device and dtype, orthogonal weight with ``gain``, zero bias."""
    return init_linear_(nn.Linear(n_in, n_out, **fk), gain)


def tanh_mlp(in_dim: int, hidden: tuple[int, ...], fk: dict[str, Any]) -> MLP:
    """PPO's MLPs: ``Linear -> tanh`` layers of sizes ``hidden``, orthogonal init with gain sqrt(2)."""
    return MLP(in_dim, hidden, activation="tanh", orthogonal_gain=math.sqrt(2), **fk)
