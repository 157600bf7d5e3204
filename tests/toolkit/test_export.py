"""export_policy, load_exported and ``tritonrl export``: artifacts, sidecars and every refusal.

The parity of every preset's export is in tests/agents/test_policy_export.py; the serving example
in tests/toolkit/test_serving.py. Here: small policy modules written for the test (a linear one and
a GRU one), what the sidecar records, what is refused (and that nothing is written then), the
references-only trace, and the command line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from tritonrl.cli import main
from tritonrl.kernels.backend import references_forced, references_only, registry
from tritonrl.toolkit.export import (
    ExportError,
    export_policy,
    exported_program,
    foreign_ops,
    load_exported,
    sidecar_path,
)
from tritonrl.toolkit.policy import GreedyActor, PolicyModule

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)


class Linear(PolicyModule):
    family = "test"
    extra_outputs = ("q_values",)

    def __init__(self) -> None:
        super().__init__(OBS, gym.spaces.Discrete(3))
        self.net = nn.Linear(4, 3)

    def mirrors(self) -> list[torch.Tensor]:
        return [*self.net.parameters()]

    def act(self, obs: torch.Tensor, *state: torch.Tensor) -> torch.Tensor:
        return self.net(obs.to(torch.float32)).argmax(-1)

    def outputs(self, obs: torch.Tensor, *state: torch.Tensor) -> dict[str, torch.Tensor]:
        q = self.net(obs.to(torch.float32))
        return {"action": q.argmax(-1), "q_values": q}


class Recurrent(PolicyModule):
    family = "test"
    recurrent = True

    def __init__(self) -> None:
        super().__init__(OBS, gym.spaces.Discrete(3))
        self.cell, self.out = nn.GRUCell(4, 5), nn.Linear(5, 3)

    def mirrors(self) -> list[torch.Tensor]:
        return [*self.parameters()]

    def state_spec(self) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
        return [("h", (5,), torch.float32)]

    def act(self, obs: torch.Tensor, *state: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.cell(obs, state[0])
        return self.out(h).argmax(-1), h

    def outputs(self, obs: torch.Tensor, *state: torch.Tensor) -> dict[str, torch.Tensor]:
        action, h = self.act(obs, *state)
        return {"action": action, "state_0": h}


class DataDependent(Linear):
    def act(self, obs: torch.Tensor, *state: torch.Tensor) -> torch.Tensor:
        if bool(obs.sum() > 0):  # a branch on a value: torch.export cannot trace it
            return self.net(obs).argmax(-1)
        return torch.zeros(obs.shape[0], dtype=torch.long)


@torch.library.custom_op("tritonrl_test::scale", mutates_args=())
def _scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2.0


@_scale.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class Foreign(Linear):
    def act(self, obs: torch.Tensor, *state: torch.Tensor) -> torch.Tensor:
        return self.net(torch.ops.tritonrl_test.scale(obs)).argmax(-1)


def _seeded(cls: type[PolicyModule]) -> PolicyModule:
    torch.manual_seed(0)
    return cls().eval()


@pytest.mark.parametrize("fmt", ["pt2", "onnx"])
def test_a_feed_forward_policy_round_trips_with_a_dynamic_batch(fmt: str, tmp_path: Path) -> None:
    policy = _seeded(Linear)
    path = export_policy(policy, format=fmt, path=tmp_path / f"p.{fmt}", outputs="all")
    program = load_exported(path)
    for batch in (1, 7, 300):  # traced at 2: the batch dimension is dynamic
        obs = torch.rand(batch, 4) * 2 - 1
        action, q = program(obs)
        want = policy.outputs(obs)
        assert torch.equal(action, want["action"])  # exact: argmax of values within 1e-6
        torch.testing.assert_close(q, want["q_values"], rtol=1e-5, atol=1e-6)
    doc = json.loads(sidecar_path(path).read_text())
    assert (
        doc["format"] == "tritonrl-policy" and doc["artifact"] == path.name and doc["artifact_format"] == fmt
    )
    assert doc["inputs"] == ["obs"] and doc["outputs"] == ["action", "q_values"]
    assert doc["observation"]["space"]["type"] == "Box" and doc["observation"]["dtype"] == "float32"
    assert doc["action"] == {"space": {"type": "Discrete", "n": 3, "start": 0}, "shape": [], "dtype": "int64"}
    assert doc["recurrent"] is False and doc["state"] == [] and doc["dynamic_batch"] is True
    assert doc["onnx_opset"] == (18 if fmt == "onnx" else None)
    assert {"python", "torch", "tritonrl"} <= set(doc["versions"])


def test_a_recurrent_policy_exports_its_state_as_inputs_and_outputs(tmp_path: Path) -> None:
    policy = _seeded(Recurrent)
    path = export_policy(policy, format="onnx", path=tmp_path / "r.onnx")
    program = load_exported(path)
    assert program.recurrent and program.sidecar["inputs"] == ["obs", "h"]
    assert program.sidecar["outputs"] == ["action", "next_h"]
    assert program.sidecar["state"] == [{"name": "h", "shape": [5], "dtype": "float32"}]
    obs = torch.rand(20, 3, 4)
    h_ours, h_theirs = policy.initial_state(3), program.initial_state(3)
    for t in range(20):  # the state carried through 20 steps
        a_ours, *h_ours = policy(obs[t], *h_ours)
        a_theirs, *h_theirs = program(obs[t], *h_theirs)
        assert torch.equal(a_ours, a_theirs), t  # exact: argmax of values within 1e-6
        torch.testing.assert_close(h_theirs[0], h_ours[0], rtol=1e-5, atol=1e-6)


def test_an_aoti_package_runs_as_the_module(tmp_path: Path) -> None:
    policy = _seeded(Linear)
    program = load_exported(export_policy(policy, format="aoti", path=tmp_path / "p.aoti.pt2"))
    obs = torch.rand(9, 4)
    assert torch.equal(program(obs), policy(obs))  # exact: argmax of values within 1e-6
    with pytest.raises(ExportError, match=r"aoti artifact's name must end in \.pt2"):
        export_policy(policy, format="aoti", path=tmp_path / "p.aoti")
    assert not (tmp_path / "p.aoti").exists()


def _nothing_written(folder: Path) -> None:
    assert list(folder.iterdir()) == [], [p.name for p in folder.iterdir()]


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (DataDependent, r"DataDependent cannot be exported: .*"),
        (
            Foreign,
            r"Foreign cannot be exported: its graph calls tritonrl_test\.scale\.default, which is not ",
        ),
    ],
)
def test_a_policy_that_cannot_be_exported_is_refused_naming_why(
    cls: type[PolicyModule], message: str, tmp_path: Path
) -> None:
    with pytest.raises(ExportError, match=message):
        export_policy(_seeded(cls), path=tmp_path / "p.pt2")
    _nothing_written(tmp_path)


def test_bad_requests_are_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = _seeded(Linear)
    with pytest.raises(ExportError, match="unknown format 'zip'; formats: pt2, onnx, aoti"):
        export_policy(policy, format="zip", path=tmp_path / "p.zip")
    with pytest.raises(ExportError, match="at least 2 observations"):
        export_policy(policy, torch.zeros(1, 4), path=tmp_path / "p.pt2")
    with pytest.raises(ExportError, match="outputs must be 'action' or 'all'"):
        export_policy(policy, path=tmp_path / "p.pt2", outputs="q")
    half = _seeded(Linear).to(torch.bfloat16)
    with pytest.raises(ExportError, match=r"policy weights must be f32 .*net\.weight \(torch\.bfloat16\)"):
        export_policy(half, path=tmp_path / "p.pt2")
    with pytest.raises(ExportError, match="export takes a PolicyModule"):
        export_policy(nn.Linear(4, 3), path=tmp_path / "p.pt2")  # type: ignore[arg-type]
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # as if the export extra were not installed
    with pytest.raises(
        ExportError, match=r"format 'onnx' needs the export extra .*pip install 'tritonrl\[export\]'"
    ):
        export_policy(policy, format="onnx", path=tmp_path / "p.onnx")
    _nothing_written(tmp_path)


def test_load_exported_refuses_what_is_not_an_artifact(tmp_path: Path) -> None:
    (tmp_path / "a.pt2").write_bytes(b"x")
    with pytest.raises(ExportError, match="no sidecar a.pt2.json beside it"):
        load_exported(tmp_path / "a.pt2")
    (tmp_path / "a.pt2.json").write_text('{"format": "something-else"}')
    with pytest.raises(ExportError, match="not a tritonrl policy sidecar"):
        load_exported(tmp_path / "a.pt2")


def test_references_only_selects_every_reference_and_leaks_no_custom_op(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tritonrl.agents.dqn import DQNAgent, preset

    ops = registry()
    assert ops and not references_forced()
    with references_only():
        assert references_forced()
        for op in ops.values():
            assert op.select("cpu").backend == "torch" and "references_only" in op.select("cpu").reason
    assert not references_forced()
    # TRITONRL_INLINE_REFERENCE=0 routes traced kernel calls through the tritonrl:: custom ops; an
    # export trace takes the references all the same (the noisy dueling head, with C51's support)
    monkeypatch.setenv("TRITONRL_INLINE_REFERENCE", "0")
    env = gym.make("CartPole-v1")
    agent = DQNAgent(env.observation_space, env.action_space, preset("rainbow", buffer_size=100))
    ep = exported_program(agent.policy())
    targets = {str(n.target) for n in ep.graph_module.graph.nodes if n.op == "call_function"}
    assert not any(t.startswith("tritonrl") for t in targets) and foreign_ops(ep.graph_module) == []
    assert any("log_softmax" in t for t in targets)  # the head's reference: C51's distribution


def test_greedy_actor_takes_one_observation_and_resets_rows() -> None:
    policy = _seeded(Recurrent)
    actor = GreedyActor(policy)
    obs = torch.rand(2, 4)
    first = actor(obs)
    assert first.shape == (2,) and actor.state is not None
    h = actor.state[0].clone()
    actor.reset(torch.tensor([True, False]))
    assert torch.equal(actor.state[0][0], torch.zeros(5)) and torch.equal(
        actor.state[0][1], h[1]
    )  # exact: copies
    one = GreedyActor(_seeded(Linear))(np.zeros(4, np.float32))
    assert one.shape == () and one.dtype == torch.int64


# ----------------------------------------------------------------------------- the command line


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("export") / "run"
    assert main(["train", "--agent", "dqn", "--steps", "600", "--run-dir", str(run), "--no-progress"]) == 0
    return run


def test_export_command_writes_the_artifact_and_its_sidecar(
    run_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["export", str(run_dir), "--outputs", "all"]) == 0
    assert "dqn (step 600) exported to" in capsys.readouterr().out
    program = load_exported(run_dir / "policy.pt2")
    doc = program.sidecar
    assert doc["checkpoint"]["agent"] == "dqn" and doc["checkpoint"]["env"] == "CartPole-v1"
    assert doc["checkpoint"]["step"] == 600 and len(doc["checkpoint"]["crc32"]) == 8
    assert doc["outputs"] == ["action", "q_values"] and "market" not in doc
    from tritonrl.agents.dqn import DQNAgent

    agent = DQNAgent.load(run_dir / "checkpoint.safetensors")
    obs = torch.rand(50, 4)
    action, q = program(obs)
    assert torch.equal(action, agent.eval_policy()(obs))  # exact: one f32 program, eager and exported
    torch.testing.assert_close(q, agent.policy().q_values(obs), rtol=0, atol=0)  # exact: the same


def test_the_command_line_offers_every_format() -> None:
    from tritonrl.cli import export as cli_export
    from tritonrl.toolkit.export import FORMATS

    assert cli_export.FORMATS == FORMATS


def test_export_command_refusals_are_one_line(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    raw = (run_dir / "checkpoint.safetensors").read_bytes()
    (damaged / "checkpoint.safetensors").write_bytes(raw[: len(raw) // 2])
    cases = [
        ([str(tmp_path / "missing")], "no such run folder"),
        ([str(empty)], "no checkpoint.safetensors"),
        ([str(damaged)], "checkpoint.safetensors"),
        ([str(run_dir), "--format", "zip"], "invalid choice: 'zip'"),
    ]
    for argv, words in cases:
        capsys.readouterr()
        assert main(["export", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("error: ") and words in err and err.count("\n") == 1, err
    assert [p.name for p in empty.iterdir()] == [] and [p.name for p in damaged.iterdir()] == [
        "checkpoint.safetensors"
    ]
