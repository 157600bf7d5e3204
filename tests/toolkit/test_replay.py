"""Replay buffers: n-step returns over parallel envs and episode ends, ring wrap, dtype rules and
the direct (numpy) write paths; the hypothesis state machine driving add/extend/sample/update
against a plain-Python model (``replay_model.py``). Bad input and sampling:
``test_replay_errors.py``; checkpoints: ``test_replay_checkpoint.py``; device staging:
``test_replay_device.py``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from replay_model import OBS, ReplayMachine, make_step, to_tensors
from tritonrl.toolkit.replay import PrioritizedReplayBuffer, ReplayBuffer

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


@pytest.mark.parametrize("num_envs", [3, 40])
@pytest.mark.parametrize("prioritized", [False, True])
@pytest.mark.parametrize("obs_dtype", [torch.float32, torch.bfloat16])
def test_direct_add_equals_extend(prioritized: bool, obs_dtype: torch.dtype, num_envs: int) -> None:
    """add() of tensors writes the ring directly (numpy views of f32 CPU storage: through
    ``tolist()`` for a few environments, array writes for more; copy_ otherwise); the buffer must
    equal one filled by extend() bit for bit, across the ring's wrap-around and with inputs whose
    dtypes need converting (f64 observations, int32 actions, f64 rewards)."""
    rng = np.random.default_rng(1)
    steps = [make_step(t, num_envs, rng) for t in range(30)]
    kw: dict[str, Any] = dict(num_envs=num_envs, gamma=0.9, obs_dtype=obs_dtype)
    kind = PrioritizedReplayBuffer if prioritized else ReplayBuffer
    capacity = 6 * num_envs - 1  # wraps around
    a, b = kind(capacity, OBS, **kw), kind(capacity, OBS, **kw)
    assert a._staging.small == (num_envs == 3)  # both host paths run
    for t, s in enumerate(steps):
        obs, act, rew, nxt, term, trunc = to_tensors(s)
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
    good = to_tensors(make_step(0, 2, np.random.default_rng(0)))
    buf.add(*good)
    before = {k: v.clone() for k, v in buf.state_dict().items() if k != "meta"}
    bad_reward = good[2].clone()
    bad_reward[1] = float("nan")
    cases = [
        ((good[0][:1], *good[1:]), ValueError, "obs must have shape"),
        ((*good[:2], bad_reward, *good[3:]), ValueError, r"ReplayBuffer\.add: reward\[1\] = nan"),
        ((*good[:4], good[4].float(), good[5]), TypeError, "terminated must be boolean"),
        ((good[0], good[1].float(), *good[2:]), TypeError, "action must have an integer dtype"),
    ]
    for args, error, match in cases:
        with pytest.raises(error, match=match):
            buf.add(*args)
    # without the value checks, the host staging still refuses the rewards it reads
    with pytest.raises(ValueError, match="reward contains NaN"):
        buf.add(*cases[1][0], check=False)
    after = buf.state_dict()
    assert after["meta"]["size"] == 2
    for k, v in before.items():
        assert torch.equal(v, after[k]), k


def test_extend_equals_repeated_add() -> None:
    rng = np.random.default_rng(0)
    steps = [make_step(t, 3, rng) for t in range(40)]
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
def test_gather_copies_the_sampledstored_rows(
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


# ---- n-step bookkeeping ----------------------------------------------------------------------


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
            steps = [make_step(t + k, 3, rng, 0.3, 0.2) for k in range(4)]
            t += 4
            for buf in (host, tensor):
                buf.extend(*(np.stack(f) for f in zip(*steps, strict=True)))
        else:
            s = make_step(t, 3, rng, 0.3, 0.2)
            t += 1
            args = to_tensors(s) if round_ % 2 else (s[0].astype(np.float64), *s[1:])
            host.add(*args)
            tensor.add(*args)
    sh, st_ = host.state_dict(), tensor.state_dict()
    assert sh.pop("meta") == st_.pop("meta")
    for k in sh:
        assert torch.equal(sh[k], st_[k]), k
