"""Frame replay (frames stored once as uint8): the same transitions as ``ReplayBuffer`` over full
stacked observations; only valid transitions sampled while the rings wrap (hypothesis, against a
plain-Python slot model); prioritized updates; memory; save/load; bad input."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonrl.kernels.sumtree import leaves
from tritonrl.toolkit.replay import FrameReplayBuffer, PrioritizedFrameReplayBuffer, ReplayBuffer


class Stream:
    """Vector steps of zero-padded frame stacks (a frame-stack wrapper's model). Every frame is
    unique (it encodes env and a per-env counter), so a mix-up of slots is visible."""

    def __init__(self, E: int, C: int, stack: int, seed: int, p_term: float, p_trunc: float) -> None:
        self.E, self.C, self.stack = E, C, stack
        self.rng = np.random.default_rng(seed)
        self.p_term, self.p_trunc = p_term, p_trunc
        self.count = [0] * E
        self.obs = np.stack([self._reset(e) for e in range(E)])

    def _frame(self, e: int) -> np.ndarray:
        c = self.count[e] = self.count[e] + 1
        f = np.zeros((self.C, 2, 2), np.uint8)
        f[:, 0, 0], f[:, 0, 1], f[:, 1, 0], f[:, 1, 1] = c % 256, c // 256, e + 1, np.arange(self.C) + 1
        return f

    def _reset(self, e: int) -> np.ndarray:
        stack = np.zeros((self.stack * self.C, 2, 2), np.uint8)
        stack[-self.C :] = self._frame(e)
        return stack

    def step(self) -> tuple[np.ndarray, ...]:
        E, C = self.E, self.C
        obs = self.obs
        nxt = np.concatenate([obs[:, C:], np.stack([self._frame(e) for e in range(E)])], axis=1)
        term = self.rng.random(E) < self.p_term
        trunc = ~term & (self.rng.random(E) < self.p_trunc)
        action = self.rng.integers(0, 5, E)
        reward = self.rng.integers(-3, 4, E).astype(np.float32)
        after = nxt.copy()
        for e in np.flatnonzero(term | trunc):
            after[e] = self._reset(e)
        self.obs = after
        return obs, action, reward, nxt, term, trunc


def _key(obs: Any, action: int, next_obs: Any) -> tuple[bytes, int, bytes]:
    return (np.asarray(obs, np.uint8).tobytes(), int(action), np.asarray(next_obs, np.uint8).tobytes())


def frame_transitions(buf: FrameReplayBuffer) -> dict[tuple, tuple[float, float]]:
    """Every valid transition of ``buf`` (obs and next obs as bytes: ``scale=1``)."""
    idx = buf.valid_indices()
    if idx.numel() == 0:
        return {}
    b = buf._gather(idx, torch.ones(idx.shape[0]))
    out = {}
    for j in range(idx.shape[0]):
        key = _key(b.obs[j].to(torch.uint8).numpy(), int(b.action[j]), b.next_obs[j].to(torch.uint8).numpy())
        assert key not in out  # every frame is unique: so is every transition
        out[key] = (float(b.reward[j]), float(b.discount[j]))
    return out


def reference_transitions(ref: ReplayBuffer) -> dict[tuple, tuple[float, float]]:
    n = len(ref)
    o, a, nx = ref._obs[:n].numpy(), ref._action[:n].numpy(), ref._next_obs[:n].numpy()
    r, d = ref._reward[:n].numpy(), ref._discount[:n].numpy()
    return {_key(o[i], a[i], nx[i]): (float(r[i]), float(d[i])) for i in range(n)}


def assert_same_values(got: dict, want: dict) -> None:
    assert set(got) <= set(want)
    for k, (r, d) in got.items():
        # f32 returns of small integers, summed in f64 in the same order: relative 1e-6
        assert math.isclose(r, want[k][0], rel_tol=1e-6, abs_tol=1e-6)
        assert math.isclose(d, want[k][1], rel_tol=1e-6)


def _frame_kw(E: int, n: int, stack: int, gamma: float = 0.9) -> dict[str, Any]:
    return dict(
        stack=stack, num_envs=E, n_step=n, gamma=gamma, obs_dtype=torch.float32, scale=1.0, num_actions=5
    )


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("C, stack", [(1, 4), (2, 1), (1, 2)])
def test_same_transitions_as_replay_buffer(n: int, C: int, stack: int) -> None:
    E, T = 3, 80
    stream = Stream(E, C, stack, seed=n + 7 * stack, p_term=0.08, p_trunc=0.06)
    shape = (stack * C, 2, 2)
    buf = FrameReplayBuffer(E * 200, shape, **_frame_kw(E, n, stack))
    ref = ReplayBuffer(E * T, shape, num_envs=E, n_step=n, gamma=0.9, obs_dtype=torch.uint8)
    for t in range(T):
        step = stream.step()
        buf.add(*step)
        ref.add(*step)
        assert len(buf) == len(ref) and buf.pending == ref.pending, t
    got, want = frame_transitions(buf), reference_transitions(ref)
    assert set(got) == set(want)
    assert_same_values(got, want)
    ends = np.asarray(ref._discount[: len(ref)])
    assert (ends == 0).any()  # terminations were covered


class SlotModel:
    """Plain-Python model of the slots: per env, a list of slot records (a step's transition key
    or ``None`` for an episode's final frame); a transition is sampleable when its next slot is
    written and its stack's oldest frame is among the last ``ring`` written slots."""

    def __init__(self, E: int, ring: int, stack: int, n: int) -> None:
        self.ring, self.stack, self.n = ring, stack, n
        self.slots: list[list[dict[str, Any] | None]] = [[] for _ in range(E)]
        self.open: list[list[dict[str, Any]]] = [[] for _ in range(E)]  # windows of this episode
        self.preview = [False] * E

    def step(self, step: tuple[np.ndarray, ...], gamma: float) -> None:
        obs, action, reward, nxt, term, trunc = step
        for e, slots in enumerate(self.slots):
            rec = {"t": len(slots), "obs": obs[e], "action": int(action[e]), "rewards": [], "end": None}
            slots.append(rec)
            self.open[e].append(rec)
            for r in self.open[e]:
                r["rewards"].append(float(reward[e]))
            done = bool(term[e] or trunc[e])
            for r in self.open[e]:
                if done or len(r["rewards"]) == self.n:
                    k = len(r["rewards"])
                    r["next"] = nxt[e]
                    r["reward"] = sum(gamma**j * x for j, x in enumerate(r["rewards"]))
                    r["discount"] = 0.0 if term[e] else gamma**k
                    r["end"] = r["t"] + k  # the next step's slot, or the episode's final slot
            self.open[e] = [r for r in self.open[e] if r["end"] is None]
            if done:
                slots.append(None)  # the final frame
            self.preview[e] = not done

    def expected(self) -> dict[tuple, tuple[float, float]]:
        out = {}
        for e, slots in enumerate(self.slots):
            top = len(slots) if self.preview[e] else len(slots) - 1  # newest written slot
            for t in range(max(0, len(slots) - self.ring - 1), len(slots)):
                r = slots[t]
                if r is None or r["end"] is None or r["end"] > top or t - self.stack + 1 <= top - self.ring:
                    continue
                out[_key(r["obs"], r["action"], r["next"])] = (r["reward"], r["discount"])
        return out


@settings(max_examples=200, deadline=None)
@given(
    E=st.integers(1, 3),
    n=st.integers(1, 4),
    stack=st.integers(1, 3),
    C=st.integers(1, 2),
    extra=st.integers(0, 5),
    T=st.integers(1, 50),
    p_end=st.sampled_from([0.0, 0.15, 0.5]),
    prioritized=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_wrapping_rings_sample_only_valid_transitions(
    E: int, n: int, stack: int, C: int, extra: int, T: int, p_end: float, prioritized: bool, seed: int
) -> None:
    ring = stack + n + extra
    shape = (stack * C, 2, 2)
    stream = Stream(E, C, stack, seed, p_term=p_end / 2, p_trunc=p_end / 2)
    kw = _frame_kw(E, n, stack)
    if prioritized:
        buf: FrameReplayBuffer = PrioritizedFrameReplayBuffer(E * ring, shape, alpha=0.6, eps=1e-3, **kw)
    else:
        buf = FrameReplayBuffer(E * ring, shape, **kw)
    model = SlotModel(E, ring, stack, n)
    ref = ReplayBuffer(E * T, shape, num_envs=E, n_step=n, gamma=0.9, obs_dtype=torch.uint8)
    gen = torch.Generator().manual_seed(seed)
    last: torch.Tensor | None = None  # the previous step's batch: some rows may be stale now
    for _ in range(T):
        step = stream.step()
        buf.add(*step)
        if prioritized and last is not None:
            assert isinstance(buf, PrioritizedFrameReplayBuffer)
            buf.update_priorities(last, torch.rand(last.shape[0], generator=gen) * 3)
        ref.add(*step)
        model.step(step, 0.9)
        got, want = frame_transitions(buf), model.expected()
        assert set(got) == set(want) and len(buf) == len(want)
        assert_same_values(got, want)
        assert_same_values(got, reference_transitions(ref))  # every one produced by ReplayBuffer
        tree = leaves(buf._tree)[: buf.capacity]
        assert torch.equal(tree > 0, torch.from_numpy(buf._valid))  # exact: the same flags
        if len(buf):
            batch = buf.sample(min(len(buf), 5), generator=gen)
            assert set(batch.indices.tolist()) <= set(buf.valid_indices().tolist())
            for j in range(batch.indices.shape[0]):
                key = _key(
                    batch.obs[j].to(torch.uint8), int(batch.action[j]), batch.next_obs[j].to(torch.uint8)
                )
                assert key in got
            last = batch.indices


def _filled(cls: type = PrioritizedFrameReplayBuffer, T: int = 40, **kw: Any) -> FrameReplayBuffer:
    stream = Stream(2, 1, 4, seed=3, p_term=0.1, p_trunc=0.05)
    buf = cls(2 * 16, (4, 2, 2), **{**_frame_kw(2, 3, 4), **kw})
    for _ in range(T):
        buf.add(*stream.step())
    return buf


def test_draw_never_returns_an_empty_leaf() -> None:
    buf = _filled(FrameReplayBuffer)
    B = 64
    # uniforms just below 1 round (j + u) up to j + 1: the last stratum's target reaches the total
    u = torch.full((B,), 1.0 - 2.0**-24)
    idx = buf._draw(u)
    assert set(idx.tolist()) <= set(buf.valid_indices().tolist())


def test_prioritized_updates_weights_and_stale_rows() -> None:
    buf = _filled()
    assert isinstance(buf, PrioritizedFrameReplayBuffer)
    g = torch.Generator().manual_seed(0)
    batch = buf.sample(6, generator=g)
    assert buf.sample_calls == 1 and buf.current_beta == pytest.approx(0.4 + 0.6 / 100_000)
    td = torch.tensor([0.5, 2.0, 1.0, 0.1, 3.0, 0.7])
    buf.update_priorities(batch.indices, td)
    prio = buf.priorities()
    rows = batch.indices.tolist()
    for i in rows:  # the last of duplicate rows wins
        last = max(j for j, x in enumerate(rows) if x == i)
        assert prio[i].item() == pytest.approx((td[last].item() + 1e-6) ** 0.6, rel=1e-6)
    beta = buf.current_beta
    b2 = buf.sample(8, generator=g)
    valid = prio[prio > 0]
    want = (prio[b2.indices] / valid.min()) ** -beta
    torch.testing.assert_close(b2.weights, want, rtol=1e-6, atol=0)  # f32 pow of the same leaves
    # a newly valid slot gets the running max priority
    stream = Stream(2, 1, 4, seed=11, p_term=0.0, p_trunc=0.0)
    before = set(buf.valid_indices().tolist())
    buf.add(*stream.step())
    new = set(buf.valid_indices().tolist()) - before
    assert new and all(buf.priorities()[i].item() == pytest.approx(3.000001**0.6) for i in new)
    # rows overwritten since they were sampled are skipped, not revived
    stale = b2.indices
    for _ in range(20):
        buf.add(*stream.step())
    dead = [i for i in stale.tolist() if not buf._valid[i]]
    assert dead
    buf.update_priorities(stale, torch.ones(stale.shape[0]))
    assert all(buf.priorities()[i].item() == 0 for i in dead)
    assert torch.equal(buf.priorities() > 0, torch.from_numpy(buf._valid))  # exact: the same flags
    with pytest.raises(ValueError, match="NaN"):
        buf.update_priorities(torch.tensor([int(buf.valid_indices()[0])]), torch.tensor([float("nan")]))


def test_memory_bytes() -> None:
    parts = FrameReplayBuffer.memory_bytes(1_000_000, (4, 84, 84), stack=4)
    assert sum(parts.values()) <= 7.5e9
    assert parts["frames"] == 1_000_000 * 84 * 84
    for cls in (FrameReplayBuffer, PrioritizedFrameReplayBuffer):
        buf = cls(3 * 20, (6, 3, 5), stack=3, num_envs=3, n_step=2, action_shape=(2,))
        real = sum(t.nbytes for t in buf._storage().values()) + sum(t.nbytes for t in buf._tree)
        assert sum(cls.memory_bytes(60, (6, 3, 5), stack=3, action_shape=(2,)).values()) == real


@pytest.mark.parametrize("cls", [FrameReplayBuffer, PrioritizedFrameReplayBuffer])
def test_save_load_resumes_exactly(cls: type, tmp_path: Path) -> None:
    src = _filled(cls)
    if isinstance(src, PrioritizedFrameReplayBuffer):
        b = src.sample(4)
        src.update_priorities(b.indices, torch.arange(4.0))
    path = tmp_path / "frames.safetensors"
    src.save(path)
    dst = cls(2 * 16, (4, 2, 2), **_frame_kw(2, 3, 4))
    dst.load(path)
    assert len(dst) == len(src) and dst.pending == src.pending and dst.steps == src.steps
    a, b = src.state_dict(), dst.state_dict()
    assert a.pop("meta") == b.pop("meta")
    for k in a:
        assert torch.equal(a[k], b[k]), k  # exact: a copy
    stream = Stream(2, 1, 4, seed=5, p_term=0.2, p_trunc=0.1)
    for _ in range(3):
        ga = src.sample(5, generator=torch.Generator().manual_seed(9))
        gb = dst.sample(5, generator=torch.Generator().manual_seed(9))
        for x, y in zip(ga, gb, strict=True):
            assert torch.equal(x, y)  # exact: the same state sampled with the same generator
        step = stream.step()
        src.add(*step)
        dst.add(*step)


def test_load_refuses_damaged_foreign_or_other_files(tmp_path: Path) -> None:
    src = _filled()
    good = tmp_path / "good.safetensors"
    src.save(good)
    dst = _filled(T=10)
    before = dst.state_dict()
    damaged = tmp_path / "damaged.safetensors"
    data = bytearray(good.read_bytes())
    data[-5] ^= 0xFF
    damaged.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="damaged"):
        dst.load(damaged)
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(good.read_bytes()[:100])
    with pytest.raises(ValueError, match="not a readable"):
        dst.load(truncated)
    other = tmp_path / "replay.safetensors"
    ReplayBuffer(8, (4, 2, 2)).save(other)
    with pytest.raises(ValueError, match="another configuration"):
        dst.load(other)
    with pytest.raises(ValueError, match="another configuration"):
        FrameReplayBuffer(2 * 16, (4, 2, 2), **_frame_kw(2, 3, 4)).load(good)  # uniform vs PER
    after = dst.state_dict()
    assert before.pop("meta") == after.pop("meta")
    assert all(torch.equal(before[k], after[k]) for k in before)  # exact: unchanged


def test_bad_input_and_arguments() -> None:
    buf = FrameReplayBuffer(8, (2, 2, 2), stack=2, num_envs=2, num_actions=3)
    obs = np.zeros((2, 2, 2, 2), np.uint8)
    good = (obs, np.zeros(2, np.int64), np.zeros(2, np.float32), obs, np.zeros(2, bool), np.zeros(2, bool))
    with pytest.raises(TypeError, match="obs must be uint8 frames"):
        buf.add(obs.astype(np.float32), *good[1:])
    with pytest.raises(TypeError, match="next_obs must be uint8"):
        buf.add(*good[:3], obs.astype(np.float32), *good[4:])
    with pytest.raises(ValueError, match="obs must have shape"):
        buf.add(obs[:1], *good[1:])
    with pytest.raises(ValueError, match="reward"):
        buf.add(obs, good[1], np.array([1.0, np.nan], np.float32), *good[3:])
    with pytest.raises(ValueError, match="action"):
        buf.add(obs, np.array([0, 3]), *good[2:])
    assert buf.steps == 0 and len(buf) == 0
    buf.add(*good)
    assert buf.steps == 1
    with pytest.raises(ValueError, match="multiple of num_envs"):
        FrameReplayBuffer(9, (2, 2, 2), stack=2, num_envs=2)
    with pytest.raises(ValueError, match="stack \\+ n_step"):
        FrameReplayBuffer(8, (2, 2, 2), stack=2, num_envs=2, n_step=3)
    with pytest.raises(ValueError, match="obs_shape"):
        FrameReplayBuffer(8, (3, 2, 2), stack=2)
    with pytest.raises(ValueError, match="host staging only"):
        FrameReplayBuffer(8, (2, 2, 2), stack=2, staging="device")
    with pytest.raises(TypeError, match="obs_dtype"):
        FrameReplayBuffer(8, (2, 2, 2), stack=2, obs_dtype=torch.uint8)


def test_bfloat16_and_scaled_samples() -> None:
    stream = Stream(1, 1, 2, seed=1, p_term=0.0, p_trunc=0.0)
    buf = FrameReplayBuffer(10, (2, 2, 2), stack=2, obs_dtype=torch.bfloat16)
    for _ in range(4):
        buf.add(*stream.step())
    b = buf.sample(2)
    assert b.obs.dtype == torch.bfloat16 and b.obs.shape == (2, 2, 2, 2)
    assert float(b.obs.float().max()) <= 1.0 and b.reward.dtype == torch.float32


def test_deferred_checks_raise_in_check_inputs() -> None:
    buf = FrameReplayBuffer(8, (2, 2, 2), stack=2, num_envs=2, num_actions=3)
    obs = np.zeros((2, 2, 2, 2), np.uint8)
    buf.inputs.mode = "deferred"  # an accelerator's checks: a device flag, read in check_inputs
    buf.add(obs, torch.tensor([0, 7]), np.zeros(2, np.float32), obs, np.zeros(2, bool), np.zeros(2, bool))
    assert buf.steps == 1
    with pytest.raises(ValueError, match="action"):
        buf.check_inputs()


@pytest.mark.parametrize("cls", [FrameReplayBuffer, PrioritizedFrameReplayBuffer])
def test_sample_and_update_read_nothing_on_the_host(cls: type, monkeypatch: pytest.MonkeyPatch) -> None:
    from helpers import HostReads
    from tritonrl.kernels.sumtree import cpu as sumtree_cpu

    kw = {"check_priorities": False} if cls is PrioritizedFrameReplayBuffer else {}
    buf = _filled(cls, **kw)
    reads = HostReads()
    torch_update = sumtree_cpu._per_update_torch

    def update(*args: Any) -> None:  # the torch reference reads its validity flag (Triton does not)
        with reads.lifted():
            torch_update(*args)

    # the sum tree's device-generic paths in place of its numpy CPU paths (what a GPU runs)
    monkeypatch.setattr(sumtree_cpu, "_per_sample_cpu", sumtree_cpu._per_sample_torch)
    monkeypatch.setattr(sumtree_cpu, "_per_update_cpu", update)
    g = torch.Generator().manual_seed(1)
    with reads:
        batch = buf.sample(8, generator=g)
        if isinstance(buf, PrioritizedFrameReplayBuffer):
            buf.update_priorities(batch.indices, torch.rand(8, generator=g))
            batch = buf.sample(8, generator=g)
    assert set(batch.indices.tolist()) <= set(buf.valid_indices().tolist())
