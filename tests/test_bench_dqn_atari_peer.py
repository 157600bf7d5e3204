"""benchmarks/dqn_atari_peer.py without CleanRL: its window, the two rates, the command lines and
the one-thread runner (the runs themselves need a CleanRL checkout and are made by hand)."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmark files live in the checkout, not in the wheel
peer = importlib.import_module("dqn_atari_peer")

REL = 1e-12
"""The rates are a few float sums and one division of exact inputs: rounding only."""


def _args(*extra: str) -> argparse.Namespace:
    return peer.parse_args(["--cleanrl", "/nowhere/cleanrl", "--cleanrl-python", "/nowhere/python", *extra])


def test_window_starts_past_learning_starts_and_ends_before_the_last_step() -> None:
    assert peer.window(30_000, 10_000, 1_000) == (11_000, 29_000)
    assert peer.window(3_000, 1_000, 500) == (1_500, 2_500)
    assert peer.window(30_001, 10_500, 1_000) == (11_000, 30_000)  # CleanRL's last step is 30_000
    with pytest.raises(ValueError, match="multiple of 100"):
        peer.window(30_000, 10_000, 150)
    with pytest.raises(ValueError, match="at least 2000"):
        peer.window(13_000, 10_000, 1_000)


def test_peer_rate_uses_the_wall_times_of_the_window_points() -> None:
    # 40 steps/s before step 1_500, 50 steps/s after: only the window's two points count
    points = [
        [s, s / 40 if s <= 1_500 else 1_500 / 40 + (s - 1_500) / 50, 0.0] for s in range(1_100, 3_000, 100)
    ]
    assert peer.peer_rate(points, 1_500, 2_500) == pytest.approx(50.0, rel=REL)
    with pytest.raises(ValueError, match="no charts/SPS point at step 3000"):
        peer.peer_rate(points, 1_500, 3_000)


def test_tritonrl_rate_is_the_window_steps_over_the_intervals_wall_time() -> None:
    rows = [
        {"global_step": 1_000.0, "charts/SPS": 9_999.0},  # before learning: outside
        {"global_step": 1_500.0, "charts/SPS": 9_999.0},  # the interval that ends at the start: outside
        {"global_step": 2_000.0, "charts/SPS": 50.0},
        {"global_step": 2_000.0, "charts/episodic_return": 3.0},  # a row without SPS
        {"global_step": 2_500.0, "charts/SPS": 25.0},
        {"global_step": 3_000.0, "charts/SPS": 1.0},  # the final evaluation's interval: outside
    ]
    expected = 1_000 / (500 / 50 + 500 / 25)
    assert peer.tritonrl_rate(rows, 1_500, 2_500) == pytest.approx(expected, rel=REL)
    with pytest.raises(ValueError, match="no charts/SPS row"):
        peer.tritonrl_rate(rows[2:], 1_500, 2_500)


def test_tritonrl_command_is_accepted_by_trains_parser(tmp_path: Path) -> None:
    from tritonrl.cli.train import add_parser

    args = _args("--steps", "20000", "--learning-starts", "5000", "--buffer-size", "50000", "--env", "Pong")
    cmd = peer.tritonrl_command(args, tmp_path / "run")
    assert cmd[:3] == [sys.executable, "-m", "tritonrl"]
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    parsed = parser.parse_args(cmd[3:])
    assert (parsed.agent, parsed.env, parsed.steps) == ("dqn-atari", "ALE/Pong-v5", 20_000)
    assert parsed.overrides == ["learning_starts=5000", "buffer_size=50000", "eps_decay_steps=2000"]
    assert (parsed.device, parsed.threads, parsed.eval_every, parsed.checkpoint_minutes) == ("cpu", 1, 0, 0.0)
    assert parsed.run_dir == str(tmp_path / "run")


def test_cleanrl_command_runs_the_script_as_main_on_one_thread(tmp_path: Path) -> None:
    args = _args("--env", "Pong")
    cmd = peer.cleanrl_command(args)
    assert cmd[3] == "/nowhere/cleanrl/cleanrl/dqn_atari.py"
    assert cmd[4:] == [
        "--env-id",
        "PongNoFrameskip-v4",
        "--total-timesteps",
        "30000",
        "--learning-starts",
        "10000",
        "--buffer-size",
        "100000",
        "--seed",
        "1",
        "--no-cuda",
    ]
    # the runner on a stand-in script: run as __main__, its own argv, one torch thread
    script = tmp_path / "script.py"
    script.write_text(
        "import sys, torch\nif __name__ == '__main__':\n"
        "    print(torch.get_num_threads(), sys.argv[0].endswith('script.py'), sys.argv[1:], __file__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", peer.CLEANRL_RUNNER, str(script), "--flag", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.split()
    assert out == ["1", "True", "['--flag',", "'1']", str(script)]


def test_table_ratio_is_the_median_of_the_pairs() -> None:
    ms = [
        peer.Measurement("cleanrl", 0, 50.0, (1, 2), 10.0, 1.0, 0.99, 70.0),
        peer.Measurement("tritonrl", 0, 100.0, (1, 2), 10.0, 1.0, 0.99),
        peer.Measurement("tritonrl", 1, 90.0, (1, 2), 10.0, 1.0, 0.99),
        peer.Measurement("cleanrl", 1, 30.0, (1, 2), 10.0, 1.0, 0.99),
        peer.Measurement("cleanrl", 2, 40.0, (1, 2), 10.0, 1.0, 0.99),
        peer.Measurement("tritonrl", 2, 80.0, (1, 2), 10.0, 1.0, 0.99),
    ]
    cleanrl, tritonrl = peer.table_rows(ms, _args())
    # exact: medians of three exact values pick one of them, and the baseline's ratio is set to 1.0
    assert (cleanrl.value, cleanrl.ratio, tritonrl.value) == (40.0, 1.0, 90.0)
    assert tritonrl.ratio == pytest.approx(2.0, rel=REL)  # the pairs: 2.0, 3.0, 2.0
    assert "ratio range 2.00-3.00x" in tritonrl.note and "one torch thread" in tritonrl.case


def test_bench_run_without_a_checkout_gives_no_rows(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.delenv("TRITONRL_CLEANRL", raising=False)
    monkeypatch.delenv("TRITONRL_CLEANRL_PYTHON", raising=False)
    assert peer.run(quick=True) == []
    assert "TRITONRL_CLEANRL" in capsys.readouterr().out
