"""Data-parallel scaling: env steps/s of ``train`` with 1 and with 2 processes (``torchrun``).

Each measurement is ``python -m torch.distributed.run --standalone --nproc-per-node N -m
tritonrl train ...`` in a fresh folder, with the same global settings for every N (the
preset's global ``--num-envs``, each of the N ranks stepping its share), one torch thread per
process, no evaluation until the end and no TensorBoard. The throughput is rank 0's
``charts/SPS`` (global env steps per second of wall time between two metric flushes), the median
over the flushes after the first (start-up, first update); process start-up and the final
evaluation are outside it.

Rows, per agent (``ppo`` on CartPole-v1, 8 environments; ``dqn`` on CartPole-v1, 4 environments):

- ``1 process``: the single-process run (the baseline);
- ``2 processes (gloo)``: two CPU ranks; ratio ``sps2 / sps1``; ``extra["efficiency"]`` is
  ``sps2 / (2 * sps1)``: 1.0 is perfect scaling, 0.5 no gain at all.

On a machine with 2 or more CUDA devices the same pair is measured with ``--device cuda``
(NCCL, one GPU per rank); with one GPU those rows are left out, with a line on stderr.

On a CPU the ranks share the machine's cores: with 2 cores and anything else running, expect
well under perfect scaling (the ranks also wait for each other at every gradient all-reduce).
"""

from __future__ import annotations

import csv
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from tritonrl.cli.bench import Row

NAME = "scaling"
REQUIRES = ("gymnasium",)  # where it is missing, `tritonrl bench` skips this file in one line
AGENTS = [  # (preset, env, global envs, steps, steps with quick, log every)
    ("ppo", "CartPole-v1", 8, 32_768, 12_288, 2_048),
    ("dqn", "CartPole-v1", 4, 12_000, 6_000, 1_000),
]


def train_sps(
    agent: str, env: str, num_envs: int, steps: int, log_every: int, nproc: int, device: str = "cpu"
) -> float:
    """Median ``charts/SPS`` of ``train`` on ``nproc`` processes after the first flush (module doc).

    Raises:
        RuntimeError: the run failed (its last output lines in the message).
    """
    with tempfile.TemporaryDirectory(prefix="tritonrl-scaling-") as tmp:
        run = Path(tmp) / "run"
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(nproc),
            "-m",
            "tritonrl",
            "train",
            *("--agent", agent, "--env", env, "--num-envs", str(num_envs), "--steps", str(steps)),
            *("--log-every", str(log_every), "--eval-every", "0", "--eval-episodes", "1"),
            *("--checkpoint-minutes", "0", "--device", device, "--threads", "1"),
            *("--run-dir", str(run), "--no-progress", "--no-tensorboard"),
        ]
        env_vars = {**os.environ, "OMP_NUM_THREADS": "1"}
        # the ranks import the tritonrl this process runs (a checkout without PYTHONPATH: its root)
        env_vars.setdefault("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
        proc = subprocess.run(cmd, cwd=tmp, env=env_vars, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
            raise RuntimeError(f"train on {nproc} process(es) failed ({proc.returncode}):\n{tail}")
        with open(run / "metrics.csv", newline="") as f:
            sps = [float(r["charts/SPS"]) for r in csv.DictReader(f) if r.get("charts/SPS")]
    if len(sps) < 2:
        raise RuntimeError(f"only {len(sps)} metric flushes: raise the steps or lower log_every")
    return statistics.median(sps[1:])


def _pair(
    agent: str, env: str, num_envs: int, steps: int, log_every: int, device: str, backend: str
) -> list[Row]:
    case = f"{agent} {env}, {num_envs} envs global, {device}"
    one = train_sps(agent, env, num_envs, steps, log_every, 1, device)
    two = train_sps(agent, env, num_envs, steps, log_every, 2, device)
    eff = two / (2 * one)
    return [
        Row(NAME, case, "1 process", one, "env steps/s", note="baseline"),
        Row(
            NAME,
            case,
            f"2 processes ({backend})",
            two,
            "env steps/s",
            ratio=two / one,
            note=f"efficiency sps2/(2*sps1) = {eff:.2f}",
            extra={"efficiency": eff},
        ),
    ]


def run(quick: bool = False) -> list[Row]:
    """The rows of the module docstring. ``quick``: fewer steps per run."""
    rows: list[Row] = []
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for agent, env, num_envs, steps, quick_steps, log_every in AGENTS:
        n = quick_steps if quick else steps
        if gpus >= 2:  # first: on a GPU machine they are the point, and a time limit cuts the end
            rows += _pair(agent, env, num_envs, n, log_every, "cuda", "NCCL")
        rows += _pair(agent, env, num_envs, n, log_every, "cpu", "gloo")
    if gpus == 1:
        print("scaling: one CUDA device: the multi-GPU (NCCL) rows are not measured", file=sys.stderr)
    return rows
