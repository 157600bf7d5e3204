"""The LSTM and GRU policies train on whole sequences at once: each sequence is split at its
episode starts, the pieces are padded into one batch and run through torch's fused ``lstm`` /
``gru`` (:meth:`tritonrl.agents.nets.recurrent.LSTMCore.sequence`). That must equal the step-by-step
computation the cores act with (:meth:`~tritonrl.agents.nets.recurrent.LSTMCore.sequence_stepwise`,
one cell call per step, the memory masked where an episode starts): features, log-probs,
entropies, values and every gradient.

Tolerances, and why:

- float64: ``rtol=1e-10, atol=1e-12``. The two paths compute the same sums in another order
  only, so in f64 they agree to ~1e-15; a wrong reset, a piece scattered to the wrong place or a
  wrong initial state moves results by O(0.1).
- float32: ``rtol=1e-5, atol=1e-6``. The fused op (oneDNN on a CPU, cuDNN on CUDA) computes the
  input products of all steps in one GEMM and adds ``x W_ih + h W_hh + b_ih + b_hh`` in another
  order than ``LSTMCell``/``GRUCell``: a few ulps per step, carried through the recurrence
  (measured: every output and gradient within 4e-7 of its largest magnitude, 1.7e-6 absolute
  on gradients of order 5).
- bfloat16 (a smoke test: bf16 on a CPU is slow, tiny sizes): the batched path's error against
  the f32 reference is bounded by what bf16 itself costs, ``err(batched bf16, f32) <= 2 *
  err(stepwise bf16, f32) + 1e-2`` (both round every matmul and gate to 8 mantissa bits; eps is
  about one bf16 ulp, 2^-7, at the features' magnitude ~1; measured: batched 2e-3 (LSTM) and
  1.1e-2 (GRU) against stepwise 4e-3 and 6e-3).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonrl.agents.nets.actor_critic import ActorCritic
from tritonrl.agents.nets.policy_heads import CategoricalHead
from tritonrl.agents.nets.recurrent import GRUCore, LSTMCore, subsequence_layout, subsequence_stats

CORES: dict[str, type[LSTMCore] | type[GRUCore]] = {"lstm": LSTMCore, "gru": GRUCore}
OBS, HIDDEN, SIZE, ACTIONS = 3, (8,), 6, 4
F64 = {"rtol": 1e-10, "atol": 1e-12}
F32 = {"rtol": 1e-5, "atol": 1e-6}

L = 7
# One row per case, each row from a non-zero stored memory (used unless the row starts at step 0).
CASES = {
    "no reset": [],
    "reset at the first step": [0],
    "reset mid-segment": [3],
    "reset at the last step": [L - 1],
    "several resets": [1, 2, 5],
    "first, mid and last": [0, 3, L - 1],
    "every step": list(range(L)),
}


def _starts(rows: list[list[int]], length: int = L) -> torch.Tensor:
    s = torch.zeros(len(rows), length, dtype=torch.bool)
    for b, ts in enumerate(rows):
        s[b, ts] = True
    return s


def _policy(kind: str, dtype: torch.dtype = torch.float32, seed: int = 0) -> ActorCritic:
    """A policy with every parameter random (biases too: zero biases would make a zero memory
    look like a reset one)."""
    torch.manual_seed(seed)
    core = CORES[kind](OBS, HIDDEN, SIZE, dtype=dtype)
    policy = ActorCritic(core, CategoricalHead(SIZE, ACTIONS, dtype=dtype), dtype=dtype)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.6)
    return policy


def _inputs(kind: str, starts: torch.Tensor, dtype: torch.dtype, seed: int = 1) -> dict[str, Any]:
    B, T = starts.shape
    g = torch.Generator().manual_seed(seed)
    n_state = 2 if kind == "lstm" else 1
    return {
        "x": torch.randn(B, T, OBS, generator=g, dtype=torch.float64).to(dtype),
        "raw": torch.randint(0, ACTIONS, (B, T), generator=g),
        "starts": starts,
        "state": tuple(
            torch.randn(B, SIZE, generator=g, dtype=torch.float64).to(dtype) for _ in range(n_state)
        ),
        "upstream": torch.randn(3, B, T, generator=g, dtype=torch.float64),
    }


def _evaluate(policy: ActorCritic, inp: dict[str, Any], stepwise: bool) -> dict[str, torch.Tensor]:
    """Log-probs, entropies, values and the gradients of a random combination of them with
    respect to every parameter, the stored memory and the observations."""
    policy.zero_grad()
    x = inp["x"].clone().requires_grad_(True)
    state = tuple(s.clone().requires_grad_(True) for s in inp["state"])
    if stepwise:
        fa, fc = policy.core.sequence_stepwise(x, inp["starts"], state)
        logp, ent, value = policy.evaluate_features(fa, fc, inp["raw"])
    else:
        logp, ent, value = policy.evaluate(x, inp["raw"], inp["starts"], state)
    up = inp["upstream"].to(logp.dtype)
    (up[0] * logp + up[1] * ent + up[2] * value).sum().backward()
    out = {"logp": logp.detach(), "entropy": ent.detach(), "value": value.detach(), "d_obs": x.grad}
    out |= {f"d_state{i}": s.grad for i, s in enumerate(state)}
    out |= {f"d_{name}": p.grad.clone() for name, p in policy.named_parameters() if p.grad is not None}
    return out


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], **tol: float) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k] is not None, k
        torch.testing.assert_close(a[k], b[k], msg=lambda m, k=k: f"{k}: {m}", **tol)


# ----------------------------------------------------------------------------- equality


@pytest.mark.parametrize("kind", list(CORES))
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, F64), (torch.float32, F32)], ids=["f64", "f32"])
def test_batched_equals_stepwise_with_resets_anywhere(kind: str, dtype: torch.dtype, tol: dict) -> None:
    policy = _policy(kind, dtype)
    inp = _inputs(kind, _starts(list(CASES.values())), dtype)
    batched, stepwise = _evaluate(policy, inp, False), _evaluate(policy, inp, True)
    _assert_same(batched, stepwise, **tol)
    # every parameter got a gradient, and the stored memory matters exactly where it should
    assert {f"d_{n}" for n, _ in policy.named_parameters()} <= batched.keys()
    fresh = inp["starts"][:, 0]
    assert (batched["d_state0"][fresh] == 0).all() and (batched["d_state0"][~fresh].abs().sum(1) > 0).all()


@pytest.mark.parametrize("kind", list(CORES))
@pytest.mark.parametrize("name", list(CASES))
def test_each_case_alone(kind: str, name: str) -> None:
    # A batch of one row: the layout is the row's own pieces and nothing else.
    policy = _policy(kind, torch.float64)
    inp = _inputs(kind, _starts([CASES[name]]), torch.float64)
    _assert_same(_evaluate(policy, inp, False), _evaluate(policy, inp, True), **F64)


@pytest.mark.parametrize("kind", list(CORES))
@settings(max_examples=25, derandomize=True)
@given(data=st.data())
def test_random_start_masks(kind: str, data: st.DataObject) -> None:
    B = data.draw(st.integers(1, 4), label="B")
    T = data.draw(st.integers(1, 9), label="L")
    flags = data.draw(st.lists(st.booleans(), min_size=B * T, max_size=B * T), label="starts")
    starts = torch.tensor(flags, dtype=torch.bool).view(B, T)
    policy = _policy(kind, torch.float32, seed=B * 10 + T)
    inp = _inputs(kind, starts, torch.float32, seed=T)
    _assert_same(_evaluate(policy, inp, False), _evaluate(policy, inp, True), **F32)


@pytest.mark.parametrize("kind", list(CORES))
def test_a_larger_layout_only_pads_and_a_smaller_one_fails(kind: str) -> None:
    core = _policy(kind, torch.float64).core
    starts = _starts(list(CASES.values()))
    inp = _inputs(kind, starts, torch.float64)
    rows, length = subsequence_layout(starts)
    ref = core.sequence(inp["x"], starts, inp["state"])[0]
    torch.testing.assert_close(core.sequence(inp["x"], starts, inp["state"], (rows, length))[0], ref, **F64)
    torch.testing.assert_close(
        core.sequence(inp["x"], starts, inp["state"], (rows + 5, length + 3))[0], ref, **F64
    )
    with pytest.raises((IndexError, RuntimeError)):
        core.sequence(inp["x"], starts, inp["state"], (rows - 1, length))


def test_compiled_evaluate_breaks_the_graph_around_the_split_and_agrees() -> None:
    # torch.compile of a caller of sequence(): the split recurrence runs eagerly (a graph break,
    # torch.compiler.disable), the rest compiled; same numbers as eager (f32 tolerance: Inductor
    # reorders the heads' reductions).
    policy = _policy("lstm", torch.float32)
    inp = _inputs("lstm", _starts(list(CASES.values())), torch.float32)
    compiled = torch.compile(policy.evaluate, dynamic=False)
    for starts in (inp["starts"], torch.zeros_like(inp["starts"])):  # two layouts
        args = (inp["x"], inp["raw"], starts, inp["state"])
        for a, b in zip(compiled(*args), policy.evaluate(*args), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_subsequence_stats_and_layout() -> None:
    starts = _starts(list(CASES.values()))
    count, longest = subsequence_stats(starts)
    # pieces: no reset 1 (7); first 1 (7); mid 2 (3, 4); last 2 (6, 1); [1, 2, 5]: 4 (1, 1, 3, 2);
    # [0, 3, 6]: 3 (3, 3, 1); every step: 7 (1 each)
    assert count.tolist() == [1, 1, 2, 2, 4, 3, 7]
    assert longest.tolist() == [7, 7, 4, 6, 3, 3, 1]
    assert subsequence_layout(starts) == (20, 7)
    assert subsequence_layout(starts[4:]) == (14, 3)
    with pytest.raises(ValueError, match="starts must be"):
        subsequence_stats(starts.float())


# ----------------------------------------------------------------------------- bf16


@pytest.mark.parametrize("kind", list(CORES))
def test_bf16_runs_and_stays_close_to_f32(kind: str) -> None:
    starts = _starts(list(CASES.values())[:4])
    p32, p16 = _policy(kind, torch.float32), _policy(kind, torch.bfloat16)
    with torch.no_grad():
        for a, b in zip(p16.parameters(), p32.parameters(), strict=True):
            b.copy_(a.float())  # the same (bf16-representable) weights in both
    inp32 = _inputs(kind, starts, torch.float32)
    inp16 = {**inp32, "x": inp32["x"].bfloat16(), "state": tuple(s.bfloat16() for s in inp32["state"])}
    inp32 = {**inp16, "x": inp16["x"].float(), "state": tuple(s.float() for s in inp16["state"])}
    ref = p32.core.sequence_stepwise(inp32["x"], starts, inp32["state"])[0]
    batched = p16.core.sequence(inp16["x"], starts, inp16["state"])[0]
    stepwise = p16.core.sequence_stepwise(inp16["x"], starts, inp16["state"])[0]
    assert batched.dtype == torch.bfloat16 and torch.isfinite(batched).all()
    err = (batched.float() - ref).abs().max().item()
    err_bf16 = (stepwise.float() - ref).abs().max().item()
    assert err <= 2 * err_bf16 + 1e-2, (err, err_bf16)
    logp, ent, value = p16.evaluate(inp16["x"], inp16["raw"], starts, inp16["state"])
    (logp.sum() + ent.sum() + value.sum()).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in p16.parameters())


# ----------------------------------------------------------------------------- through the agent

gym = pytest.importorskip("gymnasium")

from tritonrl.agents.ppo import PPOAgent  # noqa: E402  (imports gymnasium)
from tritonrl.agents.ppo import preset as ppo_preset  # noqa: E402

E = 3
SMALL = {
    "num_steps": 12,
    "seq_len": 6,
    "num_minibatches": 2,
    "update_epochs": 2,
    "hidden": (8,),
    "memory_size": 8,
    "total_steps": 10_000,
    "lr": 1e-3,
}
SPACE = gym.spaces.Box(-10.0, 10.0, (OBS,))


def _agent(kind: str, stepwise: bool) -> PPOAgent:
    cfg = dataclasses.replace(ppo_preset(f"ppo-{kind}"), **SMALL)
    agent = PPOAgent(SPACE, gym.spaces.Discrete(ACTIONS), cfg, num_envs=E, seed=0)
    if stepwise:  # the reference path: one cell call per step in training too
        core = agent.net.core
        core.sequence = lambda x, starts, state, layout=None: core.sequence_stepwise(x, starts, state)
    return agent


def _rollout(agents: list[PPOAgent], g: torch.Generator) -> None:
    """The same transitions into every agent: env 0 truncated at steps 2 and 9, env 1 terminated
    at step 5 and at the rollout's last step, env 2 truncated at step 5 (a sequence boundary, 6)
    and terminated at step 7; actions from the first agent."""
    ends = {
        (2, 0): "trunc",
        (9, 0): "trunc",
        (5, 1): "term",
        (11, 1): "term",
        (5, 2): "trunc",
        (7, 2): "term",
    }
    for t in range(SMALL["num_steps"]):
        obs = torch.randn(E, OBS, generator=g)
        action = agents[0].act(obs)
        for agent in agents[1:]:
            agent.act(obs)
        term = torch.tensor([ends.get((t, e)) == "term" for e in range(E)])
        trunc = torch.tensor([ends.get((t, e)) == "trunc" for e in range(E)])
        reward, final = torch.randn(E, generator=g), torch.randn(E, OBS, generator=g)
        for agent in agents:
            agent.observe(obs, action.clone(), reward, final, term, trunc)


@pytest.mark.parametrize("kind", list(CORES))
def test_agent_update_equals_the_stepwise_update_with_truncations(kind: str) -> None:
    batched, stepwise = _agent(kind, False), _agent(kind, True)
    g = torch.Generator().manual_seed(3)
    for _ in range(2):
        _rollout([batched, stepwise], g)
        # an episode starts after every termination and truncation (the memory resets there)
        starts = batched.buffer.starts
        for t, e in [(3, 0), (10, 0), (6, 1), (6, 2), (8, 2)]:
            assert starts[t, e], (t, e)
        assert int(starts[1:].sum()) == 5
        m_b, m_s = batched.update(), stepwise.update()
        for k in m_b:  # f32 rounding of the fused op, through two epochs of Adam
            torch.testing.assert_close(m_b[k], m_s[k], rtol=1e-4, atol=1e-5, msg=k)
        for (name, a), b in zip(batched.net.named_parameters(), stepwise.net.parameters(), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("kind", list(CORES))
def test_acting_steps_the_cell_and_resets_on_done(kind: str) -> None:
    # act carries one memory per environment and clears it where the previous step ended an
    # episode (terminated or truncated), exactly as one core.step per call with those flags.
    agent = _agent(kind, False)
    core = agent.net.core
    g = torch.Generator().manual_seed(5)
    state = core.initial_state(E)
    starts = torch.ones(E, dtype=torch.bool)
    for t in range(8):
        obs = torch.randn(E, OBS, generator=g)
        action = agent.act(obs)
        with torch.no_grad():
            _, _, state = core.step(agent._pending.x, state, starts)
        for a, b in zip(agent.state, state, strict=True):
            assert torch.equal(a, b), t
        term, trunc = torch.tensor([t == 2, False, t == 5]), torch.tensor([False, t == 3, False])
        agent.observe(obs, action, torch.zeros(E), obs, term, trunc)
        starts = term | trunc
