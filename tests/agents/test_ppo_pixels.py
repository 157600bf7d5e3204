"""PPO on image observations: the ``ppo-atari`` and ``ppo-minatar`` presets, the conv torso shared
by actor and critic, the one conversion of bytes where they enter, the refusals, and a MinAtar learning test
(docs/pages/pixels.md)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

pytest.importorskip("gymnasium", reason="gymnasium is missing (benchmarks/fetch-wheels.sh brings it)")

import gymnasium as gym
from tritonrl.agents.nets.actor_critic import ConvCore
from tritonrl.agents.nets.conv import ConvTorso
from tritonrl.agents.ppo import PIXEL_PRESETS, PRESETS, PPOAgent, PPOConfig, preset

ATARI = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)  # four stacked 84x84 frames
MINATAR = gym.spaces.Box(0, 1, (4, 10, 10), np.uint8)  # MinAtar Breakout's four channels
ACT = gym.spaces.Discrete(4)
SMALL = {"num_steps": 4, "num_minibatches": 2, "update_epochs": 2}


def _rollout(agent: PPOAgent, rng: np.random.Generator) -> None:
    """Fill the rollout with random frames (an episode ends every 3rd step, a truncation every 5th)."""
    space = agent.observation_space
    high = int(space.high.max())
    obs = rng.integers(0, high + 1, (agent.num_envs, *space.shape), dtype=np.uint8)
    for t in range(agent.config.num_steps):
        nxt = rng.integers(0, high + 1, obs.shape, dtype=np.uint8)
        action = agent.act(torch.from_numpy(obs))
        term = np.full(agent.num_envs, t % 3 == 2)
        trunc = np.full(agent.num_envs, t % 5 == 4)
        agent.observe(obs, action, np.ones(agent.num_envs, np.float32), nxt, term, trunc)
        obs = nxt


def test_the_atari_preset_builds_acts_collects_and_updates() -> None:
    agent = PPOAgent(ATARI, ACT, preset("ppo-atari", **SMALL), num_envs=2, seed=0)
    core = agent.net.core
    assert isinstance(core, ConvCore) and isinstance(core.torso, ConvTorso)
    assert core.torso.kind == "nature" and core.feature_dim == 512
    assert agent.pixel_scale == 1 / 255
    assert {p.dtype for p in agent.net.parameters()} == {agent.dtype} == {torch.float32}
    _rollout(agent, np.random.default_rng(0))
    # the rollout holds the converted frames, in the training dtype, scaled to [0, 1]
    obs = agent.buffer.obs
    assert obs.dtype == agent.dtype and tuple(obs.shape) == (4, 2, 4, 84, 84)
    assert 0.0 <= float(obs.min()) and float(obs.max()) <= 1.0 and float(obs.max()) > 0.9
    before = [p.detach().clone() for p in agent.net.parameters()]
    metrics = agent.update()
    assert all(torch.isfinite(v) for v in metrics.values()), metrics
    assert any(not torch.equal(b, p) for b, p in zip(before, agent.net.parameters(), strict=True))


@pytest.mark.parametrize("kind", ["minatar", "impala"])
def test_other_conv_torsos_and_a_gaussian_head_build_and_act(kind: str) -> None:
    box = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    for space, policy in ((ACT, "discrete"), (box, "continuous")):
        agent = PPOAgent(MINATAR, space, PPOConfig(policy=policy, torso=kind, **SMALL), num_envs=2)
        assert agent.net.core.torso.kind == kind and agent.pixel_scale == 1.0
        _rollout(agent, np.random.default_rng(1))
        assert torch.isfinite(agent.update()["losses/policy_loss"])


def test_published_settings() -> None:
    cfg = preset("ppo-atari")
    # CleanRL ppo_atari.py
    assert (cfg.policy, cfg.torso, cfg.num_steps, cfg.lr, cfg.anneal_lr) == (
        "discrete",
        "nature",
        128,
        2.5e-4,
        True,
    )
    assert (cfg.gamma, cfg.gae_lambda, cfg.num_minibatches, cfg.update_epochs) == (0.99, 0.95, 4, 4)
    assert (cfg.clip_coef, cfg.clip_vloss, cfg.ent_coef, cfg.vf_coef) == (0.1, True, 0.01, 0.5)
    assert (cfg.max_grad_norm, cfg.total_steps, cfg.norm_adv, cfg.target_kl) == (0.5, 10_000_000, True, None)
    spec, mini = PIXEL_PRESETS
    assert spec.name == "ppo-atari" and spec in PRESETS
    assert (spec.default_env, spec.default_num_envs, spec.steps_field) == (
        "ALE/Breakout-v5",
        8,
        "total_steps",
    )
    # ppo-minatar: ppo-atari's settings but the torso, the learning rate and the horizon
    assert mini.name == "ppo-minatar" and mini in PRESETS
    assert (mini.default_env, mini.default_num_envs, mini.default_steps) == (
        "MinAtar/Breakout-v1",
        8,
        5_000_000,
    )
    small = preset("ppo-minatar")
    assert (small.torso, small.lr, small.total_steps) == ("minatar", 1e-3, 5_000_000)
    assert replace(small, torso="nature", lr=2.5e-4, total_steps=10_000_000) == cfg


def test_the_shared_torso_is_initialised_as_cleanrl() -> None:
    agent = PPOAgent(ATARI, ACT, preset("ppo-atari", **SMALL), num_envs=1, seed=0)
    torso = agent.net.core.torso
    conv = torso.convs[0].weight.detach().reshape(32, -1)
    # orthogonal rows with gain sqrt(2): W W^T = 2 I (f32 rounding over 256 products)
    torch.testing.assert_close(conv @ conv.T, 2 * torch.eye(32), rtol=0, atol=1e-4)
    assert all(float(m.bias.detach().abs().max()) == 0 for m in torso.convs)  # exact: zero biases
    # the actor's logits orthogonal with gain 0.01, the critic with gain 1 (rows of norm 0.01 and 1)
    logits = agent.net.head.logits.weight.detach()
    torch.testing.assert_close(logits.norm(dim=1), torch.full((4,), 0.01), rtol=1e-4, atol=0)
    torch.testing.assert_close(agent.net.critic.weight.detach().norm(), torch.tensor(1.0), rtol=1e-4, atol=0)


def test_act_converts_the_bytes_once_and_matches_the_network_on_scaled_floats() -> None:
    agent = PPOAgent(ATARI, ACT, preset("ppo-atari", **SMALL), num_envs=3, seed=0)
    obs = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    action = agent.act(obs, explore=False)
    pending = agent._pending
    assert pending is not None and pending.x.dtype == agent.dtype
    with torch.no_grad():
        want = agent.net.act(obs.float() / 255, None, None, True)
    # x * (1/255) against x / 255: one f32 rounding apart per input, carried through the network
    torch.testing.assert_close(pending.x, obs.float() / 255, rtol=1e-6, atol=0)
    torch.testing.assert_close(pending.value, want[3], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(pending.logprob, want[2], rtol=1e-5, atol=1e-6)
    assert torch.equal(action, want[0])  # exact: greedy argmax of logits 1e-6 apart, no ties here


def test_bf16_parameters_and_f32_losses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONRL_DTYPE", "bf16")  # the training dtype of an Ampere GPU, on the CPU
    agent = PPOAgent(ATARI, ACT, preset("ppo-atari", **SMALL), num_envs=2, seed=0)
    assert agent.dtype == torch.bfloat16
    assert {p.dtype for p in agent.net.parameters()} == {torch.bfloat16}
    _rollout(agent, np.random.default_rng(2))
    assert agent.buffer.obs.dtype == torch.bfloat16  # converted once, where the bytes entered
    assert agent.buffer.values.dtype == agent.buffer.logprobs.dtype == torch.float32
    before = [p.detach().clone() for p in agent.net.parameters()]
    metrics = agent.update()
    for key in ("losses/policy_loss", "losses/value_loss", "losses/entropy"):
        assert metrics[key].dtype == torch.float32 and torch.isfinite(metrics[key]), key
    assert any(not torch.equal(b, p) for b, p in zip(before, agent.net.parameters(), strict=True))


def test_image_observations_must_be_bytes() -> None:
    agent = PPOAgent(MINATAR, ACT, preset("ppo-atari", torso="minatar", **SMALL), num_envs=2)
    with pytest.raises(TypeError, match="image obs must be uint8"):
        agent.act(torch.zeros(2, 4, 10, 10))
    z = np.zeros((2, 4, 10, 10), np.float32)
    with pytest.raises(TypeError, match="image obs must be uint8"):
        agent.observe(
            z, torch.zeros(2, dtype=torch.int64), np.zeros(2, np.float32), z, *[np.zeros(2, bool)] * 2
        )
    b = np.zeros((2, 4, 10, 10), np.uint8)
    with pytest.raises(TypeError, match="image next_obs must be uint8"):
        agent.observe(
            b, torch.zeros(2, dtype=torch.int64), np.zeros(2, np.float32), z, *[np.zeros(2, bool)] * 2
        )
    assert agent.buffer.pos == 0  # nothing stored
    with pytest.raises(ValueError, match=r"obs has shape \(2, 4, 9, 10\)"):
        agent.act(torch.zeros(2, 4, 9, 10, dtype=torch.uint8))


def test_what_image_observations_cannot_take() -> None:
    with pytest.raises(
        ValueError, match="torso='nature' .* needs a feed-forward policy .* got policy='lstm'"
    ):
        PPOConfig(policy="lstm", torso="nature")
    with pytest.raises(ValueError, match="needs a feed-forward policy"):
        preset("ppo-atari", policy="mamba")
    with pytest.raises(ValueError, match="normalize_obs=True is not available with torso='nature'"):
        preset("ppo-atari", normalize_obs=True)
    with pytest.raises(ValueError, match="torso=.* is not one of"):
        PPOConfig(torso="resnet")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="image observations .* need a conv torso"):
        PPOAgent(ATARI, ACT, PPOConfig())
    with pytest.raises(ValueError, match="torso='nature' needs uint8 \\[C, H, W\\] image observations"):
        PPOAgent(gym.spaces.Box(-1, 1, (8,), np.float32), ACT, PPOConfig(torso="nature"))
    with pytest.raises(ValueError, match="must be a flat Box or a uint8"):  # float images are not bytes
        PPOAgent(gym.spaces.Box(0, 1, (4, 10, 10), np.float32), ACT, PPOConfig(torso="minatar"))
    with pytest.raises(ValueError, match="too small for the nature torso"):
        PPOAgent(MINATAR, ACT, PPOConfig(torso="nature"))


def test_a_saved_pixel_agent_loads_and_acts_the_same(tmp_path) -> None:
    agent = PPOAgent(MINATAR, ACT, preset("ppo-atari", torso="minatar", **SMALL), num_envs=2, seed=0)
    _rollout(agent, np.random.default_rng(3))
    agent.update()
    _rollout(agent, np.random.default_rng(4))  # a full rollout, saved with the agent
    agent.save(tmp_path / "a.safetensors")
    loaded = PPOAgent.load(tmp_path / "a.safetensors")
    assert loaded.config == agent.config and loaded.pixel_scale == 1.0
    assert torch.equal(loaded.buffer.obs, agent.buffer.obs)  # exact: the stored frames themselves
    for a, b in zip(agent.net.parameters(), loaded.net.parameters(), strict=True):
        assert torch.equal(a, b)  # exact: the same weights
    obs = torch.randint(0, 2, (2, 4, 10, 10), dtype=torch.uint8)
    assert torch.equal(agent.act(obs), loaded.act(obs))  # exact: same weights and generator state
    assert math.isclose(loaded.current_lr(), agent.current_lr())


@pytest.mark.learning
def test_minatar_breakout_beats_a_random_policy() -> None:
    """``ppo-minatar`` (``ppo-atari`` with the MinAtar torso and lr 1e-3) on MinAtar Breakout, 8
    environments, 30k steps: the greedy evaluation (10 episodes) beats the random policy's 0.39
    (20,000 random steps, 2,007 episodes; test_dqn_pixels.py) clearly. Seed 1: evaluations 1.3,
    2.2, 1.8 at 10k, 20k, 30k steps (~5 s on one thread; seed 2: 3.5, 6.0, 3.9). At ppo-atari's
    lr 2.5e-4 the same budget stays at 0.3 (too slow for a short test)."""
    pytest.importorskip("minatar", reason='MinAtar is missing: pip install "tritonrl[minatar]"')
    from tritonrl.toolkit.envs.vector import make_vec_env
    from tritonrl.toolkit.training.loop import LoopConfig, run_training
    from tritonrl.toolkit.training.onpolicy import OnPolicySchedule

    torch.set_num_threads(1)
    steps = 30_000
    env = make_vec_env("MinAtar/Breakout-v1", 8, seed=1)
    cfg = preset("ppo-minatar", total_steps=steps)
    agent = PPOAgent(env.single_observation_space, env.single_action_space, cfg, num_envs=8, seed=1)
    try:
        summary = run_training(
            agent,
            env,
            OnPolicySchedule(cfg.num_steps),
            LoopConfig(
                total_steps=steps,
                seed=1,
                eval_every=10_000,
                eval_episodes=10,
                final_eval=False,
                plot=False,
                tensorboard=False,
            ),
        )
    finally:
        env.close()
    evals = [round(r, 2) for _, r in summary["evaluations"]]
    print(f"\n[learning] ppo-minatar Breakout seed=1, one torch thread: evaluations {evals}")
    assert max(r for _, r in summary["evaluations"]) >= 1.5, evals


def test_torso_hidden_sizes_the_conv_torsos_linear_layers() -> None:
    default = PPOAgent(MINATAR, ACT, preset("ppo-minatar", **SMALL), num_envs=2, seed=0)
    linears = [m for m in default.net.core.torso.mlp.modules() if isinstance(m, torch.nn.Linear)]
    assert [tuple(m.weight.shape) for m in linears] == [(128, 1024)]  # the kind's default, 16*8*8 in
    agent = PPOAgent(MINATAR, ACT, preset("ppo-minatar", torso_hidden=(64, 32), **SMALL), num_envs=2)
    linears = [m for m in agent.net.core.torso.mlp.modules() if isinstance(m, torch.nn.Linear)]
    assert [tuple(m.weight.shape) for m in linears] == [(64, 1024), (32, 64)]
    assert agent.net.core.feature_dim == 32 and agent.net.critic.weight.shape == (1, 32)
    flat = PPOAgent(MINATAR, ACT, preset("ppo-minatar", torso_hidden=(), **SMALL), num_envs=2)
    assert flat.net.core.feature_dim == 1024  # the flattened convolution features
    _rollout(agent, np.random.default_rng(5))
    assert torch.isfinite(agent.update()["losses/policy_loss"])


def test_bad_torso_hidden_values_are_refused() -> None:
    with pytest.raises(ValueError, match="torso_hidden"):
        preset("ppo-minatar", torso_hidden=(0,))
    with pytest.raises(ValueError, match="torso_hidden"):
        preset("ppo-minatar", torso_hidden=(64, -1))
    with pytest.raises(ValueError, match="torso_hidden=.* is for a conv torso"):
        PPOConfig(torso_hidden=(64,))  # the mlp torso's sizes are `hidden`
    with pytest.raises(ValueError, match="torso_hidden"):
        preset("ppo-minatar", torso_hidden=(1.5,))  # type: ignore[arg-type]


def test_a_checkpoint_older_than_torso_hidden_loads_with_the_kinds_default(tmp_path) -> None:
    from tritonrl.toolkit.checkpoint import load_checkpoint, save_checkpoint
    from tritonrl.toolkit.config import backfilled_fields, check_config_dict, resumable_fields

    assert "torso_hidden" in backfilled_fields(PPOConfig) and "torso_hidden" not in resumable_fields(
        PPOConfig
    )
    agent = PPOAgent(MINATAR, ACT, preset("ppo-minatar", **SMALL), num_envs=2, seed=0)
    path = tmp_path / "old.safetensors"
    agent.save(path)
    saved = load_checkpoint(path)
    del saved["config"]["torso_hidden"]  # as written before the field existed
    save_checkpoint(path, saved)
    check_config_dict(PPOConfig, saved["config"])
    restored = PPOAgent.load(path)
    assert restored.config.torso_hidden is None and restored.net.core.feature_dim == 128
    for a, b in zip(agent.net.parameters(), restored.net.parameters(), strict=True):
        assert torch.equal(a, b)  # exact: the same weights, loaded
