"""Overlapped acting and learning for SAC and TD3 (``LoopConfig(overlap=True)``).

As tests/toolkit/test_overlap.py for the DQN family: the process learner reproduces the inline
oracle bit for bit on a CPU (exact comparisons: the same computation in another process), the
actor acts one sync interval behind, and the lagged actor explores exactly as ``act`` does. Tiny
networks on Pendulum-v1, a few hundred steps: about 25 s here in all (2 shared cores).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

from helpers import assert_same_tree, metric_rows, overlap_loop
from tritonrl.agents.sac import SACAgent, TD3Agent, preset
from tritonrl.toolkit.checkpoint import load_checkpoint
from tritonrl.toolkit.envs.vector import make_vec_env
from tritonrl.toolkit.lifecycle import CHECKPOINT_NAME
from tritonrl.toolkit.training.loop import run_training
from tritonrl.toolkit.training.offpolicy import schedule_for
from tritonrl.toolkit.training.overlap import actor_generator

# sync points every 16 env steps, 4 updates each from step 96 on (the first sync point >= 96)
SMALL = {
    "hidden": (16, 16),
    "batch_size": 16,
    "buffer_size": 1_000,
    "learning_starts": 96,
    "train_freq": 16,
    "gradient_steps": 4,
}
AGENTS: dict[str, type[SACAgent] | type[TD3Agent]] = {"sac": SACAgent, "td3": TD3Agent}


def _run(
    learner: str,
    name: str,
    *,
    steps: int = 400,
    num_envs: int = 1,
    run_dir: Path | None = None,
    agent_class: Any = None,
) -> tuple[Any, dict[str, Any]]:
    torch.set_num_threads(1)
    env = make_vec_env("Pendulum-v1", num_envs, seed=5)
    cls = agent_class if agent_class is not None else AGENTS[name]
    agent = cls(
        env.single_observation_space,
        env.single_action_space,
        preset(name, **SMALL),
        num_envs=num_envs,
        seed=5,
    )
    cfg = overlap_loop(
        learner, run_dir, total_steps=steps, seed=5, eval_every=200, eval_episodes=1, log_every=100
    )
    try:
        summary = run_training(agent, env, schedule_for(agent), cfg)
    finally:
        env.close()
    return agent, summary


def _metric_rows(run_dir: Path) -> list[dict[str, str]]:
    rows = metric_rows(run_dir)
    assert rows and any(row.get("losses/qf_loss") for row in rows)
    return rows


@pytest.mark.parametrize(("name", "num_envs"), [("sac", 1), ("td3", 2)])
def test_process_learner_is_bit_identical_to_inline(tmp_path: Path, name: str, num_envs: int) -> None:
    inline, s_inline = _run("inline", name, num_envs=num_envs, run_dir=tmp_path / "inline")
    proc, s_proc = _run("process", name, num_envs=num_envs, run_dir=tmp_path / "process")
    assert inline.updates == proc.updates > 0
    assert_same_tree(inline.state_dict(), proc.state_dict())
    assert s_inline["evaluations"] == s_proc["evaluations"]
    assert s_inline["recent_return"] == s_proc["recent_return"]
    assert _metric_rows(tmp_path / "inline") == _metric_rows(tmp_path / "process")
    saved = [load_checkpoint(tmp_path / d / CHECKPOINT_NAME)["agent"] for d in ("inline", "process")]
    assert_same_tree(saved[0], saved[1], "checkpoint")  # the final checkpoint holds the learner's state
    assert_same_tree(saved[1], proc.state_dict(), "checkpoint")


def _recording(base: type[SACAgent] | type[TD3Agent]) -> type[Any]:
    """``base`` recording the learner's update count and the actor weights each time the actor's
    snapshot is refreshed."""

    class Recording(base):  # type: ignore[misc,valid-type]
        loads: list[int]

        def lagged_actor(self) -> Any:
            actor = super().lagged_actor()
            self.loads = []
            load = actor.load

            def recording_load(tensors: Any) -> None:
                self.loads.append(self.updates)
                load(tensors)

            actor.load = recording_load  # type: ignore[method-assign]
            self.lagged = actor
            return actor

    return Recording


@pytest.mark.parametrize("name", ["sac", "td3"])
def test_inline_actor_acts_one_sync_interval_behind(name: str) -> None:
    # At sync point k the actor gets the weights after the updates of sync point k-1.
    agent, _ = _run("inline", name, steps=300, agent_class=_recording(AGENTS[name]))
    syncs = list(range(16, 300, 16))
    due = [4 * sum(1 for s in syncs[:i] if s >= 96) for i in range(len(syncs))]  # updates before sync i
    assert agent.loads[: len(syncs)] == due
    assert agent.loads[-1] == agent.updates  # the final drain: the actor holds the last weights
    for mine, learner in zip(agent.lagged.snapshot.parameters(), agent.actor.parameters(), strict=True):
        assert torch.equal(mine, learner)


@pytest.mark.parametrize("name", ["sac", "td3"])
def test_lagged_actor_explores_as_act_does(name: str) -> None:
    # The same weights and the same generator state give the same actions, before learning_starts
    # (uniform) and after it (the family's exploring policy); evaluations as eval_policy.
    env = make_vec_env("Pendulum-v1", 2, seed=0)
    try:
        obs_space, act_space = env.single_observation_space, env.single_action_space
    finally:
        env.close()
    agent = AGENTS[name](obs_space, act_space, preset(name, **{**SMALL, "learning_starts": 6}), num_envs=2)
    twin = copy.deepcopy(agent)
    actor = agent.lagged_actor()
    twin.generator = actor_generator(twin.generator, twin.device)  # the actor's generator, same state
    g = torch.Generator().manual_seed(1)
    for _ in range(6):  # env steps 0, 2, 4: uniform; 6, 8, 10: the policy
        obs = torch.randn((2, 3), generator=g)
        got = actor(obs)
        assert torch.equal(got, twin.act(obs))
        twin.env_steps += 2
    assert (got.abs() <= 2.0).all()  # Pendulum's bounds
    obs = torch.randn((5, 3), generator=g)
    assert torch.equal(actor.eval_policy()(obs), twin.eval_policy()(obs))
