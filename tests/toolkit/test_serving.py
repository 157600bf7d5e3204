"""The docs' serving example runs where tritonrl is not installed, and returns what tritonrl's own
evaluation returns.

The ``serve.py`` block of docs/pages/using-policies.md is run as it is in a subprocess started with
``python -S`` (no site initialisation: the editable install's path hook is never loaded) whose
import path holds the site-packages folders (torch, gymnasium, onnxruntime) and not the
repository; the subprocess first proves that ``import tritonrl`` fails there.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")
pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (the export extra)")

import gymnasium as gym
from tritonrl.agents.ppo import PPOAgent
from tritonrl.cli import main

PAGE = Path(__file__).resolve().parents[2] / "docs" / "pages" / "using-policies.md"
_BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)
_NO_TRITONRL = """\
import importlib.util
assert importlib.util.find_spec("tritonrl") is None, "tritonrl is importable here"
"""


def _serving_block() -> str:
    (block,) = [b for b in _BLOCK.findall(PAGE.read_text()) if b.startswith("# serve.py")]
    assert "tritonrl" not in block.replace("without tritonrl", "")  # it imports no tritonrl
    return block


def _site_packages() -> list[str]:
    """Where torch, gymnasium and onnxruntime are installed: this interpreter's site-packages (their
    ``.pth`` files, the editable install's among them, are not read without site initialisation)."""
    return sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})


def _returns_of(agent: PPOAgent) -> list[float]:
    """tritonrl's evaluation of the serving example's episodes (seeds 0, 1, 2)."""
    greedy = agent.eval_policy()
    env = gym.make("CartPole-v1")
    out = []
    for seed in range(3):
        obs, _ = env.reset(seed=seed)
        done, total = False, 0.0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(greedy(obs).numpy())
            total, done = total + float(reward), terminated or truncated
        out.append(total)
    return out


def test_the_serving_example_runs_without_tritonrl(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "ppo"
    assert main(["train", "--agent", "ppo", "--steps", "4096", "--run-dir", str(run), "--no-progress"]) == 0
    assert main(["export", str(run), "--format", "pt2"]) == 0
    assert main(["export", str(run), "--format", "onnx"]) == 0
    script = tmp_path / "serve.py"
    script.write_text(_NO_TRITONRL + _serving_block())
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONPATH"] = os.pathsep.join(_site_packages())
    done = subprocess.run(
        [sys.executable, "-S", str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    served = json.loads(done.stdout.strip().splitlines()[-1])
    ours = _returns_of(PPOAgent.load(run / "checkpoint.safetensors"))
    assert served == {"pt2": ours, "onnx": ours}  # the same actions, so the same episodes
    assert min(ours) > 9  # episodes of a policy, not of a crash at the first step


def test_the_subprocess_would_notice_an_importable_tritonrl(tmp_path: Path) -> None:
    """The guard the serving test prepends fails where tritonrl is on the path (it can fail)."""
    script = tmp_path / "guard.py"
    script.write_text(_NO_TRITONRL)
    env = dict(os.environ, PYTHONPATH=str(PAGE.parents[2]))  # the repository: its tritonrl/ folder
    done = subprocess.run([sys.executable, "-S", str(script)], env=env, capture_output=True, text=True)
    assert done.returncode != 0 and "tritonrl is importable here" in done.stderr
