"""Leaf-wise helpers for nested containers of tensors (recurrent memories, batched states).

A *tree* is ``None``, a tensor, or a tuple, list, dict or dataclass whose fields are trees. Leaves are visited
in a fixed order (container, insertion, field order): how recurrent memories are flattened into checkpoints. A
core module: it imports torch only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["from_leaves", "leaves", "tree_map", "zip_map"]


def zip_map(fn: Callable[..., torch.Tensor], *trees: Any) -> Any:
    """Apply ``fn`` leaf-wise to trees of one structure, rebuilt in the structure of ``trees[0]``.

    Raises:
        TypeError: a leaf that is neither a tensor nor a supported container.
        ValueError: the trees' tuples or lists differ in length.
    """
    first = trees[0]
    if first is None:
        return None
    if isinstance(first, torch.Tensor):
        return fn(*trees)
    if isinstance(first, (tuple, list)):
        return type(first)(zip_map(fn, *parts) for parts in zip(*trees, strict=True))
    if isinstance(first, dict):
        return {k: zip_map(fn, *(t[k] for t in trees)) for k in first}
    if dataclasses.is_dataclass(first) and not isinstance(first, type):
        return type(first)(
            **{f.name: zip_map(fn, *(getattr(t, f.name) for t in trees)) for f in dataclasses.fields(first)}
        )
    raise TypeError(f"a tree of tensors holds a {type(first).__name__}")


def tree_map(fn: Callable[[torch.Tensor], torch.Tensor], tree: Any) -> Any:
    """Apply ``fn`` to every tensor of ``tree``, keeping its structure.

    Raises:
        TypeError: a leaf that is neither a tensor nor a supported container.
    """
    return zip_map(fn, tree)


def leaves(tree: Any) -> list[torch.Tensor]:
    """The tensors of ``tree`` in its fixed order (``[]`` for ``None``).

    Raises:
        TypeError: a leaf that is neither a tensor nor a supported container.
    """
    out: list[torch.Tensor] = []

    def collect(t: torch.Tensor) -> torch.Tensor:
        out.append(t)
        return t

    tree_map(collect, tree)
    return out


def from_leaves(template: Any, values: list[torch.Tensor]) -> Any:
    """A tree shaped like ``template`` holding copies of ``values`` (in `leaves` order), each on its
    leaf's device and dtype.

    Raises:
        ValueError: the number of ``values``, or the shape of one, does not fit ``template``.
    """
    own = leaves(template)
    if len(own) != len(values):
        raise ValueError(f"recurrent memory has {len(values)} tensors, expected {len(own)}")
    for o, s in zip(own, values, strict=True):
        if not isinstance(s, torch.Tensor) or tuple(s.shape) != tuple(o.shape):
            shape = tuple(s.shape) if isinstance(s, torch.Tensor) else type(s).__name__
            raise ValueError(f"recurrent memory has shape {shape}, expected {tuple(o.shape)}")
    it = iter(values)
    return tree_map(lambda o: next(it).to(o.device, o.dtype).clone(), template)
