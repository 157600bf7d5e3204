"""Overlapped PPO: ``LoopConfig(overlap=True)``, an on-policy schedule (``PPOAgent.lagged_actor``,
``PPOAgent.observe_steps``).

Rollout ``k + 1`` is collected from a snapshot of the weights after update ``k - 1`` while the
learner runs update ``k``; the learner stores the snapshot's log-probs as the rollout's old
log-probs. Checked here: the process learner reproduces the inline one bit for bit (same
computation in another process: exact), the stored log-probs are those of the policy one update
behind (recomputed from a saved copy of its weights: 1e-6, a batched forward against the actor's
one-row-per-env forward), ``observe_steps`` stores what per-step ``observe`` stores, what overlap
refuses, and exact resume. About 25 s here (2 shared cores).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

from helpers import assert_same_tree, metric_rows, overlap_loop
from tritonrl.agents.ppo import PPOAgent, preset
from tritonrl.toolkit.envs.vector import make_vec_env
from tritonrl.toolkit.training.loop import LoopConfig, run_training
from tritonrl.toolkit.training.onpolicy import schedule_for
from tritonrl.toolkit.training.overlap import check_overlap

SMALL = {"num_steps": 32, "update_epochs": 2, "num_minibatches": 2}


def _run(
    learner: str,
    *,
    env_id: str = "CartPole-v1",
    name: str = "ppo",
    num_envs: int = 2,
    steps: int = 640,
    run_dir: Path | None = None,
    agent_class: type[PPOAgent] = PPOAgent,
    overlap: bool = True,
    **kw: Any,
) -> tuple[PPOAgent, dict[str, Any]]:
    env = make_vec_env(env_id, num_envs, seed=5)
    agent = agent_class(
        env.single_observation_space,
        env.single_action_space,
        preset(name, **SMALL),
        num_envs=num_envs,
        seed=5,
    )
    cfg = overlap_loop(
        learner,
        run_dir,
        total_steps=steps,
        seed=5,
        eval_every=steps // 2,
        eval_episodes=2,
        log_every=128,
        overlap=overlap,
        **kw,
    )
    try:
        return agent, run_training(agent, env, schedule_for(agent), cfg)
    finally:
        env.close()


def _state(agent: PPOAgent) -> dict[str, Any]:
    # the learning rate in the optimizer's param group is what the last update set in the inline
    # learner and what a load sets (current_lr, one update on) in this process: every update
    # sets it again, so it is left out; every tensor is compared
    state = agent.state_dict()
    for group in state["optimizer"]["optimizer"]["param_groups"]:
        group.pop("lr")
    return state


_rows = metric_rows


@pytest.mark.parametrize(
    ("name", "env_id", "num_envs"), [("ppo", "CartPole-v1", 2), ("ppo-continuous", "Pendulum-v1", 1)]
)
def test_process_learner_is_bit_identical_to_inline(
    tmp_path: Path, name: str, env_id: str, num_envs: int
) -> None:
    inline, s_inline = _run("inline", name=name, env_id=env_id, num_envs=num_envs, run_dir=tmp_path / "i")
    proc, s_proc = _run("process", name=name, env_id=env_id, num_envs=num_envs, run_dir=tmp_path / "p")
    assert inline.updates == proc.updates == 640 // (32 * num_envs)
    assert_same_tree(_state(inline), _state(proc))
    assert s_inline["evaluations"] == s_proc["evaluations"]
    rows = _rows(tmp_path / "i" / "metrics.csv")
    assert any(row.get("losses/policy_loss") for row in rows)
    assert rows == _rows(tmp_path / "p" / "metrics.csv")


class _Recording(PPOAgent):
    """Keeps, at each update, the stored rollout and the weights the update starts from."""

    def update(self) -> dict[str, torch.Tensor]:
        b = self.buffer
        log: list[Any] = self.__dict__.setdefault("log", [])
        log.append(
            {
                "obs": b.obs.clone(),
                "raw": b.actions.clone(),
                "logprobs": b.logprobs.clone(),
                "values": b.values.clone(),
                "policy": copy.deepcopy(self.net.state_dict()),
            }
        )
        return super().update()


def test_rollouts_are_scored_by_the_policy_one_update_behind() -> None:
    agent, _ = _run("inline", agent_class=_Recording, steps=320)
    log = agent.log  # type: ignore[attr-defined]
    assert len(log) == 5
    scorer = copy.deepcopy(agent.net)
    for k, entry in enumerate(log):
        # update k trains on rollout k, acted by the weights update k - 1 started from (rollouts 0
        # and 1: the initial weights); its values are the critic the update starts from
        acted_by = log[max(k - 1, 0)]["policy"]
        scorer.load_state_dict(acted_by)
        obs, raw = entry["obs"].flatten(0, 1), entry["raw"].flatten(0, 1)
        with torch.no_grad():
            logp, _, _ = scorer.evaluate(obs, raw)
            scorer.load_state_dict(entry["policy"])
            values = scorer.value(obs, None, None)
        torch.testing.assert_close(entry["logprobs"].flatten(), logp, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(entry["values"].flatten(), values, rtol=1e-6, atol=1e-6)
    # the lag is real: from rollout 2 on, the learner's own policy scores the actions differently
    scorer.load_state_dict(log[3]["policy"])
    with torch.no_grad():
        own, _, _ = scorer.evaluate(log[3]["obs"].flatten(0, 1), log[3]["raw"].flatten(0, 1))
    assert not torch.allclose(own, log[3]["logprobs"].flatten(), atol=1e-4)


def test_observe_steps_stores_what_observe_stores() -> None:
    env = make_vec_env("CartPole-v1", 3, seed=1)
    space = (env.single_observation_space, env.single_action_space)
    one = PPOAgent(*space, preset("ppo", num_steps=16), num_envs=3, seed=1)
    many = PPOAgent(*space, preset("ppo", num_steps=16), num_envs=3, seed=1)
    steps: list[tuple[torch.Tensor, ...]] = []
    obs = env.obs
    for _ in range(16):
        action = one.act(obs)
        tr = env.step(action)
        one.observe(obs, action, tr.reward, tr.next_obs, tr.terminated, tr.truncated)
        steps.append(
            tuple(
                torch.as_tensor(v) for v in (obs, action, tr.reward, tr.next_obs, tr.terminated, tr.truncated)
            )
        )
        obs = tr.obs
    env.close()
    blocks = [torch.stack([s[i] for s in steps]) for i in range(6)]
    raw, logprob = one.buffer.actions.clone(), one.buffer.logprobs.clone()
    many.observe_steps(*(b[:7] for b in blocks), raw=raw[:7], logprob=logprob[:7])
    many.observe_steps(*(b[7:] for b in blocks), raw=raw[7:], logprob=logprob[7:])
    a, b = one.buffer, many.buffer
    assert a.pos == b.pos == 16 and many.env_steps == one.env_steps == 48
    for field in (
        "obs",
        "actions",
        "logprobs",
        "rewards",
        "terminated",
        "truncated",
        "has_next_value",
        "starts",
    ):
        assert torch.equal(getattr(a, field), getattr(b, field)), field
    # values: a [48]-row critic forward against 16 forwards of 3 rows (GEMM blocking): 1e-6
    torch.testing.assert_close(b.values, a.values, rtol=1e-6, atol=1e-6)
    mask = a.has_next_value
    torch.testing.assert_close(b.next_values[mask], a.next_values[mask], rtol=1e-6, atol=1e-6)
    # without the behaviour log-probs, the agent's own policy scores the actions
    fresh = PPOAgent(*space, preset("ppo", num_steps=16), num_envs=3, seed=1)
    fresh.observe_steps(*blocks)
    torch.testing.assert_close(fresh.buffer.logprobs, a.logprobs, rtol=1e-6, atol=1e-6)
    # refusals, before anything is stored
    bad = [b.clone() for b in blocks]
    bad[0][4, 1, 2] = float("nan")
    other = PPOAgent(*space, preset("ppo", num_steps=16), num_envs=3, seed=1)
    with pytest.raises(ValueError, match=r"obs\[4, 1, 2\] = nan is not finite"):  # named by its block index
        other.observe_steps(*bad)
    with pytest.raises(ValueError, match="steps"):
        other.observe_steps(blocks[0], *(b[:5] for b in blocks[1:]))
    with pytest.raises(ValueError, match="come together"):
        other.observe_steps(*blocks, raw=raw)
    assert other.buffer.pos == 0 and other.env_steps == 0
    with pytest.raises(RuntimeError, match="do not fit"):
        many.observe_steps(*(b[:1] for b in blocks))


def test_overlap_refuses_recurrent_and_normalised_ppo() -> None:
    env = make_vec_env("CartPole-v1", 2, seed=0)
    space = (env.single_observation_space, env.single_action_space)
    try:
        lstm = PPOAgent(*space, preset("ppo-lstm"), num_envs=2)
        with pytest.raises(ValueError, match="recurrent"):
            run_training(lstm, env, schedule_for(lstm), LoopConfig(total_steps=10, overlap=True))
        with pytest.raises(ValueError, match="recurrent"):  # the CLI's check, before the run
            check_overlap(lstm, schedule_for(lstm))
        normed = PPOAgent(*space, preset("ppo", normalize_obs=True), num_envs=2)
        with pytest.raises(ValueError, match="normalize_obs"):
            run_training(normed, env, schedule_for(normed), LoopConfig(total_steps=10, overlap=True))
        ppo = PPOAgent(*space, num_envs=2)
        check_overlap(ppo, schedule_for(ppo))  # what run_training(overlap=True) accepts
    finally:
        env.close()


def test_the_lagged_actor_checks_observations_as_act_does() -> None:
    import gymnasium as gym
    import numpy as np

    flat = PPOAgent(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), preset("ppo"), num_envs=2)
    actor = flat.lagged_actor()
    bad = torch.zeros(2, 4)
    bad[1, 3] = float("inf")
    with pytest.raises(ValueError, match=r"obs\[1, 3\] = inf is not finite"):
        actor(bad)
    with pytest.raises(ValueError, match="shape"):
        actor(torch.zeros(2, 5))
    action = actor(torch.zeros(2, 4))
    assert action.shape == (2,) and set(actor.extras()) == {"raw", "logprob"}
    # image observations: the environment's bytes only, cast for the f32 snapshot
    pixels = gym.spaces.Box(0, 255, (4, 10, 10), np.uint8)
    image = PPOAgent(pixels, gym.spaces.Discrete(3), preset("ppo-minatar"), num_envs=2)
    image_actor = image.lagged_actor()
    with pytest.raises(TypeError, match="uint8"):
        image_actor(torch.zeros(2, 4, 10, 10))
    assert image_actor(torch.zeros(2, 4, 10, 10, dtype=torch.uint8)).shape == (2,)
    assert image_actor.extras()["logprob"].dtype == torch.float32


def test_stopped_and_resumed_overlapped_ppo_matches_the_uninterrupted_run(tmp_path: Path) -> None:
    # checkpoints every 100 steps: off the sync points (every 64 env steps), so staged steps,
    # their log-probs and the actor's snapshot have to come back
    full_agent, full = _run("process", run_dir=tmp_path / "full", checkpoint_every=100)
    _, stopped = _run("process", run_dir=tmp_path / "split", checkpoint_every=100, stop_at=300)
    assert stopped["interrupted"] and stopped["global_step"] == 300
    torch.manual_seed(12345)  # disturb every global RNG in between
    resumed_agent, resumed = _run("process", run_dir=tmp_path / "split", checkpoint_every=100, resume=True)
    assert resumed["global_step"] == full["global_step"] == 640
    assert_same_tree(_state(full_agent), _state(resumed_agent))
    assert resumed["evaluations"] == full["evaluations"]
    assert _rows(tmp_path / "full" / "metrics.csv") == _rows(tmp_path / "split" / "metrics.csv")
    # a sequential run resumes the overlapped checkpoint: the staged steps are stored first
    _run("process", run_dir=tmp_path / "seq", checkpoint_every=100, stop_at=300)
    agent, seq = _run("inline", run_dir=tmp_path / "seq", checkpoint_every=100, resume=True, overlap=False)
    assert seq["global_step"] == 640 and agent.env_steps == 640
    assert agent.updates == 640 // 64
