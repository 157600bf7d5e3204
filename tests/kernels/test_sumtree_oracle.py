"""The sum tree's eager path (kernels/sumtree/cpu.py, what the ops run on a CPU) against the plain-loop
oracle of its specification (kernels/sumtree/reference.py), over random op sequences.

Tolerances: the rows, the minima and the sampled indices are compared exactly (the prefix rule
is one deterministic sequential f64 sum rounded once per entry, and a descent only compares and
subtracts in f32, so both sides compute the same bits); the leaf values ``p ** alpha`` and the IS
weights ``** -beta`` within ``rtol=1e-6`` (torch's f32 ``pow`` against a correctly rounded f64
``pow``: an ulp or two apart).
"""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonrl.kernels.sumtree import (
    leaves,
    leaves_for,
    new_sumtree,
    per_insert,
    per_sample,
    per_update,
    rebuild,
)
from tritonrl.kernels.sumtree.reference import Leaves, build_ref, insert_ref, sample_ref, update_ref

ops = st.lists(
    st.tuples(
        st.sampled_from(["insert", "update"]),
        st.integers(0, 2**31 - 1),  # a seed for the op's arguments
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(
    capacity=st.sampled_from([5, 32, 100, 1500, 40_000]),  # 1 to 4 levels of rows
    alpha=st.sampled_from([0.0, 0.6, 1.0]),
    beta=st.floats(0.0, 1.0),
    batch=st.integers(1, 64),
    sequence=ops,
)
def test_cpu_path_computes_the_specification(
    capacity: int, alpha: float, beta: float, batch: int, sequence: list[tuple[str, int]]
) -> None:
    tree = new_sumtree(capacity)
    P = leaves_for(capacity)
    model = Leaves(sums=[0.0] * P, mins=[float("inf")] * P)
    size = 0
    for op, seed in sequence:
        g = torch.Generator().manual_seed(seed)
        if op == "insert" or size == 0:
            start = size if size < capacity else int(torch.randint(0, capacity, (), generator=g))
            count = int(torch.randint(1, min(capacity - start, 300) + 1, (), generator=g))
            per_insert(tree, start, count, alpha=alpha)
            insert_ref(model, start, count, alpha)
            size = max(size, start + count)
            continue
        idx = torch.randint(0, size, (batch,), generator=g)
        td = torch.randn(batch, generator=g) * torch.exp2(torch.randint(-8, 9, (batch,), generator=g).float())
        if seed % 7 == 0:  # a rejected batch: a NaN, or an index outside [0, size)
            if seed % 2:
                td[0] = float("nan")
            else:
                idx[-1] = size
        per_update(tree, idx, td, alpha=alpha, eps=1e-6, size=max(size, 1))
        update_ref(model, idx.tolist(), td.tolist(), alpha, 1e-6, max(size, 1))

    got_leaves = leaves(tree)
    torch.testing.assert_close(got_leaves, torch.tensor(model.sums), rtol=1e-6, atol=0)
    torch.testing.assert_close(tree.mins[:P], torch.tensor(model.mins), rtol=1e-6, atol=0)
    assert float(tree.max_priority[0]) == torch.tensor(model.max_priority, dtype=torch.float32).item()
    assert tree.status.tolist() == [model.rejected, model.reason]

    # exact: the rows and minima the updates kept are the prefix rule of their own leaves
    sums, mins = build_ref(got_leaves.clone(), tree.mins[:P].clone())
    assert torch.equal(tree.sums, sums) and torch.equal(tree.mins, mins)

    u = torch.rand(batch, generator=torch.Generator().manual_seed(batch))
    idx, w = per_sample(tree, u, beta, size)
    want_idx, want_w = sample_ref(tree, u, beta, size)
    assert torch.equal(idx, want_idx)  # exact: the same f32 compares and subtractions
    torch.testing.assert_close(w, want_w, rtol=1e-6, atol=0)


@settings(max_examples=20, deadline=None)
@given(capacity=st.sampled_from([32, 1000, 40_000]), seed=st.integers(0, 2**31 - 1))
def test_rebuild_is_the_specification(capacity: int, seed: int) -> None:
    """``rebuild`` (both roundings) against the oracle's build from the same leaves, exactly (the
    leaves span 2**40 in ratio, so a different accumulation would show)."""
    g = torch.Generator().manual_seed(seed)
    tree = new_sumtree(capacity)
    P = leaves_for(capacity)
    values = torch.exp2(torch.rand(capacity, generator=g) * 40 - 20)
    leaves(tree)[:capacity] = values
    tree.mins[:capacity] = values
    for exact in (False, True):
        rebuild(tree, exact=exact)
        sums, mins = build_ref(leaves(tree).clone(), tree.mins[:P].clone(), exact=exact)
        assert torch.equal(tree.sums, sums) and torch.equal(tree.mins, mins)  # exact: the same rule
