"""Overlapped runs of agents on CUDA (``pytest --gpu``): the stream learner.

``overlap_learner="stream"`` (what ``"auto"`` picks on CUDA) queues the learner's rounds on a CUDA
stream of its own and acts from the snapshot on the current stream; the streams meet only at sync
points. Checked: the run is bit-identical to the inline learner on the same device (the same
computation, only queued on another stream: exact comparisons of the final state, the
evaluations and every logged metric), and the learner's updates really ran on a stream other
than the one the actor used. The kernels involved are deterministic (no atomics but the PER
update's last-one-wins ``atomic_max``), so equality is the right test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

from helpers import assert_same_tree, metric_rows, overlap_loop
from tritonrl.agents.dqn import DQNAgent
from tritonrl.agents.dqn import preset as dqn_preset
from tritonrl.agents.ppo import PPOAgent
from tritonrl.agents.ppo import preset as ppo_preset
from tritonrl.toolkit.envs.vector import make_vec_env
from tritonrl.toolkit.training.loop import run_training
from tritonrl.toolkit.training.offpolicy import schedule_for as dqn_schedule
from tritonrl.toolkit.training.onpolicy import schedule_for as ppo_schedule

DQN_SMALL = {"learning_starts": 300, "train_freq": 32, "gradient_steps": 4, "target_update_every": 16}
PPO_SMALL = {"num_steps": 32, "update_epochs": 2, "num_minibatches": 2}


class _StreamsSeen:
    """Mixed into an agent: records the CUDA stream each ``update()`` was queued on."""

    streams: list[int]

    def update(self) -> Any:
        self.streams = getattr(self, "streams", [])
        self.streams.append(torch.cuda.current_stream(self.device).stream_id)
        return super().update()  # type: ignore[misc]


class _DQN(_StreamsSeen, DQNAgent):
    pass


class _PPO(_StreamsSeen, PPOAgent):
    pass


def _run(kind: str, name: str, num_envs: int, learner: str, run_dir: Path) -> tuple[Any, dict[str, Any]]:
    env_id = "CartPole-v1"
    env = make_vec_env(env_id, num_envs, seed=7, device="cuda")
    if kind == "dqn":
        cfg = dqn_preset(name, **DQN_SMALL)
        agent: Any = _DQN(
            env.single_observation_space,
            env.single_action_space,
            cfg,
            num_envs=num_envs,
            device="cuda",
            seed=7,
        )
        schedule, steps = dqn_schedule(agent), 1_500
    else:
        agent = _PPO(
            env.single_observation_space,
            env.single_action_space,
            ppo_preset(name, **PPO_SMALL),
            num_envs=num_envs,
            device="cuda",
            seed=7,
        )
        schedule, steps = ppo_schedule(agent), 640
    loop = overlap_loop(
        learner, run_dir, total_steps=steps, seed=7, eval_every=steps // 2, eval_episodes=2, log_every=256
    )
    try:
        summary = run_training(agent, env, schedule, loop)
    finally:
        env.close()
    torch.cuda.synchronize()
    return agent, summary


def _state(agent: Any) -> dict[str, Any]:
    state = agent.state_dict()
    if isinstance(agent, PPOAgent):  # set by every update from the schedule: see test_overlap_ppo._state
        for group in state["optimizer"]["optimizer"]["param_groups"]:
            group.pop("lr")
    return state


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("kind", "name", "num_envs"), [("dqn", "dqn", 1), ("dqn", "rainbow", 2), ("ppo", "ppo", 2)]
)
def test_stream_learner_is_bit_identical_to_inline_on_cuda(
    kind: str, name: str, num_envs: int, tmp_path: Path
) -> None:
    inline, s_inline = _run(kind, name, num_envs, "inline", tmp_path / "inline")
    stream, s_stream = _run(kind, name, num_envs, "auto", tmp_path / "stream")  # auto: stream on CUDA
    assert inline.updates == stream.updates > 0
    assert_same_tree(_state(inline), _state(stream))
    assert s_inline["evaluations"] == s_stream["evaluations"]
    assert metric_rows(tmp_path / "inline") == metric_rows(tmp_path / "stream")
    default = torch.cuda.default_stream(torch.device("cuda")).stream_id
    assert set(inline.streams) == {default}
    assert default not in set(stream.streams) and len(set(stream.streams)) == 1
