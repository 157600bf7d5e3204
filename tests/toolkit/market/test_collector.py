"""The device experience collector: no host read per step (DQN with n-step PER, Rainbow, PPO), the
f32 acting snapshot and its sync, what reaches the replay (ICM's too), state round trips and
argument errors.

The environment is a tiny random walk written in tensor ops (:class:`WalkEnv`), so that these
tests need neither the market data nor ``MarketEnv``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch

gym = pytest.importorskip("gymnasium")

from helpers import HostReads  # noqa: E402
from tritonrl.agents.dqn import DQNAgent  # noqa: E402
from tritonrl.agents.dqn import preset as dqn_preset  # noqa: E402
from tritonrl.agents.ppo import PPOAgent  # noqa: E402
from tritonrl.agents.ppo import preset as ppo_preset  # noqa: E402
from tritonrl.toolkit.envs.vector import Transition  # noqa: E402
from tritonrl.toolkit.precision import training_dtype  # noqa: E402
from tritonrl.toolkit.replay import ReplayBuffer  # noqa: E402
from tritonrl.toolkit.replay.rollout import RolloutBuffer  # noqa: E402
from tritonrl.toolkit.training.collector import Collector  # noqa: E402

D = 3  # observation width
E = 4  # environments


class WalkEnv:
    """``num_envs`` random walks on the device: action ``a`` in {0, 1, 2} moves by ``a - 1`` plus
    noise from the env's own generator; reward ``-|position| / 4``; terminated beyond ``|x| > 3``,
    truncated after ``horizon`` steps; same-step autoreset to 0. Observations ``[E, D]`` in the
    training dtype: position, step fraction, a noise feature. No host read anywhere."""

    def __init__(self, num_envs: int = E, *, horizon: int = 5, device: str = "cpu", seed: int = 0) -> None:
        self.num_envs, self.device, self.horizon = num_envs, torch.device(device), horizon
        self.dtype = training_dtype(self.device)
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (D,), np.float32)
        self.single_action_space = gym.spaces.Discrete(3)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.x = torch.zeros(num_envs, device=self.device)
        self.t = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self.obs: torch.Tensor | None = None

    def _observe(self) -> torch.Tensor:
        noise = torch.randn(self.num_envs, device=self.device, generator=self.generator)
        return torch.stack([self.x, self.t.float() / self.horizon, noise], 1).to(self.dtype)

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[torch.Tensor, dict]:
        self.x.zero_()
        self.t.zero_()
        self.obs = self._observe()
        return self.obs, {}

    def step_transition(self, actions: torch.Tensor) -> Transition:
        noise = 0.5 * torch.randn(self.num_envs, device=self.device, generator=self.generator)
        self.x = self.x + (actions.float() - 1.0) + noise
        self.t = self.t + 1
        reward = -self.x.abs() / 4
        terminated = self.x.abs() > 3.0
        truncated = ~terminated & (self.t >= self.horizon)
        next_obs = self._observe()
        done = terminated | truncated
        self.x = torch.where(done, 0.0, self.x)
        self.t = torch.where(done, 0, self.t)
        self.obs = torch.where(done[:, None], self._observe(), next_obs)
        return Transition(self.obs, reward, next_obs, terminated, truncated)


DQN_TINY = {"torso_width": 16, "batch_size": 4, "buffer_size": 64, "atoms": 11, "replay_staging": "device"}
DQN_CASES = {
    "per-nstep": ("dqn", {"prioritized": True, "n_step": 3}),
    "rainbow": ("rainbow", {}),
    "double-dueling-2step": ("double", {"dueling": True, "n_step": 2}),
}


def _dqn(name: str = "dqn", seed: int = 0, **extra: Any) -> DQNAgent:
    cfg = dqn_preset(name, **{**DQN_TINY, **extra})
    env = WalkEnv()
    return DQNAgent(env.single_observation_space, env.single_action_space, cfg, num_envs=E, seed=seed)


def _accelerator_defaults(agent: Any) -> None:
    """What an agent does on an accelerator, forced on the CPU (as tests/agents/test_no_host_sync.py
    does): deferred input checks, deferred priority checks, no numpy views of the replay storage
    or of PPO's rollout storage (host memory where the storage lives on a CPU; a CUDA buffer has
    none)."""
    agent.inputs.mode = "deferred"
    buffer = agent.buffer
    if isinstance(buffer, RolloutBuffer):
        assert buffer._cpu
        buffer._cpu = False  # the tensor writes a CUDA rollout makes
    if isinstance(buffer, ReplayBuffer):
        if hasattr(buffer, "check_priorities"):
            buffer.check_priorities = False
        buffer._views = None


# ----------------------------------------------------------------------------- no host read per step


@pytest.mark.parametrize("case", list(DQN_CASES))
def test_dqn_collector_steps_read_nothing_on_the_host(case: str) -> None:
    name, extra = DQN_CASES[case]
    agent = _dqn(name, **extra)
    _accelerator_defaults(agent)
    env = WalkEnv()
    collector = Collector(agent, env, sync_every=2)
    n = agent.config.n_step
    for _ in range(3):
        with HostReads():
            for _ in range(4):  # the first call resets the env; a due sync runs inside too
                t = collector.step()
        assert isinstance(t, Transition) and t.reward.device == agent.device
        for _ in range(3):
            agent.update()  # (its own no-host-read test is tests/agents/test_no_host_sync.py)
        assert agent.inputs.pending
        agent.check_inputs()
    assert agent.env_steps == 12 * E and len(agent.buffer) == (12 - n + 1) * E
    assert collector.syncs == 3  # construction, then before rounds 2 and 3 (3 updates each time)


def test_ppo_collector_steps_read_nothing_on_the_host() -> None:
    cfg = dataclasses.replace(ppo_preset("ppo"), num_steps=6, num_minibatches=2, update_epochs=1, hidden=(8,))
    env = WalkEnv(horizon=4)
    agent = PPOAgent(env.single_observation_space, env.single_action_space, cfg, num_envs=E, seed=0)
    _accelerator_defaults(agent)
    collector = Collector(agent, env)
    assert collector.snapshot is None
    flags: list[torch.Tensor] = []  # the truncation flags the env handed over
    step_transition = env.step_transition

    def recording(actions: torch.Tensor) -> Transition:
        t = step_transition(actions)
        flags.append(t.truncated)
        return t

    env.step_transition = recording  # type: ignore[method-assign]
    for _ in range(2):
        with HostReads() as guard, pytest.MonkeyPatch.context() as mp:
            guarded_numpy = torch.Tensor.numpy

            def numpy(
                t: torch.Tensor, *args: Any, _guarded: Any = guarded_numpy, _guard: Any = guard, **kwargs: Any
            ) -> Any:
                # PPO's observe reads CPU truncation flags (free on a CPU; flags on an accelerator
                # are never read): the one host read allowed here, of exactly that tensor
                if flags and t is flags[-1]:
                    with _guard.lifted():
                        return _guarded(t, *args, **kwargs)
                return _guarded(t, *args, **kwargs)

            mp.setattr(torch.Tensor, "numpy", numpy)
            for _ in range(cfg.num_steps):  # truncations and the rollout's last step included
                collector.step()
        assert agent.buffer.full
        agent.update()
        agent.check_inputs()
    assert agent.env_steps == 2 * cfg.num_steps * E
    with pytest.raises(RuntimeError):  # the rollout is full again: the caller updates first
        for _ in range(cfg.num_steps + 1):
            collector.step()


# ----------------------------------------------------------------------------- the snapshot


def test_the_snapshot_is_f32_and_equals_the_bf16_learner_after_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONRL_DTYPE", "bf16")
    agent = _dqn("noisy", learning_starts=0)
    assert agent.dtype == torch.bfloat16
    env = WalkEnv()
    assert env.dtype == torch.bfloat16
    collector = Collector(agent, env, sync_every=2)
    assert collector.snapshot is not None

    def same() -> bool:  # the weights; the noise buffers are drawn anew at every acting step
        pairs = zip(collector.snapshot.state_dict().items(), agent.online.state_dict().values(), strict=True)
        weights = [(s, o) for (k, s), o in pairs if not k.endswith(("eps_in", "eps_out"))]
        return all(s.dtype == torch.float32 and torch.equal(s, o.float()) for s, o in weights)

    assert same()
    for _ in range(3):
        collector.step()
    agent.update()  # 1 update since the sync: the snapshot stays as it was
    collector.step()
    assert not same() and collector.syncs == 1
    agent.update()
    collector.step()  # 2 updates: synced before acting
    assert same() and collector.syncs == 2
    assert agent.buffer.state_dict()["obs"].dtype == torch.bfloat16  # the replay keeps the training dtype


def test_greedy_actions_come_from_the_snapshot_and_exploration_from_the_agents_generator() -> None:
    greedy = _dqn(eps_start=0.0, eps_end=0.0)
    env = WalkEnv()
    collector = Collector(greedy, env)
    obs = env.reset()[0]
    action = collector.policy(obs)
    assert torch.equal(action, greedy.act(obs, explore=False))  # f32 on a CPU: the same network
    # epsilon 1: the agent's own draws, from its generator, in act()'s order
    a, b = _dqn(eps_start=1.0, eps_end=1.0), _dqn(eps_start=1.0, eps_end=1.0)
    ca = Collector(a, WalkEnv())
    for _ in range(3):
        assert torch.equal(ca.policy(obs), b.act(obs))


def test_the_collector_stores_what_agent_observe_would() -> None:
    """The transitions written straight into the device-staging replay are those agent.observe
    stores in a host-staging replay (the same set; device staging commits each one n - 1 steps
    after it started), and env_steps advances alike."""
    agent = _dqn(n_step=3, prioritized=True, eps_start=0.5, eps_end=0.5)
    host = _dqn(n_step=3, prioritized=True, replay_staging="host")
    assert agent.buffer.staging == "device" and host.buffer.staging == "host"
    env = WalkEnv(horizon=3)
    collector = Collector(agent, env)
    T = 14
    for _ in range(T):
        obs = env.obs if env.obs is not None else env.reset()[0]
        before = agent.generator.get_state()
        t = collector.step()
        after = agent.generator.get_state()
        agent.generator.set_state(before)
        action = collector.policy(obs)  # the same draw again: the action the step took
        agent.generator.set_state(after)
        host.observe(obs, action, t.reward, t.next_obs, t.terminated, t.truncated)
    assert agent.env_steps == host.env_steps == T * E

    def rows(buf: ReplayBuffer, last_start: int | None = None) -> list[tuple]:
        sd = buf.state_dict()
        fields = (sd["obs"], sd["action"], sd["reward"], sd["next_obs"], sd["discount"])
        return sorted(tuple(map(str, (f[i].tolist() for f in fields))) for i in range(sd["obs"].shape[0]))

    dev_rows = rows(agent.buffer)
    assert len(dev_rows) == (T - 2) * E
    assert set(dev_rows) <= set(rows(host.buffer))
    assert len(rows(host.buffer)) - len(dev_rows) <= 2 * E  # only starts of the last n - 1 steps


# ----------------------------------------------------------------------------- state and errors


def test_state_dict_round_trip_restores_the_snapshot() -> None:
    agent = _dqn(learning_starts=0)
    env = WalkEnv()
    first = Collector(agent, env, sync_every=100)
    for _ in range(4):
        first.step()
    agent.update()
    state = first.state_dict()
    second = Collector(agent, env, sync_every=100)  # built now: synced with the updated learner
    assert not all(
        torch.equal(a, b)
        for a, b in zip(state["snapshot"].values(), second.state_dict()["snapshot"].values(), strict=True)
    )
    second.load_state_dict(state)
    again = second.state_dict()
    assert again["synced_at"] == 0 and again["syncs"] == 1
    for k, v in state["snapshot"].items():
        assert torch.equal(v, again["snapshot"][k]), k
    with pytest.raises(ValueError, match="synced_at"):
        second.load_state_dict({**state, "synced_at": -1})
    bad = {**state, "snapshot": {k: v[..., :1] for k, v in state["snapshot"].items()}}
    with pytest.raises(ValueError, match="does not match"):
        second.load_state_dict(bad)


def test_bad_arguments() -> None:
    agent = _dqn()
    with pytest.raises(ValueError, match="sync_every"):
        Collector(agent, WalkEnv(), sync_every=0)
    with pytest.raises(ValueError, match="environments"):
        Collector(agent, WalkEnv(num_envs=E + 1))
    with pytest.raises(TypeError, match="agent protocol"):
        Collector(object(), WalkEnv())


def test_icm_steps_through_the_collector_as_through_observe() -> None:
    """The collector hands every step to ``agent.observe``: ICM's intrinsic reward and its own
    replay are fed, and the replays hold what the plain ``act`` / ``observe`` path stores (on a
    CPU the f32 snapshot, synced after every update, is the learner)."""
    icm = {"icm": True, "icm_embed": 4, "icm_hidden": 8, "eps_start": 0.5, "eps_end": 0.5}
    agent, plain = _dqn(**icm), _dqn(**icm)
    env, plain_env = WalkEnv(), WalkEnv()
    collector = Collector(agent, env)
    obs = plain_env.reset()[0]
    for _ in range(6):
        collector.step()
        action = plain.act(obs)
        t = plain_env.step_transition(action)
        plain.observe(obs, action, t.reward, t.next_obs, t.terminated, t.truncated)
        obs = t.obs
    assert agent.env_steps == plain.env_steps == 6 * E
    for buf, want in ((agent.buffer, plain.buffer), (agent.icm_buffer, plain.icm_buffer)):
        got, ref = buf.state_dict(), want.state_dict()
        assert len(buf) == len(want) > 0
        for k in ("obs", "action", "reward", "next_obs"):
            assert torch.equal(got[k], ref[k]), k  # exact: the same computation twice


def test_replay_staging_auto_is_host_on_a_cpu_and_old_configs_read_it_as_auto() -> None:
    from tritonrl.agents.dqn import DQNConfig
    from tritonrl.toolkit.config import check_config_dict, resumable_fields

    agent = _dqn(replay_staging="auto")
    assert agent.replay_staging == "host" and agent.buffer.staging == "host"
    saved = DQNConfig().to_dict()
    assert "replay_staging" in resumable_fields(DQNConfig)
    del saved["replay_staging"]  # a checkpoint from before the field
    check_config_dict(DQNConfig, saved)
    assert DQNConfig.from_dict(saved).replay_staging == "auto"
    with pytest.raises(ValueError, match="replay_staging"):
        DQNConfig(replay_staging="gpu")
    # a resume that switches the staging: the agent's state loads, the open windows dropped
    host = _dqn(replay_staging="host")
    env = WalkEnv()
    collector = Collector(host, env)
    for _ in range(5):
        collector.step()
    device = _dqn(replay_staging="device")
    device.load_state_dict(host.state_dict())
    assert len(device.buffer) == len(host.buffer) and device.buffer.pending == 0


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["rainbow", "ppo"])
def test_collector_steps_never_synchronise_on_cuda(name: str) -> None:
    """On CUDA the device proves it: ``torch.cuda.set_sync_debug_mode("error")`` raises on any
    synchronising call (a device-to-host read) inside the collector's steps ("auto" replay
    staging is the device staging there)."""
    env = WalkEnv(device="cuda", horizon=3)
    if name == "ppo":
        cfg = dataclasses.replace(ppo_preset("ppo"), num_steps=16, hidden=(8,))
        agent: Any = PPOAgent(
            env.single_observation_space, env.single_action_space, cfg, num_envs=E, device="cuda"
        )
    else:
        cfg = dqn_preset(name, **{**DQN_TINY, "replay_staging": "auto"})
        agent = DQNAgent(
            env.single_observation_space, env.single_action_space, cfg, num_envs=E, device="cuda"
        )
        assert agent.buffer.staging == "device"
    collector = Collector(agent, env)
    collector.step()  # first call: reset and lazy initialisation outside the check
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(8):
            collector.step()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    assert agent.env_steps == 9 * E
