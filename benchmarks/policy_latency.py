"""Action latency of an exported policy at batch 1 and 256, beside Stable-Baselines3's ``predict``.

Rows, for each pair of networks of the same sizes (untrained weights: latency does not depend on
training), at batch 1 and batch 256, one row per path: p50 of one call in microseconds (``value``),
p99 in ``extra`` and in the note, and the ratio of SB3's p50 to the row's (``> 1``: faster than
SB3). Every path takes the observations as a float32 numpy array ``[B, obs_dim]`` (what a user's
loop hands over) and returns the actions as a numpy array (what ``env.step`` takes):

- ``SB3 predict``: ``model.predict(obs, deterministic=True)`` (the baseline);
- ``policy() module``: ``agent.policy()`` called on ``torch.from_numpy(obs)`` under ``no_grad``;
- ``eval_policy``: ``agent.eval_policy()`` (the same module behind the agent's input checks and the
  numpy -> torch conversion);
- ``.pt2 program``: ``torch.export.load(path).module()``;
- ``AOTInductor``: ``torch._inductor.aoti_load_package(path)`` (compiled once per policy, not timed;
  the compile seconds are in the note), and ``AOTInductor, loader.run``: the same package's
  ``loader.run([obs])``, without the Python wrapper of its call (which parses the input and output
  specs and flattens the arguments every call);
- ``ONNX Runtime``: ``onnxruntime.InferenceSession`` with one intra-op and one inter-op thread.

The pairs (:data:`PAIRS`): SB3 PPO ``MlpPolicy`` on CartPole-v1 (64-64 tanh actor and critic)
against the ``ppo`` preset (the same shape); SB3 DQN ``MlpPolicy`` (64-64 ReLU) against ``dqn``
with a 64-64 torso (``torso_hidden``); SB3 SAC on Pendulum-v1 (256-256 ReLU) against ``sac``
(256-256). CPU rows run with one torch thread. The paths are timed in alternating windows (the
order rotated each round), so that load on a shared machine hits all alike; the percentiles pool
every call of a path (numpy).

On a GPU (first, so that a time limit cuts CPU rows, not these): the same with the policies and
SB3's models on CUDA (``eval_policy``, ``.pt2``, AOTInductor compiled for CUDA; no ONNX Runtime
row), a ``torch.cuda.synchronize()`` before each reading of the clock.

Optional peers: where ``stable_baselines3`` is missing the SB3 rows are left out (one line says
how to install it) and the other rows have no ratio; where the ``export`` extra (onnx, onnxscript,
onnxruntime) is missing, the ONNX Runtime rows are left out the same way. ``quick`` (smoke runs
and the GPU check) times fewer calls and skips the AOTInductor compile (a row says so).

Measured numbers: docs/pages/speed.md ("Action latency of an exported policy").
"""

from __future__ import annotations

import importlib
import math
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from tritonrl.cli.bench import Row, one_cpu_thread

NAME = "policy_latency"
REQUIRES = ("gymnasium",)  # SB3 and the ONNX stack are optional: their rows are left out without them
BATCHES = (1, 256)
CALLS = {1: 5_000, 256: 1_000}  # timed calls per path and batch (full mode)
QUICK_CALLS = {1: 200, 256: 20}
ROUNDS = 10  # alternating windows per batch (full mode); quick: 2
WARMUP = 50  # untimed calls per path before the windows (quick: 5)
SB3_INSTALL = "pip install stable-baselines3 (or pip install 'tritonrl[bench]')"
ORT_INSTALL = "pip install 'tritonrl[export]'"
BASELINE = "SB3 predict"
AOTI_LOADER = "AOTInductor, loader.run"
PATHS = (
    BASELINE,
    "policy() module",
    "eval_policy",
    ".pt2 program",
    "AOTInductor",
    AOTI_LOADER,
    "ONNX Runtime",
)


class Pair(NamedTuple):
    """One network shape on both sides: the tritonrl preset (with ``overrides``) and the SB3
    algorithm class (with ``sb3_kwargs``) on the environment ``env_id``."""

    key: str
    label: str
    env_id: str
    preset: str
    overrides: dict[str, Any]
    sb3_algo: str
    sb3_kwargs: dict[str, Any]


PAIRS: dict[str, Pair] = {
    "ppo": Pair("ppo", "PPO, CartPole-v1, 64-64 tanh", "CartPole-v1", "ppo", {}, "PPO", {}),
    "dqn": Pair(
        "dqn",
        "DQN, CartPole-v1, 64-64 ReLU",
        "CartPole-v1",
        "dqn",
        {"torso_hidden": (64, 64), "buffer_size": 1_000},
        "DQN",
        {"buffer_size": 1_000},
    ),
    "sac": Pair(
        "sac",
        "SAC, Pendulum-v1, 256-256 ReLU",
        "Pendulum-v1",
        "sac",
        {"buffer_size": 1_000},
        "SAC",
        {"buffer_size": 1_000},
    ),
}
"""The SB3 defaults each pair matches: ``MlpPolicy`` nets (PPO 64-64 tanh, DQN [64, 64] ReLU, SAC
[256, 256] ReLU); the buffer sizes only keep the models small (no effect on the networks)."""


# ----------------------------------------------------------------------------- optional peers


def sb3() -> Any | None:
    """The ``stable_baselines3`` module, or None where it does not import."""
    try:
        return importlib.import_module("stable_baselines3")
    except ImportError:
        return None


def onnx_ready() -> bool:
    """Whether the ONNX export and runtime import (the ``export`` extra)."""
    for name in ("onnx", "onnxscript", "onnxruntime"):
        try:
            importlib.import_module(name)
        except ImportError:
            return False
    return True


# ----------------------------------------------------------------------------- the paths


def _agent(pair: Pair, env: Any, device: str) -> Any:
    if pair.key == "ppo":
        from tritonrl.agents.ppo import PPOAgent, preset

        cls: Any = PPOAgent
    elif pair.key == "dqn":
        from tritonrl.agents.dqn import DQNAgent, preset

        cls = DQNAgent
    else:
        from tritonrl.agents.sac import SACAgent, preset

        cls = SACAgent
    cfg = preset(pair.preset, **pair.overrides)
    return cls(env.observation_space, env.action_space, cfg, num_envs=1, device=device, seed=0)


def _tensor_path(
    fn: Callable[[torch.Tensor], torch.Tensor], device: str
) -> Callable[[np.ndarray], np.ndarray]:
    """``fn`` as a numpy -> numpy call: the observations to ``device``, the actions back."""

    def call(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return fn(torch.from_numpy(obs).to(device)).cpu().numpy()

    return call


def build_paths(
    pair: Pair, device: str, folder: Path, *, aoti: bool, sb3_module: Any | None, onnx: bool
) -> tuple[dict[str, Callable[[np.ndarray], Any]], dict[str, str], Any]:
    """The timed calls of ``pair`` on ``device`` (numpy obs -> numpy actions), a note per path (the
    AOTInductor compile seconds, or why a path is skipped), and the observation space. Exports go
    into ``folder``."""
    import gymnasium as gym
    from tritonrl.toolkit.export import export_policy

    env = gym.make(pair.env_id)
    agent = _agent(pair, env, device)
    policy = agent.policy()
    actor = agent.eval_policy()
    example = policy.example_obs(4)
    paths: dict[str, Callable[[np.ndarray], Any]] = {}
    notes: dict[str, str] = {}
    if sb3_module is not None:
        algo = getattr(sb3_module, pair.sb3_algo)
        model = algo("MlpPolicy", env, device=device, seed=0, **pair.sb3_kwargs)
        paths[BASELINE] = lambda obs: model.predict(obs, deterministic=True)[0]
    paths["policy() module"] = _tensor_path(policy, device)
    paths["eval_policy"] = lambda obs: actor(obs).cpu().numpy()
    pt2 = export_policy(policy, example, format="pt2", path=folder / f"{pair.key}-{device}.pt2")
    paths[".pt2 program"] = _tensor_path(torch.export.load(str(pt2)).module(), device)
    if aoti:
        t0 = time.perf_counter()
        package = export_policy(policy, example, format="aoti", path=folder / f"{pair.key}-{device}.aoti.pt2")
        notes["AOTInductor"] = f"compiled in {time.perf_counter() - t0:.0f} s (not timed)"
        compiled = torch._inductor.aoti_load_package(str(package))
        paths["AOTInductor"] = _tensor_path(compiled, device)
        paths[AOTI_LOADER] = _tensor_path(lambda x: compiled.loader.run([x])[0], device)
        notes[AOTI_LOADER] = "the compiled model without the package's Python call (argument flattening)"
    else:
        notes["AOTInductor"] = "skipped in quick mode: its C++ compile takes seconds per policy"
    if device == "cpu" and onnx:
        import onnxruntime

        path = export_policy(policy, example, format="onnx", path=folder / f"{pair.key}.onnx")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        paths["ONNX Runtime"] = lambda obs: session.run(None, {"obs": obs})[0]
        notes["ONNX Runtime"] = "1 intra-op, 1 inter-op thread"
    env.close()
    return paths, notes, env.observation_space


# ----------------------------------------------------------------------------- timing


def interleaved_latency(
    paths: dict[str, Callable[[np.ndarray], Any]],
    obs: np.ndarray,
    calls: int,
    rounds: int,
    *,
    warmup: int = WARMUP,
    sync: Callable[[], None] | None = None,
) -> dict[str, np.ndarray]:
    """Seconds of each single call of every path on ``obs``: ``calls`` each, in ``rounds``
    alternating windows (the paths' order rotated each round), after ``warmup`` untimed calls;
    ``sync`` (CUDA) runs after each call, before the clock is read."""
    keys = list(paths)
    done = sync or (lambda: None)
    for key in keys:
        for _ in range(warmup):
            paths[key](obs)
        done()
    per = max(1, calls // rounds)
    times = {key: np.empty(per * rounds) for key in keys}
    clock = time.perf_counter
    for r in range(rounds):
        for key in keys[r % len(keys) :] + keys[: r % len(keys)]:
            fn, out = paths[key], times[key]
            for i in range(r * per, (r + 1) * per):
                t0 = clock()
                fn(obs)
                done()
                out[i] = clock() - t0
    return times


def latency_rows(
    pair: Pair,
    device: str,
    paths: dict[str, Callable[[np.ndarray], Any]],
    notes: dict[str, str],
    space: Any,
    *,
    quick: bool,
    where: str,
) -> list[Row]:
    """One row per path and batch (:data:`BATCHES`) of ``pair``: p50 microseconds, p99 in
    ``extra`` and the note, the ratio of SB3's p50 to the row's (None without SB3)."""
    calls = QUICK_CALLS if quick else CALLS
    rounds, warmup = (2, 5) if quick else (ROUNDS, WARMUP)
    sync = torch.cuda.synchronize if device == "cuda" else None
    space.seed(0)
    rows: list[Row] = []
    for batch in BATCHES:
        obs = np.stack([space.sample() for _ in range(batch)]).astype(np.float32)
        times = interleaved_latency(paths, obs, calls[batch], rounds, warmup=warmup, sync=sync)
        stats = {k: np.percentile(t, [50, 99]) * 1e6 for k, t in times.items()}
        base = stats.get(BASELINE)
        case = f"{pair.label}, batch {batch}, {where}: action latency, numpy in and out"
        for key in PATHS:
            if key not in stats:
                if key == "AOTInductor" and key in notes:  # skipped: say so in the row
                    rows.append(Row(NAME, case, key, math.nan, "us (p50)", None, notes[key]))
                continue
            p50, p99 = (float(v) for v in stats[key])
            ratio = None if base is None else float(base[0]) / p50
            extra = {"p99_us": p99, "calls": float(len(times[key]))}
            if base is not None:
                extra["p99_ratio"] = float(base[1]) / p99
            note = "; ".join(s for s in (f"p99 {p99:.1f} us", notes.get(key, "")) if s)
            rows.append(Row(NAME, case, key, p50, "us (p50)", 1.0 if key == BASELINE else ratio, note, extra))
    return rows


def pair_rows(pair: Pair, device: str, *, quick: bool, sb3_module: Any | None, onnx: bool) -> list[Row]:
    """The rows of ``pair`` on ``device`` (exports in a temporary folder, removed after)."""
    where = "CPU, 1 torch thread" if device == "cpu" else f"CUDA ({torch.cuda.get_device_name(0)})"
    with tempfile.TemporaryDirectory(prefix="tritonrl-latency-") as tmp:
        paths, notes, space = build_paths(
            pair, device, Path(tmp), aoti=not quick, sb3_module=sb3_module, onnx=onnx
        )
        return latency_rows(pair, device, paths, notes, space, quick=quick, where=where)


def run(quick: bool = False, pairs: Sequence[str] = tuple(PAIRS)) -> list[Row]:
    """The rows described in the module docstring, for the pairs named in ``pairs``."""
    sb3_module = sb3()
    if sb3_module is None:
        print(f"{NAME}: SB3 rows left out (stable_baselines3 is not installed): {SB3_INSTALL}")
    onnx = onnx_ready()
    if not onnx:
        print(f"{NAME}: ONNX Runtime rows left out (onnx, onnxscript or onnxruntime missing): {ORT_INSTALL}")
    rows: list[Row] = []
    if torch.cuda.is_available():
        for key in pairs:
            rows.extend(pair_rows(PAIRS[key], "cuda", quick=quick, sb3_module=sb3_module, onnx=False))
    with one_cpu_thread():  # the exports too: AOTInductor's C++ takes its thread count from here
        for key in pairs:
            rows.extend(pair_rows(PAIRS[key], "cpu", quick=quick, sb3_module=sb3_module, onnx=onnx))
    return rows
