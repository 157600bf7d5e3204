"""The TCN forecaster: shapes, dtypes, causal encode, bad input, learning; and its encoder as the
DQN agent's ``"tcn"`` torso (one implementation, used over an observation window)."""

from __future__ import annotations

import pytest
import torch
from forecast_model_checks import (
    check_bad_input,
    check_causal,
    check_dtypes,
    check_learns,
    check_registered,
    check_shapes,
)
from tritonrl.agents.forecast.conv import TCN, TCNEncoder
from tritonrl.agents.nets.torsos import SequenceTorso, build_torso

SMALL = {"width": 16, "depth": 3, "kernel_size": 3}


def _make(**kw) -> TCN:
    return TCN(**{**SMALL, **kw})


def test_registered() -> None:
    check_registered("tcn", TCN)


def test_shapes() -> None:
    check_shapes(_make)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_parameter_dtypes_from_construction(dtype: torch.dtype) -> None:
    check_dtypes(_make, dtype)


def test_encode_is_causal() -> None:
    check_causal(_make)


def test_bad_input() -> None:
    check_bad_input(_make)
    with pytest.raises(ValueError, match="kernel_size must be >= 2"):
        TCN(16, 3, kernel_size=1)


def test_learns_within_budget() -> None:
    # 300 steps of batch 64 (defaults: width 32, depth 4, receptive field 61 >= W = 32): about
    # 0.012 test MSE against the naive 0.078 (threshold 0.039), ~1.5 s at one thread.
    check_learns(TCN, steps=300)


def test_torso_is_the_forecaster_encoder() -> None:
    """The "tcn" torso runs a TCNEncoder (the class the forecaster's encode runs) over [B, K, D]
    and returns the newest step: equal to the encoder's last step, causal over the window."""
    torch.manual_seed(0)
    torso = build_torso((6, 3), "tcn", width=16, depth=2, norm="none")
    assert isinstance(torso, SequenceTorso) and type(torso.encoder) is TCNEncoder
    assert torso.out_features == 16
    x = torch.randn(4, 6, 3)
    # exact: forward is the encoder's last step
    torch.testing.assert_close(torso(x), torso.encoder(x)[:, -1], rtol=0, atol=0)
    # a forecaster with the same seed builds the same encoder first: same weights, same features
    torch.manual_seed(0)
    model = TCN(6, 3, width=16, depth=2)
    # exact: the same encoder class, weights and input
    torch.testing.assert_close(model.encode(x)[:, -1], torso(x), rtol=0, atol=0)
    bf16 = build_torso((6, 3), "tcn", width=16, depth=2, norm="rmsnorm", dtype=torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in bf16.parameters())
    assert bf16(x.bfloat16()).shape == (4, 16)
    with pytest.raises(ValueError, match=r"tcn torso needs observations of shape \[history, features\]"):
        build_torso((6,), "tcn")
    with pytest.raises(ValueError, match="spectral_norm is not available with the tcn torso"):
        build_torso((6, 3), "tcn", spectral_norm=True)


def test_dqn_agent_builds_and_updates_with_the_tcn_torso() -> None:
    np = pytest.importorskip("numpy")
    gym = pytest.importorskip("gymnasium")
    from tritonrl.agents.dqn import DQNAgent, DQNConfig, preset

    obs = gym.spaces.Box(-np.inf, np.inf, (5, 3), np.float32)  # a history of 5 observations of 3
    cfg = preset(
        "dqn",
        torso="tcn",
        torso_width=16,
        torso_depth=2,
        torso_norm="rmsnorm",
        batch_size=16,
        buffer_size=256,
        learning_starts=16,
    )
    agent = DQNAgent(obs, gym.spaces.Discrete(2), cfg, num_envs=2, seed=0)
    assert isinstance(agent.online.torso, SequenceTorso)
    assert agent.act(torch.randn(2, 5, 3)).shape == (2,)
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        agent.observe(
            torch.randn(2, 5, 3, generator=g),
            torch.randint(2, (2,), generator=g),
            torch.rand(2, generator=g),
            torch.randn(2, 5, 3, generator=g),
            torch.rand(2, generator=g) < 0.05,
            torch.zeros(2, dtype=torch.bool),
        )
    before = [p.detach().clone() for p in agent.online.torso.parameters()]
    for _ in range(3):
        assert torch.isfinite(agent.update()["losses/td_loss"])
    after = list(agent.online.torso.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True)), "torso never updated"
    with pytest.raises(ValueError, match="spectral_norm is not available with torso='tcn'"):
        DQNConfig(torso="tcn", spectral_norm=True)
