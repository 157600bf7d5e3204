"""DQN's mlp torso with a size per layer (``torso_hidden``): the network it builds, its checks, and
its way through checkpoints, ``--set`` and ``--resume``.

About 10 s here (two short CLI runs of 128 and 160 CartPole steps; the rest builds small agents).
"""

from __future__ import annotations

from pathlib import Path

import pytest

gym = pytest.importorskip("gymnasium")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from tritonrl.agents.dqn import DQNAgent, DQNConfig, preset  # noqa: E402
from tritonrl.agents.nets.torsos import MLPTorso, build_torso  # noqa: E402
from tritonrl.cli import main  # noqa: E402
from tritonrl.toolkit.checkpoint import CheckpointError, load_checkpoint, save_checkpoint  # noqa: E402
from tritonrl.toolkit.config import (  # noqa: E402
    apply_overrides,
    backfilled_fields,
    check_config_dict,
    resumable_fields,
)

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
SMALL = {"buffer_size": 64, "batch_size": 4}


def _agent(**kw) -> DQNAgent:
    return DQNAgent(OBS, gym.spaces.Discrete(3), preset("dqn", **SMALL, **kw), num_envs=1, seed=0)


def _linear_shapes(module: torch.nn.Module) -> list[tuple[int, ...]]:
    return [tuple(m.weight.shape) for m in module.modules() if isinstance(m, torch.nn.Linear)]


def test_the_torso_has_one_layer_per_size() -> None:
    agent = _agent(torso_hidden=(120, 84))
    torso = agent.online.torso
    assert isinstance(torso, MLPTorso) and torso.out_features == 84
    assert _linear_shapes(torso) == [(120, 4), (84, 120)]  # [out, in] per layer
    weights = [tuple(p.shape) for p in agent.online.head.parameters() if p.ndim == 2]
    assert weights == [(3, 84)]  # the head reads the last layer's features
    assert agent.online(torch.zeros(5, 4, dtype=torso.layers[0].weight.dtype)).shape == (5, 3)
    # None keeps the uniform torso: torso_depth layers of torso_width
    assert _linear_shapes(_agent(torso_width=16, torso_depth=3).online.torso) == [(16, 4), (16, 16), (16, 16)]


def test_the_builder_takes_sizes_for_the_mlp_torso_only() -> None:
    torso = build_torso((2, 3), "mlp", hidden=(7, 5, 2), norm="rmsnorm")
    assert [layer.out_features for layer in torso.layers] == [7, 5, 2]
    assert torso(torch.zeros(4, 2, 3)).shape == (4, 2)  # [B, *obs_shape] is flattened
    with pytest.raises(ValueError, match=r"torso hidden=\(8,\) is for the mlp torso, not 'resmlp'"):
        build_torso((3,), "resmlp", hidden=(8,))
    with pytest.raises(ValueError, match=r"hidden=\(\) has no layer"):
        build_torso((3,), "mlp", hidden=())
    with pytest.raises(ValueError, match=r"hidden=\(8, 0\): layer sizes must be >= 1"):
        build_torso((3,), "mlp", hidden=(8, 0))


def test_config_checks() -> None:
    assert DQNConfig().torso_hidden is None  # the default network is unchanged
    assert apply_overrides(DQNConfig(), {"torso_hidden": "120,84"}).torso_hidden == (120, 84)
    assert apply_overrides(DQNConfig(torso_hidden=(8,)), {"torso_hidden": "none"}).torso_hidden is None
    for kw, message in (
        ({"torso_hidden": ()}, r"torso_hidden=\(\) has no layer"),
        ({"torso_hidden": (64, -1)}, r"torso_hidden=\(64, -1\): each item must be >= 1, got -1"),
        ({"torso_hidden": (64, True)}, r"torso_hidden=\(64, True\) must be an int"),
        ({"torso_hidden": (8,), "torso": "attention"}, r"or a conv torso, not torso='attention'"),
    ):
        with pytest.raises(ValueError, match=message):
            DQNConfig(**kw)


def test_state_dict_round_trip_and_refusal(tmp_path: Path) -> None:
    agent = _agent(torso_hidden=(12, 6))
    agent.save(tmp_path / "a.safetensors")
    state = load_checkpoint(tmp_path / "a.safetensors")  # an agent's own file: its state dict
    assert tuple(state["config"]["torso_hidden"]) == (12, 6)
    restored = DQNAgent.load(tmp_path / "a.safetensors")
    assert restored.config.torso_hidden == (12, 6)  # a tuple again, not a list
    assert _linear_shapes(restored.online.torso) == [(12, 4), (6, 12)]
    x = torch.randn(3, 4).to(agent.online.torso.layers[0].weight.dtype)
    # exact: the same weights, the same computation
    torch.testing.assert_close(restored.online(x), agent.online(x), rtol=0, atol=0)
    with pytest.raises(CheckpointError, match=r"torso.layers.1.weight has shape \(6, 12\)"):
        _agent(torso_hidden=(12, 7)).load_state_dict(state)
    # the same shapes, another config: the uniform 16-16 torso against torso_hidden=(16, 16)
    same = _agent(torso_width=16).state_dict()
    with pytest.raises(CheckpointError, match=r"torso_hidden \(checkpoint None, now \(16, 16\)\)"):
        _agent(torso_hidden=(16, 16)).load_state_dict(same)


def test_a_checkpoint_older_than_the_field_loads_as_the_uniform_torso(tmp_path: Path) -> None:
    assert "torso_hidden" in backfilled_fields(DQNConfig) and "torso_hidden" not in resumable_fields(
        DQNConfig
    )
    path = tmp_path / "old.safetensors"
    _agent(torso_width=16).save(path)
    saved = load_checkpoint(path)
    del saved["config"]["torso_hidden"]  # as written before the field existed
    save_checkpoint(path, saved)
    check_config_dict(DQNConfig, saved["config"])  # accepted: the default is that network
    restored = DQNAgent.load(path)
    assert restored.config.torso_hidden is None and _linear_shapes(restored.online.torso) == [
        (16, 4),
        (16, 16),
    ]
    del saved["config"]["torso_width"]  # any other fixed field is still required
    with pytest.raises(ValueError, match="lacks field"):
        check_config_dict(DQNConfig, saved["config"])


def _train(capsys, *args: str) -> tuple[int, list[str]]:
    code = main(["train", "--no-progress", "--no-tensorboard", "--eval-episodes", "1", *args])
    return code, capsys.readouterr().err.strip().splitlines()


def test_cli_set_and_resume(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    small = ("--set", "learning_starts=64", "--set", "batch_size=16", "--set", "buffer_size=512")
    args = ("--agent", "dqn", "--run-dir", str(run), *small)
    assert _train(capsys, *args, "--steps", "128", "--set", "torso_hidden=24,16")[0] == 0
    state = load_checkpoint(run / "checkpoint.safetensors")["agent"]
    assert tuple(state["config"]["torso_hidden"]) == (24, 16)
    assert tuple(state["online"]["torso.layers.1.weight"].shape) == (16, 24)
    files = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    code, err = _train(capsys, *args, "--steps", "160", "--resume", "--set", "torso_hidden=24,8")
    assert code == 2 and err == [
        "error: --resume cannot change torso_hidden (checkpoint (24, 16), now (24, 8)): start a new run"
    ], err
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == files  # nothing written
