"""Agent building blocks create their parameters in training_dtype(device) when no dtype is given;
the PPO agent creates its policy in the training dtype (never built in f32 and cast)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from tritonrl.agents.icm import ICM
from tritonrl.agents.nets.actor_critic import ActorCritic, FeedForwardCore
from tritonrl.agents.nets.conv import ConvTorso
from tritonrl.agents.nets.factored import BranchingHead
from tritonrl.agents.nets.policy_heads import CategoricalHead, FlowHead, GaussianHead
from tritonrl.agents.nets.recurrent import LSTMCore, Mamba2Core
from tritonrl.agents.nets.torsos import MLP, AttentionTorso, MLPTorso, ResidualMLPTorso, SpectralLinear
from tritonrl.toolkit.precision import training_dtype

LOW, HIGH = torch.tensor([-1.0, -2.0]), torch.tensor([1.0, 2.0])


def _sac_net(name: str, *args):
    """A network of tritonrl.agents.sac, imported here: the package imports gymnasium, which a bare
    machine's collection of this file must not need."""
    pytest.importorskip("gymnasium")
    from tritonrl.agents.sac import network

    return getattr(network, name)(*args)


def _builders():
    return {
        "BranchingHead": lambda: BranchingHead(8, [2, 3]),
        "ICM": lambda: ICM((4,), [2]),
        "MLP-relu": lambda: MLP(4, (8, 6), norm="rmsnorm"),
        "MLP-tanh-orthogonal": lambda: MLP(4, (8, 6), activation="tanh", orthogonal_gain=2**0.5),
        "MLPTorso": lambda: MLPTorso(4, width=8),
        "ResidualMLPTorso": lambda: ResidualMLPTorso(4, width=8),
        "AttentionTorso": lambda: AttentionTorso(3, 4, width=8),
        "SpectralLinear": lambda: SpectralLinear(4, 8),
        "ConvTorso-nature": lambda: ConvTorso((4, 36, 36), "nature", hidden=(8,)),
        "ConvTorso-minatar": lambda: ConvTorso((4, 10, 10), "minatar"),
        "ConvTorso-impala": lambda: ConvTorso((3, 16, 16), "impala", hidden=(8,), orthogonal_gain=2**0.5),
        # PPO: each policy kind as the agent assembles it (core, head, critic), default dtype.
        "PPO-categorical": lambda: ActorCritic(FeedForwardCore(4, (8,)), CategoricalHead(8, 3)),
        "PPO-gaussian": lambda: ActorCritic(
            FeedForwardCore(4, (8,)), GaussianHead(8, 2, LOW, HIGH, squash=True)
        ),
        "PPO-flow": lambda: ActorCritic(
            FeedForwardCore(4, (8,)), FlowHead(8, 2, LOW, HIGH, layers=2, hidden=8)
        ),
        "PPO-lstm": lambda: ActorCritic(LSTMCore(4, (8,), 8), CategoricalHead(8, 3)),
        "PPO-mamba2": lambda: ActorCritic(Mamba2Core(4, 16, headdim=8), GaussianHead(16, 2, LOW, HIGH)),
        # SAC and TD3: the actors and the twin critics
        "SAC-actor": lambda: _sac_net("SquashedGaussianActor", 4, 2, (8, 8), torch.zeros(2)),
        "TD3-actor": lambda: _sac_net("DeterministicActor", 4, 2, (8, 8)),
        "TwinQ": lambda: _sac_net("TwinQ", 4, 2, (8, 8)),
    }


@pytest.mark.parametrize("name", sorted(_builders()))
@pytest.mark.parametrize(("env", "dtype"), [("f32", torch.float32), ("bf16", torch.bfloat16)])
def test_default_dtype_follows_policy(
    name: str, env: str, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRITONRL_DTYPE", env)
    module = _builders()[name]()
    dtypes = {p.dtype for p in module.parameters() if p.is_floating_point()}
    assert dtypes == {dtype}, f"{name}: parameters in {dtypes}, policy says {dtype}"


def _ppo_agent(policy: str):
    gym = pytest.importorskip("gymnasium")
    from tritonrl.agents.ppo import PPOAgent, PPOConfig

    obs = gym.spaces.Box(-1.0, 1.0, (4,))
    act = gym.spaces.Discrete(3) if policy in ("discrete", "lstm") else gym.spaces.Box(-2.0, 2.0, (2,))
    cfg = PPOConfig(
        policy=policy,
        hidden=(8,),
        memory_size=16,
        mamba_headdim=8,
        flow_hidden=8,
        squash=policy == "continuous",
    )
    return PPOAgent(obs, act, cfg, num_envs=2, seed=0)


@pytest.mark.parametrize("policy", ["discrete", "continuous", "flow", "lstm", "mamba"])
@pytest.mark.parametrize("env", ["f32", "bf16"])
def test_ppo_policy_is_created_in_the_training_dtype(policy: str, env: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TRITONRL_DTYPE", env)
    training_dtype.cache_clear()

    def no_module_cast(self, *args, **kwargs):
        raise AssertionError(f"{type(self).__name__} was cast or moved after it was built")

    # Module.to / .float() / .bfloat16() / .cuda() all go through _apply: none may run.
    monkeypatch.setattr(nn.Module, "_apply", no_module_cast)
    agent = _ppo_agent(policy)
    monkeypatch.undo()
    training_dtype.cache_clear()
    dtype = torch.float32 if env == "f32" else torch.bfloat16
    assert agent.dtype == dtype
    assert {p.dtype for p in agent.net.parameters()} == {dtype}
    # Buffers: squash bounds stay f32 on purpose (used after the heads' f32 upcast), indices int64.
    for name, b in agent.net.named_buffers():
        assert b.dtype in (torch.float32, torch.int64), name
        assert b.dtype == torch.int64 or name.endswith((".center", ".scale")), name


@pytest.mark.parametrize("name", ["sac", "td3"])
@pytest.mark.parametrize("env", ["f32", "bf16"])
def test_sac_and_td3_networks_are_created_in_the_training_dtype(
    name: str, env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    gym = pytest.importorskip("gymnasium")
    from tritonrl.agents.sac import SACAgent, TD3Agent, preset

    monkeypatch.setenv("TRITONRL_DTYPE", env)
    training_dtype.cache_clear()

    def no_module_cast(self, *args, **kwargs):
        raise AssertionError(f"{type(self).__name__} was cast or moved after it was built")

    monkeypatch.setattr(nn.Module, "_apply", no_module_cast)  # as for PPO above
    cls = SACAgent if name == "sac" else TD3Agent
    cfg = preset(name, hidden=(8,), buffer_size=16, batch_size=4)
    agent = cls(gym.spaces.Box(-1.0, 1.0, (4,)), gym.spaces.Box(-2.0, 2.0, (2,)), cfg, num_envs=2, seed=0)
    monkeypatch.undo()
    training_dtype.cache_clear()
    dtype = torch.float32 if env == "f32" else torch.bfloat16
    nets = {k: v for k, v in agent._nets().items() if k != "log_alpha"}
    for key, module in nets.items():
        assert {p.dtype for p in module.parameters()} == {dtype}, key
        # the actor's log-scale of the bounds is an f32 buffer on purpose (used on the f32 side)
        assert all(b.dtype == torch.float32 for b in module.buffers()), key
    if name == "sac":
        assert agent.log_alpha.value.dtype == torch.float32  # a loss coefficient (see LogAlpha)


@pytest.mark.parametrize("policy", ["discrete", "continuous", "flow", "lstm"])
def test_bf16_ppo_policy_starts_from_the_rounded_f32_weights(policy: str, monkeypatch: pytest.MonkeyPatch):
    # Orthogonal init is drawn in f32 and rounded once into the bf16 parameter: with the same seed a
    # bf16 policy starts where the f32 one does (to bf16 rounding), as when it was built f32 and cast.
    monkeypatch.setenv("TRITONRL_DTYPE", "f32")
    training_dtype.cache_clear()
    full = _ppo_agent(policy).net.state_dict()
    monkeypatch.setenv("TRITONRL_DTYPE", "bf16")
    training_dtype.cache_clear()
    half = _ppo_agent(policy).net.state_dict()
    training_dtype.cache_clear()
    assert full.keys() == half.keys()
    for k, v in full.items():
        assert torch.equal(half[k], v.to(torch.bfloat16)), k
