"""One learner update of the pixel presets (``dqn-atari``, ``rainbow-atari``): the whole update,
frame replay sample included, on Atari-sized frames.

Rows:

- CPU (one torch thread): ``dqn-atari`` updates/s with the conv torsos' channels-last weights
  (the default) against the same network in NCHW (the layout a plain ``nn.Conv2d`` has), the two
  agents timed in turn over ``ROUNDS`` rounds;
- CUDA (where available): ``dqn-atari`` and ``rainbow-atari`` updates/s in bf16 (the training
  dtype of an Ampere-or-newer GPU: bf16 frames from ``frame_stack_sample``, bf16 convolutions,
  f32 loss and master weights) against f32 (``TRITONRL_DTYPE=f32``), batch 32.

``run(quick=True)``: a small replay and short timings (smoke runs, the GPU check).
"""

from __future__ import annotations

import statistics
import sys

import numpy as np
import torch
from tritonrl.cli.bench import Row, forced_dtype, format_table, one_cpu_thread, time_fn

NAME = "pixel_update"
REQUIRES = ("gymnasium",)  # where it is missing, `tritonrl bench` skips this file in one line
ROUNDS = 3
SHAPE = (4, 84, 84)


def _agent(name: str, device: str, steps: int, dtype: str | None = None, nchw: bool = False):
    """A pixel-preset agent on ``device`` whose frame replay holds ``steps`` random Atari steps
    (``nchw``: its conv weights in the contiguous layout, before any optimizer state exists)."""
    import gymnasium as gym
    from tritonrl.agents.dqn import DQNAgent, preset

    space = gym.spaces.Box(0, 255, SHAPE, np.uint8)
    with forced_dtype(dtype):
        cfg = preset(name, buffer_size=max(4 * steps, 1_000), learning_starts=0)
        agent = DQNAgent(space, gym.spaces.Discrete(4), cfg, num_envs=1, device=device, seed=0)
    if nchw:
        _nchw(agent)
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 256, (1, *SHAPE), dtype=np.uint8)
    for t in range(steps):
        nxt = rng.integers(0, 256, obs.shape, dtype=np.uint8)
        done = np.array([t % 200 == 199])
        agent.observe(obs, np.array([t % 4]), np.ones(1, np.float32), nxt, done, np.zeros(1, bool))
        obs = nxt
    for _ in range(3):
        agent.update()  # warm-up (allocations, cuDNN's algorithm choice)
    return agent


def _nchw(agent) -> None:
    """The agent's conv weights (and their target copies) in the contiguous NCHW layout (before its
    first update: Adam's moments are created in their parameter's layout)."""
    for net in (agent.online, agent.target):
        for conv in net.torso.convs:
            conv.weight.data = conv.weight.data.contiguous()


def _compare(label: str, a, b, names: tuple[str, str], device: str, min_time: float) -> list[Row]:
    times: dict[str, list[float]] = {names[0]: [], names[1]: []}
    for _ in range(ROUNDS):  # in turn: load bursts hit both alike
        for name, agent in zip(names, (a, b), strict=True):
            times[name].append(time_fn(agent.update, device, min_time=min_time / ROUNDS)["median"])
    base = statistics.median(times[names[1]])
    rows = []
    for name, ts in times.items():
        t = statistics.median(ts)
        note = f"{min(ts) * 1e3:.3g}..{max(ts) * 1e3:.3g} ms over {ROUNDS} rounds"
        if device == "cpu":
            note += "; 1 torch thread"
        rows.append(Row(NAME, label, name, 1.0 / t, "updates/s", base / t, note, {"seconds": t}))
    return rows


def run(quick: bool = False) -> list[Row]:
    """One Row per (case, variant); see the module docstring."""
    steps, min_time = (300, 0.3) if quick else (2_000, 3.0)
    rows: list[Row] = []
    if torch.cuda.is_available():
        for name in ("dqn-atari", "rainbow-atari"):
            bf16 = _agent(name, "cuda", steps, "bf16")
            f32 = _agent(name, "cuda", steps, "f32")
            rows += _compare(f"cuda {name} update, batch 32", bf16, f32, ("bf16", "f32"), "cuda", min_time)
    with one_cpu_thread():
        cl = _agent("dqn-atari", "cpu", steps)
        plain = _agent("dqn-atari", "cpu", steps, nchw=True)
        rows += _compare(
            "cpu dqn-atari update, batch 32", cl, plain, ("channels-last", "NCHW"), "cpu", min_time
        )
    return rows


if __name__ == "__main__":
    print(format_table(run(quick="--quick" in sys.argv)))
