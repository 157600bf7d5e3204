"""benchmarks/sac_loop.py: the SAC loop and its single-file reference run and give ratio rows
(a smoke run: small networks, a few hundred steps, eager only; about 25 s on the shared 2-core machine)."""

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
sac_loop = importlib.import_module("sac_loop")


def test_quick_rows_compare_the_loop_with_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sac_loop, "LEARNING_STARTS", 300)  # the warm-up: enough for a batch of 256
    threads = torch.get_num_threads()
    rows = sac_loop.run(quick=True)
    assert torch.get_num_threads() == threads
    ref = "reference: single file"
    impls = [ref, "sac", "sac, overlap", ref, "td3", "td3, overlap", ref, "sac"]
    assert [r.impl for r in rows] == impls  # quick: no compiled rows (compilation takes minutes)
    assert all(r.benchmark == "sac_loop" and r.unit == "steps/s" for r in rows)
    assert all(math.isfinite(r.value) and r.value > 0 for r in rows)
    for ref, *ours in (rows[0:3], rows[3:6], rows[6:8]):
        assert all(r.case == ref.case for r in ours) and ref.ratio == 1.0
        for r in ours:
            assert r.ratio is not None and math.isclose(r.ratio, r.value / ref.value)
    assert "CleanRL's SAC defaults" in rows[0].case and "CleanRL's TD3 defaults" in rows[3].case
    assert "collection only" in rows[6].case


def test_loop_sps_times_after_compiling(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled row's rate excludes compilation: two updates run (and are timed apart) before
    the timed loop; eager runs them too, so both rows time the same steady state."""
    monkeypatch.setattr(sac_loop, "LEARNING_STARTS", 300)
    sps, compile_s = sac_loop.loop_sps(50, name="td3", hidden=8)
    assert sps > 0 and 0 < compile_s < math.inf
    _, none = sac_loop.loop_sps(50, name="sac", hidden=8, learn=False)
    assert none == 0.0  # collection only: no update, nothing to compile


def test_interleaved_times_every_runner_in_rotated_rounds() -> None:
    calls: list[tuple[str, int]] = []
    runners = {key: (lambda n, key=key: calls.append((key, n))) for key in ("a", "b", "c")}
    rates = sac_loop.interleaved(runners, 30, 3)
    assert set(rates) == {"a", "b", "c"} and all(r > 0 for r in rates.values())
    assert [k for k, _ in calls] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert all(n == 10 for _, n in calls)


@pytest.mark.parametrize("name", ["sac", "td3"])
def test_learner_updates_per_s_runs_the_update_the_gpu_rows_time(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GPU rows' timer on the CPU (small networks): it updates the agent (both parities of
    the delayed actor step) and returns a rate."""
    calls = []
    from tritonrl.agents.sac import SACAgent, TD3Agent

    cls = SACAgent if name == "sac" else TD3Agent
    real = cls.update

    def counted(self):  # type: ignore[no-untyped-def]
        calls.append(self.updates)
        return real(self)

    monkeypatch.setattr(cls, "update", counted)
    rate = sac_loop.learner_updates_per_s(name, device="cpu", min_time=0.05, hidden=16)
    assert math.isfinite(rate) and rate > 0
    assert len(calls) >= 18 and calls[:12] == list(
        range(12)
    )  # 10 warm, then the timer's own warm-up and >= 5
