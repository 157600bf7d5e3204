"""The off-policy schedule: when updates happen, for any number of environments, and resume."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tritonrl.toolkit.training.offpolicy import OffPolicySchedule


class _Counting:
    def __init__(self) -> None:
        self.calls: list[int] = []
        self.step = 0

    def update(self) -> dict[str, torch.Tensor]:
        self.calls.append(self.step)
        return {"losses/td_loss": torch.tensor(float(len(self.calls)))}


def _drive(schedule: OffPolicySchedule, agent: _Counting, num_envs: int, vector_steps: int) -> list:
    out = []
    for _ in range(vector_steps):
        agent.step += num_envs
        out.extend(schedule.after_step(agent, agent.step))
    return out


@given(
    learning_starts=st.integers(0, 300),
    train_freq=st.integers(1, 40),
    gradient_steps=st.integers(1, 4),
    num_envs=st.integers(1, 16),
    vector_steps=st.integers(1, 120),
)
def test_updates_match_the_env_step_count(
    learning_starts, train_freq, gradient_steps, num_envs, vector_steps
) -> None:
    schedule = OffPolicySchedule(learning_starts, train_freq, gradient_steps)
    agent = _Counting()
    metrics = _drive(schedule, agent, num_envs, vector_steps)
    total = num_envs * vector_steps
    # one round per multiple of train_freq in [learning_starts, total]
    rounds = sum(1 for k in range(1, total // train_freq + 1) if k * train_freq >= learning_starts)
    assert len(agent.calls) == rounds * gradient_steps == schedule.updates
    assert len(metrics) == rounds == schedule.rounds  # "last": one metrics dict per round
    assert all(step >= learning_starts for step in agent.calls)


def test_update_to_data_ratio_does_not_depend_on_num_envs() -> None:
    counts = []
    for num_envs in (1, 3, 8):
        schedule = OffPolicySchedule(100, 10, 2)
        agent = _Counting()
        _drive(schedule, agent, num_envs, 2_400 // num_envs)
        counts.append(len(agent.calls))
    assert counts == [2 * (2_400 - 100) // 10 + 2] * 3


def test_all_metrics_and_resume() -> None:
    schedule = OffPolicySchedule(0, 4, 3, return_metrics="all")
    agent = _Counting()
    assert len(_drive(schedule, agent, 2, 4)) == 2 * 3
    state = schedule.state_dict()
    again = OffPolicySchedule(0, 4, 3, return_metrics="all")
    again.load_state_dict(state)
    assert again.state_dict() == state
    # continuing both gives the same updates
    a, b = _Counting(), _Counting()
    a.step = b.step = agent.step
    _drive(schedule, a, 2, 5)
    _drive(again, b, 2, 5)
    assert a.calls == b.calls
    with pytest.raises(ValueError, match="train_freq=4"):
        OffPolicySchedule(0, 5, 3).load_state_dict(state)


@pytest.mark.parametrize(
    "args,match",
    [((-1, 1, 1), "learning_starts"), ((0, 0, 1), "train_freq"), ((0, 1, 0), "gradient_steps")],
)
def test_bad_settings(args, match) -> None:
    with pytest.raises(ValueError, match=match):
        OffPolicySchedule(*args)
    with pytest.raises(ValueError, match="return_metrics"):
        OffPolicySchedule(0, 1, 1, return_metrics="mean")
