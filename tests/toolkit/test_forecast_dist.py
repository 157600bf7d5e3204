"""The forecasting trainer data-parallel over windows: 2 gloo ranks take the steps of one process.

One spawn of 2 ranks runs every 2-rank fit of this file (a spawn costs seconds on a busy machine);
the single-process references run in the test process. The data: 273 training windows (after the
features' 20-row warm-up), so a
``batch_size`` of 32 ends each epoch with a batch of 17 (split 9 / 8, loss weights 18/17 and
16/17) and one of 34 with a batch of 1 (rank 1 holds no window: weight 0); 64 validation windows
(split 32 / 32).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from dist_run import run_ranks
from tritonrl.agents.forecast import MLP
from tritonrl.toolkit.checkpoint import load_checkpoint
from tritonrl.toolkit.distributed import DistContext, DistributedError
from tritonrl.toolkit.forecast import FitConfig, fit, load_windows

SOURCE = "synthetic,ar=0.4,bars=430,seed=3"
REPO = Path(__file__).resolve().parents[2]


def _config(batch_size: int) -> FitConfig:
    return FitConfig(
        epochs=2, batch_size=batch_size, lr=3e-3, warmup_steps=2, patience=5, log_every=4, eval_batch=16
    )


def _model(seed: int, dropout: float = 0.0) -> MLP:
    torch.manual_seed(seed)
    return MLP(8, 6, 1, 1, hidden=16, layers=1, dropout=dropout)  # no dropout: deterministic runs


KEEP = ("stopped", "global_step", "epochs", "best_epoch", "best_val_mse", "validation", "test", "checkpoint")


def _fit(batch_size: int, *, seed: int = 0, dropout: float = 0.0, **kw: Any) -> tuple[dict, dict]:
    """``(parameters, report)`` of a fit on ``SOURCE``; ``kw`` go to ``fit``."""
    train, validation, test = load_windows(SOURCE, 8, 1)
    model = _model(seed, dropout)
    report = fit(model, train, validation, test, _config(batch_size), tensorboard=False, **kw)
    # numpy, not tensors: a tensor sent back from a rank travels as a shared-memory handle that
    # dies with the rank's process (which may exit before the parent reads it)
    params = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    return params, {k: report.get(k) for k in KEEP}


def _ranks(ctx: DistContext, folder: str) -> dict:
    out: dict = {}
    # rank 1 builds different weights: fit starts every rank from rank 0's
    for batch in (32, 34):
        out[batch] = _fit(batch, seed=ctx.rank, dist=ctx)
    run_dir = Path(folder) / "run"
    if ctx.rank:  # every way fit writes fails on rank 1, and what it prints is kept
        import tritonrl.toolkit.checkpoint as checkpoint
        import tritonrl.toolkit.logger as logger
        import tritonrl.toolkit.runfolder as runfolder

        def wrote(*args: object, **kwargs: object) -> None:
            raise AssertionError("rank 1 wrote to the run folder")

        checkpoint.save_checkpoint = checkpoint.atomic_write_bytes = wrote  # type: ignore[assignment]
        logger.MetricLogger = runfolder.RunLock = runfolder.move_aside = wrote  # type: ignore[assignment,misc]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        out["run"] = _fit(32, dist=ctx, run_dir=run_dir)
    out["printed"] = printed.getvalue()
    out["files"] = sorted(p.name for p in run_dir.iterdir())
    # dropout: each rank its own stream, saved per rank; stopped (asked on rank 0 alone) and
    # resumed on 2 ranks it ends where an uninterrupted run ends
    out["dropout"] = _fit(32, dropout=0.2, dist=ctx)
    asks = iter([False, True])
    asked = (lambda: next(asks, True)) if ctx.rank == 0 else (lambda: False)
    stop_dir = Path(folder) / "stopped"
    out["stopped"] = _fit(32, dropout=0.2, dist=ctx, run_dir=stop_dir, should_stop=asked)[1]["stopped"]
    out["resumed"] = _fit(32, dropout=0.2, seed=5, dist=ctx, run_dir=stop_dir, resume=True)
    try:
        _fit(33, dist=ctx)
    except DistributedError as exc:
        out["odd"] = str(exc)
    return out


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    return run_ranks(_ranks, 2, str(tmp_path_factory.mktemp("dp")), timeout=240)


def _close(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    # The 2-rank gradient is the single process's sum split in two (on a short batch, weighted
    # by the shares): equal up to f32 rounding of the sums (~1e-7 relative), carried through 18
    # AdamW steps. Measured: at most 3e-8 apart (weights ~0.1); 1e-6 leaves room for another BLAS
    # and stays far below one step's change (lr = 3e-3).
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(
            torch.from_numpy(a[k]), torch.from_numpy(b[k]), rtol=1e-5, atol=1e-6, msg=k
        )


@pytest.mark.parametrize("batch_size", [32, 34])
def test_two_ranks_take_the_single_process_steps(two_ranks: list[dict], batch_size: int) -> None:
    single_params, single = _fit(batch_size)
    (p0, r0), (p1, r1) = two_ranks[0][batch_size], two_ranks[1][batch_size]
    for k in p0:  # both ranks end bit-identical (same averaged gradients, same updates)
        assert np.array_equal(p0[k], p1[k]), k
    assert r0 == r1  # the same global validation/test metrics and early-stopping decisions
    _close(p0, single_params)
    assert r0["global_step"] == single["global_step"] == 2 * 9
    assert r0["best_epoch"] == single["best_epoch"]
    for split in ("validation", "test"):
        for name, metrics in single[split].items():
            for key, value in metrics.items():
                assert r0[split][name][key] == pytest.approx(value, rel=1e-4, abs=1e-6), (split, name, key)
    # and the comparison can fail: the other batch size's run is far outside the tolerance
    other = two_ranks[0][66 - batch_size][0]
    with pytest.raises(AssertionError):
        _close(other, single_params)


def test_rank0_alone_writes_and_a_batch_that_does_not_split_is_an_error(two_ranks: list[dict]) -> None:
    assert two_ranks[0]["files"] == [".lock", "checkpoint.safetensors", "fit_report.json", "metrics.csv"]
    saved = load_checkpoint(two_ranks[0]["run"][1]["checkpoint"])
    assert saved["ranks"]["world_size"] == 2 and len(saved["ranks"]["rng"]) == 2  # every rank's RNG
    assert two_ranks[0]["run"][1] == two_ranks[1]["run"][1]
    assert two_ranks[1]["printed"] == ""
    for out in two_ranks:
        assert "batch_size=33 is not divisible by the world size 2" in out["odd"]


def _torchrun(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    argv = [
        *("-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"),
        *("-m", "tritonrl", "fit", "--model", "mlp", "--data", f"market:{SOURCE}"),
        *("--window", "8", "--epochs", "1", "--set", "hidden=16", "--set", "layers=1", "--threads", "1"),
        *("--no-progress", "--no-tensorboard", "--run-dir", str(tmp_path / "run"), *flags),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRITONRL_DIST_TIMEOUT": "60", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, *argv], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180
    )


def test_cli_under_torchrun(tmp_path: Path) -> None:
    done = _torchrun(tmp_path, "--batch-size", "32")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("run folder:") == 1  # rank 0 alone prints the report
    assert "windows/s" in done.stdout and "test windows" in done.stdout
    run = tmp_path / "run"
    files = sorted(p.name for p in run.iterdir())
    assert files == [".lock", "checkpoint.safetensors", "fit_report.json", "metrics.csv"]
    assert load_checkpoint(run / "checkpoint.safetensors", tensors=False)["ranks"]["world_size"] == 2
    # a global batch the 2 ranks cannot split: one error line (rank 0's), nothing written, a failure
    (tmp_path / "other").mkdir()
    bad = _torchrun(tmp_path / "other", "--batch-size", "33")
    assert bad.returncode != 0  # torchrun's status when a worker fails (each worker exits 2)
    errors = [line for line in bad.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: --batch-size=33 is not divisible by the world size 2: use a multiple of 2 (each of "
        "the 2 ranks takes an equal share)"
    ], bad.stderr[-3000:]
    assert not (tmp_path / "other" / "run").exists()


def test_two_ranks_stop_together_and_resume_exactly(two_ranks: list[dict]) -> None:
    assert [out["stopped"] for out in two_ranks] == ["should_stop", "should_stop"]
    for out in two_ranks:
        params, report = out["resumed"]
        whole_params, whole = out["dropout"]
        assert report == whole | {"checkpoint": report["checkpoint"]}
        for k in params:  # dropout masks, weights, moments: all restored per rank, bit for bit
            assert np.array_equal(params[k], whole_params[k]), k
    # the ranks drew different dropout masks, yet end identical (averaged gradients)
    for k in two_ranks[0]["dropout"][0]:
        assert np.array_equal(two_ranks[0]["dropout"][0][k], two_ranks[1]["dropout"][0][k])
