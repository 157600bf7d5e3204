"""``DQNAgent.observe_steps`` (a block of vector steps, the overlapped learner's way in) against
the same steps through ``observe`` one at a time, and the lagged actor's host exploration against
its device path. Every comparison is exact: the same values are stored through another code path
(numpy block writes instead of per-step writes) and the same draws are taken from the same
generator, so nothing may differ by even a rounding."""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

from tritonrl.agents.dqn import DQNAgent, preset
from tritonrl.toolkit.envs.vector import make_vec_env


def _steps(name: str, num_envs: int, count: int, seed: int = 0) -> tuple[DQNAgent, list[tuple]]:
    """A fresh agent and ``count`` vector steps of CartPole under its exploring actions."""
    env = make_vec_env("CartPole-v1", num_envs, seed=seed)
    agent = DQNAgent(
        env.single_observation_space,
        env.single_action_space,
        preset(name, learning_starts=10_000),
        num_envs=num_envs,
        seed=seed,
    )
    obs, out = env.obs, []
    for _ in range(count):
        a = agent.act(obs)
        tr = env.step(a)
        out.append((obs.clone(), a.clone(), tr.reward, tr.next_obs.clone(), tr.terminated, tr.truncated))
        obs = tr.next_obs
    env.close()
    return agent, out


def _block(rows: list[tuple]) -> list[torch.Tensor]:
    return [torch.stack([torch.as_tensor(r[k]) for r in rows]) for k in range(6)]


@pytest.mark.parametrize(("name", "num_envs"), [("dqn", 1), ("dqn", 3), ("rainbow", 2), ("c51", 1)])
def test_observe_steps_equals_observe_calls(name: str, num_envs: int) -> None:
    """Blocks of 1, 7 and 40 steps (the last crossing episode ends) store what per-step calls do:
    the ring, the n-step staging, the priorities and the counters."""
    agent, rows = _steps(name, num_envs, 48)
    one, many = copy.deepcopy(agent), copy.deepcopy(agent)
    for r in rows:
        one.observe(*r)
    for lo, hi in ((0, 1), (1, 8), (8, 48)):
        many.observe_steps(*_block(rows[lo:hi]))
    assert many.env_steps == one.env_steps == 48 * num_envs
    a, b = one.buffer.state_dict(), many.buffer.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], torch.Tensor):
            assert torch.equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k
    # and sampling from both draws the same batch
    torch.manual_seed(0)
    x = one.buffer.sample(16)
    torch.manual_seed(0)
    y = many.buffer.sample(16)
    xs, ys = (list(x.values()), list(y.values())) if isinstance(x, dict) else (list(x), list(y))
    assert len(xs) == len(ys)
    for u, v in zip(xs, ys, strict=True):
        assert torch.equal(u, v) if isinstance(u, torch.Tensor) else u == v


def test_observe_steps_refuses_bad_blocks() -> None:
    agent, rows = _steps("dqn", 2, 4)
    block = _block(rows)
    bad = [t.clone() for t in block]
    bad[0][2, 1, 3] = float("nan")
    with pytest.raises(ValueError, match=r"obs\[2, 1, 3\] = nan"):
        agent.observe_steps(*bad)
    short = [*block[:2], block[2][:3], *block[3:]]
    with pytest.raises(ValueError, match="reward holds 3 steps, obs 4"):
        agent.observe_steps(*short)
    outside = [t.clone() for t in block]
    outside[1][1, 0] = 7
    with pytest.raises(ValueError, match="outside"):
        agent.observe_steps(*outside)
    assert len(agent.buffer) == 0 and agent.env_steps == 0  # a refused block stores nothing


def test_lagged_actor_host_exploration_matches_device_path() -> None:
    """At epsilon 0.5 the lagged actor skips the forward where every env explores; the actions
    must equal those of the path that always runs it (the same two draws per step)."""
    agent, _ = _steps("dqn", 3, 1)
    agent.env_steps = agent.config.eps_decay_steps // 2  # epsilon halfway: both branches taken
    host, device = agent.lagged_actor(), agent.lagged_actor()
    device.generator.set_state(host.generator.get_state())
    obs = torch.randn(200, 3, 4)
    got = [host(o) for o in obs]
    agent._host_explore = False  # what a CUDA agent does: the forward every step, device draws
    want = [device(o) for o in obs]
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    picks = torch.stack(got) != torch.stack([host.snapshot.q_values(o).argmax(-1) for o in obs])
    assert 0 < int(picks.sum()) < picks.numel()  # some random actions differ from the greedy ones
