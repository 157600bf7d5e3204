"""The sum tree's CPU path and the contiguous copies of the level totals it keeps beside a tree
(kernels/sumtree/cpu.py, "CPU path"): every other route that writes the tree (the torch
path, leaves written and rebuilt, the Triton interpreter) must reach the copies, so that the CPU
path writes the torch path's bits whatever wrote before it. Exact comparisons: the same values in
the same order on both sides.
"""

from __future__ import annotations

import pytest
import torch
from tritonrl.kernels.sumtree import SumTree, leaves, new_sumtree, per_insert, per_update, rebuild


def _assert_consistent(tree: SumTree) -> None:
    """Every internal node equals the rebuild from the leaves, bit for bit (no drift)."""
    fresh = SumTree(*(t.clone() for t in tree))
    rebuild(fresh)
    assert torch.equal(fresh.sums, tree.sums), "sum tree differs from its rebuild"
    assert torch.equal(fresh.mins, tree.mins), "min tree differs from its rebuild"


@pytest.mark.parametrize("capacity", [1000, 40_000, 300_000])  # 300k: the CPU path reads copied totals twice
def test_cpu_update_follows_writes_by_other_routes(capacity: int) -> None:
    """The CPU path reads each level's children from a contiguous copy of the totals of the level
    below; writes by any other route (the torch path, leaves written directly and rebuilt) must
    reach it. One tree takes turns of every writer; its twin only the torch path: bit for bit
    equal after every step, and equal to its rebuild at the end."""
    from tritonrl.kernels.sumtree import cpu as ref

    g = torch.Generator().manual_seed(capacity)
    size = capacity - capacity // 5  # a partly filled tree: rows with empty leaves
    mixed, twin = new_sumtree(capacity), new_sumtree(capacity)
    for step in range(12):
        idx = torch.randint(0, size, (300,), generator=g)
        td = torch.rand(300, generator=g, dtype=torch.float64).pow_(3).mul_(10.0 ** (step % 4))
        if step == 0:
            per_insert(mixed, 0, size, alpha=0.6)
            ref._per_insert_torch(twin, 0, size, 0.6)
        elif step % 4 == 1:  # the torch path on the mixed tree too
            ref._per_update_torch(mixed, idx, td, 0.6, 1e-6, size)
            ref._per_update_torch(twin, idx, td, 0.6, 1e-6, size)
        elif step % 4 == 2:  # leaves written directly, then rebuilt (as loading a buffer does)
            for tree in (mixed, twin):
                leaves(tree)[idx] = td.float()
                tree.mins[idx] = td.float()
                rebuild(tree)
        else:
            per_update(mixed, idx, td, alpha=0.6, eps=1e-6, size=size)  # the CPU path
            ref._per_update_torch(twin, idx, td, 0.6, 1e-6, size)
        for a, b in zip(mixed, twin, strict=True):
            assert torch.equal(a, b), step
    _assert_consistent(mixed)


def test_cpu_update_of_an_inference_tree() -> None:
    """A tree made under ``torch.inference_mode`` has no version counter: the CPU path then
    reads the totals again on every call, and still writes the torch path's bits."""
    from tritonrl.kernels.sumtree import cpu as ref

    g = torch.Generator().manual_seed(5)
    with torch.inference_mode():
        fast, slow = new_sumtree(40_000), new_sumtree(40_000)
        per_insert(fast, 0, 40_000, alpha=0.6)
        ref._per_insert_torch(slow, 0, 40_000, 0.6)
        for _ in range(3):
            idx = torch.randint(0, 40_000, (256,), generator=g)
            td = torch.rand(256, generator=g)
            other = torch.randint(0, 40_000, (50,), generator=g)  # unversioned writes elsewhere
            ref._per_update_torch(fast, other, td[:50], 0.6, 1e-6, 40_000)
            ref._per_update_torch(slow, other, td[:50], 0.6, 1e-6, 40_000)
            per_update(fast, idx, td, alpha=0.6, eps=1e-6, size=40_000)
            ref._per_update_torch(slow, idx, td, 0.6, 1e-6, 40_000)
            for a, b in zip(fast, slow, strict=True):
                assert torch.equal(a, b)


@pytest.mark.interpret
def test_cpu_update_after_the_interpreter_wrote_the_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Triton interpreter writes a CPU tree behind torch's version counter; its wrappers drop
    the CPU path's copies, so a CPU update that follows reads the tree as the kernels left it."""
    g = torch.Generator().manual_seed(9)
    tree = new_sumtree(40_000)
    per_insert(tree, 0, 40_000, alpha=1.0)
    per_update(
        tree, torch.arange(0, 40_000, 7), torch.rand(5715, generator=g), alpha=1.0, eps=1e-6, size=40_000
    )
    monkeypatch.setenv("TRITONRL_BACKEND", "triton")
    per_update(
        tree, torch.arange(0, 40_000, 3), torch.rand(13_334, generator=g), alpha=1.0, eps=1e-6, size=40_000
    )
    per_insert(tree, 100, 900, alpha=1.0)
    monkeypatch.setenv("TRITONRL_BACKEND", "torch")
    per_update(
        tree,
        torch.randint(0, 40_000, (256,), generator=g),
        torch.rand(256, generator=g),
        alpha=1.0,
        eps=1e-6,
        size=40_000,
    )
    _assert_consistent(tree)
