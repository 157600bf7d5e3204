"""The DQN agent as a plain object: presets, acting, updates, dtypes, checkpoints, bad input."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

import gymnasium as gym
from tritonrl.agents.dqn import PIXEL_PRESETS, PRESETS, DQNAgent, DQNConfig, preset
from tritonrl.cli.registry import find_preset
from tritonrl.toolkit.checkpoint import CheckpointError, load_checkpoint, save_checkpoint

VECTOR_PRESETS = [p for p in PRESETS if p not in PIXEL_PRESETS]  # pixel presets: test_dqn_pixels.py
OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = gym.spaces.Discrete(2)
SMALL = {"torso_width": 32, "batch_size": 16, "buffer_size": 512, "learning_starts": 16}


def _fill(agent: DQNAgent, n: int, seed: int = 0) -> None:
    """``n`` vector steps of random transitions (terminations included)."""
    g = torch.Generator().manual_seed(seed)
    e = agent.num_envs
    shape = agent.obs_shape
    for _ in range(n):
        if agent.factored:
            a = torch.stack([torch.randint(k, (e,), generator=g) for k in agent.action["nvec"]], -1)
        else:
            a = torch.randint(agent.action["n"], (e,), generator=g)
        agent.observe(
            torch.randn(e, *shape, generator=g),
            a,
            torch.rand(e, generator=g),
            torch.randn(e, *shape, generator=g),
            torch.rand(e, generator=g) < 0.05,
            torch.rand(e, generator=g) < 0.02,
        )


def _agent(name: str, *, num_envs: int = 2, obs=OBS, act=ACT, seed: int = 0, **overrides) -> DQNAgent:
    return DQNAgent(obs, act, preset(name, **{**SMALL, **overrides}), num_envs=num_envs, seed=seed)


@pytest.mark.parametrize("name", [p.name for p in VECTOR_PRESETS])
def test_every_preset_acts_and_learns(name: str) -> None:
    agent = _agent(name)
    cfg = agent.config
    assert cfg.tags == (name,)
    obs = torch.randn(2, 4)
    a = agent.act(obs)
    assert a.shape == (2,) and a.dtype == torch.int64 and ((a >= 0) & (a < 2)).all()
    _fill(agent, 40)
    before = [p.detach().clone() for p in agent.online.parameters()]
    for _ in range(3):
        metrics = agent.update()
    assert metrics and all(v.dtype == torch.float32 and v.dim() == 0 for v in metrics.values())
    assert torch.isfinite(metrics["losses/td_loss"])
    assert any(not torch.equal(b, p) for b, p in zip(before, agent.online.parameters(), strict=True))
    assert agent.updates == 3


def test_rainbow_is_the_sum_of_its_parts() -> None:
    cfg = preset("rainbow")
    flags = (cfg.double, cfg.dueling, cfg.noisy, cfg.prioritized, cfg.distribution)
    assert flags == (True, True, True, True, "c51")
    assert cfg.n_step > 1
    assert preset("qrdqn").distribution == "qr" and preset("c51").distribution == "c51"
    assert not preset("dqn").double and preset("double").double


def test_presets_are_registered_as_offpolicy_agents() -> None:
    from tritonrl.cli.registry import get_agent

    for p in VECTOR_PRESETS:
        spec = get_agent(p.name)
        assert spec.kind == "offpolicy"
        agent = spec.build(
            OBS,
            ACT,
            num_envs=3,
            device="cpu",
            seed=1,
            total_steps=100,
            overrides={"lr": "1e-4", "n_step": "2"},
        )
        assert isinstance(agent, DQNAgent) and agent.config.lr == 1e-4 and agent.config.n_step == 2
        assert agent.num_envs == 3


@pytest.mark.parametrize("dtype_env,dtype", [("f32", torch.float32), ("bf16", torch.bfloat16)])
@pytest.mark.parametrize("name", ["dqn", "qrdqn", "rainbow"])
def test_parameters_and_replay_follow_the_training_dtype(monkeypatch, name, dtype_env, dtype) -> None:
    monkeypatch.setenv("TRITONRL_DTYPE", dtype_env)
    agent = _agent(name)
    assert agent.dtype == dtype
    assert all(p.dtype == dtype for p in agent.online.parameters())
    assert all(p.dtype == dtype for p in agent.target.parameters())
    _fill(agent, 20)
    batch = agent.buffer.sample(8)
    assert batch.obs.dtype == dtype and batch.reward.dtype == torch.float32
    metrics = agent.update()
    assert all(v.dtype == torch.float32 for v in metrics.values())
    # bf16: the optimizer keeps f32 master weights so small steps are not rounded away
    assert agent.optimizer.has_masters == (dtype == torch.bfloat16)


def test_bf16_small_updates_accumulate(monkeypatch) -> None:
    # lr 1e-6: each Adam step (~1e-6) is far below half a bf16 ulp of weights of size ~0.1 (~2e-4).
    # Plain bf16 Adam would leave the weights unchanged; the masters accumulate the steps, and after
    # 300 updates (~3e-4 of drift) the rounded bf16 weights must have moved.
    monkeypatch.setenv("TRITONRL_DTYPE", "bf16")
    agent = _agent("dqn", lr=1e-6, target_update_every=10_000)
    _fill(agent, 30)
    w0 = agent.online.torso.layers[0].weight.detach().clone()
    for _ in range(300):
        agent.update()
    w1 = agent.online.torso.layers[0].weight.detach()
    assert (w1 != w0).float().mean().item() > 0.05


def test_epsilon_schedule_and_noisy_exploration() -> None:
    agent = _agent("dqn", eps_start=1.0, eps_end=0.1, eps_decay_steps=100)
    assert agent.epsilon() == 1.0
    _fill(agent, 25)  # 50 env steps (2 envs)
    assert agent.epsilon() == pytest.approx(0.55)
    _fill(agent, 50)
    assert agent.epsilon() == pytest.approx(0.1)
    # with epsilon 1 the actions are uniform; greedy ones are constant for a fixed input
    agent = _agent("dqn", eps_start=1.0, eps_end=1.0, num_envs=256)  # act takes one row per env
    obs = torch.zeros(256, 4)
    acts = agent.act(obs)
    assert 0.35 < acts.float().mean().item() < 0.65  # 256 fair coins: 6 sigma is +-0.19
    assert agent.act(obs, explore=False).unique().numel() == 1
    noisy = _agent("noisy")
    assert noisy.epsilon() == 0.0
    greedy = [noisy.q_values(torch.ones(1, 4)) for _ in range(2)]
    torch.testing.assert_close(greedy[0], greedy[1])
    # noise changes the exploring Q values, and update() draws fresh noise
    explore0 = noisy.q_values(torch.ones(1, 4), explore=True)
    _fill(noisy, 20)
    noisy.update()
    assert not torch.equal(explore0, noisy.q_values(torch.ones(1, 4), explore=True))


@pytest.mark.parametrize("path", ["act", "acting_policy", "lagged_actor"])
@pytest.mark.parametrize("name", ["noisy", "rainbow"])
def test_noisy_exploration_draws_new_noise_every_step(name: str, path: str) -> None:
    """NoisyNet draws new noise for every action. With one draw per update, every step between
    updates (and all of them before the first) took the same action for one observation: a
    CartPole run that never explored. Before any update, acting on one observation 200 times must
    pick both actions, and a greedy act stays noise-free (one action)."""
    agent = _agent(name, num_envs=1)
    obs = torch.zeros(1, 4)
    policy = {"act": agent.act, "acting_policy": agent.acting_policy(), "lagged_actor": agent.lagged_actor()}
    acts = torch.cat([policy[path](obs) for _ in range(200)])
    assert acts.unique().numel() == 2  # a fixed draw gives one action 200 times
    assert torch.cat([agent.act(obs, explore=False) for _ in range(20)]).unique().numel() == 1


@pytest.mark.parametrize("num_envs", [1, 8])
def test_host_exploration_acts_as_the_tensor_path(num_envs: int) -> None:
    """A CPU agent's host exploration path (numpy select, greedy forward skipped when every
    environment explores) gives exactly the actions and generator states of the tensor path
    (``torch.where`` of ``rand < eps``) at every epsilon of the schedule, all-random, all-greedy
    and mixed steps included. Exact equality: the same draws, the same f32 comparison."""
    agents = [_agent("dqn", num_envs=num_envs, eps_decay_steps=200) for _ in range(2)]
    assert agents[0]._host_explore
    agents[1]._host_explore = False  # the path of an accelerator agent
    g = torch.Generator().manual_seed(3)
    mixed = 0
    for _ in range(300 // num_envs):
        obs = torch.randn(num_envs, 4, generator=g)
        greedy = agents[0].act(obs, explore=False)
        acts = [agent.act(obs) for agent in agents]
        assert torch.equal(acts[0], acts[1]) and acts[0].dtype == torch.int64
        assert torch.equal(agents[0].generator.get_state(), agents[1].generator.get_state())
        mixed += int(0 < int((acts[0] != greedy).sum()) < num_envs)
        for agent in agents:  # advance the epsilon schedule
            agent.env_steps += num_envs
    assert agents[0].epsilon() == pytest.approx(agents[0].config.eps_end)  # the schedule ran out
    if num_envs > 1:
        assert mixed > 0  # some steps mixed random and greedy actions


def test_many_cpu_environments_explore_through_the_tensor_path() -> None:
    # past HOST_EXPLORE_ENVS the per-env host path costs more than the two tensor ops; the
    # actions are the same either way (the test above), so only the choice is checked here
    from tritonrl.agents.dqn.agent import HOST_EXPLORE_ENVS

    assert _agent("dqn", num_envs=HOST_EXPLORE_ENVS)._host_explore
    assert not _agent("dqn", num_envs=HOST_EXPLORE_ENVS + 1)._host_explore


def test_target_updates_hard_and_polyak() -> None:
    agent = _agent("dqn", target_update_every=3)
    _fill(agent, 20)
    t0 = [p.detach().clone() for p in agent.target.parameters()]
    agent.update()
    agent.update()
    assert all(torch.equal(a, b) for a, b in zip(t0, agent.target.parameters(), strict=True))
    agent.update()  # third update: hard copy
    assert all(
        torch.equal(a, b) for a, b in zip(agent.online.parameters(), agent.target.parameters(), strict=True)
    )
    polyak = _agent("dqn", target_update_every=1, tau=0.25)
    _fill(polyak, 20)
    t0 = [p.detach().clone() for p in polyak.target.parameters()]
    polyak.update()
    for old, new, online in zip(t0, polyak.target.parameters(), polyak.online.parameters(), strict=True):
        torch.testing.assert_close(new, old + 0.25 * (online - old))


def test_polyak_in_bf16_averages_f32_copies(monkeypatch) -> None:
    # tau = 1e-3 moves a bf16 weight by less than half an ulp per call: direct bf16 averaging would
    # never move. Averaging f32 copies and rounding once must follow the f32 recursion
    # t_k = o + (1 - tau)^k (t_0 - o) to within one bf16 rounding.
    monkeypatch.setenv("TRITONRL_DTYPE", "bf16")
    agent = _agent("dqn", tau=1e-3, target_update_every=10**6)
    with torch.no_grad():
        for p in agent.online.parameters():
            p.add_(1.0)
        for m in agent.optimizer.masters:
            m.add_(1.0)
    t0 = [m.clone() for m in agent._target_master]
    for _ in range(200):
        agent.update_target()
    for t_start, t, o in zip(t0, agent.target.parameters(), agent.optimizer.masters, strict=True):
        expected = o + (1 - 1e-3) ** 200 * (t_start - o)
        torch.testing.assert_close(t.float(), expected, atol=0.0, rtol=2**-8)
        assert not torch.equal(t.float(), t_start.to(torch.bfloat16).float())


def test_multidiscrete_uses_the_branching_head() -> None:
    act = gym.spaces.MultiDiscrete([3, 2, 4])
    for name in ("dqn", "noisy", "dueling"):
        agent = _agent(name, act=act)
        a = agent.act(torch.randn(2, 4))
        assert a.shape == (2, 3) and a.dtype == torch.int64
        assert (a < torch.tensor([3, 2, 4])).all() and (a >= 0).all()
        _fill(agent, 20)
        assert torch.isfinite(agent.update()["losses/td_loss"])
    with pytest.raises(ValueError, match="distribution='c51'"):
        _agent("c51", act=act)


@pytest.mark.parametrize("torso", ["resmlp", "attention"])
def test_torso_options(torso: str) -> None:
    obs = gym.spaces.Box(-np.inf, np.inf, (3, 2), np.float32)  # a history of 3 observations of 2
    agent = _agent("rainbow", obs=obs, torso=torso, torso_norm="rmsnorm", spectral_norm=True, torso_depth=1)
    assert agent.act(torch.randn(2, 3, 2)).shape == (2,)
    _fill(agent, 20)
    assert torch.isfinite(agent.update()["losses/td_loss"])


def test_icm_adds_intrinsic_reward_at_ingestion() -> None:
    agent = _agent("dqn", icm=True, extrinsic_coef=0.0, icm_eta=5.0, n_step=3)
    _fill(agent, 30)
    rewards = agent.buffer.sample(32).reward
    assert (rewards > 0).all()  # extrinsic rewards are ignored, curiosity is positive
    icm_batch = agent.icm_buffer.sample(8)
    assert icm_batch.discount.max().item() <= agent.config.gamma + 1e-6  # one-step transitions
    metrics = agent.update()
    assert {"losses/icm_inverse", "losses/icm_forward"} <= set(metrics)
    assert all(p.grad is not None for p in agent.icm_module.parameters())


def _resume_matches(tmp_path, name: str, **overrides) -> None:
    a = _agent(name, **overrides)
    _fill(a, 30)
    for _ in range(4):
        a.update()
    a.save(tmp_path / "a.safetensors")
    b = DQNAgent.load(tmp_path / "a.safetensors")
    assert b.config == a.config and b.env_steps == a.env_steps and b.updates == a.updates
    obs = torch.randn(5, 4)
    # exact: the same weights after a round trip
    torch.testing.assert_close(a.q_values(obs), b.q_values(obs), atol=0, rtol=0)
    # the same future: identical data, identical updates, identical weights and exploration
    _fill(a, 10, seed=9)
    _fill(b, 10, seed=9)
    for _ in range(3):
        ma, mb = a.update(), b.update()
        assert torch.equal(ma["losses/td_loss"], mb["losses/td_loss"])
    for pa, pb in zip(a.online.parameters(), b.online.parameters(), strict=True):
        assert torch.equal(pa, pb)
    assert torch.equal(a.act(obs[: a.num_envs]), b.act(obs[: b.num_envs]))


@pytest.mark.parametrize("name", ["dqn", "rainbow", "qrdqn"])
def test_save_load_resumes_exactly(tmp_path, name: str) -> None:
    _resume_matches(tmp_path, name)


def test_save_load_resumes_exactly_with_icm_and_polyak(tmp_path) -> None:
    _resume_matches(tmp_path, "noisy", icm=True, tau=0.1, target_update_every=1)


def test_save_load_resumes_exactly_with_an_annealed_rate(tmp_path) -> None:
    _resume_matches(tmp_path, "dqn", lr_final=0.0, lr_decay_steps=100)


def test_learning_rate_anneals_linearly_then_holds() -> None:
    lr = 1e-3
    const = _agent("dqn", lr=lr)
    agent = _agent("dqn", lr=lr, lr_final=1e-4, lr_decay_steps=100)  # 2 envs: 2 env steps a vector step
    _fill(const, 20)
    _fill(agent, 20)  # 40 env steps
    assert agent.current_lr() == pytest.approx(lr + 0.4 * (1e-4 - lr), rel=1e-12)
    agent.update()
    const.update()
    assert agent.optimizer.param_groups[0]["lr"] == pytest.approx(6.4e-4, rel=1e-12)
    assert const.current_lr() == lr and const.optimizer.param_groups[0]["lr"] == lr  # None: constant
    _fill(agent, 60)  # 160 env steps: past lr_decay_steps, held at lr_final
    agent.update()
    assert agent.optimizer.param_groups[0]["lr"] == pytest.approx(1e-4, rel=1e-12)
    with pytest.raises(ValueError, match="lr_decay_steps"):
        preset("dqn", lr_final=0.0, lr_decay_steps=0)


def test_checkpoint_loads_across_dtypes(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TRITONRL_DTYPE", "bf16")
    a = _agent("rainbow")
    _fill(a, 20)
    a.update()
    a.save(tmp_path / "bf16.safetensors")
    monkeypatch.setenv("TRITONRL_DTYPE", "f32")
    from tritonrl.toolkit.precision import training_dtype

    training_dtype.cache_clear()
    b = DQNAgent.load(tmp_path / "bf16.safetensors")
    assert all(p.dtype == torch.float32 for p in b.online.parameters())
    # the f32 parameters take the exact f32 master weights saved with the bf16 run
    for master, pa, pb in zip(a.optimizer.masters, a.online.parameters(), b.online.parameters(), strict=True):
        assert torch.equal(master, pb)
        assert torch.equal(pa, pb.to(torch.bfloat16))
    assert b.buffer.sample(4).obs.dtype == torch.float32
    b.update()


def test_mismatched_checkpoints_are_refused_untouched(tmp_path) -> None:
    a = _agent("dqn")
    path = tmp_path / "a.safetensors"
    a.save(path)
    state = load_checkpoint(path)
    other_obs = gym.spaces.Box(-np.inf, np.inf, (5,), np.float32)
    b = _agent("dqn", obs=other_obs)
    before = [p.detach().clone() for p in b.online.parameters()]
    with pytest.raises(CheckpointError, match="observation shape"):
        b.load_state_dict(state)
    assert all(torch.equal(x, y) for x, y in zip(before, b.online.parameters(), strict=True))
    with pytest.raises(CheckpointError, match="action space"):
        _agent("dqn", act=gym.spaces.Discrete(3)).load_state_dict(state)
    with pytest.raises(CheckpointError, match="does not match|shape"):
        _agent("dueling").load_state_dict(state)
    save_checkpoint(tmp_path / "ppo.safetensors", {"agent": "ppo", "config": {}})
    with pytest.raises(CheckpointError, match="'ppo' agent"):
        DQNAgent.load(tmp_path / "ppo.safetensors")


def test_replay_that_does_not_fit_is_refused_before_anything_changes(tmp_path) -> None:
    # A checkpoint whose replay buffer (or ICM replay) has another configuration must be refused as
    # a CheckpointError (one clear line through the CLI) while the agent is still untouched.
    a = _agent("rainbow")
    _fill(a, 20)
    a.update()
    a.save(tmp_path / "a.safetensors")
    state = load_checkpoint(tmp_path / "a.safetensors")
    for kind, overrides in (
        ("rainbow", {"buffer_size": 256}),
        ("rainbow", {"per_alpha": 0.5}),
        ("rainbow", {"n_step": 2}),
    ):
        b = _agent(kind, seed=1, **overrides)
        _fill(b, 20, seed=4)
        b.update()
        before = [t.detach().clone() for t in (*b.online.parameters(), *b.optimizer.masters)]
        moments = {k: v.clone() for k, v in b.optimizer.optimizer.state_dict()["state"][0].items()}
        replay = b.buffer.sample(4, generator=torch.Generator().manual_seed(0))
        counters = (b.env_steps, b.updates)
        with pytest.raises(CheckpointError, match="another configuration"):
            b.load_state_dict(state)
        after = [*b.online.parameters(), *b.optimizer.masters]
        assert all(torch.equal(x, y) for x, y in zip(before, after, strict=True)), overrides
        for k, v in b.optimizer.optimizer.state_dict()["state"][0].items():
            assert torch.equal(v, moments[k])
        again = b.buffer.sample(4, generator=torch.Generator().manual_seed(0))
        assert torch.equal(replay.obs, again.obs) and (b.env_steps, b.updates) == counters
    icm = _agent("dqn", icm=True)
    _fill(icm, 20)
    icm_state = icm.state_dict()
    icm_state["icm_replay"] = _agent("dqn", icm=True, buffer_size=256).icm_buffer.state_dict()
    b = _agent("dqn", icm=True, seed=1)
    before = [p.detach().clone() for p in b.online.parameters()]
    with pytest.raises(CheckpointError, match="another configuration"):
        b.load_state_dict(icm_state)
    assert all(torch.equal(x, y) for x, y in zip(before, b.online.parameters(), strict=True))


def test_generator_state_of_another_device_type_is_reseeded(tmp_path) -> None:
    # A CUDA generator's state (16 bytes: seed and offset) cannot go into a CPU generator and the
    # other way round; a checkpoint moved between CPU and GPU must still load (design: checkpoints
    # cross devices), with a deterministic reseed of the agent's generator.
    a = _agent("dqn")
    _fill(a, 20)
    a.update()
    state = a.state_dict()
    state["generator"] = torch.zeros(16, dtype=torch.uint8)  # the shape of a CUDA generator state
    b, c = _agent("dqn", seed=0), _agent("dqn", seed=0)
    b.load_state_dict(state)
    c.load_state_dict(state)
    assert b.updates == a.updates and b.env_steps == a.env_steps
    assert torch.equal(b.generator.get_state(), c.generator.get_state())
    for pa, pb in zip(a.online.parameters(), b.online.parameters(), strict=True):
        assert torch.equal(pa, pb)


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="action_space=Box"):
        DQNAgent(OBS, gym.spaces.Box(-1, 1, (2,)))
    with pytest.raises(ValueError, match="unknown DQN preset 'rainbo'"):
        preset("rainbo")
    with pytest.raises(ValueError, match="unknown config key 'lrr'"):
        find_preset(PRESETS, "dqn").build(OBS, ACT, overrides={"lrr": "1"})
    with pytest.raises(ValueError, match="distribution='c52'"):
        DQNConfig(distribution="c52")
    with pytest.raises(ValueError, match="v_max"):
        dataclasses.replace(preset("c51"), v_min=1.0, v_max=0.0)
    with pytest.raises(TypeError, match="DQNConfig"):
        DQNAgent(OBS, ACT, {"lr": 1.0})
    agent = _agent("dqn")
    with pytest.raises(ValueError, match=r"obs has shape \(2, 3\)"):
        agent.act(torch.zeros(2, 3))
    with pytest.raises(RuntimeError, match="fewer than batch_size"):
        agent.update()


@pytest.mark.parametrize("double", [False, True])
def test_update_bootstraps_as_the_config_says(double: bool) -> None:
    # One step, two transitions: env 0 truncated (bootstraps from its final obs at gamma), env 1
    # terminated (no bootstrap). The target's head is the online head negated (Q_target = -Q_online),
    # so the online argmax (double) and the target argmax (plain) differ in every row.
    agent = _agent("dqn", double=double, batch_size=2, target_update_every=1000)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in agent.target.head.parameters():
            p.neg_()
    obs, next_obs = torch.randn(2, 4, generator=g), torch.randn(2, 4, generator=g)
    action, reward = torch.tensor([1, 0]), torch.tensor([-1.0, -1.0])
    agent.observe(obs, action, reward, next_obs, torch.tensor([False, True]), torch.tensor([True, False]))
    draw = torch.Generator()
    draw.set_state(agent.generator.get_state())
    batch = agent.buffer.sample(2, generator=draw)  # the batch update() samples next
    assert sorted(batch.action.tolist()) == [0, 1]  # both transitions in it
    with torch.no_grad():
        q_sa = agent.online(batch.obs).gather(1, batch.action[:, None])[:, 0]
        q_t, q_o = agent.target(batch.next_obs), agent.online(batch.next_obs)
    select = (q_o if double else q_t).argmax(1)
    assert (q_o.argmax(1) != q_t.argmax(1)).all()  # the two rules differ in every row
    gamma = torch.where(batch.action == 1, 0.99, 0.0)  # action 1 was the truncated env's
    y = torch.tensor(-1.0) + gamma * q_t.gather(1, select[:, None])[:, 0]
    expected = torch.nn.functional.huber_loss(q_sa, y)
    # f32 forwards of the same weights on the same rows, summed in another order: a few ulps
    torch.testing.assert_close(agent.update()["losses/td_loss"], expected, rtol=1e-5, atol=1e-6)
