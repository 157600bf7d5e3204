"""Damaged checkpoints are refused at load, not trained on (issue "Reliability II", item 3).

Checksums (crc32 of the header document and of every tensor's dtype, shape and bytes) catch
flipped bits anywhere in a checkpoint or a replay-buffer file; NaN or infinite weights and
optimizer states are refused at load and never saved as the last good checkpoint; every section
of a training checkpoint (agent entries, environment state, collector, RNG) is checked for
structure before anything is applied. Each case also goes through ``train --resume``: one
``error:`` line, exit status 2, the run folder byte for byte as it was.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import re
import shutil
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save as st_save
from tritonrl.toolkit.checkpoint import CheckpointError, checksum, load_checkpoint, save_checkpoint
from tritonrl.toolkit.runstate import nonfinite_entry

gym = pytest.importorskip("gymnasium")

from tritonrl.cli import main  # noqa: E402
from tritonrl.toolkit.envs.vector import make_vec_env  # noqa: E402
from tritonrl.toolkit.replay import ReplayBuffer  # noqa: E402
from tritonrl.toolkit.training.loop import DivergenceError, LoopConfig, run_training  # noqa: E402
from tritonrl.toolkit.training.onpolicy import OnPolicySchedule  # noqa: E402


def _state() -> dict[str, Any]:
    return {
        "w": torch.arange(24, dtype=torch.float32).reshape(4, 6),
        "h": torch.linspace(-1, 1, 8, dtype=torch.bfloat16),
        "ids": torch.arange(5, dtype=torch.int64),
        "flags": torch.tensor([True, False]),
        "step": 3,
        "cfg": {"lr": 1e-3, "name": "x", "shape": (2, 3)},
        "arr": np.arange(3, dtype=np.int32),
    }


def _layout(data: bytes) -> tuple[int, dict[str, Any]]:
    """The payload's offset in a safetensors file and its header."""
    (n,) = struct.unpack("<Q", data[:8])
    return 8 + n, json.loads(data[8 : 8 + n])


def _flip_in_tensor(path: Path, name: str) -> None:
    """Flip one bit in the middle of tensor ``name``'s bytes (a file of the same size, same header)."""
    data = bytearray(path.read_bytes())
    base, header = _layout(bytes(data))
    start, end = header[name]["data_offsets"]
    data[base + (start + end) // 2] ^= 0x04
    path.write_bytes(bytes(data))


def _one_line(exc: BaseException, path: Path) -> str:
    msg = str(exc)
    assert msg.startswith(str(path)) and "\n" not in msg and len(msg) < 400, msg
    return msg


# ----------------------------------------------------------------------------- checksums


def test_every_tensor_and_the_header_carry_a_checksum(tmp_path: Path) -> None:
    path = tmp_path / "c.safetensors"
    state = _state()
    save_checkpoint(path, state)
    _, header = _layout(path.read_bytes())
    sums = json.loads(header["__metadata__"]["tritonrl.crc32"])
    assert set(sums["tensors"]) == {"w", "h", "ids", "flags"} and len(sums["header"]) == 8
    assert sums["tensors"]["w"] == checksum(state["w"])
    assert json.loads(header["__metadata__"]["tritonrl"])["checksum"] == "crc32"
    back = load_checkpoint(path)
    assert torch.equal(back["w"], state["w"]) and torch.equal(back["h"], state["h"])  # exact: a copy


@pytest.mark.parametrize("name", ["w", "h", "ids", "flags"])
def test_a_flipped_bit_in_a_tensor_is_refused_at_load(tmp_path: Path, name: str) -> None:
    path = tmp_path / "c.safetensors"
    save_checkpoint(path, _state())
    _flip_in_tensor(path, name)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    msg = _one_line(info.value, path)
    assert f"tensor '{name}' does not match its crc32 checksum" in msg
    assert load_checkpoint(path, tensors=False)["step"] == 3  # the header alone is intact


def test_a_changed_dtype_or_header_value_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.safetensors"
    save_checkpoint(path, _state())
    good = path.read_bytes()
    # the same bytes read as int32: safetensors accepts it, the checksum covers the dtype
    assert good.count(b'"F32"') == 1
    path.write_bytes(good.replace(b'"F32"', b'"I32"'))
    with pytest.raises(CheckpointError, match="tensor 'w' does not match"):
        load_checkpoint(path)
    # a counter changed inside the JSON document (still valid JSON, same length)
    assert good.count(b'\\"step\\": 3') == 1
    path.write_bytes(good.replace(b'\\"step\\": 3', b'\\"step\\": 7'))
    for tensors in (True, False):  # the header-only read checks the header's checksum too
        with pytest.raises(CheckpointError, match=r"its header .* does not match its crc32 checksum"):
            load_checkpoint(path, tensors=tensors)


def test_missing_checksums_are_refused_but_older_files_load(tmp_path: Path) -> None:
    tensors = {"w": torch.ones(3)}
    doc = {"format": "tritonrl-checkpoint", "version": 1, "state": {"w": {"__tensor__": "w"}, "n": 2}}
    old = tmp_path / "old.safetensors"  # written before checksums existed: loads, unverified
    old.write_bytes(st_save(tensors, metadata={"tritonrl": json.dumps(doc)}))
    assert load_checkpoint(old)["n"] == 2
    stripped = tmp_path / "stripped.safetensors"  # says it has checksums, has none
    stripped.write_bytes(st_save(tensors, metadata={"tritonrl": json.dumps({**doc, "checksum": "crc32"})}))
    with pytest.raises(CheckpointError, match="checksums are missing"):
        load_checkpoint(stripped)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_flipped_byte_is_refused_or_changes_nothing(tmp_path: Path, data: st.DataObject) -> None:
    """A flip anywhere (header framing, JSON, names, offsets, payload) is refused; the only flips
    that load are those that change no value (JSON whitespace, the header's padding)."""
    path = tmp_path / "c.safetensors"
    save_checkpoint(path, _state())
    raw = bytearray(path.read_bytes())
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] ^= data.draw(st.integers(1, 255))
    path.write_bytes(bytes(raw))
    try:
        got = load_checkpoint(path)
    except CheckpointError as exc:
        _one_line(exc, path)
        return
    want = _state()
    assert set(got) == set(want)
    for k, v in want.items():
        if isinstance(v, torch.Tensor):
            assert got[k].dtype == v.dtype and torch.equal(got[k], v), k  # exact: nothing may change
        elif isinstance(v, np.ndarray):
            assert np.array_equal(got[k], v) and got[k].dtype == v.dtype, k
        else:
            assert got[k] == v, k


def test_replay_file_checksums(tmp_path: Path) -> None:
    def make() -> ReplayBuffer:
        return ReplayBuffer(64, (3,), num_envs=2, obs_dtype=torch.float32)

    buf = make()
    no = torch.zeros(2, dtype=torch.bool)
    for i in range(5):
        obs = torch.full((2, 3), float(i))
        buf.add(obs, torch.zeros(2, dtype=torch.int64), torch.ones(2), obs + 1, no, no)
    path = tmp_path / "replay.safetensors"
    buf.save(path)
    fresh = make()
    fresh.load(path)
    assert len(fresh) == len(buf) == 10
    _, header = _layout(path.read_bytes())
    name = next(k for k, v in header.items() if k != "__metadata__" and v["dtype"] == "F32")
    _flip_in_tensor(path, name)
    with pytest.raises(ValueError, match=f"tensor '{name}' does not match its crc32 checksum"):
        make().load(path)


# ----------------------------------------------------------------------------- non-finite


def test_nonfinite_entry_names_the_first_bad_tensor() -> None:
    state = {
        "net": {"w": torch.ones(3), "b": torch.tensor([0.0, float("inf")])},
        "opt": [{"m": torch.tensor([float("nan")])}],
        "replay": {"obs": torch.full((2,), float("nan"))},
        "ids": torch.arange(3),
    }
    assert nonfinite_entry(state) == "net.b"
    assert nonfinite_entry({"opt": state["opt"], "replay": state["replay"]}, skip=["replay"]) == "opt.0.m"
    assert nonfinite_entry({"a": {"replay": state["replay"]}}, skip=["a.replay"]) is None
    assert nonfinite_entry({"ids": state["ids"], "e": torch.empty(0)}) is None


def _cartpole_spaces() -> tuple[gym.Space, gym.Space]:
    env = gym.make("CartPole-v1")
    return env.observation_space, env.action_space


def _dqn() -> Any:
    from tritonrl.agents.dqn import DQNAgent, preset

    obs_space, act_space = _cartpole_spaces()
    cfg = preset("dqn", torso_width=16, buffer_size=64, batch_size=8, learning_starts=8)
    agent = DQNAgent(obs_space, act_space, cfg, num_envs=2, seed=0)
    obs = torch.zeros(2, 4)
    for _ in range(8):
        a = agent.act(obs)
        agent.observe(
            obs, a, torch.ones(2), obs, torch.zeros(2, dtype=torch.bool), torch.zeros(2, dtype=torch.bool)
        )
    agent.update()
    return agent


def _ppo() -> Any:
    from tritonrl.agents.ppo import PPOAgent, preset

    obs_space, act_space = _cartpole_spaces()
    return PPOAgent(obs_space, act_space, preset("ppo", num_steps=4, hidden=16), num_envs=2, seed=0)


def _first_float(tree: Mapping[str, Any]) -> str:
    return next(k for k, v in tree.items() if isinstance(v, torch.Tensor) and v.is_floating_point())


def _poison(state: dict[str, Any], *path: Any) -> None:
    node = state
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = node[path[-1]].clone().fill_(float("nan"))


@pytest.mark.parametrize("which", ["dqn-online", "dqn-optimizer", "dqn-target-master", "ppo-policy"])
def test_nonfinite_agent_state_is_refused_and_changes_nothing(which: str) -> None:
    agent = _dqn() if which.startswith("dqn") else _ppo()
    state = copy.deepcopy(agent.state_dict())
    if which == "dqn-online":
        _poison(state, "online", key := _first_float(state["online"]))
        expect = f"online.{key}"
    elif which == "dqn-optimizer":
        per_param = state["optimizer"]["optimizer"]["state"]
        pid = next(iter(per_param))
        _poison(state, "optimizer", "optimizer", "state", pid, "exp_avg")
        expect = f"optimizer.optimizer.state.{pid}.exp_avg"
    elif which == "dqn-target-master":
        state["target_master"] = [p.detach().float().clone() for p in agent.target.parameters()]
        _poison(state, "target_master", 0)
        expect = "target_master.0"
    else:
        _poison(state, "policy", key := _first_float(state["policy"]))
        expect = f"policy.{key}"
    before = copy.deepcopy(agent.state_dict())
    with pytest.raises(CheckpointError) as info:
        agent.load_state_dict(state, where="run/checkpoint.safetensors")
    msg = str(info.value)
    assert msg.startswith("run/checkpoint.safetensors: agent tensor ") and "\n" not in msg
    assert f"'{expect}' holds NaN or infinite values" in msg
    after = agent.state_dict()
    for k in ("online", "policy"):
        if k in before:
            assert all(torch.equal(before[k][n], after[k][n]) for n in before[k])  # exact: untouched


def test_nan_in_stored_experience_is_not_scanned() -> None:
    """Replay contents are exempt (unwritten slots are uninitialised memory; what was written
    passed the input guard): a NaN there loads, a NaN in the weights does not."""
    agent = _dqn()
    state = copy.deepcopy(agent.state_dict())
    key = next(k for k, v in state["replay"].items() if isinstance(v, torch.Tensor) and v.is_floating_point())
    state["replay"][key] = state["replay"][key].clone().fill_(float("nan"))
    agent.load_state_dict(state)


@pytest.mark.parametrize("make", [_dqn, _ppo], ids=["dqn", "ppo"])
def test_an_unknown_top_level_agent_entry_is_refused(make: Any) -> None:
    agent = make()
    state = {**agent.state_dict(), "onlinee": {}}
    with pytest.raises(CheckpointError, match=r"^agent state: unknown agent entry 'onlinee'"):
        agent.load_state_dict(state)
    assert set(agent.state_dict()) <= set(type(agent).part_keys) | {
        "agent",
        "config",
        "observation_space",
        "action_space",
        "num_envs",
        "seed",
        "counters",
        "generator",
    }


# ----------------------------------------------------------------------------- env sections


def _damaged_env_states(state: dict[str, Any]) -> dict[str, tuple[dict[str, Any], str]]:
    layers = state["envs"][1]
    base = next(i for i, layer in enumerate(layers) if "x_threshold" in layer)
    limit = next(i for i, layer in enumerate(layers) if "_elapsed_steps" in layer)
    cases = {}
    for name, (i, key, value, match) in {
        "state-too-long": (base, "state", np.zeros(5), r"CartPoleEnv.state: saved an array of shape \(5,\)"),
        "state-tuple-short": (
            base,
            "state",
            {"__seq__": "tuple", "items": [0.0, 1.0, 2.0]},
            "saved 3 numbers",
        ),
        "number-as-string": (base, "x_threshold", "2.4", "CartPoleEnv.x_threshold: saved a string"),
        "counter-as-array": (limit, "_elapsed_steps", np.zeros(2), r"saved an array of shape \(2,\)"),
        "generator-as-number": (base, "_np_random", 7, "saved a number, this env's holds a generator"),
    }.items():
        damaged = copy.deepcopy(state)
        damaged["envs"][1][i][key] = value
        cases[name] = (damaged, match)
    obs = copy.deepcopy(state)
    obs["obs"] = obs["obs"].long()
    cases["obs-not-float"] = (obs, "not a float tensor")
    return cases


def test_damaged_env_state_is_refused_before_anything_changes() -> None:
    env = make_vec_env("CartPole-v1", 2, seed=0)
    other = make_vec_env("CartPole-v1", 2, seed=5)
    for _ in range(3):
        env.step(torch.zeros(2, dtype=torch.int64))
    good = env.get_state()
    other.set_state(good)  # the intact state loads
    before = other.get_state()
    for name, (damaged, match) in _damaged_env_states(good).items():
        with pytest.raises(ValueError, match=match):
            other.set_state(damaged)
        after = other.get_state()
        assert torch.equal(after["obs"], before["obs"]), name  # exact: nothing was applied
        assert np.array_equal(after["envs"][1][-1]["state"], before["envs"][1][-1]["state"]), name
    env.close()
    other.close()


def test_collector_snapshot_and_sections_are_checked() -> None:
    import gymnasium as gym
    from toy_agent import ToyPolicy
    from tritonrl.toolkit.acting import SnapshotPolicy
    from tritonrl.toolkit.runstate import training_sections

    net = torch.nn.Linear(3, 2)
    toy = ToyPolicy(net, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2))
    policy = SnapshotPolicy(toy, lambda p, obs: p(obs), lambda: [*net.parameters()], lambda: 0)
    state = policy.state_dict()
    state["snapshot"]["net.bias"] = torch.tensor([0.0, float("inf")])
    before = {k: v.clone() for k, v in policy.snapshot.state_dict().items()}
    with pytest.raises(ValueError, match="collector snapshot tensor 'net.bias' holds NaN or infinite values"):
        policy.load_state_dict(state)
    assert all(torch.equal(v, policy.snapshot.state_dict()[k]) for k, v in before.items())  # exact: untouched
    sections = {k: {} for k in ("agent", "env", "schedule", "loop", "rng", "meta")}
    assert set(training_sections({"format": "tritonrl-train", **sections, "collector": {}}, "c")) >= {"env"}
    with pytest.raises(CheckpointError, match="^c: unknown section 'envs' in a training-run checkpoint$"):
        training_sections({"format": "tritonrl-train", **sections, "envs": {}}, "c")


# ----------------------------------------------------------------------------- the loop


class _Toy:
    """A linear 'policy' with one 'moment' that an update can poison while the weights stay finite."""

    def __init__(self, poison_at: int | None = None) -> None:
        self.net = torch.nn.Linear(4, 2)
        self.moment = torch.zeros(3)
        self.updates = 0
        self.poison_at = poison_at

    def act(self, obs: torch.Tensor, explore: bool = True) -> torch.Tensor:
        return torch.randint(0, 2, (obs.shape[0],))

    def observe(self, *args: Any) -> None:
        pass

    def update(self) -> dict[str, torch.Tensor]:
        self.updates += 1
        if self.updates == self.poison_at:
            self.moment[1] = float("nan")
        return {"charts/updates": torch.tensor(float(self.updates))}

    def state_dict(self) -> dict[str, Any]:
        return {"net": self.net.state_dict(), "moment": self.moment.clone(), "updates": self.updates}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.net.load_state_dict(state["net"])
        self.moment = state["moment"].clone()
        self.updates = state["updates"]


def _loop(agent: Any, run: Path, **kw: Any) -> dict[str, Any]:
    env = make_vec_env("CartPole-v1", 2, seed=0)
    opts: dict[str, Any] = {
        "total_steps": 64,
        "log_every": 16,
        "final_eval": False,
        "tensorboard": False,
        "plot": False,
        "run_dir": str(run),
        "checkpoint_every": 16,
    }
    opts.update(kw)
    try:
        return run_training(agent, env, OnPolicySchedule(4), LoopConfig(**opts))
    finally:
        env.close()


def test_a_nonfinite_state_never_replaces_the_last_good_checkpoint(tmp_path: Path) -> None:
    # an update every 4 vector steps (8 env steps): the 3rd (step 24) poisons the moment, not the
    # weights; the save at step 32 refuses to write it
    with pytest.raises(
        DivergenceError,
        match=r"^non-finite agent\.moment in the state to save at step 32: stopped; "
        r"the last good checkpoint \(step 16\) is kept$",
    ):
        _loop(_Toy(poison_at=3), tmp_path)
    good = tmp_path / "checkpoint.safetensors"
    saved = load_checkpoint(good)
    assert saved["loop"]["step"] == 16 and bool(saved["agent"]["moment"].isfinite().all())
    # the loop refuses such a checkpoint too, for an agent without its own check_state_dict
    state = dict(saved)
    state["agent"] = {**saved["agent"], "moment": torch.full((3,), float("inf"))}
    save_checkpoint(good, state)
    data = good.read_bytes()
    with pytest.raises(CheckpointError, match=r"checkpoint\.safetensors: agent tensor 'moment' holds NaN"):
        _loop(_Toy(), tmp_path, resume=True)
    assert good.read_bytes() == data


def test_the_end_of_a_run_does_not_save_the_step_it_just_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tritonrl.toolkit.lifecycle as lifecycle

    steps: list[int] = []
    real = lifecycle.save_checkpoint

    def counting(path: Path, state: Any) -> None:
        steps.append(int(state["loop"]["step"]))
        real(path, state)

    monkeypatch.setattr(lifecycle, "save_checkpoint", counting)
    _loop(_Toy(), tmp_path / "a", checkpoint_every=16)
    assert steps == [16, 32, 48, 64]  # the last step's save is the run's last
    steps.clear()
    _loop(_Toy(), tmp_path / "b", checkpoint_every=40)
    assert steps == [40, 64]  # the end saves the steps since the last checkpoint
    steps.clear()
    # the final evaluation runs before the last step's save, which so holds it
    _loop(_Toy(), tmp_path / "c", checkpoint_every=16, final_eval=True, eval_episodes=1)
    assert steps == [16, 32, 48, 64]
    assert load_checkpoint(tmp_path / "c" / "checkpoint.safetensors")["loop"]["evaluations"][-1][0] == 64


# ----------------------------------------------------------------------------- the CLI

_DQN = (
    "train",
    "--agent",
    "dqn",
    "--num-envs",
    "2",
    "--no-progress",
    "--no-tensorboard",
    "--eval-episodes",
    "1",
    "--set",
    "torso_width=16",
    "--set",
    "learning_starts=100",
    "--set",
    "train_freq=32",
    "--set",
    "batch_size=16",
    "--set",
    "buffer_size=1000",
)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder of a tiny DQN run (trained once for this module)."""
    run = tmp_path_factory.mktemp("trained") / "run"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        assert main([*_DQN, "--steps", "256", "--run-dir", str(run)]) == 0, err.getvalue()
    return run


def _flip_weight(ckpt: Path) -> None:
    _, header = _layout(ckpt.read_bytes())
    _flip_in_tensor(ckpt, next(k for k in header if k.startswith("agent.online.") and k.endswith("weight")))


def _rewrite(ckpt: Path, change: Any) -> None:
    state = load_checkpoint(ckpt)
    change(state)
    save_checkpoint(ckpt, state)  # valid checksums: the damage is in the content


def _nan_weights(state: dict[str, Any]) -> None:
    online = state["agent"]["online"]
    _poison(state, "agent", "online", _first_float(online))


def _long_cartpole_state(state: dict[str, Any]) -> None:
    layer = next(layer for layer in state["env"]["envs"][0] if "x_threshold" in layer)
    layer["state"] = np.zeros(5)


def _unknown_agent_entry(state: dict[str, Any]) -> None:
    state["agent"]["replay_v2"] = {"note": "not a DQN entry"}


CLI_CASES = {
    "flipped-weight-bit": (
        _flip_weight,
        r"damaged checkpoint: tensor 'agent\.online\..*weight' does not match",
    ),
    "nan-weights": (
        lambda p: _rewrite(p, _nan_weights),
        r"agent tensor 'online\.\S+' holds NaN or infinite values",
    ),
    "damaged-env-state": (
        lambda p: _rewrite(p, _long_cartpole_state),
        r"CartPoleEnv\.state: saved an array of shape \(5,\), this env's holds an array of shape \(4,\)",
    ),
    "unknown-agent-entry": (lambda p: _rewrite(p, _unknown_agent_entry), r"unknown agent entry 'replay_v2'"),
}


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes()) for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_train_resume_refuses_a_damaged_checkpoint_in_one_line(
    case: str, trained_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    damage, match = CLI_CASES[case]
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    damage(run / "checkpoint.safetensors")
    before = _snapshot(tmp_path)
    threads = torch.get_num_threads()
    try:
        code = main([*_DQN, "--steps", "512", "--resume", "--run-dir", str(run)])
    finally:
        torch.set_num_threads(threads)
    out, err = capsys.readouterr()
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"error: {run / 'checkpoint.safetensors'}: "), lines[0]
    assert re.search(match, lines[0]), lines[0]
    assert _snapshot(tmp_path) == before  # the run folder untouched, the checkpoint kept
    assert not (run / ".lock").read_text()  # the lock released
