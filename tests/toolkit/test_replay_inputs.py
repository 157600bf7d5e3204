"""Replay buffers used directly (as cpprb users do): ``add``/``extend`` refuse NaN/inf values and
out-of-range actions, named with the first bad entry, and store nothing (host inputs); tensors on an
accelerator are checked into a device flag, without a host read, that ``check_inputs`` raises."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from helpers import HostReads
from hypothesis import given, settings
from hypothesis import strategies as st
from replay_model import OBS, same_content, snapshot
from tritonrl.toolkit.replay import PrioritizedReplayBuffer, ReplayBuffer

E = 4
NUM_ACTIONS = 5


def _buffer(cls: type, staging: str, n_step: int, **kw: Any) -> ReplayBuffer:
    kw.setdefault("num_actions", NUM_ACTIONS)
    return cls(32, OBS, num_envs=E, n_step=n_step, staging=staging, **kw)


def _step(t: int = 0) -> list[Any]:
    obs = torch.arange(E * 2, dtype=torch.float32).reshape(E, 2) + 10 * t
    no = torch.zeros(E, dtype=torch.bool)
    return [obs, torch.arange(E) % NUM_ACTIONS, torch.ones(E), obs + 0.5, no, no.clone()]


def _set(i: int, index: tuple[int, ...], value: float):
    def bad(step: list[Any]) -> Any:
        x = step[i].clone()
        x[index] = value
        return x

    return bad


# case: (argument index, bad value from a good step, error, message)
CASES = {
    "nan obs": (0, _set(0, (1, 1), float("nan")), ValueError, r"\.add: obs\[1, 1\] = nan is not finite"),
    "inf next_obs": (
        3,
        _set(3, (2, 0), float("inf")),
        ValueError,
        r"\.add: next_obs\[2, 0\] = inf is not finite",
    ),
    "-inf obs": (0, _set(0, (0, 0), float("-inf")), ValueError, r"\.add: obs\[0, 0\] = -inf is not finite"),
    "nan reward": (2, _set(2, (3,), float("nan")), ValueError, r"\.add: reward\[3\] = nan is not finite"),
    "action 99": (
        1,
        _set(1, (2,), 99),
        ValueError,
        r"\.add: action\[2\] = 99 is outside Discrete\(5\) \(0 <= a < 5\)",
    ),
    "action -1": (1, _set(1, (0,), -1), ValueError, r"\.add: action\[0\] = -1 is outside Discrete\(5\)"),
    "numpy action 5": (1, lambda s: np.array([0, 1, 5, 0]), ValueError, r"\.add: action\[2\] = 5 is outside"),
    "obs 3 rows": (0, lambda s: s[0][:3], ValueError, r"^obs must have shape \(4, 2\), got \(3, 2\)"),
    "action 3 rows": (1, lambda s: s[1][:3], ValueError, r"^action must have shape \(4,\), got \(3,\)"),
    "reward 5 rows": (2, lambda s: torch.ones(5), ValueError, r"^reward must have shape \(4,\), got \(5,\)"),
    "float action": (1, lambda s: s[1].float(), TypeError, r"^action must have an integer dtype"),
    "int obs": (0, lambda s: s[0].long(), TypeError, r"^obs must have a floating dtype"),
    "float terminated": (4, lambda s: s[4].float(), TypeError, r"^terminated must be boolean"),
    "bool reward": (2, lambda s: s[4], TypeError, r"^reward must be a real number array"),
}
BUFFERS = [
    (cls, staging, n)
    for cls in (ReplayBuffer, PrioritizedReplayBuffer)
    for staging in ("host", "device")
    for n in (1, 3)
]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("cls, staging, n_step", BUFFERS)
def test_add_refuses_bad_steps_and_stores_nothing(cls: type, staging: str, n_step: int, case: str) -> None:
    buf = _buffer(cls, staging, n_step)
    for t in range(4):  # some transitions committed, some windows open
        buf.add(*_step(t))
    step = _step(4)
    i, bad, error, match = CASES[case]
    step[i] = bad(step)
    before, counters = snapshot(buf), (len(buf), buf.steps, buf.pending)
    with pytest.raises(error, match=match) as info:
        buf.add(*step)
    assert "\n" not in str(info.value)
    if error is ValueError and match.startswith(r"\."):  # value errors name the buffer
        assert str(info.value).startswith(f"{cls.__name__}.add: ")
    assert same_content(snapshot(buf), before) and (len(buf), buf.steps, buf.pending) == counters
    buf.add(*_step(4))  # the buffer goes on
    assert buf.steps == 5


def test_extend_names_the_step_and_the_environment() -> None:
    buf = ReplayBuffer(32, OBS, num_envs=E, n_step=2, num_actions=NUM_ACTIONS)
    steps = [_step(t) for t in range(3)]
    fields = [torch.stack([s[k] for s in steps]) for k in range(6)]
    bad = [f.clone() for f in fields]
    bad[3][2, 1, 0] = float("nan")
    with pytest.raises(ValueError, match=r"ReplayBuffer\.extend: next_obs\[2, 1, 0\] = nan is not finite"):
        buf.extend(*bad)
    bad = [f.clone() for f in fields]
    bad[1][1, 3] = 7
    with pytest.raises(
        ValueError, match=r"ReplayBuffer\.extend: action\[1, 3\] = 7 is outside Discrete\(5\)"
    ):
        buf.extend(*bad)
    assert buf.steps == 0 and len(buf) == 0
    buf.extend(*fields)
    assert buf.steps == 3


def test_what_is_not_refused() -> None:
    """Without ``num_actions`` any integer action is stored (the buffer knows no action space);
    huge finite values pass; ``check=False`` (an agent that checked the step) skips the values."""
    buf = ReplayBuffer(32, OBS, num_envs=E)
    step = _step()
    step[1] = torch.tensor([99, -1, 0, 2**40])
    buf.add(*step)
    assert buf.sample(1).action.dtype == torch.int64 and len(buf) == E
    big = _step()
    big[0] = torch.full((E, 2), 3e38)
    big[3] = torch.full((E, 2), -3e38)
    buf.add(*big)  # the sum overflows; the entries are finite
    checked = ReplayBuffer(32, OBS, num_envs=E, num_actions=NUM_ACTIONS)
    step = _step()
    step[0] = step[0].clone()
    step[0][0, 0] = float("nan")
    checked.add(*step, check=False)
    assert len(checked) == E and torch.isnan(checked.state_dict()["obs"][0, 0])


def test_multidiscrete_and_float_actions() -> None:
    multi = ReplayBuffer(8, OBS, num_envs=2, action_shape=(2,), num_actions=[3, 2])
    obs, no = torch.zeros(2, 2), torch.zeros(2, dtype=torch.bool)
    multi.add(obs, torch.tensor([[2, 1], [0, 0]]), torch.zeros(2), obs, no, no)
    with pytest.raises(ValueError, match=r"action\[1, 1\] = 2 is outside MultiDiscrete\(\[3, 2\]\)"):
        multi.add(obs, torch.tensor([[2, 1], [0, 2]]), torch.zeros(2), obs, no, no)
    same = ReplayBuffer(8, OBS, num_envs=2, action_shape=(2,), num_actions=3)  # 3 in every dimension
    with pytest.raises(ValueError, match=r"action\[0, 0\] = 3 is outside MultiDiscrete\(\[3, 3\]\)"):
        same.add(obs, torch.tensor([[3, 1], [0, 0]]), torch.zeros(2), obs, no, no)
    box = ReplayBuffer(8, OBS, num_envs=2, action_shape=(2,), action_dtype=torch.float32)
    box.add(obs, torch.full((2, 2), 1e6), torch.zeros(2), obs, no, no)  # unbounded: finite is enough
    with pytest.raises(ValueError, match=r"ReplayBuffer\.add: action\[1, 0\] = nan is not finite"):
        box.add(obs, torch.tensor([[0.0, 0.0], [float("nan"), 0.0]]), torch.zeros(2), obs, no, no)
    assert len(multi) == len(box) == 2


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"num_actions": 0}, "num_actions must be a positive int"),
        ({"num_actions": 2.5}, "num_actions must be a positive int"),
        ({"num_actions": True}, "num_actions must be a positive int"),
        ({"num_actions": [3, 2]}, r"num_actions=\[3, 2\] needs action_shape=\(2,\), got \(\)"),
        ({"num_actions": 3, "action_shape": (2, 2)}, r"num_actions=3 needs action_shape \(\) or \(D,\)"),
        ({"num_actions": 3, "action_dtype": torch.float32}, "needs an integer action_dtype"),
    ],
)
def test_num_actions_is_validated(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ReplayBuffer(8, OBS, **kw)


@pytest.mark.parametrize("cls, staging, n_step", BUFFERS)
def test_deferred_checks_read_nothing_and_raise_at_check_inputs(cls: type, staging: str, n_step: int) -> None:
    # The accelerator path, forced on a CPU: values fold into a device flag, nothing is read on the
    # host (the device staging reads nothing else either); check_inputs() reads the flag.
    buf = _buffer(
        cls, staging, n_step, **({"check_priorities": False} if cls is PrioritizedReplayBuffer else {})
    )
    buf.inputs.mode = "deferred"
    buf._views = None  # the CUDA buffer's path: no numpy views of the storage
    good = [_step(t) for t in range(3)]
    bad = _step(3)
    bad[1] = torch.tensor([0, 99, 0, 0])
    if staging == "device":
        with HostReads():
            for s in good:
                buf.add(*s)
        buf.check_inputs()  # nothing failed
        with HostReads():
            buf.add(*bad)  # stored: the entry is not known without a sync
    else:  # host staging reads rewards and flags on the host by design: values are still deferred
        for s in [*good, bad]:
            buf.add(*s)
    assert buf.steps == 4
    msg = (
        rf"^{cls.__name__}\.add: action held an action outside Discrete\(5\) at a step since the last "
        r"check \(deferred check on cpu, without a per-step sync; set buffer\.inputs\.mode = 'eager' to "
        r"find the entry\)$"
    )
    with pytest.raises(ValueError, match=msg):
        buf.check_inputs()
    with pytest.raises(ValueError, match="action held"):  # stays failed
        buf.check_inputs()


@settings(max_examples=40, deadline=None)
@given(
    envs=st.integers(1, 6),
    dim=st.integers(1, 5),
    field=st.sampled_from(["obs", "next_obs", "reward"]),
    value=st.sampled_from([float("nan"), float("inf"), float("-inf")]),
    where=st.integers(0, 1000),
    n_step=st.integers(1, 3),
)
def test_the_first_bad_entry_is_named_wherever_it_is(
    envs: int, dim: int, field: str, value: float, where: int, n_step: int
) -> None:
    buf = ReplayBuffer(16, (dim,), num_envs=envs, n_step=n_step, num_actions=2)
    obs = torch.zeros(envs, dim)
    no = torch.zeros(envs, dtype=torch.bool)
    step = {"obs": obs, "next_obs": obs.clone(), "reward": torch.zeros(envs)}
    bad = step[field]
    idx = np.unravel_index(where % bad.numel(), bad.shape)
    bad[idx] = value
    name = ", ".join(str(int(i)) for i in idx)
    with pytest.raises(ValueError, match=rf"ReplayBuffer\.add: {field}\[{name}\] = {value!r} is not finite"):
        buf.add(step["obs"], torch.zeros(envs, dtype=torch.int64), step["reward"], step["next_obs"], no, no)
    assert buf.steps == 0 and len(buf) == 0
