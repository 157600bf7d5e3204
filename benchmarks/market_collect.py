"""Experience collection on market data: ``Collector`` (policy + ``MarketEnv`` + replay write) in env steps/s.

Each row times :meth:`tritonrl.toolkit.training.collector.Collector.step` (act with the policy, step
the env, write the transition into the agent's buffer; no learner update) on ``MarketEnv`` over
synthetic bars (5,000 regime-switching bars, seed 0, uploaded once; ``MarketEnvConfig()``: window
32, 6 features, observation 193 wide, 256-decision episodes from random starts):

- ``dqn``: DQN with a small MLP (torso 64-64, the agent's defaults otherwise), epsilon-greedy from
  the collector's f32 acting snapshot, uniform replay;
- ``dqn n3+PER``: the same with 3-step returns and prioritized replay (Rainbow's replay);
- ``rainbow``: the ``rainbow`` preset (double, dueling, noisy head, 51-atom C51, 3-step, PER) on
  the same 64-64 torso;
- ``ppo``: discrete PPO with a 64-64 actor-critic, 64-step rollouts, through ``agent.act`` /
  ``agent.observe`` (the learner's weights; a full rollout is dropped, not learned from);
- ``MarketEnv alone``: the env's ``step_transition`` with pre-drawn random actions, the baseline:
  ``ratio`` is a collector's speed relative to it (the share of the env-only speed left once
  the policy and the replay write are paid for).

Every DQN buffer uses ``replay_staging="device"`` (n-step windows closed on the device, no host
read of rewards or flags) and holds 128 vector steps (``128 * num_envs`` transitions).

Then the whole training loop on CPU (``run_training``: act, step, store and the due updates), DQN
(64-64 torso, the ``dqn`` preset's market overrides: train_freq 64, gradient_steps 16, batch 256)
at 1,024 envs, sequential (stepped by the ``Collector``, as ``tritonrl train --env market:...``
does) against overlapped (``LoopConfig(overlap=True)``: the overlapped actor steps the env, the
learner trains in a second process; ``ratio`` is overlapped / sequential), at two replay ratios:

- ``market preset``: 16 updates every 64 env steps, 256 updates per vector step of 1,024 envs: the
  learner is nearly all of a step and the overlap can hide only the collection;
- ``1 update / vector step``: one update of 256 per vector step (train_freq 1,024, gradient_steps
  1): collection and learning cost about the same, which is where an overlap can gain most.

Each loop row is one run whose replay holds ``LOOP_RING`` vector steps, timed from the end of the
vector step after the ring first wrapped to the end of the one before the last: no fork or first
update inside, no final hand-back of the learner's state, and no first writes to the replay, which
in a forked learner each copy a page the main process still shares (copy-on-write: about 1.5 ms a
round at 1,024 envs until the ring has wrapped once). Overlap needs a free second core: on a busy
machine its row drops below the sequential one (docs/pages/speed.md). On CUDA the same loop rows
run on the GPU first, the overlapped one with the stream learner (the learner's updates on a CUDA
stream of their own while the host steps the env).

On CPU: 1,024 envs, torch on one thread (tritonrl.cli.bench; the notes say so). On CUDA the
GPU rows are measured and listed first: 16,384 envs (the issue's goal on an H200: >= 10 million
env steps/s with a small MLP policy; the rows' notes say whether it is met) and 1,024 envs, eager
(``compile="none"``), timed as wall time over blocks of 16 steps ending in a
``torch.cuda.synchronize`` (``bench.time_loop``: the throughput a collection loop sees, launch
overhead included). A row that raises is printed as ``failed`` and the others still run; the
benchmark then prints the rows it has and raises (the bench run exits 1).
``run(quick=True)``: shorter timings.
"""

from __future__ import annotations

import gc
import sys
import traceback
from collections.abc import Callable
from typing import Any

import torch
from tritonrl.cli.bench import Row, format_table, one_cpu_thread, time_loop

REQUIRES = ("gymnasium",)  # where it is missing, `tritonrl bench` skips this file in one line

NAME = "market_collect"
BARS = 5000
CPU_ENVS = (1024,)
CUDA_ENVS = (16384, 1024)
RING_STEPS = 128  # replay capacity in vector steps
WIDTH = 64  # the small MLP: two hidden layers of this width
POOL = 64  # pre-drawn action vectors for the env-only baseline
BLOCK = 16  # CUDA rows: steps per timed block (one synchronize per block)
GOAL = 10e6  # env steps/s at 16,384 envs on an H200 (issue 11)
WARMUP_STEPS = 4  # before timing: the n-step windows fill, lazy allocations happen


def _env(data: Any, n: int) -> Any:
    from tritonrl.toolkit.envs.market.env import MarketEnv, MarketEnvConfig

    env = MarketEnv(data, n, MarketEnvConfig(), seed=0)
    env.reset(seed=0)
    return env


def _env_alone(data: Any, n: int, device: str) -> Callable[[], object]:
    env = _env(data, n)
    gen = torch.Generator(device=device).manual_seed(0)
    pool = [torch.randint(0, 3, (n,), device=device, generator=gen) for _ in range(POOL)]
    state = {"i": 0}

    def step() -> object:
        state["i"] = (state["i"] + 1) % POOL
        return env.step_transition(pool[state["i"]])

    return step


def _dqn(name: str, **switches: Any) -> Callable[[Any, int, str], Callable[[], object]]:
    def make(data: Any, n: int, device: str) -> Callable[[], object]:
        from tritonrl.agents.dqn import DQNAgent, preset
        from tritonrl.toolkit.training.collector import Collector

        env = _env(data, n)
        cfg = preset(
            name,
            torso_width=WIDTH,
            torso_depth=2,
            buffer_size=RING_STEPS * n,
            replay_staging="device",
            compile="none",
            **switches,
        )
        agent = DQNAgent(
            env.single_observation_space, env.single_action_space, cfg, device=device, num_envs=n, seed=0
        )
        return Collector(agent, env).step

    return make


def _ppo(data: Any, n: int, device: str) -> Callable[[], object]:
    from tritonrl.agents.ppo import PPOAgent, preset
    from tritonrl.toolkit.training.collector import Collector

    env = _env(data, n)
    cfg = preset("ppo", hidden=(WIDTH, WIDTH), num_steps=64, compile="none")
    agent = PPOAgent(
        env.single_observation_space, env.single_action_space, cfg, device=device, num_envs=n, seed=0
    )
    collector = Collector(agent, env)

    def step() -> object:
        if agent.buffer.full:  # no update here: the rollout is dropped and collection goes on
            agent.buffer.reset()
        return collector.step()

    return step


IMPLS: tuple[tuple[str, Callable[[Any, int, str], Callable[[], object]]], ...] = (
    ("MarketEnv alone", _env_alone),
    ("dqn", _dqn("dqn")),
    ("dqn n3+PER", _dqn("dqn", n_step=3, prioritized=True)),
    ("rainbow", _dqn("rainbow")),
    ("ppo", _ppo),
)


# (case, overrides, vector steps timed): the loop rows' replay ratios (module docstring)
LOOP_CASES = (
    ("market preset", {}, 12),
    ("1 update / vector step", {"train_freq": 1024, "gradient_steps": 1}, 400),
)
LOOP_ENVS = 1024
LOOP_RING = 8  # the loop rows' replay, in vector steps: it wraps before the timing starts


def _loop(data: Any, overrides: dict[str, Any], vector_steps: int, overlap: bool) -> float:
    """Env steps/s of one ``run_training`` of ``vector_steps`` vector steps (module docstring), on
    ``data``'s device. On CUDA the two timestamps the rate is taken between wait for every stream
    (the learner's too): the rate counts the device work queued in between."""
    import time

    from tritonrl.agents.dqn import DQNAgent, preset
    from tritonrl.cli.registry import get_agent
    from tritonrl.toolkit.training.collector import Collector
    from tritonrl.toolkit.training.loop import LoopConfig, run_training
    from tritonrl.toolkit.training.market import market_preset
    from tritonrl.toolkit.training.offpolicy import schedule_for

    n = LOOP_ENVS
    env = _env(data, n)
    switches = {**market_preset(get_agent("dqn")).overrides, **overrides}
    switches.update(
        torso_hidden=(WIDTH, WIDTH), buffer_size=LOOP_RING * n, learning_starts=2 * n, compile="none"
    )
    device = data.device
    agent = DQNAgent(
        env.single_observation_space,
        env.single_action_space,
        preset("dqn", **switches),
        num_envs=n,
        seed=0,
        device=device,
    )
    cfg = LoopConfig(
        total_steps=(LOOP_RING + 2 + vector_steps) * n,
        seed=0,
        eval_every=0,
        final_eval=False,
        overlap=overlap,
        plot=False,
        tensorboard=False,
        progress=False,
        checkpoint_seconds=0,
    )
    collector = None if overlap else Collector(agent, env)
    stamps: list[float] = []  # one per vector step: should_stop is asked after each
    # from the end of the vector step after the ring wrapped to the end of the one before the
    # last (the last step of an overlapped run waits for the learner's whole state)
    first, last = LOOP_RING + 1, LOOP_RING + vector_steps
    cuda = device.type == "cuda"

    def stamp() -> bool:
        if cuda and len(stamps) in (first, last):
            torch.cuda.synchronize(device)
        stamps.append(time.perf_counter())
        return False

    run_training(agent, env, schedule_for(agent), cfg, collector=collector, should_stop=stamp)
    assert len(stamps) == last + 2, (len(stamps), last)
    return (last - first) * n / (stamps[last] - stamps[first])


def _loop_rows(data: Any, quick: bool) -> list[Row]:
    rows: list[Row] = []
    cuda = data.device.type == "cuda"
    for case, overrides, vector_steps in LOOP_CASES:
        steps = max(4, vector_steps // 4) if quick else vector_steps
        rates = {}
        for overlap in (False, True):
            rates[overlap] = _loop(data, overrides, steps, overlap)
            gc.collect()
        label = f"{LOOP_ENVS} envs {data.device.type}, dqn loop, {case}"
        note = (
            f"{torch.cuda.get_device_name(0)}; overlapped: the stream learner"
            if cuda
            else "1 torch thread per process"
        )
        rows.append(Row(NAME, label, "sequential (collector)", rates[False], "env steps/s", 1.0, note))
        rows.append(
            Row(NAME, label, "overlapped", rates[True], "env steps/s", rates[True] / rates[False], note)
        )
    return rows


def run(quick: bool = False) -> list[Row]:
    """One Row per (device, number of envs, implementation), then the CPU loop rows; see the
    module docstring."""
    with one_cpu_thread():
        rows = _run(quick)
        from tritonrl.toolkit.bars import synthetic_bars, upload

        bars = synthetic_bars(BARS, seed=0)
        if torch.cuda.is_available():  # the loop on CUDA, sequential against the stream learner
            rows += _loop_rows(upload(bars, "cuda"), quick)
        return rows + _loop_rows(upload(bars, "cpu"), quick)


def _run(quick: bool) -> list[Row]:
    from tritonrl.toolkit.bars import synthetic_bars, upload

    min_time = 0.1 if quick else 0.5
    bars = synthetic_bars(BARS, seed=0)
    cases = ([("cuda", n) for n in CUDA_ENVS] if torch.cuda.is_available() else []) + [
        ("cpu", n) for n in CPU_ENVS
    ]
    rows: list[Row] = []
    failed: list[str] = []
    for device, n in cases:
        data = upload(bars, device)
        if device == "cpu":
            nthreads = torch.get_num_threads()
            where = f"{nthreads} torch thread{'s' if nthreads > 1 else ''}"
        else:
            where = torch.cuda.get_device_name(0)
        base = None
        case = f"{n} envs {device}"
        for impl, make in IMPLS:
            try:
                step = make(data, n, device)
                for _ in range(WARMUP_STEPS):
                    step()
                sps = n / time_loop(step, device, block=BLOCK, min_time=min_time)["median"]
            except Exception as exc:  # one agent failing (e.g. memory) must not hide the others' rows
                traceback.print_exc()
                first = str(exc).splitlines()[0][:80] if str(exc) else ""
                why = f"failed: {type(exc).__name__}: {first}"
                rows.append(Row(NAME, case, impl, float("nan"), "", None, why))
                failed.append(f"{impl} ({case})")
                continue
            finally:
                step = None  # free the agent, its replay and the env before the next row
                gc.collect()
                if device == "cuda":
                    torch.cuda.empty_cache()
            if impl == "MarketEnv alone":
                base = sps
            note = [where]
            if impl != "MarketEnv alone" and device == "cuda" and n == 16384:
                note.append(f"goal >= {GOAL / 1e6:g}M on an H200: {'met' if sps >= GOAL else 'NOT met'}")
            ratio = None if base is None else sps / base
            rows.append(Row(NAME, case, impl, sps, "env steps/s", ratio, ", ".join(note)))
    if failed:  # the rows measured are printed here, then the run counts as failed (exit 1)
        print(format_table(rows))
        raise RuntimeError(f"{NAME}: {', '.join(failed)} failed (tracebacks above)")
    return rows


if __name__ == "__main__":  # --quick: shorter timings; --loop: the loop rows alone
    if "--loop" in sys.argv:
        from tritonrl.toolkit.bars import synthetic_bars, upload

        with one_cpu_thread():
            bars = upload(synthetic_bars(BARS, seed=0), "cpu")
            print(format_table(_loop_rows(bars, "--quick" in sys.argv)))
    else:
        print(format_table(run(quick="--quick" in sys.argv)))
