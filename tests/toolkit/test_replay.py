"""Replay buffers: n-step returns over parallel envs and episode ends, ring wrap, dtype rules,
input validation, prioritized sampling and updates, checkpoints; plus a hypothesis state machine
driving add/extend/sample/update against a plain-Python model."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from tritonrl.toolkit.replay import PrioritizedReplayBuffer, ReplayBatch, ReplayBuffer

OBS = (2,)


def _step(t: int, E: int, rng: np.random.Generator, p_term: float = 0.2, p_trunc: float = 0.1):
    """One vector step whose observations encode (step, env) so mix-ups are visible."""
    obs = np.stack([np.full(OBS, 10 * t + e, np.float32) for e in range(E)])
    return (
        obs,
        rng.integers(0, 5, E),
        rng.integers(-3, 4, E).astype(np.float32),
        obs + 0.5,
        rng.random(E) < p_term,
        rng.random(E) < p_trunc,
    )


def _tensors(step: tuple) -> tuple:
    """A step as CPU tensors: float obs, int64 actions, f32 rewards, bool flags."""
    return tuple(torch.from_numpy(np.asarray(x)) for x in step)


class Model:
    """Plain-Python n-step replay: the specification the buffer is checked against."""

    def __init__(self, capacity: int, E: int, n: int, gamma: float, alpha: float, eps: float) -> None:
        self.C, self.E, self.n, self.gamma, self.alpha, self.eps = capacity, E, n, gamma, alpha, eps
        self.pending: list[list[dict[str, Any]]] = [[] for _ in range(E)]
        self.ring: list[dict[str, Any] | None] = [None] * capacity
        self.prio = [0.0] * capacity
        self.max_p = 1.0
        self.count = 0
        self.samples = 0

    def __len__(self) -> int:
        return min(self.count, self.C)

    def step(self, obs, action, reward, next_obs, term, trunc) -> None:
        for e in range(self.E):
            self.pending[e].append({"obs": obs[e].tolist(), "action": int(action[e]), "rewards": []})
            for entry in self.pending[e]:
                entry["rewards"].append(float(reward[e]))
        for e in range(self.E):
            if term[e] or trunc[e]:
                done, self.pending[e] = self.pending[e], []
            elif len(self.pending[e][0]["rewards"]) == self.n:
                done = [self.pending[e].pop(0)]
            else:
                done = []
            for c in done:
                k = len(c["rewards"])
                self.ring[self.count % self.C] = {
                    "obs": c["obs"],
                    "action": c["action"],
                    "reward": sum(self.gamma**j * r for j, r in enumerate(c["rewards"])),
                    "next_obs": next_obs[e].tolist(),
                    "discount": 0.0 if term[e] else self.gamma**k,
                }
                self.prio[self.count % self.C] = self.max_p**self.alpha
                self.count += 1

    def update(self, indices: list[int], td: list[float]) -> None:
        ps = [abs(v) + self.eps for v in td]
        for i, p in zip(indices, ps, strict=True):
            self.prio[i] = p**self.alpha
        self.max_p = max([self.max_p, *ps])


def _check_batch(batch: ReplayBatch, model: Model, B: int) -> None:
    assert batch.indices.dtype == torch.int64 and batch.weights.dtype == torch.float32
    assert batch.reward.dtype == torch.float32 and batch.discount.dtype == torch.float32
    idx = batch.indices.tolist()
    assert len(idx) == B and all(0 <= i < len(model) for i in idx)
    for j, i in enumerate(idx):
        tr = model.ring[i]
        assert tr is not None
        assert batch.obs[j].tolist() == tr["obs"]
        assert batch.next_obs[j].tolist() == tr["next_obs"]
        assert int(batch.action[j]) == tr["action"]
        # f32 storage of an n-step return of small integers: relative 1e-6
        assert math.isclose(float(batch.reward[j]), tr["reward"], rel_tol=1e-6, abs_tol=1e-6)
        assert math.isclose(float(batch.discount[j]), tr["discount"], rel_tol=1e-6)


class ReplayMachine(RuleBasedStateMachine):
    """Random streams from several envs, with episode ends and ring wrap, against :class:`Model`."""

    STAGING = "host"
    model_class: type[Model] = Model

    @initialize(
        capacity=st.integers(1, 12),
        E=st.integers(1, 3),
        n=st.integers(1, 4),
        gamma=st.sampled_from([0.5, 0.9]),
        prioritized=st.booleans(),
        seed=st.integers(0, 2**16),
    )
    def setup(self, capacity: int, E: int, n: int, gamma: float, prioritized: bool, seed: int) -> None:
        self.kw: dict[str, Any] = dict(num_envs=E, n_step=n, gamma=gamma, staging=self.STAGING)
        if prioritized:
            self.kw.update(alpha=0.6, eps=1e-3, beta_steps=10)
        self.buf = (PrioritizedReplayBuffer if prioritized else ReplayBuffer)(capacity, OBS, **self.kw)
        self.model = self.model_class(capacity, E, n, gamma, 0.6, 1e-3)
        self.prioritized = prioritized
        self.rng = np.random.default_rng(seed)
        self.t = 0

    @rule(
        p_term=st.sampled_from([0.0, 0.3]),
        p_trunc=st.sampled_from([0.0, 0.2]),
        as_tensors=st.booleans(),
    )
    def add(self, p_term: float, p_trunc: float, as_tensors: bool) -> None:
        s = _step(self.t, self.model.E, self.rng, p_term, p_trunc)
        self.t += 1
        # tensors (what the vector env hands over) take add()'s direct path when n_step == 1
        self.buf.add(*(_tensors(s) if as_tensors else s))
        self.model.step(*s)

    @rule(T=st.integers(1, 5))
    def extend(self, T: int) -> None:
        steps = [_step(self.t + k, self.model.E, self.rng) for k in range(T)]
        self.t += T
        self.buf.extend(*(np.stack(f) for f in zip(*steps, strict=True)))
        for s in steps:
            self.model.step(*s)

    @precondition(lambda self: len(self.model) > 0)
    @rule(data=st.data())
    def sample(self, data: st.DataObject) -> None:
        B = data.draw(st.integers(1, len(self.model)))
        g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16)))
        batch = self.buf.sample(B, generator=g)
        _check_batch(batch, self.model, B)
        if not self.prioritized:
            assert bool((batch.weights == 1).all())
            return
        beta = 0.4 + 0.6 * min(1.0, self.model.samples / 10)
        self.model.samples += 1
        prio = self.model.prio[: len(self.model)]
        expected = [(prio[i] / min(prio)) ** -beta for i in batch.indices.tolist()]
        # leaf values are f32 (pow vs the model's f64): relative 1e-5
        np.testing.assert_allclose(batch.weights.numpy(), expected, rtol=1e-5)
        cum = np.concatenate([[0.0], np.cumsum(prio)])
        tot, tol = cum[-1], 1e-5 * cum[-1]
        for j, i in enumerate(batch.indices.tolist()):  # stratum j holds sample j
            assert cum[i] <= (j + 1) * tot / B + tol and cum[i + 1] >= j * tot / B - tol

    @precondition(lambda self: self.prioritized and len(self.model) > 0)
    @rule(data=st.data())
    def update(self, data: st.DataObject) -> None:
        n = len(self.model)
        idx = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=8))  # duplicates likely
        td = data.draw(st.lists(st.floats(-5, 5, width=32), min_size=len(idx), max_size=len(idx)))
        self.buf.update_priorities(torch.tensor(idx), torch.tensor(td))
        self.model.update(idx, td)

    @precondition(lambda self: self.prioritized and len(self.model) > 0)
    @rule(bad=st.sampled_from(["nan", "inf", "index"]))
    def bad_update(self, bad: str) -> None:
        before = self.buf.priorities()
        td = {"nan": float("nan"), "inf": float("inf"), "index": 1.0}[bad]
        idx = len(self.model) if bad == "index" else 0
        with pytest.raises(ValueError, match="rejected"):
            self.buf.update_priorities(torch.tensor([0, idx]), torch.tensor([2.0, td]))
        assert torch.equal(self.buf.priorities(), before)

    @rule()
    def bad_add(self) -> None:
        obs, act, rew, nxt, term, trunc = _step(self.t, self.model.E, self.rng)
        with pytest.raises(ValueError):
            self.buf.add(obs[:, :1], act, rew, nxt, term, trunc)  # wrong obs shape

    @rule()
    def roundtrip(self) -> None:
        """Resume from a state dict in a fresh buffer; later rules check it behaves the same."""
        cls = type(self.buf)
        kw = dict(num_envs=self.model.E, n_step=self.model.n, gamma=self.model.gamma)
        if self.prioritized:
            kw.update(alpha=0.6, eps=1e-3, beta_steps=10)
        fresh = cls(self.model.C, OBS, **kw)
        fresh.load_state_dict(self.buf.state_dict())
        self.buf = fresh

    @invariant()
    def sizes_match(self) -> None:
        assert len(self.buf) == len(self.model)
        assert self.buf.pending == sum(len(p) for p in self.model.pending)

    @invariant()
    def priorities_match(self) -> None:
        if self.prioritized and len(self.model):
            np.testing.assert_allclose(
                self.buf.priorities().numpy(), self.model.prio[: len(self.model)], rtol=1e-5
            )


ReplayMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
test_replay_state_machine = ReplayMachine.TestCase


# ---- n-step by hand ---------------------------------------------------------------------------


def test_nstep_returns_by_hand() -> None:
    """Two envs, n = 3, gamma = 0.5. Env 0 terminates at step 2, env 1 is truncated at step 3."""
    buf = ReplayBuffer(16, (1,), num_envs=2, n_step=3, gamma=0.5)
    rewards = [[1, 10], [2, 20], [4, 40], [8, 80], [16, 160]]
    ends = {(2, 0): "term", (3, 1): "trunc"}
    for t, r in enumerate(rewards):
        obs = np.array([[10.0 * t], [10.0 * t + 1]], np.float32)
        term = np.array([ends.get((t, e)) == "term" for e in range(2)])
        trunc = np.array([ends.get((t, e)) == "trunc" for e in range(2)])
        buf.add(obs, np.array([t, t]), np.array(r, np.float32), obs + 0.5, term, trunc)
    sd = buf.state_dict()
    got = [
        (float(o), float(r), float(d), float(nx))
        for o, r, d, nx in zip(
            sd["obs"][:, 0], sd["reward"], sd["discount"], sd["next_obs"][:, 0], strict=True
        )
    ]
    expected = [
        # completed at step 2: env 0 terminates (all three of its pending, no bootstrap), then
        # env 1's step-0 window is full (10 + 0.5*20 + 0.25*40, bootstrap from step 2, gamma**3)
        (0.0, 1 + 0.5 * 2 + 0.25 * 4, 0.0, 20.5),
        (10.0, 2 + 0.5 * 4, 0.0, 20.5),
        (20.0, 4.0, 0.0, 20.5),
        (1.0, 10 + 0.5 * 20 + 0.25 * 40, 0.125, 21.5),
        # step 3: env 1 truncated: its pending steps 1..3 bootstrap from the real final obs
        (11.0, 20 + 0.5 * 40 + 0.25 * 80, 0.125, 31.5),
        (21.0, 40 + 0.5 * 80, 0.25, 31.5),
        (31.0, 80.0, 0.5, 31.5),
    ]
    assert got == expected
    assert len(buf) == 7
    assert buf.pending == 3  # steps 3 and 4 of env 0 (its new episode), step 4 of env 1


@pytest.mark.parametrize("prioritized", [False, True])
@pytest.mark.parametrize("obs_dtype", [torch.float32, torch.bfloat16])
def test_direct_add_equals_extend(prioritized: bool, obs_dtype: torch.dtype) -> None:
    """add() of tensors writes the ring directly (numpy views of f32 CPU storage, copy_ otherwise);
    the buffer must equal one filled by extend() bit for bit, across the ring's wrap-around and with
    inputs whose dtypes need converting (f64 observations, int32 actions, f64 rewards)."""
    rng = np.random.default_rng(1)
    steps = [_step(t, 3, rng) for t in range(30)]
    kw: dict[str, Any] = dict(num_envs=3, gamma=0.9, obs_dtype=obs_dtype)
    kind = PrioritizedReplayBuffer if prioritized else ReplayBuffer
    a, b = kind(17, OBS, **kw), kind(17, OBS, **kw)
    for t, s in enumerate(steps):
        obs, act, rew, nxt, term, trunc = _tensors(s)
        if t % 2:
            obs, nxt, act, rew = obs.double(), nxt.double(), act.int(), rew.double()
        a.add(obs, act, rew, nxt, term, trunc)
    assert a._views is not None if obs_dtype == torch.float32 else a._views is None  # both branches run
    b.extend(*(np.stack(f) for f in zip(*steps, strict=True)))
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.pop("meta") == sb.pop("meta")
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


def test_direct_add_rejects_what_extend_rejects() -> None:
    """Bad tensors on add()'s direct path raise extend()'s errors and store nothing."""
    buf = ReplayBuffer(8, OBS, num_envs=2)
    good = _tensors(_step(0, 2, np.random.default_rng(0)))
    buf.add(*good)
    before = {k: v.clone() for k, v in buf.state_dict().items() if k != "meta"}
    bad_reward = good[2].clone()
    bad_reward[1] = float("nan")
    cases = [
        ((good[0][:1], *good[1:]), ValueError, "obs must have shape"),
        ((*good[:2], bad_reward, *good[3:]), ValueError, "NaN"),
        ((*good[:4], good[4].float(), good[5]), TypeError, "terminated must be boolean"),
        ((good[0], good[1].float(), *good[2:]), TypeError, "action must have an integer dtype"),
    ]
    for args, error, match in cases:
        with pytest.raises(error, match=match):
            buf.add(*args)
    after = buf.state_dict()
    assert after["meta"]["size"] == 2
    for k, v in before.items():
        assert torch.equal(v, after[k]), k


def test_extend_equals_repeated_add() -> None:
    rng = np.random.default_rng(0)
    steps = [_step(t, 3, rng) for t in range(40)]
    kw = dict(num_envs=3, n_step=4, gamma=0.9)
    a, b, c = (PrioritizedReplayBuffer(17, OBS, **kw) for _ in range(3))
    for s in steps:
        a.add(*s)
    b.extend(*(np.stack(f) for f in zip(*steps, strict=True)))
    for lo, hi in ((0, 7), (7, 8), (8, 40)):
        c.extend(*(np.stack(f) for f in zip(*steps[lo:hi], strict=True)))
    sa, sb, sc = (x.state_dict() for x in (a, b, c))
    assert sa.pop("meta") == sb.pop("meta") == sc.pop("meta")
    for k in sa:
        assert torch.equal(sa[k], sb[k]) and torch.equal(sa[k], sc[k]), k


# ---- dtype rules ----------------------------------------------------------------------------


def test_dtype_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    buf = ReplayBuffer(8, (3,))
    assert buf.obs_dtype == torch.float32  # CPU: training_dtype is f32
    monkeypatch.setenv("TRITONRL_DTYPE", "bf16")
    bf = PrioritizedReplayBuffer(8, (3,), action_shape=(2,), action_dtype=torch.float32)
    img = ReplayBuffer(8, (4, 4), obs_dtype=torch.uint8)
    assert bf.obs_dtype == torch.bfloat16 and img.obs_dtype == torch.uint8
    x = np.random.default_rng(0).random((1, 3)).astype(np.float32)
    reward = torch.tensor([1.0], dtype=torch.bfloat16)  # a tensor reward in any float dtype is read as f32
    bf.add(x, np.array([[0.25, -1.5]]), reward, x, np.array([False]), np.array([True]))
    batch = bf.sample(1)
    assert batch.obs.dtype == torch.bfloat16 and batch.next_obs.dtype == torch.bfloat16
    assert batch.action.dtype == torch.float32 and batch.action.tolist() == [[0.25, -1.5]]
    assert batch.reward.dtype == batch.discount.dtype == batch.weights.dtype == torch.float32
    assert torch.equal(batch.obs[0], torch.from_numpy(x[0]).to(torch.bfloat16))  # one rounding
    im = np.arange(16, dtype=np.uint8).reshape(1, 4, 4)
    img.add(im, np.array([3]), np.array([0.5]), im, np.array([True]), np.array([False]))
    b = img.sample(1)
    assert (
        b.obs.dtype == torch.uint8
        and b.action.dtype == torch.int64
        and torch.equal(b.obs[0], torch.from_numpy(im[0]))
    )


@pytest.mark.parametrize(
    "obs_dtype, action_shape, action_dtype, numpy_path",
    [
        (torch.float32, (), torch.int64, True),
        (torch.uint8, (), torch.int32, True),
        (torch.float32, (2,), torch.float32, True),
        (torch.bfloat16, (), torch.int64, False),  # numpy has no bf16: index_select
    ],
)
def test_gather_copies_the_sampled_rows(
    obs_dtype: torch.dtype, action_shape: tuple[int, ...], action_dtype: torch.dtype, numpy_path: bool
) -> None:
    """A sampled batch holds exactly the stored rows at its indices, in fresh tensors of the
    stored dtypes, on the numpy path (CPU, numpy dtypes) and on index_select."""
    buf = PrioritizedReplayBuffer(
        40, (3, 2), obs_dtype=obs_dtype, action_shape=action_shape, action_dtype=action_dtype
    )
    assert (buf._views is not None) == numpy_path
    rng = np.random.default_rng(0)
    T = 50  # wraps
    obs = rng.integers(0, 200, (T, 1, 3, 2)).astype(np.float32)
    if obs_dtype == torch.uint8:
        obs = obs.astype(np.uint8)
    action = rng.integers(0, 5, (T, 1, *action_shape))
    if action_dtype.is_floating_point:
        action = action.astype(np.float32)
    buf.extend(obs, action, rng.random((T, 1)), obs + 1, rng.random((T, 1)) < 0.1, np.zeros((T, 1), bool))
    sd = buf.state_dict()
    batch = buf.sample(40, generator=torch.Generator().manual_seed(0))
    i = batch.indices
    for name, key in [
        ("obs", "obs"),
        ("action", "action"),
        ("reward", "reward"),
        ("next_obs", "next_obs"),
        ("discount", "discount"),
    ]:
        got, want = getattr(batch, name), sd[key].index_select(0, i)
        assert got.dtype == want.dtype and torch.equal(got, want), name
    before = buf.state_dict()["obs"].clone()
    batch.obs.zero_()  # the batch owns its memory
    batch.reward.fill_(-1.0)
    assert torch.equal(buf.state_dict()["obs"], before)
    assert torch.equal(buf.sample(40, generator=torch.Generator().manual_seed(0)).indices, i)
    if numpy_path:  # traced, the gather leaves numpy for index_select: one graph, the same rows
        traced = torch.compile(buf._gather, fullgraph=True, backend="eager")(i, batch.weights)
        for name in ("obs", "action", "reward", "next_obs", "discount"):
            assert torch.equal(getattr(traced, name), sd[name].index_select(0, i)), name


# ---- bad input --------------------------------------------------------------------------------


def _filled(prioritized: bool = True) -> ReplayBuffer:
    rng = np.random.default_rng(1)
    cls = PrioritizedReplayBuffer if prioritized else ReplayBuffer
    buf = cls(10, OBS, num_envs=2, n_step=2)
    for t in range(8):
        buf.add(*_step(t, 2, rng))
    return buf


def _snapshot(buf: ReplayBuffer) -> dict[str, Any]:
    """The buffer's content; the rejection counters (diagnostics) are left out."""
    sd = buf.state_dict()
    sd.pop("status", None)
    sd["meta"] = {k: v for k, v in sd["meta"].items() if k != "rejections_seen"}
    return {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in sd.items()}


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a
    )


_GOOD = _step(0, 2, np.random.default_rng(2))


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
    buf = _filled()
    before = _snapshot(buf)
    with pytest.raises(error, match=match):
        buf.add(*args)
    assert _same(_snapshot(buf), before)


def test_bad_sample_and_update() -> None:
    empty = PrioritizedReplayBuffer(4, OBS)
    with pytest.raises(ValueError, match="empty"):
        empty.sample(1)
    buf = _filled()
    with pytest.raises(ValueError, match="exceeds"):
        buf.sample(len(buf) + 1)
    with pytest.raises(ValueError, match="batch_size"):
        buf.sample(0)
    before = _snapshot(buf)
    with pytest.raises(ValueError, match="entries"):
        buf.update_priorities(torch.tensor([0, 1]), torch.tensor([1.0]))
    with pytest.raises(TypeError, match="indices"):
        buf.update_priorities(torch.tensor([0.0]), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="rejected"):
        buf.update_priorities(torch.tensor([0, len(buf)]), torch.tensor([1.0, 2.0]))
    assert _same(_snapshot(buf), before)
    with pytest.raises(ValueError):
        ReplayBuffer(0, OBS)
    with pytest.raises(ValueError):
        PrioritizedReplayBuffer(4, OBS, eps=0.0)
    with pytest.raises(TypeError):
        ReplayBuffer(4, OBS, obs_dtype=torch.int32)


def test_deferred_priority_check() -> None:
    """check_priorities=False (the CUDA default): a bad batch is ignored now, reported by check()."""
    buf = _filled()
    buf.check_priorities = False
    before = buf.priorities()
    buf.update_priorities(torch.tensor([1]), torch.tensor([float("nan")]))  # no raise
    assert torch.equal(buf.priorities(), before) and buf.rejected_updates == 1
    with pytest.raises(ValueError, match="NaN"):
        buf.check()
    buf.check()  # reported once


# ---- sampling ---------------------------------------------------------------------------------


def test_generator_makes_sampling_reproducible() -> None:
    buf = _filled()
    a = buf.sample(5, generator=torch.Generator().manual_seed(3))
    b = buf.sample(5, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a.indices, b.indices)
    u = _filled(prioritized=False)
    assert torch.equal(
        u.sample(6, generator=torch.Generator().manual_seed(1)).indices,
        u.sample(6, generator=torch.Generator().manual_seed(1)).indices,
    )


def test_beta_anneals_linearly() -> None:
    buf = PrioritizedReplayBuffer(8, OBS, beta=0.4, beta_final=1.0, beta_steps=4)
    buf.add(*_step(0, 1, np.random.default_rng(0), 0.0, 1.0))
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
        buf.add(*_step(t, 1, rng))
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(16)
    for _ in range(50):
        counts += torch.bincount(buf.sample(16, generator=g).indices, minlength=16)
    expected = counts.sum() / 16
    assert float(((counts - expected) ** 2 / expected).sum()) < 37.697


# ---- checkpoints -------------------------------------------------------------------------------


def test_save_load_roundtrip_across_dtypes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONRL_DTYPE", "bf16")  # saved in bf16 ...
    src = _filled()
    src.update_priorities(torch.tensor([0, 3]), torch.tensor([4.0, 0.5]))
    src.sample(2)
    path = tmp_path / "replay.safetensors"
    src.save(path)
    assert [p.name for p in tmp_path.iterdir()] == ["replay.safetensors"]  # no temp file left
    monkeypatch.delenv("TRITONRL_DTYPE")  # ... loaded in f32
    dst = PrioritizedReplayBuffer(10, OBS, num_envs=2, n_step=2)
    dst.load(path)
    assert dst.obs_dtype == torch.float32
    a, b = src.state_dict(), dst.state_dict()
    assert a.pop("meta") == b.pop("meta")
    for k in a:
        assert torch.equal(a[k].to(b[k].dtype), b[k]), k
    ga = src.sample(4, generator=torch.Generator().manual_seed(9))
    gb = dst.sample(4, generator=torch.Generator().manual_seed(9))
    assert torch.equal(ga.indices, gb.indices) and torch.equal(ga.weights, gb.weights)
    rng = np.random.default_rng(7)
    s = _step(50, 2, rng, 0.0, 0.0)
    src.add(*s)
    dst.add(*s)  # pending n-step windows resumed too
    assert len(src) == len(dst) and src.pending == dst.pending


def test_load_rejects_damaged_or_foreign_files(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    src = _filled()
    good = tmp_path / "good.safetensors"
    src.save(good)
    dst = _filled()
    dst.update_priorities(torch.tensor([1]), torch.tensor([7.0]))
    before = _snapshot(dst)
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(ValueError, match="not a readable safetensors"):
        dst.load(truncated)
    foreign = tmp_path / "foreign.safetensors"
    save_file({"w": torch.zeros(3)}, str(foreign))
    with pytest.raises(ValueError, match="not a replay-buffer file"):
        dst.load(foreign)
    other = PrioritizedReplayBuffer(11, OBS, num_envs=2, n_step=2)
    with pytest.raises(ValueError, match="configuration"):
        other.load(good)
    with pytest.raises(FileNotFoundError):
        dst.load(tmp_path / "missing.safetensors")
    assert _same(_snapshot(dst), before)


def test_interrupted_save_keeps_the_previous_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    buf = _filled()
    path = tmp_path / "r.safetensors"
    buf.save(path)
    old = path.read_bytes()

    def boom(fd: int) -> None:  # the bytes were written to the temporary file; flushing them fails
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError, match="disk full"):
        buf.save(path)
    assert path.read_bytes() == old and [p.name for p in tmp_path.iterdir()] == ["r.safetensors"]


def test_save_syncs_the_temporary_file_before_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without an fsync before os.replace, a power loss can leave the new name pointing at an empty
    # or partial file (the rename reaches the disk before the data).
    import os

    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))))
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        events.append(("replace", os.path.basename(src)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    _filled().save(tmp_path / "r.safetensors")
    # then the folder is synced too, so that the rename itself survives a power cut
    assert [e[0] for e in events] == ["fsync", "replace", "fsync"] and events[0][1] == events[1][1], events
    assert events[2][1] == tmp_path.name, events


# ---- CUDA (--gpu) -------------------------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_buffer_end_to_end() -> None:
    from tritonrl.toolkit.precision import training_dtype

    buf = PrioritizedReplayBuffer(1000, OBS, device="cuda", num_envs=4, n_step=3)
    assert buf.obs_dtype == training_dtype("cuda") and not buf.check_priorities
    rng = np.random.default_rng(0)
    steps = [_step(t, 4, rng) for t in range(300)]
    for s in steps[:100]:
        buf.add(*s)
    buf.extend(*(np.stack(f) for f in zip(*steps[100:], strict=True)))
    for g in (torch.Generator(device="cuda").manual_seed(0), torch.Generator().manual_seed(0)):
        batch = buf.sample(256, generator=g)
        assert batch.obs.device.type == "cuda" and batch.obs.dtype == buf.obs_dtype
        assert batch.indices.device.type == "cuda"
    buf.update_priorities(batch.indices, torch.randn(256, device="cuda"))
    buf.check()
    before = buf.priorities()
    buf.update_priorities(batch.indices, torch.full((256,), float("nan"), device="cuda"))  # deferred
    assert torch.equal(buf.priorities(), before)
    with pytest.raises(ValueError, match="NaN"):
        buf.check()
    buf.check_priorities = True
    with pytest.raises(ValueError, match="indices"):
        buf.update_priorities(torch.tensor([len(buf)], device="cuda"), torch.ones(1, device="cuda"))


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(2, 7),
    E=st.integers(1, 5),
    gamma=st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_one_step_schedule_equals_the_timeline_schedule(n: int, E: int, gamma: float, seed: int) -> None:
    """add()'s n-step bookkeeping for one vector step (a few Python operations per environment)
    must give the timeline version's commits and state bit for bit, over any reachable state:
    rewards that do not sum exactly, episode ends by termination and by truncation."""
    from tritonrl.toolkit.replay.nstep import NStepState, _schedule_one, _schedule_window, schedule

    rng = np.random.default_rng(seed)
    K = n - 1
    state = NStepState(rng.integers(0, K + 1, E).astype(np.int64), rng.normal(size=(K, E)) * 10.0)
    for _ in range(6):
        r = (rng.normal(size=(1, E)) * 3.0).astype(np.float32)
        term = rng.random((1, E)) < 0.2
        trunc = ~term & (rng.random((1, E)) < 0.2)
        got, got_state = schedule(state, r, term, trunc, n, gamma)
        r64 = r.astype(np.float64)
        want, want_state = _schedule_window(state, r64, term, term | trunc, n, gamma)
        again, _ = _schedule_one(state, r64[0], term[0], (term | trunc)[0], n, gamma)
        for c in (got, again):
            for field in ("start", "end", "reward", "discount"):
                a, b = getattr(c, field), getattr(want, field)
                assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), field
        assert got_state.pending.tobytes() == want_state.pending.tobytes()
        assert got_state.rewards.tobytes() == want_state.rewards.tobytes()
        state = got_state


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("prioritized", [False, True])
def test_nstep_host_write_equals_tensor_write(n: int, prioritized: bool) -> None:
    """n-step buffers on the CPU write through numpy views; the tensor path (the one accelerators
    and bf16 storage take) must leave the same state bit for bit: one-step adds of tensors and of
    f64 arrays, multi-step extends, episode ends and the ring's wrap-around."""
    rng = np.random.default_rng(7)
    kw: dict[str, Any] = dict(num_envs=3, n_step=n, gamma=0.9)
    kind = PrioritizedReplayBuffer if prioritized else ReplayBuffer
    host, tensor = kind(11, OBS, **kw), kind(11, OBS, **kw)
    tensor._views = None  # the tensor path (without the storage's numpy views)
    assert host._views is not None and host._staging.views is not None
    t = 0
    for round_ in range(12):
        if round_ % 3 == 2:
            steps = [_step(t + k, 3, rng, 0.3, 0.2) for k in range(4)]
            t += 4
            for buf in (host, tensor):
                buf.extend(*(np.stack(f) for f in zip(*steps, strict=True)))
        else:
            s = _step(t, 3, rng, 0.3, 0.2)
            t += 1
            args = _tensors(s) if round_ % 2 else (s[0].astype(np.float64), *s[1:])
            host.add(*args)
            tensor.add(*args)
    sh, st_ = host.state_dict(), tensor.state_dict()
    assert sh.pop("meta") == st_.pop("meta")
    for k in sh:
        assert torch.equal(sh[k], st_[k]), k


# ---- device staging -----------------------------------------------------------------------------


class DeviceModel(Model):
    """Plain-Python device staging: every step (after ``n - 1`` warm-up steps) commits, in
    environment order, the transitions that started ``n - 1`` steps earlier, each return cut at
    the first episode end in its window. ``pending[e]`` holds env ``e``'s last ``n - 1`` steps."""

    def step(self, obs, action, reward, next_obs, term, trunc) -> None:
        for e in range(self.E):
            self.pending[e].append(
                {
                    "obs": obs[e].tolist(),
                    "action": int(action[e]),
                    "reward": float(reward[e]),
                    "next_obs": next_obs[e].tolist(),
                    "term": bool(term[e]),
                    "done": bool(term[e] or trunc[e]),
                }
            )
        if len(self.pending[0]) < self.n:
            return
        for e in range(self.E):
            window = self.pending[e]
            k = next((j + 1 for j, s in enumerate(window) if s["done"]), self.n)
            end = window[k - 1]
            self.ring[self.count % self.C] = {
                "obs": window[0]["obs"],
                "action": window[0]["action"],
                "reward": sum(self.gamma**j * s["reward"] for j, s in enumerate(window[:k])),
                "next_obs": end["next_obs"],
                "discount": 0.0 if end["term"] else self.gamma**k,
            }
            self.prio[self.count % self.C] = self.max_p**self.alpha
            self.count += 1
            window.pop(0)


class DeviceReplayMachine(ReplayMachine):
    """:class:`ReplayMachine`'s rules (add, extend, sample, priority updates, bad inputs, resume)
    on a device-staging buffer, against :class:`DeviceModel`."""

    STAGING = "device"
    model_class = DeviceModel

    @rule()
    def roundtrip(self) -> None:
        fresh = type(self.buf)(self.model.C, OBS, **self.kw)
        fresh.load_state_dict(self.buf.state_dict())
        self.buf = fresh

    @invariant()
    def pending_is_a_python_count(self) -> None:
        assert self.buf.pending == min(self.t, self.model.n - 1) * self.model.E


DeviceReplayMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_device_replay_state_machine = DeviceReplayMachine.TestCase


def _rows(buf: ReplayBuffer) -> list[tuple]:
    """The stored transitions as sortable tuples (exact f32 values)."""
    sd = buf.state_dict()
    return sorted(
        zip(
            map(tuple, sd["obs"].tolist()),
            sd["action"].tolist(),
            sd["reward"].tolist(),
            map(tuple, sd["next_obs"].tolist()),
            sd["discount"].tolist(),
            strict=True,
        )
    )


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 6),
    E=st.integers(1, 4),
    T=st.integers(1, 30),
    gamma=st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0]),
    p_term=st.sampled_from([0.0, 0.1, 0.4]),
    p_trunc=st.sampled_from([0.0, 0.1, 0.4]),
    seed=st.integers(0, 2**32 - 1),
)
def test_device_staging_stores_the_host_transitions(
    n: int, E: int, T: int, gamma: float, p_term: float, p_trunc: float, seed: int
) -> None:
    """Both staging modes store the same transitions, bit for bit (returns summed in f64 in the
    same order, rounded once): device mode holds exactly the host mode's transitions that started
    at least ``n - 1`` steps before the end of the stream (host mode may have committed later
    starts whose window an episode end closed early)."""
    rng = np.random.default_rng(seed)
    steps = [_step(t, E, rng, p_term, p_trunc) for t in range(T)]
    for s in steps:  # non-integer rewards, so that the rounding of the sums is exercised
        s[2][:] = rng.normal(size=E).astype(np.float32) * 3.0
    kw = dict(num_envs=E, n_step=n, gamma=gamma)
    host = ReplayBuffer(T * E, OBS, **kw)
    device = PrioritizedReplayBuffer(T * E, OBS, staging="device", **kw)
    for s in steps:
        host.add(*s)
        device.add(*_tensors(s))
    last_start = T - n  # obs[0] = 10 * start + env
    want = [row for row in _rows(host) if row[0][0] // 10 <= last_start]
    assert _rows(device) == want
    assert len(device) == max(0, T - n + 1) * E and device.pending == min(T, n - 1) * E
    assert device.priorities().eq(1.0).all()  # inserted at the initial max priority, 1 ** alpha


def test_device_staging_by_hand() -> None:
    """The host mode's hand-computed example in device mode: the same seven transitions of steps
    0..2, committed two steps after they started (steps 2, 3, 4), in environment order."""
    buf = ReplayBuffer(16, (1,), num_envs=2, n_step=3, gamma=0.5, staging="device")
    rewards = [[1, 10], [2, 20], [4, 40], [8, 80], [16, 160]]
    ends = {(2, 0): "term", (3, 1): "trunc"}
    for t, r in enumerate(rewards):
        obs = torch.tensor([[10.0 * t], [10.0 * t + 1]])
        term = torch.tensor([ends.get((t, e)) == "term" for e in range(2)])
        trunc = torch.tensor([ends.get((t, e)) == "trunc" for e in range(2)])
        buf.add(obs, torch.tensor([t, t]), torch.tensor(r, dtype=torch.float32), obs + 0.5, term, trunc)
        assert len(buf) == 2 * max(0, t - 1) and buf.pending == 2 * min(t + 1, 2)
    sd = buf.state_dict()
    got = [
        (float(o), float(r), float(d), float(nx))
        for o, r, d, nx in zip(
            sd["obs"][:, 0], sd["reward"], sd["discount"], sd["next_obs"][:, 0], strict=True
        )
    ]
    assert got == [
        (0.0, 1 + 0.5 * 2 + 0.25 * 4, 0.0, 20.5),  # step 2
        (1.0, 10 + 0.5 * 20 + 0.25 * 40, 0.125, 21.5),
        (10.0, 2 + 0.5 * 4, 0.0, 20.5),  # step 3: env 0's window cut by its termination at step 2
        (11.0, 20 + 0.5 * 40 + 0.25 * 80, 0.125, 31.5),
        (20.0, 4.0, 0.0, 20.5),  # step 4
        (21.0, 40 + 0.5 * 80, 0.25, 31.5),  # truncated at step 3: bootstraps from its final obs
    ]


def _device_stream(T: int, E: int, seed: int) -> list[tuple]:
    rng = np.random.default_rng(seed)
    return [_tensors(_step(t, E, rng, 0.2, 0.2)) for t in range(T)]


@pytest.mark.parametrize("prioritized", [False, True])
def test_device_staging_resumes_exactly(tmp_path: Path, prioritized: bool) -> None:
    """save/load mid-stream (warm-up included) and state_dict/load_state_dict: the resumed buffer
    continues bit for bit like the one never stopped, staging ring and ring wrap-around included."""
    kind = PrioritizedReplayBuffer if prioritized else ReplayBuffer
    kw: dict[str, Any] = dict(num_envs=3, n_step=4, gamma=0.9, staging="device")
    steps = _device_stream(30, 3, 0)
    for cut in (2, 17):
        a = kind(20, OBS, **kw)
        for s in steps[:cut]:
            a.add(*s)
        a.save(tmp_path / "r.safetensors")
        b, c = kind(20, OBS, **kw), kind(20, OBS, **kw)
        b.load(tmp_path / "r.safetensors")
        c.load_state_dict(a.state_dict())
        for s in steps[cut:]:
            for buf in (a, b, c):
                buf.add(*s)
        if prioritized:
            for buf in (a, b, c):
                buf.update_priorities(torch.tensor([0, 5]), torch.tensor([3.0, 0.25]))
        sa, sb, sc = (x.state_dict() for x in (a, b, c))
        assert sa.pop("meta") == sb.pop("meta") == sc.pop("meta")
        assert {"ring_obs", "ring_reward", "ring_done"} <= set(sa) and "stage_obs" not in sa
        for k in sa:
            assert torch.equal(sa[k], sb[k]) and torch.equal(sa[k], sc[k]), k


def test_a_state_of_the_other_staging_mode_loads_without_its_open_windows() -> None:
    """A run resumed with the other staging (e.g. ``replay_staging="auto"`` resolving differently on
    another device) keeps the stored transitions and counters and starts with an empty staging."""
    kw: dict[str, Any] = dict(num_envs=2, n_step=3, gamma=0.9)
    host, device = ReplayBuffer(50, OBS, **kw), ReplayBuffer(50, OBS, staging="device", **kw)
    for s in _device_stream(9, 2, 1):
        host.add(*s)
        device.add(*s)
    to_device, to_host = ReplayBuffer(50, OBS, staging="device", **kw), ReplayBuffer(50, OBS, **kw)
    to_device.load_state_dict(host.state_dict())
    to_host.load_state_dict(device.state_dict())
    for src, dst in ((host, to_device), (device, to_host)):
        assert _rows(dst) == _rows(src) and dst.steps == src.steps and dst.pending == 0
    more = _device_stream(3, 2, 2)
    for s in more:
        to_device.add(*s)
    assert len(to_device) == len(host) + 2  # a fresh warm-up of n - 1 steps, then one step's commits
    with pytest.raises(ValueError, match="configuration"):
        ReplayBuffer(50, OBS, staging="device", **{**kw, "n_step": 2}).load_state_dict(host.state_dict())
    bad = device.state_dict()
    bad["meta"] = {**bad["meta"], "stage_steps": 99}
    with pytest.raises(ValueError, match="stage_steps"):
        ReplayBuffer(50, OBS, staging="device", **kw).load_state_dict(bad)


def test_device_staging_checks_shapes_and_dtypes_without_reading_values() -> None:
    from helpers import HostReads

    buf = PrioritizedReplayBuffer(8, OBS, num_envs=2, n_step=3, staging="device", check_priorities=False)
    buf._views = None  # no numpy views of the CPU storage (the CUDA buffer's path)
    good = _tensors(_step(0, 2, np.random.default_rng(0)))
    cases = [
        ((good[0][:1], *good[1:]), ValueError, "obs must have shape"),
        ((*good[:2], good[2][:1], *good[3:]), ValueError, "reward must have shape"),
        ((*good[:4], good[4].float(), good[5]), TypeError, "terminated must be boolean"),
        ((good[0], good[1].float(), *good[2:]), TypeError, "action must have an integer dtype"),
        ((*good[:2], good[4], *good[3:]), TypeError, "reward must be a real"),
    ]
    for args, error, match in cases:
        with pytest.raises(error, match=match):
            buf.add(*args)
    assert buf.steps == 0 and buf.pending == 0
    with HostReads():
        for s in _device_stream(6, 2, 3):
            buf.add(*s)
    assert len(buf) == 8 and buf.steps == 6
    with pytest.raises(ValueError, match="staging must be one of"):
        ReplayBuffer(8, OBS, staging="gpu")


def test_memory_bytes_counts_the_device_ring() -> None:
    kw: dict[str, Any] = dict(obs_dtype=torch.float32, num_envs=4, n_step=3)
    host = ReplayBuffer.memory_bytes(100, (5,), **kw)
    device = ReplayBuffer.memory_bytes(100, (5,), staging="device", **kw)
    assert host["observations"] == (200 + 8) * 20 and device["observations"] == (200 + 24) * 20
    assert device["actions"] == (100 + 12) * 8 and device["rewards and discounts"] == 800 + 120
