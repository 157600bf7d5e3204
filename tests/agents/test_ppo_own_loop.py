"""Traps of PPO in a user's own loop (issue 42, item 7): ``observe`` given another action than the
one ``act`` sampled (refused, or stored with its own log-prob behind ``rescore=True``), and the
learning rate annealed to 0 at ``total_steps`` (a warning, once)."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import torch

gym = pytest.importorskip("gymnasium")

from tritonrl.agents.ppo import LRAnnealedWarning, PPOAgent, PPOConfig  # noqa: E402  (imports gymnasium)

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
DISCRETE = gym.spaces.Discrete(2)
BOX = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
E = 3
TINY = {
    "num_steps": 4,
    "seq_len": 2,
    "num_minibatches": 1,
    "update_epochs": 1,
    "hidden": (8,),
    "memory_size": 8,
    "mamba_headdim": 8,
    "flow_hidden": 8,
}
POLICIES = ["discrete", "continuous", "flow", "lstm", "gru", "mamba"]


def _agent(policy: str, **kw) -> PPOAgent:
    cfg = dataclasses.replace(PPOConfig(policy=policy), **{**TINY, **kw})
    act = DISCRETE if policy in ("discrete", "lstm", "gru", "mamba") else BOX
    return PPOAgent(OBS, act, cfg, num_envs=E, seed=0)


def _other(agent: PPOAgent, action: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """``action`` with the given rows changed (and still inside the action space)."""
    out = action.clone()
    for r in rows:
        out[r] = 1 - out[r] if out.dtype == torch.int64 else -0.5 * out[r] + 0.25
    return out


def _rest():
    return (
        torch.ones(E),
        torch.randn(E, 4),
        torch.zeros(E, dtype=torch.bool),
        torch.zeros(E, dtype=torch.bool),
    )


# ----------------------------------------------------------------------------- another action


@pytest.mark.parametrize("policy", POLICIES)
def test_observe_refuses_another_action_than_act_sampled_and_stores_nothing(policy: str) -> None:
    agent = _agent(policy)
    obs = torch.randn(E, 4)
    action = agent.act(obs)
    with pytest.raises(ValueError) as info:
        agent.observe(obs, _other(agent, action, [0, 2]), *_rest())
    msg = str(info.value)
    assert msg.startswith("PPOAgent.observe: action differs in rows [0, 2] from the action act returned")
    assert "rescore=True" in msg and "\n" not in msg
    assert agent.buffer.pos == 0 and agent.env_steps == 0
    # act's own action goes in afterwards, as a copy too (numpy, a clone: equal values)
    copy = action.numpy().copy() if policy != "discrete" else action.clone()
    agent.observe(obs, copy, *_rest())
    assert agent.buffer.pos == 1


@pytest.mark.parametrize("policy", ["discrete", "continuous", "lstm"])
def test_another_action_is_refused_at_check_inputs_on_an_accelerator(policy: str) -> None:
    # The accelerator path, forced on the CPU: no host read on the step, the device-side flag is
    # read by check_inputs(), or by update() first with check_at_update.
    agent = _agent(policy)
    agent.inputs.mode = "deferred"
    agent.inputs.check_at_update = True
    for t in range(agent.config.num_steps):
        obs = torch.randn(E, 4)
        action = agent.act(obs)
        agent.observe(obs, _other(agent, action, [1]) if t == 1 else action.clone(), *_rest())  # no error
    before = [p.detach().clone() for p in agent.net.parameters()]
    match = (
        r"^PPOAgent\.observe: action differed from the action act returned for this obs at a step "
        r"since the last check \(deferred check on cpu.*rescore=True"
    )
    with pytest.raises(ValueError, match=match):
        agent.update()
    with pytest.raises(ValueError, match=match):  # it stays failed
        agent.check_inputs()
    assert all(
        torch.equal(a, b) for a, b in zip(before, agent.net.parameters(), strict=True)
    )  # exact: untouched


def test_equal_actions_pass_the_deferred_check() -> None:
    agent = _agent("discrete")
    agent.inputs.mode = "deferred"
    for _ in range(agent.config.num_steps):
        obs = torch.randn(E, 4)
        action = agent.act(obs)
        agent.observe(obs, action.numpy().copy(), *_rest())
    assert agent.inputs.pending
    agent.check_inputs()
    agent.update()


@pytest.mark.parametrize("policy", POLICIES)
def test_rescore_stores_the_given_action_with_its_log_prob(policy: str) -> None:
    agent = _agent(policy)
    for t in range(agent.config.num_steps):  # memories move on: later steps start from them
        obs = torch.randn(E, 4)
        action = agent.act(obs)
        acted = agent._pending.logprob.clone()
        given = _other(agent, action, [0, 1])
        agent.observe(obs, given, *_rest(), rescore=True)
        raw = agent.buffer.actions[t]
        assert torch.allclose(agent.net.head.to_raw(given).to(raw.dtype), raw, atol=1e-5)
        stored = agent.buffer.logprobs[t]
        # row 2 kept act's action: the same log-prob from the same features (recomputed)
        torch.testing.assert_close(stored[2], acted[2], rtol=1e-4, atol=1e-4)
        if isinstance(agent.action_space, gym.spaces.Discrete):
            # two actions: the flipped one has probability 1 - p(act's)
            torch.testing.assert_close(stored[:2].exp(), 1 - acted[:2].exp(), rtol=1e-4, atol=1e-5)
        else:
            assert not torch.allclose(stored[:2], acted[:2])
    assert agent.buffer.full
    agent.update()  # the rollout trains


def test_rescore_of_a_feed_forward_step_matches_evaluate() -> None:
    agent = _agent("continuous")
    obs = torch.randn(E, 4)
    agent.act(obs)
    given = torch.tensor([[0.5, -1.0], [1.5, 0.0], [-2.0, 2.0]])
    agent.observe(obs, given, *_rest(), rescore=True)
    want, _, _ = agent.net.evaluate(agent.buffer.obs[0], agent.net.head.to_raw(given))
    torch.testing.assert_close(agent.buffer.logprobs[0], want, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- the annealed lr


def test_a_warning_says_once_that_the_annealed_learning_rate_reached_zero() -> None:
    agent = _agent("discrete", total_steps=2 * TINY["num_steps"] * E)  # lr reaches 0 after 2 updates

    def update() -> list[warnings.WarningMessage]:
        for _ in range(agent.config.num_steps):
            obs = torch.randn(E, 4)
            agent.observe(obs, agent.act(obs), *_rest())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            metrics = agent.update()
        assert float(metrics["charts/learning_rate"]) >= 0
        return [w for w in caught if issubclass(w.category, LRAnnealedWarning)]

    assert not update() and not update()  # lr, lr / 2: learning
    caught = update()  # lr 0: nothing learned from here on
    assert len(caught) == 1 and agent.current_lr() == 0.0
    msg = str(caught[0].message)
    assert msg.startswith("PPOAgent.update: the learning rate has annealed to 0")
    assert "total_steps=24" in msg and "anneal_lr" in msg
    assert caught[0].filename == __file__  # points at the caller's update()
    assert not update()  # once per agent


def test_no_warning_without_annealing() -> None:
    agent = _agent("discrete", total_steps=1, anneal_lr=False)
    for _ in range(3):
        for _ in range(agent.config.num_steps):
            obs = torch.randn(E, 4)
            agent.observe(obs, agent.act(obs), *_rest())
        with warnings.catch_warnings():
            warnings.simplefilter("error", LRAnnealedWarning)
            agent.update()
