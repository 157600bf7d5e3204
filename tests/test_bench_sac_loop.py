"""benchmarks/sac_loop.py: the SAC loop and its single-file reference run and give ratio rows
(a smoke run: small networks, a few hundred steps; about 20 s on the shared 2-core machine)."""

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
    assert [r.impl for r in rows] == ["reference: single file", "sac"] * 2
    assert all(r.benchmark == "sac_loop" and r.unit == "steps/s" for r in rows)
    assert all(math.isfinite(r.value) and r.value > 0 for r in rows)
    for ref, ours in (rows[0:2], rows[2:4]):
        assert ref.case == ours.case and ref.ratio == 1.0
        assert ours.ratio is not None and math.isclose(ours.ratio, ours.value / ref.value)
    assert "CleanRL's SAC defaults" in rows[0].case and "collection only" in rows[2].case
