"""The parts SAC and TD3 share (tritonrl.agents.sac.base, network): the networks keep their
parameter creation order and names (seeded weights and checkpoints depend on them), and SAC's
acting draws the action of ``sample`` without its log-probability."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("gymnasium")

from tritonrl.agents.nets.torsos import MLP
from tritonrl.agents.sac.network import DeterministicActor, SquashedGaussianActor, TwinQ

HIDDEN = (16, 8)


def _by_hand(*dims: tuple[int, int]) -> list[nn.Module]:
    """MLP + Linear pairs in the order the networks were first written to build them."""
    out: list[nn.Module] = []
    for in_dim, out_dim in dims:
        torso = MLP(in_dim, HIDDEN)
        out += [torso, nn.Linear(torso.out_features, out_dim)]
    return out


def _params(modules: list[nn.Module]) -> list[torch.Tensor]:
    return [p for m in modules for p in m.parameters()]


def test_networks_keep_their_creation_order_and_names() -> None:
    torch.manual_seed(0)
    q = TwinQ(5, 2, HIDDEN)
    torch.manual_seed(0)
    ref = _by_hand((7, 1), (7, 1))
    # exact: the same draws of the same generator in the same order
    assert all(torch.equal(a, b) for a, b in zip(q.parameters(), _params(ref), strict=True))
    names = list(dict.fromkeys(n.split(".")[0] for n, _ in q.named_parameters()))
    assert names == ["torso1", "head1", "torso2", "head2"]

    torch.manual_seed(1)
    actor = SquashedGaussianActor(5, 2, HIDDEN, torch.zeros(2))
    torch.manual_seed(1)
    torso, mean = _by_hand((5, 2))
    log_std = nn.Linear(torso.out_features, 2)  # type: ignore[arg-type]
    # exact: as above
    assert all(
        torch.equal(a, b) for a, b in zip(actor.parameters(), _params([torso, mean, log_std]), strict=True)
    )
    names = list(dict.fromkeys(n.split(".")[0] for n, _ in actor.named_parameters()))
    assert names == ["torso", "mean", "log_std"]

    torch.manual_seed(2)
    det = DeterministicActor(5, 2, HIDDEN)
    torch.manual_seed(2)
    # exact: as above
    assert all(torch.equal(a, b) for a, b in zip(det.parameters(), _params(_by_hand((5, 2))), strict=True))
    assert list(dict.fromkeys(n.split(".")[0] for n, _ in det.named_parameters())) == ["torso", "mu"]


def test_explore_is_the_action_of_sample() -> None:
    torch.manual_seed(0)
    actor = SquashedGaussianActor(4, 3, HIDDEN, torch.log(torch.tensor([1.0, 2.0, 0.5])))
    obs, noise = torch.randn(6, 4), torch.randn(6, 3)
    a = actor.explore(obs, noise)
    # exact: explore runs the first half of sample's computation on the same inputs
    torch.testing.assert_close(a, actor.sample(obs, noise)[0], rtol=0, atol=0)
    assert a.shape == (6, 3) and bool((a.abs() <= 1).all())


def test_q1_is_the_first_critic_of_forward_and_td3_runs_only_it_in_the_actor_step() -> None:
    torch.manual_seed(0)
    q = TwinQ(5, 2, HIDDEN)
    obs, act = torch.randn(7, 5), torch.rand(7, 2) * 2 - 1
    # exact: the same modules on the same inputs
    assert torch.equal(q.q1(obs, act), q(obs, act)[0]) and q.q1(obs, act).dtype == torch.float32

    import gymnasium as gym
    from tritonrl.agents.sac import TD3Agent
    from tritonrl.agents.sac import preset as sac_preset

    space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    obs_space = gym.spaces.Box(-5.0, 5.0, (3,), np.float32)
    cfg = sac_preset("td3", hidden=(8,), batch_size=4, buffer_size=32, learning_starts=4, policy_frequency=1)
    agent = TD3Agent(obs_space, space, cfg, num_envs=1, seed=0)
    seen: list[str] = []
    for name in ("torso1", "torso2"):
        getattr(agent.critic, name).register_forward_hook(lambda *_, n=name: seen.append(n))
    loss = agent._actor_loss(torch.randn(4, 3))
    assert seen == ["torso1"] and loss.dtype == torch.float32
