"""Prioritized-replay sum tree: sampling distribution, IS weights, stratification, updates,
duplicate resolution, rejection of bad batches, accuracy, and Triton-vs-torch parity.

Backends: ``torch`` (the reference, CPU), ``interpret`` (the Triton kernels under the Triton
interpreter, CPU) and ``cuda`` (compiled kernels, ``--gpu``).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonrl.kernels.sumtree import (
    BAD_INDEX,
    BAD_PRIORITY,
    PER_INSERT,
    PER_SAMPLE,
    PER_UPDATE,
    SumTree,
    geometry,
    leaves,
    leaves_for,
    new_sumtree,
    per_insert,
    per_sample,
    per_update,
    rebuild,
    total,
)
from tritonrl.kernels.sumtree.cpu import prefix_eager
from tritonrl.kernels.sumtree.reference import FANOUT, ROW

# Upper 0.1% points of the chi-square distribution (standard tables), by degrees of freedom.
CHI2_999 = {7: 24.322, 12: 32.909, 15: 37.697}
F32_EPS = 2.0**-24  # unit roundoff of f32


@pytest.fixture(
    params=[
        pytest.param("torch", id="torch"),
        pytest.param("interpret", marks=pytest.mark.interpret, id="interpret"),
        pytest.param("cuda", marks=pytest.mark.gpu, id="cuda"),
    ]
)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Device of the tensors; forces the backend so a test cannot pass on the other path."""
    monkeypatch.setenv("TRITONRL_BACKEND", "torch" if request.param == "torch" else "triton")
    return "cpu" if request.param in ("torch", "interpret") else "cuda"


def _expected_backend(device: str) -> str:
    import os

    return "torch" if os.environ.get("TRITONRL_BACKEND") == "torch" else "triton"


def _tree_with(priorities: torch.Tensor, device: str, alpha: float = 1.0) -> SumTree:
    """A tree whose first len(priorities) leaves are priorities**alpha (set by per_update)."""
    n = priorities.shape[0]
    tree = new_sumtree(n, device)
    idx = torch.arange(n, device=device)
    per_update(tree, idx, (priorities.to(device) - 1e-6).float(), alpha=alpha, eps=1e-6, size=n)
    return tree


def _leaves(tree: SumTree, n: int) -> torch.Tensor:
    return leaves(tree)[:n].double().cpu()


def _chi2(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def _clone(tree: SumTree) -> SumTree:
    return SumTree(*(t.clone() for t in tree))


def _assert_consistent(tree: SumTree) -> None:
    """Every internal node equals the rebuild from the leaves, bit for bit (no drift)."""
    fresh = _clone(tree)
    rebuild(fresh)
    assert torch.equal(fresh.sums, tree.sums), "sum tree differs from its rebuild"
    assert torch.equal(fresh.mins, tree.mins), "min tree differs from its rebuild"


# ---- sampling distribution ------------------------------------------------------------------


def test_sampling_matches_priorities_chi_square(backend: str) -> None:
    device = backend
    prio = torch.tensor([1.0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0.5], dtype=torch.float64)
    alpha = 0.7
    tree = _tree_with(prio, device, alpha)
    probs = prio**alpha / (prio**alpha).sum()
    g = torch.Generator(device=device).manual_seed(0)
    counts = torch.zeros(13, dtype=torch.float64)
    batches, B = (20, 256) if device == "cpu" else (200, 4096)
    for _ in range(batches):
        idx, _ = per_sample(tree, torch.rand(B, generator=g, device=device), 0.4, 13)
        counts += torch.bincount(idx.cpu(), minlength=13).double()
    assert PER_SAMPLE.last_backend == _expected_backend(device)
    stat = _chi2(counts, probs)
    # df = 13 - 1; stratified draws vary less than multinomial ones, so this is conservative.
    assert stat < CHI2_999[12], f"chi-square {stat:.1f} >= {CHI2_999[12]} (p < 0.001)"
    # the same statistic rejects a wrong distribution (uniform), so the test can fail
    assert _chi2(counts, torch.full((13,), 1 / 13, dtype=torch.float64)) > 10 * CHI2_999[12]


def test_partially_filled_tree_never_samples_empty_leaves(backend: str) -> None:
    device = backend
    tree = new_sumtree(100, device)  # P = 128
    per_insert(tree, 0, 37, alpha=0.6)
    u = torch.cat([torch.rand(500, device=device), torch.full((12,), 1 - 2**-24, device=device)])
    idx, w = per_sample(tree, u, 0.5, 37)
    assert int(idx.min()) >= 0 and int(idx.max()) <= 36
    # all leaves equal: every weight is exactly (1)**-beta == 1 up to exp2/log2 rounding
    torch.testing.assert_close(w.cpu(), torch.ones(512), rtol=1e-6, atol=0)


def test_weights_follow_the_formula(backend: str) -> None:
    device = backend
    g = torch.Generator().manual_seed(3)
    n = 50
    prio = torch.rand(n, generator=g, dtype=torch.float64) * 10 + 0.01
    alpha, beta = 0.6, 0.45
    tree = _tree_with(prio, device, alpha)
    idx, w = per_sample(tree, torch.rand(300, generator=g).to(device), beta, n)
    leaves = _leaves(tree, n)
    P_i = leaves / leaves.sum()
    w_all = (n * P_i) ** -beta
    expected = w_all[idx.cpu()] / w_all.max()
    # f64 formula vs f32 kernel: leaf values are exact inputs; exp2/log2 in f32 cost ~1e-6 rel.
    torch.testing.assert_close(w.double().cpu(), expected, rtol=1e-5, atol=0)
    assert float(w.max()) <= 1.0 + 1e-6


def test_each_stratum_is_hit_once_per_batch(backend: str) -> None:
    device = backend
    g = torch.Generator().manual_seed(4)
    n, B = 40, 64
    prio = torch.rand(n, generator=g, dtype=torch.float64) ** 3 * 5 + 1e-3
    tree = _tree_with(prio, device, 1.0)
    idx, _ = per_sample(tree, torch.rand(B, generator=g).to(device), 0.4, n)
    leaves = _leaves(tree, n)
    cum = torch.cat([torch.zeros(1, dtype=torch.float64), leaves.cumsum(0)])
    tot = float(cum[-1])
    tol = 1e-5 * tot  # f32 descent vs f64 prefix sums
    for j, i in enumerate(idx.cpu().tolist()):
        lo_seg, hi_seg = j * tot / B, (j + 1) * tot / B
        assert cum[i] <= hi_seg + tol and cum[i + 1] >= lo_seg - tol, (
            f"sample {j} (leaf {i}) is outside stratum {j}"
        )
    assert torch.equal(idx.cpu(), idx.cpu().sort().values), "stratified indices must be non-decreasing"


def test_known_uniforms_give_known_leaves(backend: str) -> None:
    device = backend
    tree = _tree_with(torch.tensor([1.0, 3.0, 4.0, 2.0], dtype=torch.float64), device, 1.0)
    u = torch.tensor([0.1, 0.1, 0.5, 0.95], device=device)  # B = 4 strata of mass 2.5
    idx, _ = per_sample(tree, u, 0.0, 4)
    # targets (j + u_j) * 2.5 = 0.25, 2.75, 6.25, 9.875 against prefix sums 0, 1, 4, 8, 10
    assert idx.cpu().tolist() == [0, 1, 2, 3]
    # exact ties: a target equal to a prefix sum belongs to the leaf that starts there
    ones = _tree_with(torch.ones(8, dtype=torch.float64), device, 1.0)
    idx, _ = per_sample(ones, torch.zeros(8, device=device), 0.0, 8)
    assert idx.cpu().tolist() == list(range(8))


# ---- updates -------------------------------------------------------------------------------


def test_update_last_duplicate_wins_and_tree_is_consistent(backend: str) -> None:
    device = backend
    n = 20
    tree = new_sumtree(n, device)
    per_insert(tree, 0, n, alpha=0.5)
    idx = torch.tensor([3, 7, 3, 19, 7, 3, 0], device=device)
    td = torch.tensor([1.0, 2.0, 3.0, -4.0, 5.0, -6.0, 0.0], device=device)
    per_update(tree, idx, td, alpha=0.5, eps=0.01, size=n)
    assert PER_UPDATE.last_backend == _expected_backend(device)
    leaves = _leaves(tree, n)
    expected = {3: 6.01, 7: 5.01, 19: 4.01, 0: 0.01}
    for i, p in expected.items():
        assert math.isclose(float(leaves[i]), p**0.5, rel_tol=1e-6), (i, float(leaves[i]))
    assert float(leaves[1]) == 1.0  # untouched leaves keep max_priority ** alpha = 1
    assert math.isclose(float(tree.max_priority[0]), 6.01, rel_tol=1e-6)
    _assert_consistent(tree)
    assert math.isclose(float(tree.mins[geometry(32).min_offsets[-1]]), 0.01**0.5, rel_tol=1e-6)
    assert geometry(32).min_offsets[-1] == tree.mins.shape[0] - 1  # the root is the last entry


@pytest.mark.parametrize("capacity", [20, 1000, 20_000, 300_000])  # 300k: two sparse levels
@pytest.mark.parametrize("td_dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_cpu_fast_update_is_bitwise_the_torch_path(
    capacity: int, td_dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CPU update (numpy index work around torch cumsum/amin/pow) writes exactly what the
    device-generic torch path writes: random batches with many duplicates, rejected batches too."""
    from tritonrl.kernels.sumtree import cpu as ref

    calls: list[str] = []
    fast_path = ref._per_update_cpu

    def counted(*args: object) -> None:
        calls.append("cpu")
        fast_path(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(ref, "_per_update_cpu", counted)
    g = torch.Generator().manual_seed(capacity)
    size = capacity - capacity // 7  # a partly filled tree
    fast, slow = new_sumtree(capacity), new_sumtree(capacity)
    per_insert(fast, 0, size, alpha=0.6)
    per_insert(slow, 0, size, alpha=0.6)
    for step in range(20):
        B = [1, 7, 256, 1000][step % 4]
        idx = torch.randint(0, size, (B,), generator=g)
        idx[B // 2 :] = idx[: B - B // 2].clone()  # half the batch repeats the other half
        if step >= 12:  # sorted, as stratified sampling returns them: without repeats, or with
            idx = idx.unique() if step % 2 else idx.sort().values
            B = idx.shape[0]
        td = (torch.randn(B, generator=g, dtype=torch.float64) * 10 ** (step % 5 - 2)).to(td_dtype)
        alpha = [0.6, 0.5, 1.0, 0.0][step % 4]
        if step == 5:
            td[B // 2] = float("nan")
        if step == 9:
            idx[0] = size
        if step == 10:
            idx[-1] = -1
        if step == 15:  # increasing, below the range at its first end
            idx[0] = -1
        if step == 17:  # increasing, above the range at its last end
            idx[-1] = size
        ref.per_update_eager(fast, idx, td, alpha, 1e-6, size)
        ref._per_update_torch(slow, idx, td, alpha, 1e-6, size)
        for a, b in zip(fast, slow, strict=True):
            assert torch.equal(a, b), (step, B)
    assert calls == ["cpu"] * 20  # the fast path ran every time
    assert fast.status.tolist() == [5, BAD_INDEX]
    _assert_consistent(fast)


@settings(max_examples=60, deadline=None)
@given(  # P = 32 .. 524288: 1 to 4 levels of rows, up to two sparse levels
    capacity=st.one_of(st.integers(1, 2000), st.integers(2000, 70_000), st.integers(270_000, 400_000)),
    fill=st.floats(0.01, 1.0),
    batch=st.integers(1, 600),
    order=st.sampled_from(["random", "sorted", "unique"]),  # unique: strictly increasing
    repeats=st.floats(0.0, 0.9),  # share of the batch copied from its other entries
    seed=st.integers(0, 2**31 - 1),
    spread=st.sampled_from([1.0, 1e3, 1e12]),  # 1e12: rows whose f64 sums are inexact
    alpha=st.sampled_from([0.0, 0.6, 1.0]),
    td_dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16, torch.float16]),
)
def test_cpu_fast_update_is_bitwise_the_torch_path_hypothesis(
    capacity: int,
    fill: float,
    batch: int,
    order: str,
    repeats: float,
    seed: int,
    spread: float,
    alpha: float,
    td_dtype: torch.dtype,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CPU update (whole-row numpy gathers and write-backs around torch cumsum / amin / pow)
    writes exactly the torch path's bits, and its trees equal their rebuild, on random trees of
    every depth, batches with and without repeats, in every order (exact: one function of the
    same inputs, by the prefix rule)."""
    from tritonrl.kernels.sumtree import cpu as ref

    calls: list[str] = []
    fast_path = ref._per_update_cpu

    def counted(*args: object) -> None:
        calls.append("cpu")
        fast_path(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(ref, "_per_update_cpu", counted)
    g = torch.Generator().manual_seed(seed)
    size = max(1, round(capacity * fill))
    fast, slow = new_sumtree(capacity), new_sumtree(capacity)
    for tree in (fast, slow):
        per_insert(tree, 0, size, alpha=alpha)
    overflowed = 0  # batches with an infinity (f16 overflows from 65504), rejected by both paths
    for _ in range(2):  # the second batch updates a tree the first one changed
        idx = torch.randint(0, size, (batch,), generator=g)
        k = int(batch * repeats)
        if k:
            idx[batch - k :] = idx[torch.randint(0, batch, (k,), generator=g)]
        if order != "random":
            idx = idx.unique() if order == "unique" else idx.sort().values
        td = (torch.rand(idx.shape[0], generator=g, dtype=torch.float64) ** 3 * spread).to(td_dtype)
        overflowed += not bool(torch.isfinite(td).all())
        per_update(fast, idx, td, alpha=alpha, eps=1e-6, size=size)
        ref._per_update_torch(slow, idx, td, alpha, 1e-6, size)
        for a, b in zip(fast, slow, strict=True):
            assert torch.equal(a, b)  # exact: the same computation, see the docstring
    assert calls == ["cpu", "cpu"]
    assert int(fast.status[0]) == overflowed
    _assert_consistent(fast)


@settings(max_examples=60, deadline=None)
@given(  # P = 32 .. 524288: 1 to 4 levels of rows, ranges within one row or across many
    capacity=st.one_of(st.integers(1, 2000), st.integers(2000, 70_000), st.integers(270_000, 400_000)),
    ranges=st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(1, 3000)), min_size=1, max_size=6),
    seed=st.integers(0, 2**31 - 1),
    spread=st.sampled_from([1.0, 1e3, 1e12]),  # 1e12: rows whose f64 sums are inexact
    alpha=st.sampled_from([0.0, 0.6, 1.0]),
)
def test_cpu_fast_insert_is_bitwise_the_torch_path_hypothesis(
    capacity: int,
    ranges: list[tuple[float, int]],
    seed: int,
    spread: float,
    alpha: float,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CPU insert (numpy on views of the same memory) writes exactly the torch path's bits
    on trees of every depth, between updates that raise the running maximum and leave rows of
    mixed scale (exact: the same prefix rule on the same children, see the reference docstring)."""
    from tritonrl.kernels.sumtree import cpu as ref

    calls: list[str] = []
    fast_path = ref._per_insert_cpu

    def counted(*args: object) -> None:
        calls.append("cpu")
        fast_path(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(ref, "_per_insert_cpu", counted)
    g = torch.Generator().manual_seed(seed)
    P = max(FANOUT, 1 << (capacity - 1).bit_length())
    fast, slow = new_sumtree(capacity), new_sumtree(capacity)
    for where, count in ranges:
        count = min(count, P)
        start = min(int(where * P), P - count)
        per_insert(fast, start, count, alpha=alpha)
        ref._per_insert_torch(slow, start, count, alpha)
        for a, b in zip(fast, slow, strict=True):
            assert torch.equal(a, b), (start, count)
        idx = torch.randint(0, capacity, (17,), generator=g)
        td = torch.rand(17, generator=g, dtype=torch.float64).pow_(3).mul_(spread)
        for tree in (fast, slow):  # new priorities: a new running maximum for the next insert
            ref._per_update_torch(tree, idx, td, alpha, 1e-6, capacity)
    assert calls == ["cpu"] * len(ranges)
    _assert_consistent(fast)


@settings(max_examples=150)
@given(  # P = 32 .. 131072: 1 to 4 levels of rows, padded roots
    capacity=st.one_of(st.integers(1, 2000), st.integers(2000, 70_000)),
    fill=st.floats(0.0, 1.0),
    batch=st.integers(1, 300),
    seed=st.integers(0, 2**31 - 1),
    spread=st.sampled_from([1.0, 1e3, 1e12]),  # 1e12: rows whose f64 sums are inexact
    alpha=st.sampled_from([0.0, 0.6, 1.0]),
    beta=st.sampled_from([0.0, 0.4, 0.5, 1.0]),  # 0.5: torch's pow takes its rsqrt path
    edges=st.booleans(),
)
def test_cpu_fast_sample_is_bitwise_the_torch_path(
    capacity: int,
    fill: float,
    batch: int,
    seed: int,
    spread: float,
    alpha: float,
    beta: float,
    edges: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CPU descent (numpy on views of the tree) returns exactly the indices and weights of
    the device-generic torch path for the same uniforms, on random trees of every depth."""
    from tritonrl.kernels.sumtree import cpu as ref

    calls: list[str] = []
    fast_path = ref._per_sample_cpu

    def counted(*args: object) -> tuple[torch.Tensor, torch.Tensor]:
        calls.append("cpu")
        return fast_path(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(ref, "_per_sample_cpu", counted)
    g = torch.Generator().manual_seed(seed)
    size = max(1, round(capacity * fill))
    tree = new_sumtree(capacity)
    per_insert(tree, 0, size, alpha=alpha)
    n = min(size, 5000)
    idx = torch.randint(0, size, (n,), generator=g)
    td = torch.rand(n, generator=g, dtype=torch.float64) ** 3 * spread
    per_update(tree, idx, td.float(), alpha=alpha, eps=1e-6, size=size)
    u = torch.rand(batch, generator=g)
    if edges:  # the ends of [0, 1): the first and the last target of a stratum
        u[::2] = 0.0
        u[1::2] = 1.0 - 2.0**-24
    fast = per_sample(tree, u, beta, size)
    slow = ref._per_sample_torch(tree, u, beta, size)
    assert calls == ["cpu"]
    assert torch.equal(fast[0], slow[0]), "indices differ"
    assert torch.equal(fast[1], slow[1]), "weights differ"
    assert fast[0].dtype == torch.int64 and fast[1].dtype == torch.float32
    assert int(fast[0].max()) < size


def test_cpu_update_writes_the_trees_own_tensors() -> None:
    """The CPU update caches numpy views per tree; a tree that shares ``sums`` and ``mins`` with
    another but has its own ``scratch`` and ``max_priority`` gets its own."""
    a = new_sumtree(100)
    per_insert(a, 0, 100, alpha=1.0)
    per_update(a, torch.tensor([1]), torch.tensor([2.0]), alpha=1.0, eps=1.0, size=100)
    b = a._replace(scratch=a.scratch.clone(), max_priority=torch.ones(1))
    per_update(b, torch.tensor([2]), torch.tensor([4.0]), alpha=1.0, eps=1.0, size=100)
    assert b.max_priority.tolist() == [5.0] and a.max_priority.tolist() == [3.0]
    assert a.scratch.tolist() == b.scratch.tolist() == [-1] * 128
    _assert_consistent(b)


@pytest.mark.parametrize("start, count", [(0, 1), (37, 41), (5, 95), (99, 1), (64, 32), (0, 100)])
def test_insert_range_sets_max_priority_and_stays_consistent(backend: str, start: int, count: int) -> None:
    device = backend
    tree = new_sumtree(100, device)  # P = 128: 4 rows under the root row (28 padding children)
    per_insert(tree, 0, 100, alpha=0.5)
    g = torch.Generator().manual_seed(start)
    per_update(
        tree,
        torch.randperm(100, generator=g).to(device),
        torch.rand(100, generator=g).to(device) * 9,
        alpha=0.5,
        eps=1e-3,
        size=100,
    )
    before = _leaves(tree, 128)
    per_insert(tree, start, count, alpha=0.5)
    assert PER_INSERT.last_backend == _expected_backend(device)
    after = _leaves(tree, 128)
    top = float(tree.max_priority[0]) ** 0.5
    inside = torch.zeros(128, dtype=torch.bool)
    inside[start : start + count] = True
    torch.testing.assert_close(
        after[inside], torch.full((count,), top, dtype=torch.float64), rtol=1e-6, atol=0
    )
    assert torch.equal(after[~inside], before[~inside])
    _assert_consistent(tree)


@pytest.mark.parametrize(
    "bad, reason",
    [
        ((torch.tensor([0, 1]), torch.tensor([1.0, float("nan")])), BAD_PRIORITY),
        ((torch.tensor([0, 1]), torch.tensor([float("-inf"), 1.0])), BAD_PRIORITY),
        ((torch.tensor([0, 10]), torch.tensor([1.0, 1.0])), BAD_INDEX),
        ((torch.tensor([-1, 2]), torch.tensor([1.0, 1.0])), BAD_INDEX),
        ((torch.tensor([12, 2]), torch.tensor([float("nan"), 1.0])), BAD_INDEX | BAD_PRIORITY),
    ],
)
def test_bad_batch_changes_nothing(backend: str, bad: tuple[torch.Tensor, torch.Tensor], reason: int) -> None:
    device = backend
    tree = new_sumtree(16, device)
    per_insert(tree, 0, 10, alpha=0.6)
    per_update(
        tree,
        torch.tensor([4], device=device),
        torch.tensor([2.0], device=device),
        alpha=0.6,
        eps=1e-6,
        size=10,
    )
    before = _clone(tree)
    idx, td = (t.to(device) for t in bad)
    per_update(tree, idx, td, alpha=0.6, eps=1e-6, size=10)
    for name in ("sums", "mins", "scratch", "max_priority"):
        assert torch.equal(getattr(tree, name), getattr(before, name)), f"{name} changed"
    assert tree.status.cpu().tolist() == [1, reason]


@settings(max_examples=12)
@given(
    capacity=st.integers(1, 70),
    batch=st.integers(1, 90),
    seed=st.integers(0, 2**31 - 1),
    alpha=st.sampled_from([0.0, 0.6, 1.0]),
)
@pytest.mark.interpret
def test_triton_matches_torch_same_uniforms(
    capacity: int, batch: int, seed: int, alpha: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interpreter vs reference: identical indices for the same uniforms, identical trees up to
    the ulps of ``p ** alpha`` (exp2/log2 in the kernel, pow in torch)."""
    g = torch.Generator().manual_seed(seed)
    trees = {b: new_sumtree(capacity) for b in ("torch", "triton")}
    size = int(torch.randint(1, capacity + 1, (1,), generator=g))
    idx = torch.randint(0, size, (batch,), generator=g)
    td = torch.randn(batch, generator=g) * 4
    for b, tree in trees.items():
        monkeypatch.setenv("TRITONRL_BACKEND", b)
        per_insert(tree, 0, size, alpha=alpha)
        per_update(tree, idx, td, alpha=alpha, eps=1e-3, size=size)
        assert PER_UPDATE.last_backend == b
    lo = int(torch.randint(0, size, (1,), generator=g))
    n_new = int(torch.randint(0, size - lo + 1, (1,), generator=g))
    for b, tree in trees.items():
        monkeypatch.setenv("TRITONRL_BACKEND", b)
        per_insert(tree, lo, n_new, alpha=alpha)
    a, t = trees["torch"], trees["triton"]
    _assert_consistent(t)
    # p ** alpha: torch pow vs exp2(alpha * log2 p), each within ~1 ulp; the error grows with
    # |log2 p| (<= ~8 here), so allow 8 ulps (1e-6 relative); sums inherit the leaves' error.
    torch.testing.assert_close(t.sums, a.sums, rtol=1e-6, atol=0)
    torch.testing.assert_close(t.mins, a.mins, rtol=1e-6, atol=0)
    assert torch.equal(t.max_priority, a.max_priority)
    assert torch.equal(t.scratch, torch.full_like(t.scratch, -1)), "scratch must be reset"
    # sampling: run both backends on the SAME tree
    u = torch.rand(batch, generator=g)
    out = {}
    for b in ("torch", "triton"):
        monkeypatch.setenv("TRITONRL_BACKEND", b)
        out[b] = per_sample(a, u, 0.4, size)
        assert PER_SAMPLE.last_backend == b
    assert torch.equal(out["torch"][0], out["triton"][0]), "indices differ for the same uniforms"
    torch.testing.assert_close(out["triton"][1], out["torch"][1], rtol=1e-5, atol=0)


# ---- layout and the prefix rule ------------------------------------------------------------


def test_prefix_rule_is_a_sequential_f64_sum() -> None:
    """The CPU reference's prefix (torch.cumsum of f32) must equal the sequential f64 sum rounded
    at each step, which the Triton kernels reproduce. Children spanning 2**60 make the f64 sums
    inexact, so a different accumulation order or precision would show up here."""
    g = torch.Generator().manual_seed(11)
    kids = torch.exp2(torch.rand(500, FANOUT, generator=g) * 60 - 30)
    acc = torch.zeros(500, dtype=torch.float64)
    expected = torch.empty(500, FANOUT)
    for j in range(FANOUT):
        acc = acc + kids[:, j].double()
        expected[:, j] = acc.float()
    assert torch.equal(prefix_eager(kids), expected)
    out = torch.empty(500, ROW)[:, 1:]  # a strided destination, as the tree's rows are
    prefix_eager(kids, out=out)
    assert torch.equal(out, expected)
    # a plausible other rule (an f32 running sum) gives other bits on this data
    acc32 = torch.zeros(500)
    for j in range(FANOUT):
        acc32 = acc32 + kids[:, j]
    assert not torch.equal(acc32, expected[:, -1])


@pytest.mark.parametrize("capacity", [1, 32, 33, 100, 1024, 1025, 40_000])
def test_geometry_and_padding(capacity: int) -> None:
    """Rows of 33 entries: a leading 0, non-decreasing prefixes, the total last; padding rows
    and the leading zeros stay 0 through inserts and updates; the root total is the sum."""
    g = geometry(leaves_for(capacity))
    assert g.P >= max(capacity, FANOUT) and g.levels == max(1, math.ceil(math.log2(g.P) / 5))
    tree = new_sumtree(capacity)
    assert tree.sums.shape == (g.sum_size,) and tree.mins.shape == (g.min_size,)
    gen = torch.Generator().manual_seed(capacity)
    per_insert(tree, 0, capacity, alpha=0.6)
    per_update(
        tree,
        torch.randint(0, capacity, (300,), generator=gen),
        torch.randn(300, generator=gen),
        alpha=0.6,
        eps=1e-3,
        size=capacity,
    )
    below = leaves(tree)
    for lvl in range(1, g.levels + 1):
        stored = (g.sum_offsets[lvl + 1] - g.sum_offsets[lvl]) // ROW if lvl < g.levels else 1
        rows = tree.sums[g.sum_offsets[lvl] : g.sum_offsets[lvl] + ROW * stored].view(stored, ROW)
        n = g.rows[lvl - 1]
        assert torch.all(rows[:, 0] == 0) and torch.all(rows[n:] == 0), f"level {lvl} padding written"
        assert torch.all(rows[:, 1:] >= rows[:, :-1]), f"level {lvl} prefixes decrease"
        kids = below[: FANOUT * n].view(n, FANOUT).double()
        # each total is within one f32 rounding per level of its children's sum
        torch.testing.assert_close(rows[:n, FANOUT].double(), kids.sum(1), rtol=lvl * F32_EPS, atol=0)
        below = rows[:, FANOUT]
    assert float(total(tree)) == float(tree.sums[g.total_offset])
    _assert_consistent(tree)


@pytest.mark.interpret
def test_triton_rows_are_bitwise_the_reference_on_inexact_sums(monkeypatch: pytest.MonkeyPatch) -> None:
    """Priorities over 24 decades: the f64 row sums round, so only the same accumulation order
    gives the same bits. The kernel's tree must equal the torch rebuild of its own leaves."""
    monkeypatch.setenv("TRITONRL_BACKEND", "triton")
    gen = torch.Generator().manual_seed(12)
    C = 1000
    tree = new_sumtree(C)
    per_insert(tree, 0, C, alpha=1.0)
    td = torch.pow(10.0, torch.rand(C, generator=gen) * 24 - 12)
    per_update(tree, torch.randperm(C, generator=gen), td, alpha=1.0, eps=1e-30, size=C)
    per_insert(tree, 100, 50, alpha=1.0)
    assert PER_UPDATE.last_backend == "triton" and PER_INSERT.last_backend == "triton"
    _assert_consistent(tree)
    # the same uniforms give the same leaves on both backends over this tree
    u = torch.rand(257, generator=gen)
    out = {}
    for b in ("torch", "triton"):
        monkeypatch.setenv("TRITONRL_BACKEND", b)
        out[b] = per_sample(tree, u, 0.4, C)
    assert torch.equal(out["torch"][0], out["triton"][0])


@pytest.mark.parametrize("capacity", [1, 31, 33, 1025, 40_000])
def test_descent_lands_in_the_target_interval(
    backend: str, capacity: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Across level counts (1 to 4 rows deep) and padded roots, every sample's leaf interval
    holds its target mass, up to the f32 rounding of the descent."""
    device = backend
    forced = "torch" if _expected_backend(device) == "torch" else "triton"
    monkeypatch.setenv("TRITONRL_BACKEND", "torch")  # build with the reference (fast), sample with each
    gen = torch.Generator().manual_seed(capacity)
    prio = torch.rand(capacity, generator=gen, dtype=torch.float64) ** 4 * 100 + 1e-3
    tree = _tree_with(prio, device, 1.0)
    monkeypatch.setenv("TRITONRL_BACKEND", forced)
    B = 256
    u = torch.rand(B, generator=gen)
    idx, _ = per_sample(tree, u.to(device), 0.4, capacity)
    assert PER_SAMPLE.last_backend == forced
    leaf = _leaves(tree, capacity)
    cum = torch.cat([torch.zeros(1, dtype=torch.float64), leaf.cumsum(0)])
    target = (torch.arange(B, dtype=torch.float64) + u.double()) * cum[-1] / B
    i = idx.cpu()
    tol = 1e-5 * float(cum[-1])  # f32 descent (4 roundings per level) vs f64 prefix sums
    assert bool(torch.all((cum[i] <= target + tol) & (target < cum[i + 1] + tol)))
    assert int(i.min()) >= 0 and int(i.max()) < capacity


# ---- accuracy --------------------------------------------------------------------------------


def test_millions_of_updates_do_not_drift(monkeypatch: pytest.MonkeyPatch) -> None:
    """2M+ updates on a 1M-leaf tree: nodes stay exactly fl32(left + right) of the current
    leaves (no accumulated error), and the root stays within the pairwise-summation bound."""
    monkeypatch.setenv("TRITONRL_BACKEND", "torch")
    C = 1 << 20
    g = torch.Generator().manual_seed(5)
    tree = new_sumtree(C)
    per_insert(tree, 0, C, alpha=0.6)
    updates = 0
    for _ in range(520):
        idx = torch.randint(0, C, (4096,), generator=g)
        td = torch.randn(4096, generator=g).mul_(10).pow_(3)  # priorities over ~9 decades
        per_update(tree, idx, td, alpha=0.6, eps=1e-6, size=C)
        updates += 4096
    assert updates > 2_000_000
    _assert_consistent(tree)
    exact = float(total(tree, exact=True))
    L = geometry(C).levels
    assert L == 4
    # each level rounds a (near-exact) f64 sum of positive terms to f32 once: relative error
    # <= L * u (u = 2**-24); the f64 accumulation adds < 32 * 2**-53 per level, far below u
    assert abs(float(total(tree)) - exact) <= L * F32_EPS * exact
    rebuild(tree, exact=True)
    assert abs(float(total(tree)) - exact) <= F32_EPS * exact  # one f32 rounding of an f64 sum
    assert float(tree.mins[-1]) == float(leaves(tree).min())


def test_exact_rebuild_matches_fsum() -> None:
    g = torch.Generator().manual_seed(6)
    tree = new_sumtree(1000)
    vals = (torch.rand(1000, generator=g) * 30 - 15).exp()  # 13 decades
    leaves(tree)[:1000] = vals
    tree.mins[:1000] = vals
    rebuild(tree, exact=True)
    assert float(total(tree)) == float(torch.tensor(math.fsum(vals.double().tolist()), dtype=torch.float32))


# ---- metadata validation (never reads data) ---------------------------------------------------


def test_metadata_errors_name_the_argument() -> None:
    tree = new_sumtree(8)
    with pytest.raises(TypeError, match="uniforms"):
        per_sample(tree, torch.rand(4, dtype=torch.float64), 0.4, 8)
    with pytest.raises(ValueError, match="size"):
        per_sample(tree, torch.rand(4), 0.4, 33)  # beyond the P = 32 leaves
    with pytest.raises(ValueError, match="beta"):
        per_sample(tree, torch.rand(4), -0.1, 8)
    with pytest.raises(TypeError, match="indices"):
        per_update(tree, torch.tensor([1], dtype=torch.int32), torch.ones(1), alpha=0.6, eps=1e-6, size=8)
    with pytest.raises(ValueError, match="entries"):
        per_update(tree, torch.tensor([1, 2]), torch.ones(1), alpha=0.6, eps=1e-6, size=8)
    with pytest.raises(ValueError, match="eps"):
        per_update(tree, torch.tensor([1]), torch.ones(1), alpha=0.6, eps=0.0, size=8)
    with pytest.raises(TypeError, match="SumTree"):
        per_sample(tuple(tree), torch.rand(4), 0.4, 8)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="capacity"):
        new_sumtree(0)


def test_checked_trees_are_remembered_by_their_tensors() -> None:
    """The ops check a tree's metadata once and remember it by its five tensor objects: a tree
    with any tensor replaced is checked again (and refused when wrong), and the memo keeps no
    tree alive."""
    import gc
    import weakref

    from tritonrl.kernels.sumtree import api

    tree = new_sumtree(8)
    per_insert(tree, 0, 8, alpha=0.6)
    per_sample(tree, torch.rand(2), 0.4, 8)
    assert id(tree) in api._CHECKED
    bad = [
        (tree._replace(sums=tree.sums.double()), TypeError, "tree.sums"),
        (tree._replace(mins=tree.mins[:-1].clone()), ValueError, "tree.mins"),
        (tree._replace(status=torch.zeros(3, dtype=torch.int32)), ValueError, "tree.status"),
        (tree._replace(max_priority=torch.ones(1, dtype=torch.float64)), TypeError, "tree.max_priority"),
        (tree._replace(scratch=torch.full((64,), -1, dtype=torch.int32)), ValueError, "tree.sums"),
    ]
    for wrong, error, match in bad:
        for _ in range(2):  # a refused tree is never remembered
            with pytest.raises(error, match=match):
                per_sample(wrong, torch.rand(2), 0.4, 8)
            with pytest.raises(error, match=match):
                per_update(wrong, torch.tensor([1]), torch.ones(1), alpha=0.6, eps=1e-6, size=8)
    per_update(tree, torch.tensor([1]), torch.ones(1), alpha=0.6, eps=1e-6, size=8)  # still fine
    sums = weakref.ref(tree.sums)
    del tree, bad, wrong
    gc.collect()
    assert sums() is None, "the memo keeps a tree alive"


def test_cpu_auto_runs_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITONRL_BACKEND", raising=False)
    tree = new_sumtree(8)
    per_insert(tree, 0, 8, alpha=0.6)
    assert PER_INSERT.last_backend == "torch"
    per_sample(tree, torch.rand(3), 0.4, 8)
    assert PER_SAMPLE.last_backend == "torch"


# ---- compiled kernels on CUDA at realistic sizes (--gpu) --------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("C, B", [(1 << 20, 4096), (100_000, 256), (33, 7)])
def test_gpu_parity_realistic(C: int, B: int, monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator(device="cuda").manual_seed(7)
    trees = {b: new_sumtree(C, "cuda") for b in ("torch", "triton")}
    for b, tree in trees.items():
        monkeypatch.setenv("TRITONRL_BACKEND", b)
        per_insert(tree, 0, C, alpha=0.6)
    for _ in range(3):
        idx = torch.randint(0, C, (B,), device="cuda", generator=g)  # duplicates at every size
        td = torch.randn(B, device="cuda", generator=g) * 5
        for b, tree in trees.items():
            monkeypatch.setenv("TRITONRL_BACKEND", b)
            per_update(tree, idx, td, alpha=0.6, eps=1e-6, size=C)
            assert PER_UPDATE.last_backend == b
    a, t = trees["torch"], trees["triton"]
    _assert_consistent(t)
    # GPU exp2/log2 are the approximate instructions (~2 ulp each): 2e-6 relative
    torch.testing.assert_close(t.sums, a.sums, rtol=2e-6, atol=0)
    assert torch.equal(t.max_priority, a.max_priority)
    assert bool((t.scratch == -1).all())
    u = torch.rand(B, device="cuda", generator=g)
    out = {}
    for b in ("torch", "triton"):
        monkeypatch.setenv("TRITONRL_BACKEND", b)
        out[b] = per_sample(a, u, 0.4, C)
    assert torch.equal(out["torch"][0], out["triton"][0])
    torch.testing.assert_close(out["triton"][1], out["torch"][1], rtol=1e-5, atol=0)


@pytest.mark.gpu
def test_gpu_update_is_deterministic(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same duplicate-heavy update twice from the same state: bit-identical trees."""
    monkeypatch.setenv("TRITONRL_BACKEND", "triton")
    C = 1 << 18
    base = new_sumtree(C, "cuda")
    per_insert(base, 0, C, alpha=0.6)
    g = torch.Generator(device="cuda").manual_seed(8)
    idx = torch.randint(0, 512, (4096,), device="cuda", generator=g)  # ~8 copies of each index
    td = torch.randn(4096, device="cuda", generator=g)
    results = []
    for _ in range(2):
        tree = _clone(base)
        per_update(tree, idx, td, alpha=0.6, eps=1e-6, size=C)
        results.append(tree)
    for name in ("sums", "mins", "max_priority"):
        assert torch.equal(getattr(results[0], name), getattr(results[1], name))
    last = {i: v for i, v in zip(idx.tolist(), td.tolist(), strict=True)}
    leaf = leaves(results[0])[:512].double().cpu()
    for i, v in last.items():
        assert math.isclose(float(leaf[i]), (abs(v) + 1e-6) ** 0.6, rel_tol=1e-5)
