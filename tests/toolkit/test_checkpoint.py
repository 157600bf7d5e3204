"""Checkpoints: round trips, atomic writes, cross-dtype loading, clear errors that touch nothing."""

from __future__ import annotations

import os
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from tritonrl.toolkit.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from tritonrl.toolkit.optim import MasterWeightOptimizer
from tritonrl.toolkit.runstate import capture_rng_state, load_into_module, restore_rng_state


def _model(dtype: torch.dtype, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).to(dtype)


def test_round_trip_nested_values(tmp_path):
    state = {
        "config": {"lr": 3e-4, "hidden": (64, 64), "name": "ppo", "none": None, "flag": True},
        "counters": {"step": 12345, "updates": 7},
        "int_keys": {0: torch.arange(3), 5: {"x": 1.5}},
        "list": [torch.zeros(2, dtype=torch.bfloat16), 3, "s"],
        "array": np.arange(4, dtype=np.uint32),
        "big": 2**100,
        "nan": float("inf"),
    }
    path = tmp_path / "c.safetensors"
    save_checkpoint(path, state)
    back = load_checkpoint(path)
    assert back["config"] == state["config"]  # tuples stay tuples
    assert back["counters"] == state["counters"]
    assert set(back["int_keys"]) == {0, 5}  # int keys stay ints (torch optimizers rely on it)
    assert torch.equal(back["int_keys"][0], torch.arange(3))
    assert back["list"][0].dtype == torch.bfloat16 and back["list"][1:] == [3, "s"]
    assert back["array"].dtype == np.uint32 and back["array"].tolist() == [0, 1, 2, 3]
    assert back["big"] == 2**100 and back["nan"] == float("inf")


def test_views_and_shared_tensors_are_saved(tmp_path):
    base = torch.arange(10.0)
    save_checkpoint(tmp_path / "c.safetensors", {"a": base, "b": base, "view": base[2:5]})
    back = load_checkpoint(tmp_path / "c.safetensors")
    assert torch.equal(back["a"], base) and torch.equal(back["b"], base)
    assert torch.equal(back["view"], torch.tensor([2.0, 3.0, 4.0]))


def test_unsupported_value_names_its_place(tmp_path):
    with pytest.raises(TypeError, match="config.fn"):
        save_checkpoint(tmp_path / "c.safetensors", {"config": {"fn": object()}})


@pytest.mark.parametrize(("src", "dst"), [(torch.bfloat16, torch.float32), (torch.float32, torch.bfloat16)])
def test_module_loads_across_dtypes(tmp_path, src, dst):
    saved = _model(src, seed=1)
    save_checkpoint(tmp_path / "m.safetensors", {"model": saved.state_dict()})
    target = _model(dst, seed=2)
    load_into_module(target, load_checkpoint(tmp_path / "m.safetensors")["model"])
    for (name, p_saved), p_new in zip(saved.state_dict().items(), target.state_dict().values(), strict=True):
        assert p_new.dtype == dst, name
        # bf16 -> f32 is exact; f32 -> bf16 rounds to nearest: equal to torch's own cast.
        assert torch.equal(p_new, p_saved.to(dst)), name


def test_optimizer_masters_restore_exact_f32_values(tmp_path):
    """bf16 training saves f32 masters; loading into an f32 model gives the exact master values."""
    model = _model(torch.bfloat16)
    opt = MasterWeightOptimizer(model.parameters(), torch.optim.Adam, lr=1e-2)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(8, 5, dtype=torch.bfloat16)).float().pow(2).mean().backward()
        opt.step()
    save_checkpoint(tmp_path / "c.safetensors", {"model": model.state_dict(), "opt": opt.state_dict()})
    state = load_checkpoint(tmp_path / "c.safetensors")
    f32 = _model(torch.float32, seed=5)
    opt32 = MasterWeightOptimizer(f32.parameters(), torch.optim.Adam, lr=1e-2)
    load_into_module(f32, state["model"])
    opt32.load_state_dict(state["opt"])
    for p, m in zip(f32.parameters(), opt.masters, strict=True):
        assert torch.equal(p, m)
    exp_avg = opt32.optimizer.state[opt32.params[0]]["exp_avg"]
    assert exp_avg.dtype == torch.float32
    assert torch.equal(exp_avg, opt.optimizer.state[opt.masters[0]]["exp_avg"])


def _snapshot(m: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in m.state_dict().items()}


def _assert_untouched(m: torch.nn.Module, before: dict[str, torch.Tensor]) -> None:
    for k, v in m.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_mismatched_shapes_raise_and_leave_module_untouched(tmp_path):
    other = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 4))
    save_checkpoint(tmp_path / "c.safetensors", {"model": other.state_dict()})
    target = _model(torch.float32)
    before = _snapshot(target)
    # The first layer matches and would be copied by a naive loader before the second fails.
    with pytest.raises(CheckpointError, match=r"2\.weight has shape \(4, 7\).*expects \(3, 7\)"):
        load_into_module(target, load_checkpoint(tmp_path / "c.safetensors")["model"])
    _assert_untouched(target, before)


def test_missing_keys_raise_and_leave_module_untouched():
    target = _model(torch.float32)
    before = _snapshot(target)
    partial = {k: torch.zeros_like(v) for k, v in target.state_dict().items() if not k.startswith("2.")}
    with pytest.raises(CheckpointError, match="missing"):
        load_into_module(target, partial)
    _assert_untouched(target, before)


@pytest.mark.parametrize("cut", [4, 100, -1, -40])
def test_truncated_file_is_a_clear_error(tmp_path, cut):
    path = tmp_path / "c.safetensors"
    save_checkpoint(path, {"model": _model(torch.float32).state_dict(), "step": 3})
    data = path.read_bytes()
    path.write_bytes(data[:cut])
    with pytest.raises(CheckpointError, match="truncated|too short|not a safetensors"):
        load_checkpoint(path)


def test_foreign_files_are_clear_errors(tmp_path):
    from safetensors.torch import save_file

    plain = tmp_path / "plain.safetensors"
    save_file({"w": torch.ones(2)}, plain)
    with pytest.raises(CheckpointError, match="not a tritonrl checkpoint"):
        load_checkpoint(plain)
    pickled = tmp_path / "model.pt"
    torch.save({"w": torch.ones(2)}, pickled)
    with pytest.raises(CheckpointError, match="not a safetensors file|truncated"):
        load_checkpoint(pickled)
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(CheckpointError, match="too short|not a safetensors"):
        load_checkpoint(text)
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        load_checkpoint(tmp_path / "missing.safetensors")


def test_loading_never_unpickles(tmp_path, monkeypatch):
    path = tmp_path / "c.safetensors"
    save_checkpoint(path, {"model": _model(torch.float32).state_dict(), "rng": capture_rng_state()})

    def forbidden(*args, **kwargs):
        raise AssertionError("pickle used while loading a checkpoint")

    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(torch, "load", forbidden)
    load_checkpoint(path)


def test_crash_mid_save_keeps_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "c.safetensors"
    save_checkpoint(path, {"step": 1, "w": torch.ones(3)})
    original = path.read_bytes()

    def crash(src, dst):
        raise OSError("disk vanished")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk vanished"):
        save_checkpoint(path, {"step": 2, "w": torch.zeros(3)})
    assert path.read_bytes() == original
    assert load_checkpoint(path)["step"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.safetensors"]  # no temporary left behind


def test_rng_state_round_trip(tmp_path):
    torch.manual_seed(3)
    np.random.seed(3)  # noqa: NPY002 (the global RNG is the thing under test)
    random.seed(3)
    save_checkpoint(tmp_path / "r.safetensors", {"rng": capture_rng_state()})
    first = (torch.rand(3), np.random.rand(3), random.random())  # noqa: NPY002
    restore_rng_state(load_checkpoint(tmp_path / "r.safetensors")["rng"])
    second = (torch.rand(3), np.random.rand(3), random.random())  # noqa: NPY002
    assert torch.equal(first[0], second[0])
    assert np.array_equal(first[1], second[1])
    assert first[2] == second[2]


def test_header_only_load_reads_no_payload(tmp_path: Path) -> None:
    """``tensors=False``: configs and counters come back, tensors are ``None``, the payload is unread
    (a checkpoint whose tensor bytes are cut off still gives its header; the full load refuses it)."""
    path = tmp_path / "c.safetensors"
    save_checkpoint(path, {"config": {"lr": 0.1, "hidden": (4, 4)}, "w": torch.ones(1000), "step": 7})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 2000])
    head = load_checkpoint(path, tensors=False)
    assert head == {"config": {"lr": 0.1, "hidden": (4, 4)}, "w": None, "step": 7}
    with pytest.raises(CheckpointError, match="truncated or corrupt tensor data"):
        load_checkpoint(path)
