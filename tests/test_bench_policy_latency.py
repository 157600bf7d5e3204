"""benchmarks/policy_latency.py: its quick rows (a smoke run of the DQN pair, no timing asserted),
the rows without Stable-Baselines3 and ONNX Runtime, and the alternating windows."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("gymnasium")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmark files live in the checkout, not in the wheel
latency = importlib.import_module("policy_latency")


def _check_rows(rows: list, *, sb3: bool, onnx: bool) -> None:
    impls = [
        *(["SB3 predict"] if sb3 else []),
        "policy() module",
        "eval_policy",
        ".pt2 program",
        "AOTInductor",  # quick: a row that says the compile was skipped
        *(["ONNX Runtime"] if onnx else []),
    ]
    assert [r.impl for r in rows] == impls * 2
    for batch, group in zip(latency.BATCHES, (rows[: len(impls)], rows[len(impls) :]), strict=True):
        assert all(r.benchmark == "policy_latency" and f"batch {batch}, CPU" in r.case for r in group)
        assert len({r.case for r in group}) == 1 and "DQN, CartPole-v1, 64-64 ReLU" in group[0].case
        skipped = next(r for r in group if r.impl == "AOTInductor")
        assert math.isnan(skipped.value) and skipped.ratio is None and "quick" in skipped.note
        timed = [r for r in group if r is not skipped]
        for r in timed:
            assert r.unit == "us (p50)" and math.isfinite(r.value) and r.value > 0
            assert r.extra["p99_us"] >= r.value and r.extra["calls"] == latency.QUICK_CALLS[batch]
            assert f"p99 {r.extra['p99_us']:.1f} us" in r.note
        if sb3:
            base = timed[0]
            assert base.ratio == 1.0  # the baseline
            for r in timed[1:]:
                assert r.ratio is not None and math.isclose(r.ratio, base.value / r.value)
        else:
            assert all(r.ratio is None for r in timed)


def test_quick_rows_of_a_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    if latency.sb3() is None:
        pytest.skip("stable_baselines3 is not installed (a benchmark-only peer)")
    monkeypatch.setattr(latency, "QUICK_CALLS", {1: 40, 256: 4})
    threads = torch.get_num_threads()
    rows = latency.run(quick=True, pairs=("dqn",))
    assert torch.get_num_threads() == threads
    _check_rows(rows, sb3=True, onnx=latency.onnx_ready())


def test_rows_without_sb3_and_onnx_runtime(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(latency, "QUICK_CALLS", {1: 20, 256: 2})
    monkeypatch.setattr(latency, "sb3", lambda: None)
    monkeypatch.setattr(latency, "onnx_ready", lambda: False)
    rows = latency.run(quick=True, pairs=("dqn",))
    _check_rows(rows, sb3=False, onnx=False)
    out = capsys.readouterr().out.splitlines()
    assert sum("SB3 rows left out" in line and "pip install stable-baselines3" in line for line in out) == 1
    assert sum("ONNX Runtime rows left out" in line and "tritonrl[export]" in line for line in out) == 1


def test_windows_alternate_and_every_call_is_timed() -> None:
    calls: list[str] = []
    paths = {key: (lambda obs, key=key: calls.append(key)) for key in ("a", "b", "c")}
    syncs: list[int] = []
    times = latency.interleaved_latency(paths, None, 6, 3, warmup=1, sync=lambda: syncs.append(1))
    assert calls[:3] == ["a", "b", "c"]  # the warm-up
    rotated = (["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"])  # two calls per window
    assert calls[3:] == [key for order in rotated for key in order for _ in range(2)]
    assert all(t.shape == (6,) and (t >= 0).all() for t in times.values())
    assert len(syncs) == 3 + 18  # after each warm-up and each timed call
