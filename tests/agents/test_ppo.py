"""The PPO agent: protocol, rollout consistency, checkpoints across dtypes, the CLI.

Exact resume is in test_resume.py (every agent family), command-line mistakes are rows of the
table in test_cli_errors.py."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

from tritonrl.agents.ppo import PPOAgent, PPOConfig, preset
from tritonrl.cli import main as cli_main
from tritonrl.toolkit.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from tritonrl.toolkit.envs.vector import make_vec_env
from tritonrl.toolkit.precision import training_dtype
from tritonrl.toolkit.training.loop import LoopConfig, run_training
from tritonrl.toolkit.training.onpolicy import OnPolicySchedule

ENVS = {
    "discrete": "CartPole-v1",
    "continuous": "Pendulum-v1",
    "flow": "Pendulum-v1",
    "lstm": "CartPoleNoVel-v1",
    "gru": "CartPoleNoVel-v1",
    "mamba": "CartPoleNoVel-v1",
}
TINY = {
    "num_steps": 8,
    "seq_len": 4,
    "num_minibatches": 2,
    "update_epochs": 2,
    "hidden": (16,),
    "memory_size": 16,
    "flow_hidden": 8,
    "mamba_headdim": 8,
    "total_steps": 1000,
}


def _agent(policy: str, num_envs: int = 3, seed: int = 0, **kw):
    cfg = dataclasses_replace(PPOConfig(policy=policy), **{**TINY, **kw})
    env = make_vec_env(ENVS[policy], num_envs, seed=seed)
    return PPOAgent(
        env.single_observation_space, env.single_action_space, cfg, num_envs=num_envs, seed=seed
    ), env


def dataclasses_replace(cfg, **kw):
    import dataclasses

    return dataclasses.replace(cfg, **kw)


def _collect(agent: PPOAgent, env, steps: int):
    obs = env.obs
    for _ in range(steps):
        action = agent.act(obs)
        tr = env.step(action)
        agent.observe(obs, action, tr.reward, tr.next_obs, tr.terminated, tr.truncated)
        obs = tr.obs
    return obs


@pytest.mark.parametrize("policy", ["discrete", "continuous", "flow", "lstm", "gru", "mamba"])
def test_protocol_shapes_and_first_epoch_ratio_is_one(policy):
    agent, env = _agent(policy, normalize_obs=True, squash=policy == "continuous")
    _collect(agent, env, agent.config.num_steps)
    b = agent.buffer
    assert b.full and b.obs.dtype == training_dtype("cpu") and b.logprobs.dtype == torch.float32
    # Re-scoring the rollout as update() does (sequences from the stored memories for recurrent
    # policies) reproduces the log-probs and values recorded while acting: ratio = 1 at epoch 1.
    b.compute_advantages(agent.config.gamma, agent.config.gae_lambda)
    data, n = agent._batches()
    idx = torch.arange(n)
    state = data.get("state")
    with torch.no_grad():
        logp, _, value = agent.net.evaluate(data["obs"], data["raw"], data["starts"], state)
    # Same f32 ops on the same inputs, batched differently: equal to f32 rounding.
    torch.testing.assert_close(logp, data["logprobs"][idx], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(value, data["values"][idx], rtol=1e-5, atol=1e-5)
    metrics = agent.update()
    assert {
        "losses/policy_loss",
        "losses/value_loss",
        "losses/approx_kl",
        "losses/entropy",
        "losses/clipfrac",
        "losses/explained_variance",
        "charts/learning_rate",
    } <= set(metrics)
    for k, v in metrics.items():
        assert v.dtype == torch.float32 and v.dim() == 0 and torch.isfinite(v), k
    assert agent.buffer.pos == 0 and agent.updates == 1
    a = agent.act(env.obs)
    if policy in ("discrete", "lstm", "gru", "mamba"):
        assert a.shape == (3,) and a.dtype == torch.int64
    else:
        assert a.shape == (3, 1) and a.dtype == torch.float32


def test_kl_early_stop_and_learning_rate_annealing():
    # total_steps = 2 rollouts of 8 x 3: the rate goes lr -> lr / 2 -> ...; a tiny target_kl stops
    # after the first epoch (the first epoch always runs: its KL is measured while it trains).
    agent, env = _agent("discrete", total_steps=48, update_epochs=5, target_kl=1e-9, lr=1e-3)
    rates, epochs = [], []
    for _ in range(2):
        _collect(agent, env, 8)
        m = agent.update()
        rates.append(m["charts/learning_rate"].item())
        epochs.append(m["losses/epochs"].item())
    assert rates == pytest.approx([1e-3, 5e-4])
    assert epochs == [1.0, 1.0]
    free, env = _agent("discrete", update_epochs=5, anneal_lr=False)
    _collect(free, env, 8)
    m = free.update()
    assert m["losses/epochs"].item() == 5.0 and m["charts/learning_rate"].item() == pytest.approx(2.5e-4)


def test_truncation_stores_the_value_of_the_final_observation():
    agent, env = _agent("discrete", num_envs=2)
    obs = env.obs
    action = agent.act(obs)
    final = torch.tensor([[0.1, 0.2, 0.3, 0.4], [1.0, 1.0, 1.0, 1.0]])
    agent.observe(
        obs, action, torch.ones(2), final, torch.tensor([False, False]), torch.tensor([True, False])
    )
    with torch.no_grad():
        expected = agent.net.value(final[:1], None, None)
    assert agent.buffer.has_next_value[0].tolist() == [True, False]
    torch.testing.assert_close(agent.buffer.next_values[0, :1], expected)
    assert agent.starts.tolist() == [True, False]


def test_observe_without_act_rescores_feed_forward_and_refuses_recurrent():
    agent, env = _agent("discrete", num_envs=2)
    obs = env.obs.clone()
    agent.observe(
        obs,
        torch.tensor([0, 1]),
        torch.ones(2),
        obs,
        torch.zeros(2, dtype=torch.bool),
        torch.zeros(2, dtype=torch.bool),
    )
    with torch.no_grad():
        logp, _, _ = agent.net.evaluate(obs, torch.tensor([0, 1]))
    torch.testing.assert_close(agent.buffer.logprobs[0], logp)
    no = torch.zeros(2, dtype=torch.bool)
    rec, env = _agent("lstm", num_envs=2)
    with pytest.raises(RuntimeError, match="call act"):
        rec.observe(env.obs, torch.tensor([0, 1]), torch.ones(2), env.obs, no, no)
    # A copy of the acted observation (numpy, say) is recognised; other values are refused.
    action = rec.act(env.obs)
    with pytest.raises(RuntimeError, match="call act"):
        rec.observe(env.obs + 1, action, torch.ones(2), env.obs, no, no)
    rec.observe(env.obs.numpy().copy(), action, torch.ones(2), env.obs, no, no)
    assert rec.buffer.pos == 1


def test_bad_inputs_are_clear_errors():
    agent, env = _agent("discrete", num_envs=2)
    with pytest.raises(ValueError, match="obs has shape"):
        agent.act(torch.zeros(2, 5))
    with pytest.raises(ValueError, match="num_envs=2"):
        agent.act(torch.zeros(3, 4))
    with pytest.raises(RuntimeError, match="full rollout"):
        agent.update()
    pend = make_vec_env("Pendulum-v1", 1, 0)
    with pytest.raises(ValueError, match="needs a Discrete action space"):
        PPOAgent(pend.single_observation_space, pend.single_action_space, preset("ppo"))
    with pytest.raises(ValueError, match="flat Box action space"):
        PPOAgent(env.single_observation_space, env.single_action_space, preset("ppo-flow"))
    with pytest.raises(ValueError, match="seq_len=5 must be 0 or divide num_steps=8"):
        PPOConfig(num_steps=8, seq_len=5)
    with pytest.raises(ValueError, match="policy='transformer'"):
        PPOConfig(policy="transformer")


# ----------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("policy", ["discrete", "flow", "lstm", "gru", "mamba"])
def test_checkpoint_round_trip_f32_to_bf16_and_back(policy, tmp_path, monkeypatch):
    agent, env = _agent(policy)
    _collect(agent, env, agent.config.num_steps)
    agent.update()
    _collect(agent, env, 3)  # a partial rollout and live memories are part of the state
    agent.save(tmp_path / "f32.safetensors")

    monkeypatch.setenv("TRITONRL_DTYPE", "bf16")
    training_dtype.cache_clear()
    half = PPOAgent.load(tmp_path / "f32.safetensors")
    assert half.dtype == torch.bfloat16
    for (name, p32), p16 in zip(agent.net.state_dict().items(), half.net.state_dict().values(), strict=True):
        if p32.is_floating_point() and p16.dtype == torch.bfloat16:
            assert torch.equal(p16, p32.to(torch.bfloat16)), name  # converted once, round to nearest
    assert half.buffer.obs.dtype == torch.bfloat16 and half.buffer.pos == 3
    torch.testing.assert_close(half.buffer.obs.float(), agent.buffer.obs, rtol=2**-8, atol=0)
    _collect(half, env, half.config.num_steps - 3)
    half.update()  # trains in bf16 after loading
    half.save(tmp_path / "bf16.safetensors")

    monkeypatch.setenv("TRITONRL_DTYPE", "f32")
    training_dtype.cache_clear()
    back = PPOAgent.load(tmp_path / "bf16.safetensors")
    assert back.dtype == torch.float32
    # The f32 parameters are the bf16 run's f32 master weights, not the rounded bf16 values.
    for p, m in zip(back.net.parameters(), half.optimizer.masters, strict=True):
        assert p.dtype == torch.float32 and torch.equal(p, m.float())
    assert back.updates == 2 and back.env_steps == half.env_steps


def test_reload_acts_identically(tmp_path):
    agent, env = _agent("continuous", normalize_obs=True)
    _collect(agent, env, 5)
    agent.save(tmp_path / "c.safetensors")
    twin = PPOAgent.load(tmp_path / "c.safetensors")
    obs = env.obs
    assert torch.equal(agent.act(obs), twin.act(obs))  # same weights, statistics and generator


def _params(agent: PPOAgent) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in agent.net.state_dict().items()}


def _assert_same(agent: PPOAgent, before: dict[str, torch.Tensor]) -> None:
    for k, v in agent.net.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_bad_checkpoints_raise_one_clear_error_and_touch_nothing(tmp_path):
    source, env = _agent("discrete", seed=1)
    _collect(source, env, 8)
    source.update()
    path = tmp_path / "good.safetensors"
    source.save(path)
    target, _ = _agent("discrete", seed=2)
    before = _params(target)

    data = path.read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated"):
        target.load_state_dict(load_checkpoint(tmp_path / "cut.safetensors"))
    _assert_same(target, before)

    save_checkpoint(tmp_path / "dqn.safetensors", {"agent": "dqn", "online": {}})
    with pytest.raises(CheckpointError, match="holds a 'dqn' agent, not a 'ppo' agent"):
        target.load_state_dict(load_checkpoint(tmp_path / "dqn.safetensors"))
    with pytest.raises(CheckpointError, match="not a 'ppo' agent"):
        PPOAgent.load(tmp_path / "dqn.safetensors")
    _assert_same(target, before)

    wider, _ = _agent("discrete", seed=1, hidden=(32,))
    wider.save(tmp_path / "wider.safetensors")
    with pytest.raises(CheckpointError, match=r"has shape \(32, 4\).*expects \(16, 4\)"):
        target.load_state_dict(load_checkpoint(tmp_path / "wider.safetensors"))
    _assert_same(target, before)

    state = load_checkpoint(path)
    state["optimizer"]["masters"] = state["optimizer"]["masters"][:-1]
    with pytest.raises(CheckpointError, match="optimizer state has"):
        target.load_state_dict(state)
    _assert_same(target, before)
    assert target.updates == 0

    target.load_state_dict(load_checkpoint(path))
    for k, v in target.net.state_dict().items():
        assert torch.equal(v, source.net.state_dict()[k]), k


# ----------------------------------------------------------------------------- CLI


def _cli(capsys, *args):
    code = cli_main(["train", "--no-progress", "--no-tensorboard", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_trains_resumes_and_writes_its_files(tmp_path, capsys):
    run = tmp_path / "run"
    common = [
        "--agent",
        "ppo",
        "--env",
        "CartPole-v1",
        "--num-envs",
        "2",
        "--run-dir",
        str(run),
        "--set",
        "num_steps=16",
        "--set",
        "hidden=16",
        "--eval-episodes",
        "2",
        "--log-every",
        "32",
    ]
    code, out, err = _cli(capsys, *common, "--steps", "64")
    assert code == 0, err
    assert "ppo on CartPole-v1: 64 steps" in out
    assert {"metrics.csv", "checkpoint.safetensors", "curve.png"} <= {p.name for p in run.iterdir()}
    code, out, err = _cli(capsys, *common, "--steps", "96", "--resume")
    assert code == 0, err
    assert "96 steps" in out
    assert load_checkpoint(run / "checkpoint.safetensors")["loop"]["step"] == 96


# ----------------------------------------------------------------------------- CUDA (pytest --gpu)


@pytest.mark.gpu
@pytest.mark.parametrize("policy", ["discrete", "continuous", "flow", "lstm", "gru", "mamba"])
def test_cuda_training_step_and_checkpoint_to_cpu(policy, tmp_path):
    """On CUDA (bf16 on Ampere+): a rollout and an update run on the device; the checkpoint loads
    on the CPU in f32 with the f32 master weights, and back onto CUDA."""
    cfg = dataclasses_replace(PPOConfig(policy=policy), **{**TINY, "normalize_obs": True})
    env = make_vec_env(ENVS[policy], 3, seed=0, device="cuda")
    agent = PPOAgent(
        env.single_observation_space, env.single_action_space, cfg, num_envs=3, device="cuda", seed=0
    )
    assert agent.dtype == training_dtype("cuda")
    assert agent.buffer.obs.device.type == "cuda" and agent.buffer.obs.dtype == agent.dtype
    _collect(agent, env, cfg.num_steps)
    metrics = agent.update()
    for k, v in metrics.items():
        assert v.device.type == "cuda" and torch.isfinite(v).item(), k
    agent.save(tmp_path / "cuda.safetensors")
    cpu = PPOAgent.load(tmp_path / "cuda.safetensors")
    assert cpu.dtype == torch.float32 and cpu.device.type == "cpu"
    for p, m in zip(cpu.net.parameters(), agent.optimizer.masters, strict=True):
        assert torch.equal(p, m.detach().float().cpu())
    cpu_env = make_vec_env(ENVS[policy], 3, seed=0)
    _collect(cpu, cpu_env, cfg.num_steps)
    cpu.update()
    cpu.save(tmp_path / "cpu.safetensors")
    again = PPOAgent.load(tmp_path / "cpu.safetensors", device="cuda")
    assert again.dtype == training_dtype("cuda") and again.updates == 2
    _collect(again, env, cfg.num_steps)
    again.update()


@pytest.mark.gpu
def test_cuda_ppo_learns_cartpole():
    """PPO on CUDA in the device's training dtype (bf16 on Ampere+) solves CartPole like on the CPU."""
    env = make_vec_env("CartPole-v1", 8, seed=1, device="cuda")
    cfg = dataclasses_replace(preset("ppo"), total_steps=100_000)
    agent = PPOAgent(
        env.single_observation_space, env.single_action_space, cfg, num_envs=8, device="cuda", seed=1
    )
    summary = run_training(
        agent,
        env,
        OnPolicySchedule(cfg.num_steps),
        LoopConfig(total_steps=100_000, seed=1, eval_every=10_000, target_return=475),
    )
    print(f"cuda {agent.dtype}: steps to 475: {summary['reached_target_at']}, {summary['evaluations']}")
    assert summary["reached_target_at"] is not None, summary["evaluations"]
