"""SAC and TD3 (tritonrl.agents.sac): shapes, bounds, the squashed-Gaussian log-prob, entropy
tuning, the delayed updates, input errors, checkpoints, bf16 parts and the command line.

Small networks and replays throughout: the whole file takes a few seconds on a CPU.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

gym = pytest.importorskip("gymnasium")

from tritonrl.agents.sac import (  # noqa: E402  (imports gymnasium)
    PRESETS,
    SACAgent,
    SACConfig,
    SquashedGaussianActor,
    TD3Agent,
    TD3Config,
    preset,
)
from tritonrl.agents.sac.network import squashed_gaussian_log_prob  # noqa: E402
from tritonrl.agents.sac.sac import _DEFAULT_CONFIG  # noqa: E402
from tritonrl.cli.commands import main as cli_main  # noqa: E402
from tritonrl.cli.registry import get_agent  # noqa: E402
from tritonrl.toolkit.checkpoint import CheckpointError  # noqa: E402
from tritonrl.toolkit.precision import training_dtype  # noqa: E402

TINY = {"hidden": (16, 16), "batch_size": 8, "buffer_size": 64, "learning_starts": 8}
OBS = gym.spaces.Box(-5.0, 5.0, (3,), np.float32)
BOX = gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([3.0, 0.5], np.float32))
BOX_2D = gym.spaces.Box(-2.0, 2.0, (2, 3), np.float32)
AGENTS = {"sac": SACAgent, "td3": TD3Agent}


def _agent(name: str, space: gym.Space = BOX, num_envs: int = 2, **extra) -> SACAgent | TD3Agent:
    return AGENTS[name](OBS, space, preset(name, **{**TINY, **extra}), num_envs=num_envs, seed=0)


def _fill(agent, steps: int, seed: int = 0) -> None:
    """``steps`` vector steps of random observations through act and observe."""
    g = torch.Generator().manual_seed(seed)
    E = agent.num_envs
    obs = torch.rand((E, *agent.obs_shape), generator=g)
    for _ in range(steps):
        a = agent.act(obs)
        nxt = torch.rand((E, *agent.obs_shape), generator=g)
        agent.observe(
            obs,
            a,
            torch.randn(E, generator=g),
            nxt,
            torch.zeros(E, dtype=torch.bool),
            torch.zeros(E, dtype=torch.bool),
        )
        obs = nxt


@pytest.mark.parametrize("name", list(AGENTS))
@pytest.mark.parametrize("space", [BOX, BOX_2D], ids=["box2", "box2x3"])
def test_actions_have_the_space_shape_and_lie_in_its_bounds(name: str, space: gym.Space) -> None:
    agent = _agent(name, space, num_envs=3)
    low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
    obs = torch.rand(3, 3)
    for phase in ("random", "policy"):
        for explore in (True, False):
            a = agent.act(obs, explore=explore)
            assert a.shape == (3, *space.shape) and a.dtype == torch.float32, phase
            assert bool(((a >= low) & (a <= high)).all()), (phase, explore, a)
        _fill(agent, 3)  # 9 env steps: past learning_starts (8), the policy acts
    assert agent.eval_policy()(torch.rand(7, 3)).shape == (7, *space.shape)


def test_bounds_are_rescaled_onto_minus_one_one_and_back() -> None:
    agent = _agent("sac")
    # the extremes of [-1, 1] map onto low and high; the replay stores actions in [-1, 1]
    ends = agent._to_env(torch.tensor([[-1.0, -1.0], [1.0, 1.0], [0.0, 0.0]]))
    torch.testing.assert_close(ends, torch.tensor([[-1.0, 0.0], [3.0, 0.5], [1.0, 0.25]]), rtol=0, atol=1e-7)
    obs = torch.zeros(2, 3)
    env_a = torch.tensor([[-1.0, 0.5], [2.0, 0.125]])
    agent.observe(
        obs, env_a, torch.zeros(2), obs, torch.zeros(2, dtype=torch.bool), torch.zeros(2, dtype=torch.bool)
    )
    stored = agent.buffer.state_dict()["action"]
    torch.testing.assert_close(stored, torch.tensor([[-1.0, 1.0], [0.5, -0.5]]), rtol=0, atol=1e-6)


def test_target_entropy_is_minus_the_action_dimension() -> None:
    assert _agent("sac", BOX).target_entropy == -2.0
    assert _agent("sac", BOX_2D).target_entropy == -6.0


def _reference_log_prob(mean, std, u, low, high) -> torch.Tensor:
    """log pi(a) of a = center + scale * tanh(u) through torch.distributions' own transforms."""
    base = torch.distributions.Independent(torch.distributions.Normal(mean, std), 1)
    center, scale = (high + low) / 2, (high - low) / 2
    tfs = [torch.distributions.TanhTransform(), torch.distributions.AffineTransform(center, scale)]
    dist = torch.distributions.TransformedDistribution(base, tfs)
    return dist.log_prob(center + scale * torch.tanh(u))


@pytest.mark.parametrize("D", [1, 2, 5])
def test_squashed_gaussian_log_prob_matches_torch_distributions(D: int) -> None:
    # f64, |u| < 3 so that the reference's atanh of the action loses nothing: agreement to 1e-9
    g = torch.Generator().manual_seed(D)
    mean = torch.randn(64, D, generator=g, dtype=torch.float64)
    log_std = torch.rand(64, D, generator=g, dtype=torch.float64) - 1.0
    noise = torch.randn(64, D, generator=g, dtype=torch.float64).clamp(-2, 2)
    u = (mean + log_std.exp() * noise).clamp(-3, 3)
    noise = (u - mean) / log_std.exp()
    low = -torch.rand(D, dtype=torch.float64, generator=g) - 0.5
    high = torch.rand(D, dtype=torch.float64, generator=g) + 0.5
    got = squashed_gaussian_log_prob(noise, log_std, u, torch.log((high - low) / 2))
    want = _reference_log_prob(mean, log_std.exp(), u, low, high)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


def test_squashed_gaussian_density_integrates_to_one() -> None:
    # a numerical check independent of any library: the density over [low, high] = [-2, 2] sums to 1
    # (trapezoid rule on 200k points in the atanh coordinate: error far below 1e-4)
    mean, log_std = torch.tensor([[0.3]], dtype=torch.float64), torch.tensor([[-0.2]], dtype=torch.float64)
    u = torch.linspace(-12, 12, 200_001, dtype=torch.float64).unsqueeze(-1)
    noise = (u - mean) / log_std.exp()
    logp = squashed_gaussian_log_prob(
        noise, log_std.expand_as(u), u, torch.log(torch.tensor([2.0], dtype=torch.float64))
    )
    a = 2.0 * torch.tanh(u.squeeze(-1))
    assert abs(torch.trapezoid(logp.exp(), a).item() - 1.0) < 1e-4


def test_actor_sample_is_the_reparameterised_squashed_gaussian() -> None:
    actor = SquashedGaussianActor(3, 2, (8,), torch.log(torch.tensor([2.0, 0.5])), dtype=torch.float64)
    obs = torch.randn(16, 3, dtype=torch.float64)
    noise = torch.randn(16, 2, dtype=torch.float64)
    a, logp = actor.sample(obs, noise)
    mean, log_std = actor(obs)
    u = mean + log_std.exp() * noise
    torch.testing.assert_close(a, torch.tanh(u), rtol=0, atol=1e-12)
    low, high = torch.tensor([-2.0, -0.5], dtype=torch.float64), torch.tensor([2.0, 0.5], dtype=torch.float64)
    torch.testing.assert_close(
        logp, _reference_log_prob(mean, log_std.exp(), u, low, high), rtol=1e-7, atol=1e-7
    )
    assert bool((log_std >= -5).all() and (log_std <= 2).all())


def test_sac_tunes_alpha_and_steps_the_actor_every_policy_frequency() -> None:
    agent = _agent("sac")
    _fill(agent, 8)
    actor0 = [p.clone() for p in agent.actor.parameters()]
    first = agent.update()  # update 0: critics, then policy_frequency=2 actor and alpha steps
    assert {"losses/qf_loss", "losses/actor_loss", "losses/alpha", "losses/alpha_loss"} <= first.keys()
    assert all(v.dtype == torch.float32 and v.dim() == 0 for v in first.values())
    assert float(agent.alpha()) != 1.0  # log_alpha started at 0 and moved
    actor1 = [p.clone() for p in agent.actor.parameters()]
    assert any(not torch.equal(a, b) for a, b in zip(actor0, actor1, strict=True))
    second = agent.update()  # update 1: critics only
    assert "losses/actor_loss" not in second
    assert all(torch.equal(a, b) for a, b in zip(actor1, agent.actor.parameters(), strict=True))
    fixed = _agent("sac", autotune=False, alpha=0.3)
    _fill(fixed, 8)
    assert "losses/alpha_loss" not in fixed.update() and fixed.alpha_optimizer is None
    assert math.isclose(float(fixed.alpha()), 0.3, rel_tol=1e-6)


def test_td3_moves_the_actor_and_the_targets_only_on_delayed_updates() -> None:
    agent = _agent("td3")
    _fill(agent, 8)
    assert "losses/actor_loss" in agent.update()  # update 0
    targets = [p.clone() for p in (*agent.actor_target.parameters(), *agent.critic_target.parameters())]
    assert "losses/actor_loss" not in agent.update()  # update 1: critics only
    now = [*agent.actor_target.parameters(), *agent.critic_target.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(targets, now, strict=True))
    agent.update()  # update 2: the targets move by tau
    now = [*agent.actor_target.parameters(), *agent.critic_target.parameters()]
    assert any(not torch.equal(a, b) for a, b in zip(targets, now, strict=True))


@pytest.mark.parametrize("name", list(AGENTS))
def test_input_errors_are_one_line_and_name_the_entry(name: str) -> None:
    agent = _agent(name)
    owner = AGENTS[name].__name__
    ok, f = torch.zeros(2, 3), torch.zeros(2, dtype=torch.bool)
    bad = ok.clone()
    bad[1, 2] = float("nan")
    with pytest.raises(ValueError, match=rf"^{owner}.act: obs\[1, 2\] = nan is not finite$"):
        agent.act(bad)
    a = torch.tensor([[0.0, 0.1], [0.0, 0.1]])
    with pytest.raises(ValueError, match=rf"^{owner}.observe: reward\[0\] = inf is not finite$"):
        agent.observe(ok, a, torch.tensor([float("inf"), 0.0]), ok, f, f)
    with pytest.raises(ValueError, match=rf"^{owner}.observe: action\[1, 1\] = 0.75 is outside the bounds"):
        agent.observe(ok, torch.tensor([[0.0, 0.1], [0.0, 0.75]]), torch.zeros(2), ok, f, f)
    with pytest.raises(ValueError, match=rf"^{owner}.observe: action has shape \(2, 3\), expected \(2, 2\)"):
        agent.observe(ok, torch.zeros(2, 3), torch.zeros(2), ok, f, f)
    assert len(agent.buffer) == 0  # nothing was stored
    with pytest.raises(RuntimeError, match="fewer than batch_size=8"):
        agent.update()


@pytest.mark.parametrize("name", list(AGENTS))
def test_spaces_the_family_cannot_drive_are_refused(name: str) -> None:
    cfg = preset(name, **TINY)
    with pytest.raises(ValueError, match="needs a Box action space"):
        AGENTS[name](OBS, gym.spaces.Discrete(3), cfg)
    with pytest.raises(ValueError, match="needs finite bounds"):
        AGENTS[name](OBS, gym.spaces.Box(-np.inf, np.inf, (2,)), cfg)
    with pytest.raises(TypeError, match="config must be a"):
        AGENTS[name](OBS, BOX, SACConfig() if name == "td3" else TD3Config())


def test_configs_check_their_fields() -> None:
    with pytest.raises(ValueError, match="tau"):
        SACConfig(tau=0.0)
    with pytest.raises(ValueError, match="log_std_max"):
        SACConfig(log_std_min=1.0, log_std_max=0.0)
    with pytest.raises(ValueError, match="noise_clip"):
        TD3Config(noise_clip=-1.0)
    with pytest.raises(ValueError, match="buffer_size"):
        TD3Config(buffer_size=4, batch_size=8)


def test_presets_carry_the_cleanrl_defaults_and_run_on_pendulum() -> None:
    sac, td3 = get_agent("sac"), get_agent("td3")
    assert sac.config == _DEFAULT_CONFIG and {p.name for p in PRESETS} == {"sac", "td3", "sac-portfolio"}
    s = sac.config
    assert (s.learning_starts, s.batch_size, s.buffer_size, s.gamma, s.tau) == (
        5_000,
        256,
        1_000_000,
        0.99,
        0.005,
    )
    assert (s.policy_lr, s.q_lr, s.policy_frequency, s.target_network_frequency) == (3e-4, 1e-3, 2, 1)
    assert s.hidden == (256, 256) and s.autotune
    t = td3.config
    assert (t.lr, t.exploration_noise, t.policy_noise, t.noise_clip, t.policy_frequency) == (
        3e-4,
        0.1,
        0.2,
        0.5,
        2,
    )
    assert TD3Config().learning_starts == 25_000 and t.learning_starts == 5_000
    assert "learning_starts 5000" in td3.description
    assert sac.default_env == td3.default_env == "Pendulum-v1"


@pytest.mark.parametrize("name", list(AGENTS))
def test_save_and_load_restore_the_agent_exactly(name: str, tmp_path) -> None:
    agent = _agent(name)
    _fill(agent, 8)
    agent.update()
    agent.save(tmp_path / "a.safetensors")
    again = AGENTS[name].load(tmp_path / "a.safetensors")
    obs = torch.rand(2, 3)
    # exact: the same weights and generator state act and learn identically
    assert torch.equal(agent.act(obs), again.act(obs))
    m1, m2 = agent.update(), again.update()
    assert m1.keys() == m2.keys() and all(torch.equal(m1[k], m2[k]) for k in m1)
    other = "td3" if name == "sac" else "sac"
    with pytest.raises(CheckpointError, match=f"not a {other!r} agent"):
        AGENTS[other].load(tmp_path / "a.safetensors")


@pytest.mark.parametrize("name", list(AGENTS))
def test_bf16_parts_keep_f32_masters(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONRL_DTYPE", "bf16")
    training_dtype.cache_clear()
    try:
        agent = _agent(name)
        _fill(agent, 8)
        metrics = agent.update()
        agent.update()
        agent.update()
    finally:
        monkeypatch.undo()
        training_dtype.cache_clear()
    assert {p.dtype for p in (*agent.actor.parameters(), *agent.critic.parameters())} == {torch.bfloat16}
    assert agent.buffer.sample(4).obs.dtype == torch.bfloat16
    assert all(v.dtype == torch.float32 for v in metrics.values())
    for opt, _ in agent._optimizers().values():
        assert {m.dtype for m in opt.masters} == {torch.float32}
    for target, _, masters, _ in agent._targets().values():
        assert masters is not None and {m.dtype for m in masters} == {torch.float32}
        # the bf16 target is the rounded f32 master
        assert all(
            torch.equal(p, m.to(torch.bfloat16)) for p, m in zip(target.parameters(), masters, strict=True)
        )
    if name == "sac":
        assert agent.log_alpha.value.dtype == torch.float32  # a loss coefficient, f32 on purpose


@pytest.mark.parametrize("name", list(AGENTS))
def test_cli_trains_on_pendulum_by_default(name: str, tmp_path, capsys) -> None:
    run = tmp_path / "run"
    code = cli_main(
        [
            "train", "--no-progress", "--no-tensorboard", "--agent", name, "--steps", "80",
            "--run-dir", str(run),
            "--set", "learning_starts=40", "--set", "batch_size=16", "--set", "buffer_size=200",
            "--set", "hidden=16", "--eval-every", "0", "--eval-episodes", "1", "--log-every", "40",
        ]
    )  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err
    assert f"{name} on Pendulum-v1: 80 steps" in out.out
    assert "losses/qf_loss" in (run / "metrics.csv").read_text().splitlines()[0]


def test_configs_round_trip() -> None:
    for cfg in (preset("sac"), preset("td3"), dataclasses.replace(preset("sac"), hidden=(8,))):
        assert type(cfg).from_dict(cfg.to_dict()) == cfg
