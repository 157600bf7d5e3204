"""toolkit.pytree: leaf-wise maps over recurrent states and the flatten/rebuild round trip."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from tritonrl.toolkit.pytree import from_leaves, leaves, tree_map, zip_map


@dataclass
class _State:
    conv: torch.Tensor
    ssm: torch.Tensor


def _tree() -> dict:
    return {
        "lstm": (torch.arange(2.0), torch.arange(3.0)),
        "mamba": [_State(torch.ones(2, 2), torch.zeros(1))],
    }


def test_leaves_follow_the_container_order_and_tree_map_keeps_the_structure() -> None:
    tree = _tree()
    assert [t.tolist() for t in leaves(tree)] == [[0, 1], [0, 1, 2], [[1, 1], [1, 1]], [0]]
    doubled = tree_map(lambda t: 2 * t, tree)
    assert isinstance(doubled["lstm"], tuple) and isinstance(doubled["mamba"][0], _State)
    assert [t.tolist() for t in leaves(doubled)] == [[0, 2], [0, 2, 4], [[2, 2], [2, 2]], [0]]
    assert leaves(None) == [] and tree_map(torch.clone, None) is None


def test_zip_map_combines_trees_leaf_by_leaf() -> None:
    a, b = (torch.ones(2), torch.zeros(3)), (torch.full((2,), 3.0), torch.ones(3))
    summed = zip_map(lambda x, y: x + y, a, b)
    assert summed[0].tolist() == [4.0, 4.0] and summed[1].tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError):
        zip_map(lambda x, y: x + y, a, b[:1])  # tuples of different length
    with pytest.raises(TypeError, match="holds a str"):
        tree_map(torch.clone, ("not a tensor",))


def test_from_leaves_rebuilds_copies_in_the_template_dtype_and_refuses_misfits() -> None:
    template = (torch.zeros(2, dtype=torch.bfloat16), _State(torch.zeros(1, 2), torch.zeros(3)))
    values = [torch.tensor([1.5, 2.5]), torch.tensor([[1.0, 2.0]]), torch.tensor([4.0, 5.0, 6.0])]
    rebuilt = from_leaves(template, values)
    assert rebuilt[0].dtype == torch.bfloat16 and rebuilt[0].tolist() == [1.5, 2.5]
    assert rebuilt[1].ssm.tolist() == [4.0, 5.0, 6.0]
    assert rebuilt[1].ssm.data_ptr() != values[2].data_ptr()  # a copy: the checkpoint is not aliased
    with pytest.raises(ValueError, match="has 2 tensors, expected 3"):
        from_leaves(template, values[:2])
    with pytest.raises(ValueError, match=r"has shape \(2,\), expected \(3,\)"):
        from_leaves(template, values[:2] + [torch.zeros(2)])
