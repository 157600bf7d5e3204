"""What the replay-buffer tests share: a step stream whose observations encode (step, env), a
plain-Python model of n-step replay (the specification), the hypothesis state machine that drives a
buffer against it, and small fixtures."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from tritonrl.toolkit.replay import PrioritizedReplayBuffer, ReplayBatch, ReplayBuffer

OBS = (2,)


def make_step(t: int, E: int, rng: np.random.Generator, p_term: float = 0.2, p_trunc: float = 0.1):
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


def to_tensors(step: tuple) -> tuple:
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


def check_batch(batch: ReplayBatch, model: Model, B: int) -> None:
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
        asto_tensors=st.booleans(),
    )
    def add(self, p_term: float, p_trunc: float, asto_tensors: bool) -> None:
        s = make_step(self.t, self.model.E, self.rng, p_term, p_trunc)
        self.t += 1
        # tensors (what the vector env hands over) take add()'s direct path when n_step == 1
        self.buf.add(*(to_tensors(s) if asto_tensors else s))
        self.model.step(*s)

    @rule(T=st.integers(1, 5))
    def extend(self, T: int) -> None:
        steps = [make_step(self.t + k, self.model.E, self.rng) for k in range(T)]
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
        check_batch(batch, self.model, B)
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
        obs, act, rew, nxt, term, trunc = make_step(self.t, self.model.E, self.rng)
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


def filled(prioritized: bool = True) -> ReplayBuffer:
    rng = np.random.default_rng(1)
    cls = PrioritizedReplayBuffer if prioritized else ReplayBuffer
    buf = cls(10, OBS, num_envs=2, n_step=2)
    for t in range(8):
        buf.add(*make_step(t, 2, rng))
    return buf


def snapshot(buf: ReplayBuffer) -> dict[str, Any]:
    """The buffer's content; the rejection counters (diagnostics) are left out."""
    sd = buf.state_dict()
    sd.pop("status", None)
    sd["meta"] = {k: v for k, v in sd["meta"].items() if k != "rejections_seen"}
    return {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in sd.items()}


def same_content(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a
    )


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
