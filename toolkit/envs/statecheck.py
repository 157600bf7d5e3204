"""The checks every device env's ``check_state`` starts with (`check_state_header`): the entries,
the env's identity, its config and its step count. Imports the toolkit core only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tritonrl.toolkit.config import check_config_dict

__all__ = ["check_state_header"]


def check_state_header(state: Any, keys: Sequence[str], identity: tuple[str, int, int], config: Any) -> None:
    """Raise ``ValueError`` unless ``state`` is a dict holding ``keys``, saved by an env of
    ``identity`` (env id, number of envs, data rows) with ``config``, and a non-negative int
    ``vector_steps``."""
    if not isinstance(state, dict):
        raise ValueError(f"env state is a {type(state).__name__}, not a dict")
    missing = [k for k in keys if k not in state]
    if missing:
        raise ValueError(f"env state lacks {', '.join(missing)}")
    env_id, num_envs, rows = identity
    if (state["env_id"], state["num_envs"], state["rows"]) != identity:
        raise ValueError(
            f"env state is for {str(state['env_id'])[:60]!r} x {str(state['num_envs'])[:20]} envs "
            f"over {str(state['rows'])[:20]} rows, this is {env_id!r} x {num_envs} over {rows}"
        )
    kind = type(config)
    check_config_dict(kind, state["config"], where="env state config")
    saved = kind.from_dict(state["config"])
    if saved != config:
        raise ValueError(f"env state was saved with {saved}, this env has {config}")
    steps = state["vector_steps"]
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"env state vector_steps={str(steps)[:20]} is not a non-negative int")
