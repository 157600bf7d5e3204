"""The action conversion both market environments share: `as_actions`."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["as_actions"]


def as_actions(actions: Any, num_envs: int, device: torch.device) -> torch.Tensor:
    """``actions`` as a tensor on ``device``, the way gymnasium users pass them.

    A tensor is returned as it is; an integer is ``[1]`` int64; an array or a list is copied.
    Raises ``ValueError`` for a bool, a scalar for ``num_envs > 1``, or non-numbers.
    """
    if isinstance(actions, torch.Tensor):
        return actions
    if isinstance(actions, (bool, np.bool_)):
        raise ValueError(f"actions must be integers, got {type(actions).__name__} {actions!r}")
    if isinstance(actions, (int, np.integer)):
        if num_envs != 1:
            raise ValueError(
                f"a single action steps one env, this one has {num_envs}: pass {num_envs} actions"
            )
        return torch.tensor([int(actions)], dtype=torch.int64, device=device)
    try:
        array = np.asarray(actions)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"actions must be a tensor, an array or an int, got {type(actions).__name__}"
        ) from exc
    if array.dtype == object or array.dtype.kind in "USV":
        raise ValueError(f"actions must be numbers, got an array of {array.dtype}")
    return torch.as_tensor(array, device=device)
