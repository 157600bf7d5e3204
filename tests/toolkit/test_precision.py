"""The precision policy: one detection point, with mocked CUDA capability queries."""

from __future__ import annotations

import pytest
import torch
from tritonrl.toolkit.precision import PrecisionError, explain, training_dtype


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch):
    """Mock the two CUDA queries the policy reads; returns a setter for the capability."""
    state = {"cap": (8, 0), "calls": 0}

    def capability(device):
        state["calls"] += 1
        return state["cap"]

    monkeypatch.setattr(torch.cuda, "get_device_capability", capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "Fake GPU")
    monkeypatch.delenv("TRITONRL_DTYPE", raising=False)

    def set_cap(cap: tuple[int, int]) -> None:
        state["cap"] = cap
        training_dtype.cache_clear()

    set_cap.state = state  # type: ignore[attr-defined]
    return set_cap


@pytest.mark.parametrize("cap", [(7, 0), (7, 5), (6, 1), (3, 7)])
def test_pre_ampere_is_f32(fake_gpu, cap) -> None:
    fake_gpu(cap)
    assert training_dtype("cuda:0") == torch.float32
    d = explain("cuda:0")
    assert d.capability == cap and d.name == "Fake GPU" and d.source == "detected"
    assert "8.0" in d.reason


@pytest.mark.parametrize("cap", [(8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)])
def test_ampere_and_newer_is_bf16(fake_gpu, cap) -> None:
    fake_gpu(cap)
    assert training_dtype("cuda:0") == torch.bfloat16
    assert training_dtype(torch.device("cuda", 0)) == torch.bfloat16
    assert training_dtype(0) == torch.bfloat16


def test_cpu_is_f32(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITONRL_DTYPE", raising=False)
    assert training_dtype("cpu") == torch.float32
    assert training_dtype(None) == torch.float32
    assert training_dtype("meta") == torch.float32
    assert explain("cpu").capability is None


def test_cached_per_device(fake_gpu) -> None:
    fake_gpu((9, 0))
    for _ in range(5):
        training_dtype("cuda:0")
    assert fake_gpu.state["calls"] == 1
    training_dtype("cuda:1")
    assert fake_gpu.state["calls"] == 2
    training_dtype.cache_clear()
    training_dtype("cuda:0")
    assert fake_gpu.state["calls"] == 3


def test_forced_bf16_on_old_gpu_raises(fake_gpu, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu((7, 5))
    monkeypatch.setenv("TRITONRL_DTYPE", "bf16")
    with pytest.raises(PrecisionError, match=r"7\.5"):
        training_dtype("cuda:0")
    with pytest.raises(PrecisionError):
        training_dtype("cuda:0", override="bf16")


def test_forced_f32_on_new_gpu(fake_gpu, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu((9, 0))
    monkeypatch.setenv("TRITONRL_DTYPE", "f32")
    assert training_dtype("cuda:0") == torch.float32
    assert explain("cuda:0").source == "overridden"
    # The explicit argument beats the environment.
    assert training_dtype("cuda:0", override="auto") == torch.bfloat16


def test_forced_bf16_on_cpu_is_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONRL_DTYPE", "bf16")
    assert training_dtype("cpu") == torch.bfloat16
    assert explain("cpu").source == "overridden"
    monkeypatch.setenv("TRITONRL_DTYPE", "AUTO")
    assert training_dtype("cpu") == torch.float32


@pytest.mark.parametrize("bad", ["fp16", "float16", "bfloat", "yes"])
def test_bad_env_value_raises(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv("TRITONRL_DTYPE", bad)
    with pytest.raises(ValueError, match="auto, bf16, f32"):
        training_dtype("cpu")


def test_bad_override_argument_raises() -> None:
    with pytest.raises(ValueError, match="override"):
        training_dtype("cpu", override="half")
