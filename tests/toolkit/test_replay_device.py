"""Replay buffers with device staging: the state machine against its model, the same transitions
as host staging, a hand-computed example, exact resume, loading the other mode's states, checks
without host reads, and the memory estimate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule
from replay_model import OBS, DeviceModel, ReplayMachine, make_step, to_tensors
from tritonrl.toolkit.replay import PrioritizedReplayBuffer, ReplayBuffer

# ---- device staging -----------------------------------------------------------------------------


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


def stored_rows(buf: ReplayBuffer) -> list[tuple]:
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
    steps = [make_step(t, E, rng, p_term, p_trunc) for t in range(T)]
    for s in steps:  # non-integer rewards, so that the rounding of the sums is exercised
        s[2][:] = rng.normal(size=E).astype(np.float32) * 3.0
    kw = dict(num_envs=E, n_step=n, gamma=gamma)
    host = ReplayBuffer(T * E, OBS, **kw)
    device = PrioritizedReplayBuffer(T * E, OBS, staging="device", **kw)
    for s in steps:
        host.add(*s)
        device.add(*to_tensors(s))
    last_start = T - n  # obs[0] = 10 * start + env
    want = [row for row in stored_rows(host) if row[0][0] // 10 <= last_start]
    assert stored_rows(device) == want
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


def tensor_stream(T: int, E: int, seed: int) -> list[tuple]:
    rng = np.random.default_rng(seed)
    return [to_tensors(make_step(t, E, rng, 0.2, 0.2)) for t in range(T)]


@pytest.mark.parametrize("prioritized", [False, True])
def test_device_staging_resumes_exactly(tmp_path: Path, prioritized: bool) -> None:
    """save/load mid-stream (warm-up included) and state_dict/load_state_dict: the resumed buffer
    continues bit for bit like the one never stopped, staging ring and ring wrap-around included."""
    kind = PrioritizedReplayBuffer if prioritized else ReplayBuffer
    kw: dict[str, Any] = dict(num_envs=3, n_step=4, gamma=0.9, staging="device")
    steps = tensor_stream(30, 3, 0)
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
    for s in tensor_stream(9, 2, 1):
        host.add(*s)
        device.add(*s)
    to_device, to_host = ReplayBuffer(50, OBS, staging="device", **kw), ReplayBuffer(50, OBS, **kw)
    to_device.load_state_dict(host.state_dict())
    to_host.load_state_dict(device.state_dict())
    for src, dst in ((host, to_device), (device, to_host)):
        assert stored_rows(dst) == stored_rows(src) and dst.steps == src.steps and dst.pending == 0
    more = tensor_stream(3, 2, 2)
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
    good = to_tensors(make_step(0, 2, np.random.default_rng(0)))
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
    buf.inputs.mode = "deferred"  # the value checks of a CUDA buffer: a device flag, nothing read
    with HostReads():
        for s in tensor_stream(6, 2, 3):
            buf.add(*s)
    assert len(buf) == 8 and buf.steps == 6
    buf.check_inputs()  # every value was fine
    with pytest.raises(ValueError, match="staging must be one of"):
        ReplayBuffer(8, OBS, staging="gpu")


def test_memory_bytes_counts_the_device_ring() -> None:
    kw: dict[str, Any] = dict(obs_dtype=torch.float32, num_envs=4, n_step=3)
    host = ReplayBuffer.memory_bytes(100, (5,), **kw)
    device = ReplayBuffer.memory_bytes(100, (5,), staging="device", **kw)
    assert host["observations"] == (200 + 8) * 20 and device["observations"] == (200 + 24) * 20
    assert device["actions"] == (100 + 12) * 8 and device["rewards and discounts"] == 800 + 120


@pytest.mark.parametrize("prioritized", [False, True])
@pytest.mark.parametrize("n, p_end", [(1, 0.3), (3, 0.0)])
def test_host_and_device_staging_agree_exactly(
    tmp_path: Path, prioritized: bool, n: int, p_end: float
) -> None:
    """Where both modes commit the same transitions at the same steps (one-step returns, episode ends
    included; n-step returns with no episode end), they are the same data path: identical rings,
    priorities, counters and sampled batches, over adds, extends, priority updates and a save/load
    round trip of each."""
    kind = PrioritizedReplayBuffer if prioritized else ReplayBuffer
    kw: dict[str, Any] = dict(num_envs=3, n_step=n, gamma=0.9)
    rng = np.random.default_rng(5)
    stream = []
    for t in range(30):
        s = make_step(t, 3, rng, p_end, p_end)
        s[2][:] = rng.normal(size=3).astype(np.float32) * 3.0  # returns that round
        stream.append(to_tensors(s))
    host, device = kind(20, OBS, **kw), kind(20, OBS, staging="device", **kw)

    def both(fn: Any) -> None:
        for buf in (host, device):
            fn(buf)

    def same_state() -> None:
        sh, sd = host.state_dict(), device.state_dict()
        mh, md = sh.pop("meta"), sd.pop("meta")
        assert {k: v for k, v in mh.items() if k != "config"} == {
            k: v for k, v in md.items() if k not in ("config", "stage_steps")
        }
        assert host.pending == device.pending
        for key in ("obs", "next_obs", "action", "reward", "discount", "priorities", "max_priority"):
            if key in sh:
                torch.testing.assert_close(sh[key], sd[key], rtol=0, atol=0)  # exact: same data path

    for t, s in enumerate(stream[:12]):
        both(lambda buf, s=s: buf.add(*s))
        if t >= n:
            g = [torch.Generator().manual_seed(t) for _ in range(2)]
            bh, bd = host.sample(4, generator=g[0]), device.sample(4, generator=g[1])
            for a, b in zip(bh, bd, strict=True):
                torch.testing.assert_close(a, b, rtol=0, atol=0)  # exact: same rows, same draws
            if prioritized:
                td = torch.from_numpy(rng.normal(size=4).astype(np.float32))
                both(lambda buf, i=bh.indices, td=td: buf.update_priorities(i, td))
    same_state()
    both(lambda buf: buf.save(tmp_path / f"{buf.staging}.safetensors"))
    host, device = kind(20, OBS, **kw), kind(20, OBS, staging="device", **kw)
    both(lambda buf: buf.load(tmp_path / f"{buf.staging}.safetensors"))
    same_state()
    both(lambda buf: buf.extend(*(torch.stack(f) for f in zip(*stream[12:18], strict=True))))
    for s in stream[18:]:
        both(lambda buf, s=s: buf.add(*s))
    same_state()
    g = [torch.Generator().manual_seed(99) for _ in range(2)]
    for a, b in zip(host.sample(16, generator=g[0]), device.sample(16, generator=g[1]), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # exact: same rows, same draws
