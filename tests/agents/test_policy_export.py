"""Every preset's policy module exported three ways acts as ``agent.eval_policy()`` does.

For each preset of ``--agent list`` (and the market variants of a discrete and two continuous
presets), on 1,000 observations of the preset's own environment: the ``torch.export`` program
(``.pt2``), the AOTInductor package and ONNX Runtime against ``agent.eval_policy()`` (the f32
policy module run eagerly). Discrete actions must be equal except at stated ties (the two best
values closer than 1e-5 of their size: another summation order may swap them; at most 1% of the
rows); continuous actions within 1e-5 relative to the action range (three programs that sum in
different orders agree to a few f32 ulps of the pre-activation values: near 0 a tanh action can
differ by ~1e-6 of its bounds). Recurrent policies are compared over 200 steps of the
environment with the memory carried and zeroed at episode ends. bf16-trained agents export f32
programs that agree with their own f32 snapshot.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

import numpy as np
import torch
from tritonrl.cli.registry import get_agent, list_agents
from tritonrl.toolkit.export import FORMATS, SUFFIXES, export_policy, load_exported
from tritonrl.toolkit.precision import training_dtype

ROWS = 1000
TIE = 1e-5  # relative gap of the two best values under which the argmax may differ
ENVS = 2
PIXEL_ENV = {"atari": "ALE/Breakout-v5", "minatar": "MinAtar/Breakout-v1"}
MARKET = ("rainbow", "ppo-continuous", "sac")  # discrete and continuous positions


def _env(name: str, market: bool) -> Any:
    """The preset's environment (2 envs) as the command line builds it."""
    spec = get_agent(name)
    if market:
        from tritonrl.toolkit.envs.market.env import MarketEnvConfig
        from tritonrl.toolkit.training.market import build_market_run

        kind = getattr(spec.config, "action_kind", "discrete")  # the DQN family: discrete positions
        cfg = MarketEnvConfig(window=8, episode_length=16, actions=kind)
        return build_market_run("market:synthetic,bars=600", ENVS, cfg, seed=0).env
    continuous = getattr(spec.config, "action_kind", "discrete") == "continuous"
    env_id = spec.default_env or ("Pendulum-v1" if continuous else "CartPole-v1")
    if env_id.startswith("portfolio:"):  # a small panel: the policy sees the same layout
        from tritonrl.toolkit.training.portfolio import build_portfolio_run, portfolio_env_config

        cfg = portfolio_env_config(spec.config, {"episode_length": "16"})
        return build_portfolio_run("portfolio:synthetic,bars=600,assets=3", ENVS, cfg, seed=0).env
    if env_id.startswith("ALE/"):
        pytest.importorskip("ale_py")
    if env_id.startswith("MinAtar/"):
        pytest.importorskip("minatar")
    from tritonrl.toolkit.envs.vector import make_vec_env

    return make_vec_env(env_id, ENVS, 0)


def _agent(name: str, env: Any) -> Any:
    spec = get_agent(name)
    small = {"buffer_size": "2000"} if spec.kind == "offpolicy" else {}
    return spec.build(
        env.single_observation_space, env.single_action_space, num_envs=ENVS, seed=1, overrides=small
    )


def _step(env: Any, actions: torch.Tensor) -> Any:
    if hasattr(env, "step_transition"):  # the market env
        return env.step_transition(actions)
    return env.step(actions)


def _random_actions(env: Any, rng: np.random.Generator) -> torch.Tensor:
    space = env.single_action_space
    space.seed(int(rng.integers(2**31)))
    return torch.as_tensor(np.stack([space.sample() for _ in range(ENVS)]))


def _observations(env: Any, rows: int) -> torch.Tensor:
    """``rows`` observations of ``env`` under random actions."""
    rng = np.random.default_rng(0)
    obs = env.reset()
    obs = obs[0] if isinstance(obs, tuple) else obs
    seen = []
    while len(seen) * ENVS < rows:
        seen.append(torch.as_tensor(obs).cpu())
        obs = _step(env, _random_actions(env, rng)).obs
    return torch.cat(seen)[:rows]


def _check(
    name: str, got: torch.Tensor, want: torch.Tensor, values: torch.Tensor | None, scale: float
) -> int:
    """Continuous actions within 1e-5 of ``scale`` (the action space's half-range); discrete ones
    equal except where the two best ``values`` tie (per row, or per branch). Returns the number of
    tied entries."""
    assert got.shape == want.shape and got.dtype == want.dtype, (name, got.shape, want.shape)
    if want.is_floating_point():
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * scale, msg=lambda m: f"{name}: {m}")
        return 0
    assert values is not None
    top = values.topk(2, -1).values
    tied = (top[..., 0] - top[..., 1]) <= TIE * top[..., 0].abs().clamp(min=1.0)
    differ = got != want
    assert not (differ & ~tied).any(), f"{name}: {int((differ & ~tied).sum())} actions differ away from ties"
    return int(tied.sum())


def _few_ties(name: str, ties: int, total: int) -> None:
    assert ties <= 0.01 * total, f"{name}: {ties} of {total} entries are ties: the comparison says little"


def _spread(agent: Any) -> None:
    """Move every weight by noise of 0.1 (seeded): a trained policy's outputs are spread out, a fresh
    one's can be nearly equal (PPO's actor head starts at gain 0.01), and ties prove nothing."""
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for t in agent.learner_tensors():
            if t.requires_grad and t.is_floating_point():
                t.add_(0.1 * torch.randn(t.shape, generator=g).to(t.dtype))


def _scale(agent: Any) -> float:
    """The half-range of a Box action space (1 for discrete actions)."""
    space = agent.action_space
    if not hasattr(space, "low"):
        return 1.0
    return float(np.max((space.high - space.low) / 2))


def _values(policy: Any, obs: torch.Tensor, *state: torch.Tensor) -> torch.Tensor | None:
    """What a discrete policy's argmax is taken over (Q values or log-probabilities)."""
    out = policy.outputs(obs, *state)
    for key in ("q_values", "logits"):
        if key in out:
            return out[key]
    return None


def _export_all(policy: Any, folder: Path, example: torch.Tensor) -> dict[str, Any]:
    pytest.importorskip("onnxruntime", reason="the export extra is not installed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.onnx's and inductor's notices
        paths = {fmt: folder / f"policy{SUFFIXES[fmt]}" for fmt in FORMATS}
        return {
            fmt: load_exported(export_policy(policy, example, format=fmt, path=p)) for fmt, p in paths.items()
        }


def _feed_forward(name: str, agent: Any, env: Any, folder: Path) -> None:
    obs = _observations(env, ROWS)
    evaluate = agent.eval_policy()
    want = evaluate(obs)
    policy = agent.policy()
    values = _values(policy, obs)
    for fmt, program in _export_all(policy, folder, obs[:4]).items():
        got = program(obs)
        _few_ties(f"{name} {fmt}", _check(f"{name} {fmt}", got, want, values, _scale(agent)), want.numel())


def _recurrent(name: str, agent: Any, env: Any, folder: Path) -> None:
    """200 steps with the memory carried; rows whose episode ended start from zero memory."""
    policy = agent.policy()
    programs = _export_all(policy, folder, torch.as_tensor(env.reset()))
    evaluate = agent.eval_policy()
    states = {fmt: p.initial_state(ENVS) for fmt, p in programs.items()}
    obs = env.reset()
    evaluate.reset(torch.ones(ENVS, dtype=torch.bool))
    ends = ties = 0
    for _ in range(200):
        x = torch.as_tensor(obs)
        before = evaluate.state if evaluate.state is not None else policy.initial_state(ENVS)
        want = evaluate(obs)
        values = _values(policy, x, *before)
        for fmt, program in programs.items():
            action, *state = program(x, *states[fmt])
            ties += _check(f"{name} {fmt}", action, want, values, _scale(agent))
            states[fmt] = tuple(state)
        tr = _step(env, want)
        done = torch.as_tensor(tr.terminated) | torch.as_tensor(tr.truncated)
        ends += int(done.sum())
        evaluate.reset(done)
        for fmt in states:
            states[fmt] = tuple(torch.where(done.view(-1, *[1] * (s.dim() - 1)), 0.0, s) for s in states[fmt])
        obs = tr.obs
    assert ends >= 2, f"{name}: the comparison crossed only {ends} episode ends"
    _few_ties(name, ties, 200 * ENVS * len(programs))


CASES = [(p.name, False) for p in list_agents()] + [(name, True) for name in MARKET]


def test_the_cases_cover_every_preset() -> None:
    assert {name for name, _ in CASES} >= {p.name for p in list_agents()}


@pytest.mark.heavy
@pytest.mark.parametrize(("name", "market"), CASES, ids=[f"{n}{'-market' if m else ''}" for n, m in CASES])
def test_exported_policy_acts_as_eval_policy(name: str, market: bool, tmp_path: Path) -> None:
    torch.manual_seed(0)
    env = _env(name, market)
    try:
        agent = _agent(name, env)
        _spread(agent)
        if agent.policy().recurrent:
            _recurrent(name, agent, env, tmp_path)
        else:
            _feed_forward(name, agent, env, tmp_path)
    finally:
        env.close()


@pytest.mark.heavy
@pytest.mark.parametrize("name", ["rainbow", "ppo-lstm", "sac"])
def test_a_bf16_agent_exports_f32_that_agrees_with_its_own_snapshot(
    name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TRITONRL_DTYPE", "bf16")
    training_dtype.cache_clear()
    try:
        env = _env(name, False)
        agent = _agent(name, env)
        assert agent.dtype == torch.bfloat16
        policy = agent.policy()
        assert {p.dtype for p in policy.parameters()} == {torch.float32}
        obs = _observations(env, 64)
        state = policy.initial_state(obs.shape[0])
        program = load_exported(export_policy(policy, obs[:4], path=tmp_path / "policy.pt2"))
        got = program(obs, *state)
        want = policy(obs, *state)
        pairs = zip(*((g if isinstance(g, tuple) else (g,)) for g in (got, want)), strict=True)
        for g, w in pairs:
            torch.testing.assert_close(g, w, rtol=0, atol=0)  # exact: one f32 program, eager and exported
        env.close()
    finally:
        training_dtype.cache_clear()


def test_a_factored_head_exports_its_branches(tmp_path: Path) -> None:
    """A MultiDiscrete action space (no preset has one): the argmax per branch, padding excluded."""
    pytest.importorskip("onnxruntime", reason="the export extra is not installed")
    import gymnasium as gym
    from tritonrl.agents.dqn import DQNAgent, preset

    obs_space = gym.spaces.Box(-1.0, 1.0, (6,), np.float32)
    agent = DQNAgent(obs_space, gym.spaces.MultiDiscrete([3, 5, 2]), preset("dueling", buffer_size=100))
    _spread(agent)
    obs = torch.rand(ROWS, 6) * 2 - 1
    want = agent.eval_policy()(obs)
    assert want.shape == (ROWS, 3) and int(want[:, 2].max()) <= 1  # the padding is never chosen
    policy = agent.policy()
    values = policy.q_values(obs)
    for fmt in ("pt2", "onnx"):
        program = load_exported(
            export_policy(policy, obs[:4], format=fmt, path=tmp_path / f"f{SUFFIXES[fmt]}")
        )
        _few_ties(f"factored {fmt}", _check(f"factored {fmt}", program(obs), want, values, 1.0), want.numel())


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["rainbow", "ppo-mamba", "sac"])
def test_a_cuda_policy_exports_references_that_act_as_its_kernels(name: str, tmp_path: Path) -> None:
    """On CUDA, ``eval_policy`` runs the f32 Triton kernels (the noisy dueling head with C51's
    support, the Mamba2 step); the artifacts (.pt2, AOTInductor for CUDA) hold their torch
    references (no tritonrl:: op: checked by export). The kernels' ``tl.dot`` may round through
    TF32 (a 10-bit mantissa), so values agree to 5e-3 of their size, not to f32 rounding:
    continuous actions within 5e-3 of the range, discrete ones equal except where the two best
    values are that close."""
    env = _env(name, False)
    try:
        agent = get_agent(name).build(
            env.single_observation_space, env.single_action_space, num_envs=ENVS, seed=1, device="cuda",
            overrides={"buffer_size": "2000"} if get_agent(name).kind == "offpolicy" else {},
        )  # fmt: skip
        _spread(agent)
        policy = agent.policy()
        obs = _observations(env, 256).to("cuda")
        state = policy.initial_state(obs.shape[0])
        evaluate = agent.eval_policy()
        want = evaluate(obs)
        for fmt in ("pt2", "aoti"):
            program = load_exported(
                export_policy(policy, obs[:4], format=fmt, path=tmp_path / f"c{SUFFIXES[fmt]}")
            )
            got = program(obs, *state)
            got = got[0] if isinstance(got, tuple) else got
            if want.is_floating_point():
                torch.testing.assert_close(got, want, rtol=5e-3, atol=5e-3 * _scale(agent))
            else:
                values = _values(policy, obs, *state)
                assert values is not None
                top = values.topk(2, -1).values
                near = (top[..., 0] - top[..., 1]) <= 5e-3 * top[..., 0].abs().clamp(min=1.0)
                assert not ((got != want) & ~near).any(), f"{name} {fmt}"
    finally:
        env.close()
