"""``python -m tritonrl train`` as a real process: SIGINT/SIGTERM save and exit cleanly, and the
``train`` extra (matplotlib) is optional (issue 15, items 3 and 9)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("gymnasium")

from tritonrl.cli import main
from tritonrl.toolkit.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "--no-tuned",  # the preset: no first line naming tuned settings
    "--agent",
    "ppo",
    "--env",
    "CartPole-v1",
    "--num-envs",
    "2",
    "--set",
    "num_steps=16",
    "--set",
    "hidden=16",
    "--eval-every",
    "0",
    "--eval-episodes",
    "1",
    "--log-every",
    "64",
    "--no-progress",
    "--no-tensorboard",
]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


@pytest.mark.parametrize(
    "signals",
    [("SIGINT",), ("SIGTERM",), ("SIGINT", "SIGTERM")],
    ids=["sigint", "sigterm", "sigint-then-sigterm"],
)
def test_a_signal_saves_prints_one_line_and_resume_continues(
    signals: tuple[str, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tritonrl",
            "train",
            *TINY,
            "--steps",
            "100000000",
            "--run-dir",
            str(run),
        ],
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (run / "metrics.csv").exists():  # training has started (first metric flush)
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "training did not start"
            time.sleep(0.05)
        for name in signals:  # a second signal arrives while the first is being handled
            proc.send_signal(getattr(signal, name))
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    first = getattr(signal, signals[0])
    assert proc.returncode == 128 + first, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and out == ""
    m = re.fullmatch(
        rf"interrupted by {signals[0]} at step (\d+): checkpoint saved to "
        rf"{re.escape(str(run / 'checkpoint.safetensors'))}; continue with --resume",
        lines[0],
    )
    assert m, lines[0]
    step = int(m.group(1))
    assert load_checkpoint(run / "checkpoint.safetensors")["loop"]["step"] == step >= 64
    assert not list(run.glob(".*.tmp"))
    # the last flushed row is the step of the checkpoint
    assert (run / "metrics.csv").read_text().splitlines()[-1].startswith(f"{step},")

    assert main(["train", *TINY, "--steps", str(step + 32), "--run-dir", str(run), "--resume"]) == 0
    captured = capsys.readouterr()
    assert f": {step + 32} steps in" in captured.out and captured.err == ""
    assert load_checkpoint(run / "checkpoint.safetensors")["loop"]["step"] == step + 32


_HIDE_MATPLOTLIB = """
import sys

class HideMatplotlib:
    def find_spec(self, name, path=None, target=None):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, HideMatplotlib())
for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
    del sys.modules[name]
from tritonrl.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_without_matplotlib_the_curve_is_skipped_with_one_notice(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-c", _HIDE_MATPLOTLIB, "train", *TINY, "--steps", "64", "--run-dir", str(run)],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "notice: matplotlib is not installed: curve.png skipped (pip install 'tritonrl[train]')"
    ]
    assert (run / "metrics.csv").exists() and (run / "checkpoint.safetensors").exists()
    assert not (run / "curve.png").exists()
    assert "(metrics.csv, checkpoint.safetensors)" in proc.stdout
