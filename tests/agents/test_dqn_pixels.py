"""The DQN family on image observations: the pixel presets, the frame replay behind the agent,
the one conversion of bytes at ``act``, and a MinAtar learning test (docs/pages/pixels.md)."""

from __future__ import annotations

import csv
import time

import numpy as np
import pytest
import torch

pytest.importorskip("gymnasium", reason="gymnasium is missing (benchmarks/fetch-wheels.sh brings it)")

import gymnasium as gym
from tritonrl.agents.dqn import PIXEL_PRESETS, DQNAgent, preset
from tritonrl.agents.nets.conv import ConvTorso
from tritonrl.toolkit.replay import FrameReplayBuffer, PrioritizedFrameReplayBuffer

MINATAR = gym.spaces.Box(0, 1, (4, 10, 10), np.uint8)  # MinAtar Breakout's four channels
ATARI = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)  # four stacked 84x84 frames
ACT = gym.spaces.Discrete(3)
SMALL = {"buffer_size": 400, "learning_starts": 0, "batch_size": 8}


def _space(name: str) -> gym.spaces.Box:
    return ATARI if name.endswith("-atari") else MINATAR


def _fill(agent: DQNAgent, steps: int, rng: np.random.Generator) -> None:
    space = agent.observation_space
    high = int(space.high.max())
    obs = rng.integers(0, high + 1, (agent.num_envs, *space.shape), dtype=np.uint8)
    for t in range(steps):
        nxt = rng.integers(0, high + 1, obs.shape, dtype=np.uint8)
        done = np.full(agent.num_envs, t % 13 == 12)
        action = agent.act(torch.from_numpy(obs))
        agent.observe(obs, action, np.ones(agent.num_envs, np.float32), nxt, done, np.zeros_like(done))
        obs = nxt


@pytest.mark.parametrize("name", [p.name for p in PIXEL_PRESETS])
def test_every_pixel_preset_builds_acts_and_learns(name: str) -> None:
    agent = DQNAgent(_space(name), ACT, preset(name, **SMALL), num_envs=2, seed=0)
    cfg = agent.config
    assert isinstance(agent.online.torso, ConvTorso) and agent.online.torso.kind == cfg.torso
    assert isinstance(agent.buffer, FrameReplayBuffer)
    assert isinstance(agent.buffer, PrioritizedFrameReplayBuffer) == cfg.prioritized
    assert agent.buffer.stack == cfg.frame_stack
    assert agent.pixel_scale == (1 / 255 if name.endswith("-atari") else 1.0)
    _fill(agent, 30, np.random.default_rng(0))
    before = [p.detach().clone() for p in agent.online.parameters()]
    metrics = agent.update()
    assert torch.isfinite(metrics["losses/td_loss"])
    assert any(not torch.equal(b, p) for b, p in zip(before, agent.online.parameters(), strict=True))


def test_published_settings() -> None:
    atari, rainbow = preset("dqn-atari"), preset("rainbow-atari")
    # CleanRL dqn_atari.py: a target copy every 1,000 env steps = 250 updates at one per 4 steps
    assert (atari.lr, atari.buffer_size, atari.batch_size, atari.learning_starts) == (
        1e-4,
        1_000_000,
        32,
        80_000,
    )
    assert atari.target_update_every * atari.train_freq == 1_000 and atari.loss == "mse"
    assert (rainbow.lr, rainbow.adam_eps, rainbow.n_step, rainbow.per_alpha) == (6.25e-5, 1.5e-4, 3, 0.5)
    assert rainbow.double and rainbow.dueling and rainbow.noisy and rainbow.distribution == "c51"
    minatar = preset("dqn-minatar")
    assert (minatar.buffer_size, minatar.train_freq, minatar.target_update_every) == (100_000, 1, 1_000)
    assert (minatar.eps_end, minatar.eps_decay_steps, minatar.learning_starts) == (0.1, 100_000, 5_000)


def test_no_gradient_clip_computes_no_norm_and_an_old_bound_still_loads(tmp_path) -> None:
    # CleanRL's dqn_atari.py and Young & Tian do not clip; Rainbow clips at 10
    assert preset("dqn-atari").max_grad_norm is preset("dqn-minatar").max_grad_norm is None
    assert preset("rainbow-atari").max_grad_norm == 10.0
    off = DQNAgent(MINATAR, ACT, preset("dqn-minatar", **SMALL), num_envs=2, seed=0)
    on = DQNAgent(MINATAR, ACT, preset("dqn-minatar", max_grad_norm=1e9, **SMALL), num_envs=2, seed=0)
    for agent in (off, on):
        _fill(agent, 30, np.random.default_rng(0))
    m_off, m_on = off.update(), on.update()
    assert "losses/grad_norm" not in m_off and float(m_on["losses/grad_norm"]) > 0  # none computed
    # a bound no gradient reaches scales by exactly 1: the same step, within f32 rounding
    for a, b in zip(off.online.parameters(), on.online.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    # a checkpoint of a run with the old "no clip" bound (1e9) loads, and a resume may drop it
    on.save(tmp_path / "a.safetensors")
    loaded = DQNAgent.load(tmp_path / "a.safetensors")
    assert loaded.config.max_grad_norm == 1e9
    loaded.load_state_dict(on.state_dict())
    off.load_state_dict(on.state_dict())  # max_grad_norm is resumable: 1e9 -> None is allowed
    assert off.config.max_grad_norm is None
    assert "losses/grad_norm" not in off.update()


def test_act_converts_the_bytes_once_and_matches_q_values_of_scaled_floats() -> None:
    agent = DQNAgent(ATARI, ACT, preset("dqn-atari", **SMALL), num_envs=3, seed=0)
    obs = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    q = agent.q_values(obs)
    with torch.no_grad():
        want = agent.online(obs.float() / 255)
    # the same network on x * (1/255) against x / 255: one rounding apart per input
    torch.testing.assert_close(q, want, rtol=1e-5, atol=1e-6)
    assert torch.equal(agent.act(obs, explore=False), q.argmax(-1))  # exact: the same forward


def test_image_observations_must_be_bytes_and_icm_is_refused() -> None:
    agent = DQNAgent(MINATAR, ACT, preset("dqn-minatar", **SMALL), num_envs=2, seed=0)
    with pytest.raises(TypeError, match="image obs must be uint8"):
        agent.act(torch.zeros(2, 4, 10, 10))
    with pytest.raises(TypeError, match=r"^DQNAgent\.observe: image obs must be uint8"):
        z = np.zeros((2, 4, 10, 10), np.float32)
        agent.observe(
            z, torch.zeros(2, dtype=torch.int64), np.zeros(2, np.float32), z, *[np.zeros(2, bool)] * 2
        )
    with pytest.raises(ValueError, match="icm=True is not available with image observations"):
        DQNAgent(MINATAR, ACT, preset("dqn-minatar", icm=True, **SMALL), num_envs=2)
    with pytest.raises(ValueError, match="frame_stack=3 must divide the 4 channels"):
        DQNAgent(MINATAR, ACT, preset("dqn-minatar", frame_stack=3, **SMALL), num_envs=2)


def test_a_saved_pixel_agent_loads_and_samples_the_same(tmp_path) -> None:
    agent = DQNAgent(MINATAR, ACT, preset("rainbow-minatar", **SMALL), num_envs=2, seed=0)
    _fill(agent, 40, np.random.default_rng(1))
    agent.update()
    agent.save(tmp_path / "a.safetensors")
    loaded = DQNAgent.load(tmp_path / "a.safetensors")
    g0, g1 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    a, b = agent.buffer.sample(8, generator=g0), loaded.buffer.sample(8, generator=g1)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y)  # exact: the same storage, sampled with the same draws
    obs = torch.randint(0, 2, (2, 4, 10, 10), dtype=torch.uint8)
    assert torch.equal(agent.q_values(obs), loaded.q_values(obs))  # exact: the same weights


@pytest.mark.learning
def test_minatar_breakout_beats_a_random_policy() -> None:
    """dqn-minatar on MinAtar Breakout for 30k steps (one update per 4 steps, epsilon over 15k):
    the greedy evaluation beats the random policy's 0.39 (20,000 random steps, 2,007 episodes)
    by more than 3x. Seed 1: evaluations 0.1, 2.1, 3.3 at 10k, 20k, 30k steps (~35 s)."""
    pytest.importorskip("minatar", reason='MinAtar is missing: pip install "tritonrl[minatar]"')
    from tritonrl.toolkit.envs.vector import make_vec_env
    from tritonrl.toolkit.training.loop import LoopConfig, run_training
    from tritonrl.toolkit.training.offpolicy import schedule_for

    torch.set_num_threads(1)
    env = make_vec_env("MinAtar/Breakout-v1", 1, seed=1)
    cfg = preset(
        "dqn-minatar", learning_starts=1_000, train_freq=4, eps_decay_steps=15_000, buffer_size=30_000
    )
    agent = DQNAgent(env.single_observation_space, env.single_action_space, cfg, num_envs=1, seed=1)
    t0 = time.perf_counter()
    summary = run_training(
        agent,
        env,
        schedule_for(agent),
        LoopConfig(
            total_steps=30_000, seed=1, eval_every=10_000, eval_episodes=10, plot=False, tensorboard=False
        ),
    )
    evals = [round(r, 2) for _, r in summary["evaluations"]]
    print(
        f"\n[learning] dqn-minatar Breakout seed=1, one torch thread: evaluations {evals}, "
        f"{time.perf_counter() - t0:.1f} s"
    )
    assert max(r for _, r in summary["evaluations"]) >= 1.5, evals


def _atari_run(run_dir, **kw):
    from tritonrl.toolkit.envs.vector import make_vec_env
    from tritonrl.toolkit.training.loop import LoopConfig, run_training
    from tritonrl.toolkit.training.offpolicy import schedule_for

    env = make_vec_env("ALE/Breakout-v5", 1, seed=2)
    cfg = preset("dqn-atari", learning_starts=200, buffer_size=2_000, eps_decay_steps=400)
    agent = DQNAgent(env.single_observation_space, env.single_action_space, cfg, num_envs=1, seed=2)
    loop = LoopConfig(
        total_steps=700,
        seed=2,
        run_dir=str(run_dir),
        log_every=100,
        eval_every=0,
        eval_episodes=1,
        checkpoint_every=200,
        plot=False,
        tensorboard=False,
        **kw,
    )
    try:
        return agent, run_training(agent, env, schedule_for(agent), loop)
    finally:
        env.close()


def test_atari_smoke_run_checkpoints_and_resumes_exactly(tmp_path) -> None:
    """dqn-atari on Breakout for 700 steps (updates from step 200), stopped at 500 and resumed from
    its checkpoint at 400: the same weights, counters and metric rows as the run that never
    stopped (the emulator's state, the frame replay and the generators are in the checkpoint)."""
    pytest.importorskip("ale_py", reason='ale-py is missing: pip install "tritonrl[atari]"')
    pytest.importorskip("cv2", reason='opencv is missing: pip install "tritonrl[atari]"')
    torch.set_num_threads(1)
    full_agent, full = _atari_run(tmp_path / "full")
    _, stopped = _atari_run(tmp_path / "split", stop_at=500)
    assert stopped["interrupted"] and stopped["global_step"] == 500
    torch.manual_seed(123)  # disturb the global RNGs between the stop and the resume
    agent, resumed = _atari_run(tmp_path / "split", resume=True)
    assert resumed["global_step"] == full["global_step"] == 700
    assert agent.updates == full_agent.updates > 100
    for a, b in zip(full_agent.online.parameters(), agent.online.parameters(), strict=True):
        assert torch.equal(a, b)  # exact: the same computation replayed from the checkpoint
    rows = []
    for d in ("full", "split"):
        with open(tmp_path / d / "metrics.csv", newline="") as f:
            rows.append([{k: v for k, v in r.items() if k != "charts/SPS"} for r in csv.DictReader(f)])
    assert rows[0] == rows[1] and any(r.get("losses/td_loss") for r in rows[0])  # every column but SPS
    assert resumed["evaluations"] == full["evaluations"]


@pytest.mark.parametrize("name", ["dqn-minatar", "rainbow-minatar"])
def test_bf16_pixel_agent_samples_and_learns_in_bf16(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONRL_DTYPE", "bf16")  # the training dtype of an Ampere GPU, on the CPU
    agent = DQNAgent(MINATAR, ACT, preset(name, **SMALL), num_envs=2, seed=0)
    assert agent.dtype == torch.bfloat16
    assert {p.dtype for p in agent.online.parameters()} == {torch.bfloat16}
    _fill(agent, 30, np.random.default_rng(2))
    batch = agent.buffer.sample(8, generator=torch.Generator().manual_seed(0))
    assert batch.obs.dtype == batch.next_obs.dtype == torch.bfloat16  # converted once, in the gather
    before = [p.detach().clone() for p in agent.online.parameters()]
    metrics = agent.update()
    assert metrics["losses/td_loss"].dtype == torch.float32 and torch.isfinite(metrics["losses/td_loss"])
    assert any(not torch.equal(b, p) for b, p in zip(before, agent.online.parameters(), strict=True))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["dqn-atari", "rainbow-atari"])
def test_pixel_update_on_cuda_runs_the_frame_kernel_in_the_training_dtype(name: str) -> None:
    from tritonrl.kernels.frame_stack.api import FRAME_STACK_SAMPLE

    agent = DQNAgent(
        ATARI, ACT, preset(name, buffer_size=2_000, learning_starts=0), num_envs=2, device="cuda"
    )
    _fill(agent, 200, np.random.default_rng(3))
    for _ in range(3):
        metrics = agent.update()
    assert FRAME_STACK_SAMPLE.last_backend == "triton"
    assert torch.isfinite(metrics["losses/td_loss"]).item()
    assert {p.dtype for p in agent.online.parameters()} == {agent.dtype}
    batch = agent.buffer.sample(32)
    assert batch.obs.dtype == agent.dtype and batch.obs.device.type == "cuda"
