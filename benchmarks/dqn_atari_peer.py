"""tritonrl's ``dqn-atari`` preset beside CleanRL's unmodified ``cleanrl/dqn_atari.py``: env steps/s.

Run by hand (it needs a CleanRL checkout and a Python environment for it, outside this repo)::

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/dqn_atari_peer.py \\
        --cleanrl /path/to/cleanrl --cleanrl-python /path/to/cleanrl-venv/bin/python
    # options: --env Breakout --steps 30000 --learning-starts 10000 --buffer-size 100000 --repeats 3
    #          --only cleanrl|tritonrl   --dry-run (print and check both command lines, run nothing)

Both sides train one environment on the CPU with one torch thread, each in its own process, one
after the other (the order alternates between repeats, so a drift in the machine's load falls on
both): CleanRL's script on ``<GAME>NoFrameskip-v4`` (``--no-cuda``), tritonrl's ``train --agent
dqn-atari`` on ``ALE/<GAME>-v5`` (``--device cpu --threads 1``, no periodic evaluation, no
wall-time checkpoints). Both get the same ``--steps``, ``--learning-starts`` and ``--buffer-size``;
every other setting is each side's default.

What is measured: env steps/s of the learning phase, over the same window of env steps on both
sides, from each side's own log: the first log point after ``learning_starts`` to the last one
before the end (``--log-every`` apart, a multiple of 100):

- CleanRL: the wall times TensorBoard records with its ``charts/SPS`` points (one every 100 steps
  once learning started; the value it prints, ``SPS:``, is the mean since the start, warm-up
  included, so its last one is shown beside, not used);
- tritonrl: the ``charts/SPS`` of each ``metrics.csv`` interval in the window (steps over the
  interval's wall time); the last interval, which would hold the final evaluation, is outside.

Start-up (imports, the ALE, network construction), the steps before learning and the end (the
final evaluation and checkpoint of tritonrl, the event-file close of CleanRL) are outside the
window. The table's ``ratio`` is tritonrl / CleanRL of each repeat's pair (``> 1``: tritonrl is
faster), its median, and the range over the repeats; ``load`` is the 1-minute load average seen
before each run, ``cpu`` a run's CPU time over its wall time.

One torch thread on CleanRL's side: ``OMP_NUM_THREADS=1`` and ``MKL_NUM_THREADS=1`` in its
environment, and the script is started by a runner of a few lines (:data:`CLEANRL_RUNNER`) that
calls ``torch.set_num_threads(1)``, registers the ALE ids where the installed ale-py has not, and
runs the script with ``runpy.run_path(..., run_name="__main__")``: the script itself is unmodified.

Seen working (CleanRL at fe8d8a0, 2026-04): Python 3.11, torch 2.13.0 (CPU), gymnasium 0.29.1
(the script uses 0.29's ``GrayScaleObservation``, ``FrameStack`` and the vector env's
``final_info`` / ``final_observation``, all gone in gymnasium 1.x), ale-py 0.12.1 (the emulator
tritonrl's side runs; it ships the ROMs, which CleanRL's pin 0.8.1 downloads through AutoROM;
0.9.1 works too), numpy 1.26.4 (gymnasium 0.29's env checker uses ``np.bool8``),
opencv-python-headless 4.10.0.84 (newer ones need numpy 2), tyro 1.0.17, tensorboard 2.21.0.

Smoke runs of CleanRL's side only (3,000 steps, learning from 1,000, buffer 10,000, window
1,500-2,500, on an "Intel(R) Xeon(R) Processor" of a two-core machine shared with other work):
71-75 env steps/s with ale-py 0.12.1 and with 0.9.1 alike (load 1.0-1.5, a whole core; its own
last ``SPS:``, warm-up included, 104-105), 54-55 at load 1.6-1.9 (70-85 % of a core).

Differences between the two setups, left as each side has them (the env-side ones change what
a step costs, or the game itself):

- sticky actions: none on either side (``NoFrameskip-v4``; tritonrl makes ``ALE/...-v5`` with
  ``repeat_action_probability=0``);
- frames: CleanRL skips 4 frames on RGB screens (``MaxAndSkipEnv``: four RGB frames read, a max of
  the last two), then resizes the RGB frame to 84x84 and converts it to grey (``cv2``);
  tritonrl uses gymnasium's ``AtariPreprocessing`` (the ALE's grey screen, read for the last two
  frames of the skip, max, resize);
- frame stack: CleanRL's ``FrameStack`` fills the stack with copies of the first frame at a reset;
  tritonrl's with zeros; CleanRL's replay stores whole stacks (4 frames per transition,
  ``optimize_memory_usage``), tritonrl's frame replay single frames;
- the same on both: up to 30 no-ops at a real reset (1 to 30 raw frames), a life loss ends the
  training episode without resetting the game (the next reset steps a no-op), FIRE (then action 2)
  after each reset where the game has FIRE, rewards clipped to their sign, the minimal action set,
  at most 108,000 frames a game; CleanRL's episode statistics count raw frames, tritonrl's agent
  steps;
- training: CleanRL's defaults (Adam lr 1e-4, MSE loss, batch 32, an update every 4 env steps, the
  target copied every 1,000, epsilon from 1 to 0.01 over the first 10 % of ``--steps``), which
  the ``dqn-atari`` preset has too; epsilon's decay is set to the same 10 % of ``--steps`` on
  tritonrl's side (the preset's 1M steps would keep it exploring, and skipping the greedy forward,
  for the whole run).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

NAME = "dqn_atari_peer"
ROOT = Path(__file__).resolve().parents[1]
PRESET = "dqn-atari"
PEER_SCRIPT = "cleanrl/dqn_atari.py"
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
PEER_POINT_EVERY = 100
"""CleanRL logs ``charts/SPS`` at every step past ``learning_starts`` that 100 divides."""

CLEANRL_RUNNER = """\
import runpy, sys
import torch
torch.set_num_threads(1)
try:
    import ale_py
except ImportError:  # the script's own error then says what is missing
    ale_py = None
if ale_py is not None:
    import gymnasium as gym
    if "PongNoFrameskip-v4" not in gym.registry:  # ale-py >= 0.10 under gymnasium 0.29
        from ale_py.registration import register_v0_v4_envs, register_v5_envs
        register_v0_v4_envs()
        register_v5_envs()
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
"""``python -c`` code that runs ``argv[1]`` (CleanRL's script, unmodified) as ``__main__`` on one
torch thread, with the ALE ids registered in gymnasium where ale-py has not done so: 0.8.1 (CleanRL's
pin) registers them through a gymnasium entry point, 0.9 on import, 0.10 and later only when asked
(``gym.register_envs``, which gymnasium 0.29 lacks)."""

_READ_EVENTS = """\
import glob, json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
(folder,) = glob.glob(sys.argv[1] + "/runs/*")
events = EventAccumulator(folder, size_guidance={"scalars": 0})
events.Reload()
print(json.dumps([[e.step, e.wall_time, e.value] for e in events.Scalars("charts/SPS")]))
"""
"""Run by CleanRL's Python in the run's folder: its ``charts/SPS`` points as ``[step, wall, value]``."""

_VERSIONS = """\
import importlib.metadata as m, json, sys
out = {"python": sys.version.split()[0]}
for name in ("torch", "gymnasium", "ale-py", "numpy", "opencv-python-headless", "opencv-python", "tyro"):
    try:
        out[name] = m.version(name)
    except m.PackageNotFoundError:
        pass
print(json.dumps(out))
"""


class Measurement(NamedTuple):
    """One run of one side: env steps/s over the window, and what the run looked like (a named
    tuple: ``tritonrl bench`` imports the file without a ``sys.modules`` entry, which a dataclass needs)."""

    side: str
    repeat: int
    sps: float
    window: tuple[int, int]
    wall_s: float
    load: float
    cpu: float
    own_sps_last: float | None = None
    """CleanRL's last printed ``SPS`` (the mean since its start)."""


# ----------------------------------------------------------------------------- the command lines


def env_ids(game: str) -> tuple[str, str]:
    """CleanRL's and tritonrl's id of ``game`` (``Breakout``: ``BreakoutNoFrameskip-v4``,
    ``ALE/Breakout-v5``)."""
    return f"{game}NoFrameskip-v4", f"ALE/{game}-v5"


def window(steps: int, learning_starts: int, log_every: int) -> tuple[int, int]:
    """The env steps measured: from the first multiple of ``log_every`` past ``learning_starts`` to
    the last one before ``steps`` (both sides log there).

    Raises:
        ValueError: ``log_every`` is not a positive multiple of 100 (CleanRL's points), or the window
            holds fewer than two log intervals.
    """
    if log_every <= 0 or log_every % PEER_POINT_EVERY:
        raise ValueError(f"--log-every must be a positive multiple of {PEER_POINT_EVERY}, got {log_every}")
    start = (learning_starts // log_every + 1) * log_every
    end = ((steps - 1) // log_every) * log_every
    if end - start < 2 * log_every:
        raise ValueError(
            f"--steps {steps} leaves {max(end - start, 0)} env steps after --learning-starts "
            f"{learning_starts} to measure; at least {2 * log_every} are needed (two --log-every intervals "
            f"past the first log point, and one before the end)"
        )
    return start, end


def cleanrl_command(args: argparse.Namespace) -> list[str]:
    """CleanRL's run: its Python, the one-thread runner, the script and its flags."""
    script = str(Path(args.cleanrl) / PEER_SCRIPT)
    return [
        args.cleanrl_python,
        "-c",
        CLEANRL_RUNNER,
        script,
        "--env-id",
        env_ids(args.env)[0],
        "--total-timesteps",
        str(args.steps),
        "--learning-starts",
        str(args.learning_starts),
        "--buffer-size",
        str(args.buffer_size),
        "--seed",
        str(args.seed),
        "--no-cuda",
    ]


def tritonrl_command(args: argparse.Namespace, run_dir: Path) -> list[str]:
    """tritonrl's run: ``python -m tritonrl train`` on the CPU, one thread, into ``run_dir``."""
    return [
        sys.executable,
        "-m",
        "tritonrl",
        *tritonrl_train_args(args, run_dir),
    ]


def tritonrl_train_args(args: argparse.Namespace, run_dir: Path) -> list[str]:
    """The ``train`` subcommand and its flags (a final evaluation of one episode is the least
    ``train`` runs; it comes after the measured window)."""
    return [
        "train",
        "--agent",
        PRESET,
        "--env",
        env_ids(args.env)[1],
        "--steps",
        str(args.steps),
        "--seed",
        str(args.seed),
        "--device",
        "cpu",
        "--threads",
        "1",
        "--set",
        f"learning_starts={args.learning_starts}",
        "--set",
        f"buffer_size={args.buffer_size}",
        "--set",  # CleanRL decays epsilon over exploration_fraction (0.1) of --total-timesteps
        f"eps_decay_steps={max(1, args.steps // 10)}",
        "--eval-every",
        "0",
        "--eval-episodes",
        "1",
        "--log-every",
        str(args.log_every),
        "--checkpoint-minutes",
        "0",
        "--no-progress",
        "--run-dir",
        str(run_dir),
    ]


def _child_env(pythonpath: Path) -> dict[str, str]:
    """This process's environment with one thread and ``pythonpath`` first on ``PYTHONPATH``."""
    env = {**os.environ, **ONE_THREAD}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(pythonpath), env.get("PYTHONPATH", "")) if p)
    return env


# ----------------------------------------------------------------------------- the rates


def peer_rate(points: list[list[float]], start: int, end: int) -> float:
    """Env steps/s between CleanRL's ``charts/SPS`` points at steps ``start`` and ``end``.

    Raises:
        ValueError: a point is missing (the run ended early, or logs elsewhere).
    """
    wall = {int(step): t for step, t, _ in points}
    missing = [s for s in (start, end) if s not in wall]
    if missing:
        raise ValueError(f"CleanRL logged no charts/SPS point at step {missing[0]} ({len(points)} points)")
    return (end - start) / (wall[end] - wall[start])


def tritonrl_rate(rows: list[dict[str, float]], start: int, end: int) -> float:
    """Env steps/s over the ``metrics.csv`` intervals that tile ``(start, end]``: the steps over the
    sum of the intervals' wall times (each interval's steps / its ``charts/SPS``).

    Raises:
        ValueError: the rows do not tile the window (a missing flush, or another log interval).
    """
    marks = sorted((int(r["global_step"]), r["charts/SPS"]) for r in rows if "charts/SPS" in r)
    steps = [s for s, _ in marks]
    if start not in steps or end not in steps:
        raise ValueError(f"tritonrl's metrics.csv has no charts/SPS row at step {start} and {end}: {steps}")
    seconds, prev = 0.0, start
    for step, sps in marks[steps.index(start) + 1 : steps.index(end) + 1]:
        seconds += (step - prev) / sps
        prev = step
    return (end - start) / seconds


# ----------------------------------------------------------------------------- running


def _timed(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float, label: str) -> tuple[float, float]:
    """Run ``cmd`` (output into ``cwd``'s ``stdout.txt`` / ``stderr.txt``); its wall time and CPU share.

    Raises:
        RuntimeError: a non-zero exit (the end of its stderr attached) or a time-out.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(cwd / "stdout.txt", "w") as out, open(cwd / "stderr.txt", "w") as err:
        try:
            proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=err, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{label}: no result within {timeout:.0f} s (see {cwd})") from None
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        tail = (cwd / "stderr.txt").read_text()[-3000:]
        raise RuntimeError(f"{label} exited with {proc.returncode}:\n{tail}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu / wall


def run_cleanrl(args: argparse.Namespace, repeat: int, folder: Path) -> Measurement:
    """One CleanRL run in ``folder`` (its ``runs/`` lands there) and its rate over the window."""
    start, end = window(args.steps, args.learning_starts, args.log_every)
    load = os.getloadavg()[0]
    env = _child_env(Path(args.cleanrl))
    wall, cpu = _timed(cleanrl_command(args), folder, env, args.timeout, "CleanRL's dqn_atari.py")
    read = subprocess.run(
        [args.cleanrl_python, "-c", _READ_EVENTS, str(folder)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    points = json.loads(read.stdout.strip().splitlines()[-1])
    own = float(points[-1][2]) if points else None
    return Measurement("cleanrl", repeat, peer_rate(points, start, end), (start, end), wall, load, cpu, own)


def run_tritonrl(args: argparse.Namespace, repeat: int, folder: Path) -> Measurement:
    """One tritonrl run with its run folder in ``folder`` and its rate over the window."""
    from tritonrl.toolkit.logger import read_csv

    start, end = window(args.steps, args.learning_starts, args.log_every)
    load = os.getloadavg()[0]
    run_dir = folder / "run"
    cmd = tritonrl_command(args, run_dir)
    wall, cpu = _timed(cmd, folder, _child_env(ROOT), args.timeout, f"tritonrl train --agent {PRESET}")
    rate = tritonrl_rate(read_csv(run_dir / "metrics.csv"), start, end)
    return Measurement("tritonrl", repeat, rate, (start, end), wall, load, cpu)


def run_pairs(args: argparse.Namespace) -> list[Measurement]:
    """``--repeats`` rounds of both sides (or ``--only`` one), the order alternating by round."""
    sides = {"cleanrl": run_cleanrl, "tritonrl": run_tritonrl}
    order = ["cleanrl", "tritonrl"] if args.only is None else [args.only]
    results = []
    for repeat in range(args.repeats):
        for side in order if repeat % 2 == 0 else order[::-1]:
            folder = Path(tempfile.mkdtemp(prefix=f"{NAME}-{side}-"))
            try:
                m = sides[side](args, repeat, folder)
            except Exception:
                print(f"{side} run {repeat + 1}: failed; its files are kept in {folder}", file=sys.stderr)
                raise
            shutil.rmtree(folder, ignore_errors=True)
            print(
                f"{side} run {repeat + 1}/{args.repeats}: {m.sps:.1f} env steps/s over steps "
                f"{m.window[0]}-{m.window[1]} (wall {m.wall_s:.0f} s, load {m.load:.2f}, cpu {m.cpu:.0%})",
                flush=True,
            )
            results.append(m)
    return results


# ----------------------------------------------------------------------------- the table


def table_rows(results: list[Measurement], args: argparse.Namespace) -> list[Any]:
    """One :class:`~tritonrl.cli.bench.Row` per side: the median rate, the range over the
    repeats in its note; tritonrl's ``ratio`` is the median of the per-repeat ratios."""
    from tritonrl.cli.bench import Row

    cleanrl_id, tritonrl_id = env_ids(args.env)
    case = f"{args.env}, 1 env, cpu, one torch thread"
    by_side: dict[str, list[Measurement]] = {}
    for m in results:
        by_side.setdefault(m.side, []).append(m)
    ratios = []
    if "cleanrl" in by_side and "tritonrl" in by_side:
        peer = {m.repeat: m.sps for m in by_side["cleanrl"]}
        ratios = [m.sps / peer[m.repeat] for m in by_side["tritonrl"] if m.repeat in peer]
    rows = []
    for side, impl in (
        ("cleanrl", f"cleanrl dqn_atari.py ({cleanrl_id})"),
        ("tritonrl", f"{PRESET} ({tritonrl_id})"),
    ):
        ms = by_side.get(side, [])
        if not ms:
            continue
        rates = [m.sps for m in ms]
        start, end = ms[0].window
        note = (
            f"range {min(rates):.1f}-{max(rates):.1f} over {len(ms)}; steps {start}-{end} of {args.steps}; "
            f"load {min(m.load for m in ms):.2f}-{max(m.load for m in ms):.2f}; "
            f"cpu {min(m.cpu for m in ms):.0%}-{max(m.cpu for m in ms):.0%}"
        )
        ratio = None
        if side == "tritonrl" and ratios:
            ratio = statistics.median(ratios)
            note = f"ratio range {min(ratios):.2f}-{max(ratios):.2f}x; " + note
        elif side == "cleanrl":
            ratio = 1.0 if ratios else None
            own = [m.own_sps_last for m in ms if m.own_sps_last is not None]
            if own:
                note += f"; its own last SPS (mean since start) {min(own):.0f}-{max(own):.0f}"
        extra = {"wall_s_median": statistics.median(m.wall_s for m in ms), "repeats": float(len(ms))}
        rows.append(Row(NAME, case, impl, statistics.median(rates), "env steps/s", ratio, note, extra))
    return rows


def peer_versions(args: argparse.Namespace) -> str:
    """CleanRL's commit (when ``--cleanrl`` is a git checkout) and its environment's package versions."""
    try:
        commit = subprocess.run(
            ["git", "-C", args.cleanrl, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        found = subprocess.run(
            [args.cleanrl_python, "-c", _VERSIONS], capture_output=True, text=True, timeout=120, check=True
        )
        versions = json.loads(found.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return f"CleanRL: versions unknown ({exc})"
    listed = ", ".join(f"{k} {v}" for k, v in versions.items())
    return f"CleanRL {commit or '(not a git checkout)'}: {listed}"


# ----------------------------------------------------------------------------- dry run


def dry_run(args: argparse.Namespace) -> int:
    """Print both command lines; check tritonrl's with ``train``'s own parser and, where the preset
    is registered, its ``--set`` keys; check that CleanRL's script is there. Runs no training."""
    from tritonrl.cli.registry import get_agent
    from tritonrl.cli.train import add_parser

    run_dir = Path(tempfile.gettempdir()) / f"{NAME}-tritonrl-XXXX" / "run"
    print("CleanRL:  ", _shell(cleanrl_command(args), _child_env(Path(args.cleanrl)), args.cleanrl))
    print("tritonrl: ", _shell(tritonrl_command(args, run_dir), _child_env(ROOT), str(ROOT)))
    start, end = window(args.steps, args.learning_starts, args.log_every)
    print(f"window:    env steps {start}-{end}")
    script = Path(args.cleanrl) / PEER_SCRIPT
    ok = True
    if not script.is_file():
        print(f"CleanRL:   no {PEER_SCRIPT} under {args.cleanrl}")
        ok = False
    parser = argparse.ArgumentParser(prog="tritonrl")
    add_parser(parser.add_subparsers(dest="command"))
    try:
        parser.parse_args(tritonrl_train_args(args, run_dir))
        print("tritonrl:  train's parser accepts the flags")
    except SystemExit:
        ok = False
    try:
        config = get_agent(PRESET).configure(
            {"learning_starts": str(args.learning_starts), "buffer_size": str(args.buffer_size)},
            total_steps=args.steps,
        )
        print(f"tritonrl:  preset {PRESET} resolves to {config}")
    except ValueError as exc:
        print(f"tritonrl:  preset {PRESET} is not usable on this checkout: {exc}")
        ok = False
    return 0 if ok else 1


def _shell(cmd: list[str], env: dict[str, str], pythonpath: str) -> str:
    """``cmd`` as one shell line with its thread and path variables (the runner code shown as ``RUNNER``)."""
    shown = ["'<CLEANRL_RUNNER>'" if part == CLEANRL_RUNNER else part for part in cmd]
    variables = " ".join(f"{k}={env[k]}" for k in ONE_THREAD)
    return f"{variables} PYTHONPATH={pythonpath} {' '.join(shown)}"


# ----------------------------------------------------------------------------- entry points


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cleanrl", required=True, help="a CleanRL checkout (holds cleanrl/dqn_atari.py)")
    p.add_argument("--cleanrl-python", required=True, help="the Python of CleanRL's environment")
    p.add_argument("--env", default="Breakout", help="the game (default Breakout)")
    p.add_argument("--steps", type=int, default=30_000, help="env steps per run (default 30000)")
    p.add_argument("--learning-starts", type=int, default=10_000, help="both sides (default 10000)")
    p.add_argument("--buffer-size", type=int, default=100_000, help="both sides (default 100000)")
    p.add_argument("--repeats", type=int, default=3, help="runs of each side (default 3)")
    p.add_argument("--log-every", type=int, default=1_000, help="window granularity, a multiple of 100")
    p.add_argument("--seed", type=int, default=1, help="both sides (default 1)")
    p.add_argument("--timeout", type=float, default=3_600.0, help="seconds per run (default 3600)")
    p.add_argument("--only", choices=("cleanrl", "tritonrl"), default=None, help="run one side only")
    p.add_argument("--dry-run", action="store_true", help="print and check the command lines only")
    args = p.parse_args(argv)
    if args.repeats < 1 or args.steps < 1 or args.learning_starts < 0 or args.buffer_size < 1:
        p.error("--repeats, --steps and --buffer-size must be >= 1, --learning-starts >= 0")
    try:
        window(args.steps, args.learning_starts, args.log_every)
    except ValueError as exc:
        p.error(str(exc))
    return args


def run(quick: bool = False) -> list[Any]:
    """``tritonrl bench``'s entry: the rows when ``TRITONRL_CLEANRL`` (a CleanRL checkout) and
    ``TRITONRL_CLEANRL_PYTHON`` (its Python) are set, at the defaults (``quick``: 3,000 steps,
    learning from 1,000, a buffer of 10,000, one repeat); else one line saying so, and no rows."""
    checkout, python = os.environ.get("TRITONRL_CLEANRL"), os.environ.get("TRITONRL_CLEANRL_PYTHON")
    if not checkout or not python:
        print(f"{NAME}: no rows: set TRITONRL_CLEANRL and TRITONRL_CLEANRL_PYTHON, or run it by hand")
        return []
    argv = ["--cleanrl", checkout, "--cleanrl-python", python]
    if quick:
        argv += ["--steps", "3000", "--learning-starts", "1000", "--buffer-size", "10000"]
        argv += ["--repeats", "1", "--log-every", "500"]
    args = parse_args(argv)
    return table_rows(run_pairs(args), args)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or ``--dry-run``) and print the table; the exit code."""
    from tritonrl.cli.bench import env_header, format_table

    args = parse_args(argv)
    if args.dry_run:
        return dry_run(args)
    print(env_header())
    print(peer_versions(args))
    print(f"{NAME}: env steps/s of the learning phase, 1 env, CPU, one torch thread on both sides")
    results = run_pairs(args)
    print(format_table(table_rows(results, args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
