"""Replay buffers: bad input raises and changes nothing; sampling (generators, beta annealing,
uniformity)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from replay_model import OBS, filled, make_step, same_content, snapshot
from tritonrl.toolkit.replay import PrioritizedReplayBuffer, ReplayBuffer

# ---- bad input --------------------------------------------------------------------------------


_GOOD = make_step(0, 2, np.random.default_rng(2))


def _with(i: int, value: Any) -> tuple:
    args = list(_GOOD)
    args[i] = value
    return tuple(args)


@pytest.mark.parametrize(
    "args, error, match",
    [
        (_with(0, np.zeros((2, 3), np.float32)), ValueError, "obs"),
        (_with(0, np.zeros((3, 2), np.float32)), ValueError, "obs"),
        (_with(0, np.zeros((2, 2), np.int64)), TypeError, "obs"),
        (_with(3, np.zeros((2, 2), np.uint8)), TypeError, "next_obs"),
        (_with(1, np.zeros(2, np.float32)), TypeError, "action"),
        (_with(1, np.zeros(3, np.int64)), ValueError, "action"),
        (_with(2, np.array([1.0, np.nan])), ValueError, "reward"),
        (_with(2, np.zeros(3)), ValueError, "reward"),
        (_with(4, np.array([0, 1])), TypeError, "terminated"),
        (_with(5, np.array([True])), ValueError, "truncated"),
    ],
)
def test_bad_add_raises_and_changes_nothing(args: tuple, error: type, match: str) -> None:
    buf = filled()
    before = snapshot(buf)
    with pytest.raises(error, match=match):
        buf.add(*args)
    assert same_content(snapshot(buf), before)


def test_bad_sample_and_update() -> None:
    empty = PrioritizedReplayBuffer(4, OBS)
    with pytest.raises(ValueError, match="empty"):
        empty.sample(1)
    buf = filled()
    with pytest.raises(ValueError, match="exceeds"):
        buf.sample(len(buf) + 1)
    with pytest.raises(ValueError, match="batch_size"):
        buf.sample(0)
    before = snapshot(buf)
    with pytest.raises(ValueError, match="entries"):
        buf.update_priorities(torch.tensor([0, 1]), torch.tensor([1.0]))
    with pytest.raises(TypeError, match="indices"):
        buf.update_priorities(torch.tensor([0.0]), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="rejected"):
        buf.update_priorities(torch.tensor([0, len(buf)]), torch.tensor([1.0, 2.0]))
    assert same_content(snapshot(buf), before)
    with pytest.raises(ValueError):
        ReplayBuffer(0, OBS)
    with pytest.raises(ValueError):
        PrioritizedReplayBuffer(4, OBS, eps=0.0)
    with pytest.raises(TypeError):
        ReplayBuffer(4, OBS, obs_dtype=torch.int32)


def test_buffer_skips_rechecks_but_not_reassigned_exponents(monkeypatch: pytest.MonkeyPatch) -> None:
    """The buffer hands its own checked arguments to the unchecked ops (same bits as the checked
    ones); an exponent reassigned out of range since __init__ goes through the checks and raises."""
    from tritonrl.kernels import sumtree
    from tritonrl.toolkit.replay import prioritized

    calls: list[str] = []

    def recorded(name: str) -> Any:
        fn = getattr(prioritized, name)
        return lambda *a, **k: calls.append(name) or fn(*a, **k)

    for name in ("per_update", "per_update_unchecked", "per_sample", "per_sample_unchecked"):
        monkeypatch.setattr(prioritized, name, recorded(name))
    buf, twin = filled(), filled()
    idx, td = torch.tensor([3, 1, 3, 0]), torch.tensor([0.5, -2.0, 4.0, 1e-3], dtype=torch.float64)
    buf.update_priorities(idx, td)
    sumtree.per_update(twin._tree, idx, td, alpha=twin.alpha, eps=twin.eps, size=len(twin))
    for a, b in zip(buf._tree, twin._tree, strict=True):
        assert torch.equal(a, b)  # exact: the same op on the same arguments, checked or not
    torch.manual_seed(5)
    got = buf.sample(3)
    torch.manual_seed(5)
    want = sumtree.per_sample(twin._tree, torch.rand(3), twin.current_beta, len(twin))
    assert torch.equal(got.indices, want[0]) and torch.equal(got.weights, want[1])  # exact: as above
    assert calls == ["per_update_unchecked", "per_sample_unchecked"]
    buf.eps = -1.0
    with pytest.raises(ValueError, match="eps"):
        buf.update_priorities(idx, td)
    buf.beta = buf.beta_final = -0.5
    with pytest.raises(ValueError, match="beta"):
        buf.sample(2)
    assert calls[2:] == ["per_update", "per_sample"]


def test_deferred_priority_check() -> None:
    """check_priorities=False (the CUDA default): a bad batch is ignored now, reported by check()."""
    buf = filled()
    buf.check_priorities = False
    before = buf.priorities()
    buf.update_priorities(torch.tensor([1]), torch.tensor([float("nan")]))  # no raise
    assert torch.equal(buf.priorities(), before) and buf.rejected_updates == 1
    with pytest.raises(ValueError, match="NaN"):
        buf.check()
    buf.check()  # reported once


# ---- sampling ---------------------------------------------------------------------------------


def test_generator_makes_sampling_reproducible() -> None:
    buf = filled()
    a = buf.sample(5, generator=torch.Generator().manual_seed(3))
    b = buf.sample(5, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a.indices, b.indices)
    u = filled(prioritized=False)
    assert torch.equal(
        u.sample(6, generator=torch.Generator().manual_seed(1)).indices,
        u.sample(6, generator=torch.Generator().manual_seed(1)).indices,
    )


def test_beta_anneals_linearly() -> None:
    buf = PrioritizedReplayBuffer(8, OBS, beta=0.4, beta_final=1.0, beta_steps=4)
    buf.add(*make_step(0, 1, np.random.default_rng(0), 0.0, 1.0))
    betas = []
    for _ in range(6):
        betas.append(buf.current_beta)
        buf.sample(1)
    np.testing.assert_allclose(betas, [0.4, 0.55, 0.7, 0.85, 1.0, 1.0])


def test_uniform_sampling_is_uniform() -> None:
    """Chi-square of slot frequencies against the uniform law (df = 15, p = 0.001: 37.697)."""
    buf = ReplayBuffer(16, OBS)
    rng = np.random.default_rng(0)
    for t in range(20):  # wraps
        buf.add(*make_step(t, 1, rng))
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(16)
    for _ in range(50):
        counts += torch.bincount(buf.sample(16, generator=g).indices, minlength=16)
    expected = counts.sum() / 16
    assert float(((counts - expected) ** 2 / expected).sum()) < 37.697
