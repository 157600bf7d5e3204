"""DQN loop throughput on CartPole-v1 (CPU, one torch thread), beside a single-file reference.

Rows:

- at 1 and at 8 environments, env steps/s at CleanRL's DQN defaults (``CLEANRL``: a 120-84
  network, which tritonrl's rows build too with ``torso_hidden=HIDDEN``, batch 128, one update
  per 10 env steps, target copy every 500): the single-file
  ``reference`` (a gymnasium vector env, a numpy -> torch -> numpy round trip every step, a host
  replay buffer), and ``dqn`` (and, at 8 envs, ``rainbow``) through
  :func:`tritonrl.toolkit.training.loop.run_training` set to the same settings, eager and with
  ``compile="default"``; ratio against the reference at the same number of environments. At 1
  env, the ``lean`` reference (a plain env, preallocated arrays) for scale, and ``dqn, overlap``:
  the same loop with ``LoopConfig(overlap=True)`` (the learner in a second process, acting one
  sync interval behind; it gains only where a second core is free).
- collection only (act, step, store), against the reference's collection; ``dqn (1 env), overlap``:
  what the main process of an overlapped run does per step (act, step, stage, hand over; the
  learner process stores).
- ``dqn`` / ``rainbow`` phases at 8 envs: seconds per env step spent acting, stepping the
  environments, in the replay buffer (adds and samples), and in updates.
- compiled vs eager: learner updates/s with ``compile="default"`` against eager, the two agents
  timed in alternating windows in one process (ratio: the median of the windows' ratios), and the
  seconds the first compiled update takes (compilation).
- on a GPU (first, so that a time limit cuts CPU rows, not these): the loop at CleanRL's
  settings on CUDA (``dqn`` at 1 and 8 envs, ``rainbow`` at 8), sequential against overlapped
  (the stream learner: the updates on a CUDA stream of their own while the host steps the env);
  rainbow learner updates/s at batch 256: ``compile="reduce-overhead"`` (CUDA graphs) against
  eager in the training dtype, and bf16 against f32 (eager).

``quick`` (smoke runs and the GPU check) leaves out the compiled loop rows and Rainbow's compiled
vs eager row (each compilation costs seconds to a minute).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tritonrl.cli.bench import Row, forced_dtype

NAME = "dqn_loop"
REQUIRES = ("gymnasium",)  # where it is missing, `tritonrl bench` skips this file in one line
ENV_ID = "CartPole-v1"
BATCH = 128
TRAIN_FREQ = 10  # env steps per update: the reference's update-to-data ratio


# ----------------------------------------------------------------------------- the references


class _HostReplay:
    """The replay buffer of the common single-file DQN: numpy arrays with an env axis, a copy of
    every field on ``add``, uniform indices from numpy and one numpy -> torch conversion per field
    on ``sample`` (the shape of the widely used library buffer such scripts import)."""

    def __init__(self, size: int, obs_dim: int, n_envs: int, rng: np.random.Generator) -> None:
        self.obs = np.zeros((size, n_envs, obs_dim), np.float32)
        self.next_obs = np.zeros((size, n_envs, obs_dim), np.float32)
        self.actions = np.zeros((size, n_envs, 1), np.int64)
        self.rewards = np.zeros((size, n_envs), np.float32)
        self.dones = np.zeros((size, n_envs), np.float32)
        self.size, self.n_envs, self.pos, self.full, self.rng = size, n_envs, 0, False, rng

    def add(self, obs, next_obs, action, reward, done) -> None:
        self.obs[self.pos] = np.array(obs).copy()
        self.next_obs[self.pos] = np.array(next_obs).copy()
        self.actions[self.pos] = np.array(action).reshape(self.n_envs, 1).copy()
        self.rewards[self.pos] = np.array(reward).copy()
        self.dones[self.pos] = np.array(done).copy()
        self.pos += 1
        if self.pos == self.size:
            self.full, self.pos = True, 0

    def sample(self, batch_size: int) -> tuple[torch.Tensor, ...]:
        upper = self.size if self.full else self.pos
        idx = self.rng.integers(0, upper, size=batch_size)
        env = self.rng.integers(0, self.n_envs, size=batch_size)
        data = (
            self.obs[idx, env],
            self.actions[idx, env],
            self.next_obs[idx, env],
            self.dones[idx, env].reshape(-1, 1),
            self.rewards[idx, env].reshape(-1, 1),
        )
        return tuple(torch.tensor(d) for d in data)


# The single-file DQN's defaults (CleanRL's dqn.py): what the reference runs and what ``_agent``
# sets tritonrl to. The exploration schedule and learning_starts are shortened: the timing
# covers the steady state after them (a greedy forward on ~95% of steps, one update per 10).
CLEANRL = {
    "lr": 2.5e-4,
    "buffer_size": 10_000,
    "gamma": 0.99,
    "tau": 1.0,
    "target_update_every": 500,  # env steps (CleanRL's target_network_frequency)
    "batch_size": BATCH,
    "eps_start": 1.0,
    "eps_end": 0.05,
    "train_freq": TRAIN_FREQ,
    "loss": "mse",
}
HIDDEN = (120, 84)  # CleanRL's network; tritonrl's rows build the same one (torso_hidden)
LEARNING_STARTS = 1_000


def reference_dqn(
    steps: int,
    *,
    num_envs: int = 1,
    seed: int = 0,
    learning_starts: int = LEARNING_STARTS,
    lean: bool = False,
    learn: bool = True,
) -> float:
    """A single-file DQN loop at CleanRL's defaults; returns env steps per second (learning included).

    The common shape (``lean=False``): a gymnasium vector env of ``num_envs`` environments with
    episode statistics, a ``torch.Tensor(obs)`` -> network -> ``.cpu().numpy()`` round trip every
    greedy step, the host replay buffer above, a 120-84 MLP, one update of batch 128 every 10 env
    steps (at ``num_envs > 1``: as many updates as multiples of 10 the vector step crosses, the same
    update-to-data ratio) and a target copy every 500 env steps. ``lean=True`` (one env only) strips
    it to the bone (a plain env, preallocated numpy arrays, one fancy-indexing gather per update):
    the fastest such loop we know to write in eager PyTorch, shown for scale.

    Epsilon decays to 0.05 during the first ``learning_starts`` env steps; the timing covers the
    ``steps`` env steps after them. ``learn=False`` times collection alone (acting, stepping,
    storing).
    """
    if lean and num_envs != 1:
        raise ValueError("the lean reference steps one environment")
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    env, obs_dim, n_actions = _reference_env(lean, num_envs)
    q, target = _reference_mlp(obs_dim, n_actions), _reference_mlp(obs_dim, n_actions)
    target.load_state_dict(q.state_dict())
    opt = torch.optim.Adam(q.parameters(), lr=CLEANRL["lr"])
    cap = CLEANRL["buffer_size"]
    if lean:
        b_obs = np.zeros((cap, obs_dim), np.float32)
        b_next = np.zeros((cap, obs_dim), np.float32)
        b_act = np.zeros(cap, np.int64)
        b_rew = np.zeros(cap, np.float32)
        b_done = np.zeros(cap, np.float32)
        pos = size = 0
    else:
        rb = _HostReplay(cap // num_envs, obs_dim, num_envs, rng)
    obs, _ = env.reset(seed=seed)
    t0 = time.perf_counter()
    env_steps = 0
    total = learning_starts + steps
    timed_from = None
    while env_steps < total:
        if timed_from is None and env_steps >= learning_starts:
            t0, timed_from = time.perf_counter(), env_steps
        eps = max(CLEANRL["eps_end"], 1.0 - env_steps / learning_starts)
        if lean:
            if rng.random() < eps:
                action = int(rng.integers(n_actions))
            else:
                action = int(q(torch.as_tensor(obs).unsqueeze(0)).argmax(1).cpu().numpy()[0])
            next_obs, reward, terminated, truncated, _ = env.step(action)
            b_obs[pos], b_next[pos], b_act[pos] = obs, next_obs, action
            b_rew[pos], b_done[pos] = reward, terminated
            pos, size = (pos + 1) % cap, min(size + 1, cap)
            obs = next_obs
            if terminated or truncated:
                obs, _ = env.reset()
        else:
            if rng.random() < eps:
                actions = np.array([env.single_action_space.sample() for _ in range(num_envs)])
            else:
                actions = torch.argmax(q(torch.Tensor(obs)), dim=1).cpu().numpy()
            next_obs, rewards, terminations, truncations, infos = env.step(actions)
            real_next = next_obs.copy()  # the vector env autoresets on the next call
            rb.add(obs, real_next, actions, rewards, terminations)
            obs = next_obs
        prev, env_steps = env_steps, env_steps + num_envs
        if not learn or env_steps < learning_starts:
            continue
        for _ in range(env_steps // TRAIN_FREQ - prev // TRAIN_FREQ):
            if lean:
                idx = rng.integers(size, size=BATCH)
                o, r = torch.as_tensor(b_obs[idx]), torch.as_tensor(b_rew[idx])
                a = torch.as_tensor(b_act[idx])[:, None]
                n, d = torch.as_tensor(b_next[idx]), torch.as_tensor(b_done[idx])
            else:
                o, a, n, d, r = rb.sample(BATCH)
                r, d = r.flatten(), d.flatten()
            _reference_update(q, target, opt, (o, a, n, d, r))
        if env_steps // CLEANRL["target_update_every"] > prev // CLEANRL["target_update_every"]:
            target.load_state_dict(q.state_dict())
    env.close()
    return (env_steps - (timed_from or 0)) / (time.perf_counter() - t0)


def _reference_env(lean: bool, num_envs: int) -> tuple[Any, int, int]:
    """The reference's environment (a plain one when ``lean``, else a vector env of ``num_envs``
    with episode statistics), its observation size and its number of actions."""
    import gymnasium as gym  # here, not at the top: the module imports on machines without it

    if lean:
        env = gym.make(ENV_ID)
        return env, env.observation_space.shape[0], int(env.action_space.n)
    env = gym.vector.SyncVectorEnv([lambda: gym.make(ENV_ID) for _ in range(num_envs)])
    env = gym.wrappers.vector.RecordEpisodeStatistics(env)
    return env, env.single_observation_space.shape[0], int(env.single_action_space.n)


def _reference_mlp(obs_dim: int, n_actions: int) -> torch.nn.Module:
    """CleanRL's Q-network: ``obs_dim`` -> 120 -> 84 -> ``n_actions``, ReLU between."""
    return torch.nn.Sequential(
        torch.nn.Linear(obs_dim, HIDDEN[0]),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN[0], HIDDEN[1]),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN[1], n_actions),
    )


def _reference_update(
    q: torch.nn.Module, target: torch.nn.Module, opt: torch.optim.Optimizer, batch: tuple[torch.Tensor, ...]
) -> None:
    """One TD update of the reference: MSE against ``r + gamma * max_a' target(n) * (1 - d)``;
    ``batch`` is ``(obs [B, D], action [B, 1], next_obs [B, D], done [B], reward [B])``."""
    o, a, n, d, r = batch
    with torch.no_grad():
        y = r + CLEANRL["gamma"] * target(n).max(1).values * (1 - d)
    loss = torch.nn.functional.mse_loss(q(o).gather(1, a).squeeze(1), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


# ----------------------------------------------------------------------------- ours


def _agent(name: str, num_envs: int, device: str = "cpu", **overrides: Any):
    from tritonrl.agents.dqn import DQNAgent, preset
    from tritonrl.toolkit.envs.vector import make_vec_env

    env = make_vec_env(ENV_ID, num_envs, seed=0, device=device)
    settings = {  # the reference's settings (CLEANRL), in tritonrl's units
        **{k: v for k, v in CLEANRL.items() if k != "target_update_every"},
        "target_update_every": CLEANRL["target_update_every"] // TRAIN_FREQ,  # counted in updates
        "gradient_steps": 1,
        "learning_starts": LEARNING_STARTS,
        "eps_decay_steps": LEARNING_STARTS,
        "torso_hidden": HIDDEN,
        **overrides,
    }
    cfg = preset(name, **settings)
    agent = DQNAgent(
        env.single_observation_space, env.single_action_space, cfg, device=device, num_envs=num_envs, seed=0
    )
    return agent, env


def loop_sps(
    name: str,
    steps: int,
    num_envs: int,
    *,
    learn: bool = True,
    compile: str = "none",
    overlap: bool = False,
    device: str = "cpu",
) -> float:
    """Env steps per second of ``name`` through the shared loop (no logging, no evaluation).

    ``learn=False`` times collection alone (acting, stepping, storing). ``compile``: the agent's
    compile mode (compilation happens during the warm-up, before the timing). ``overlap``: the
    timed run overlapped (on the CPU its learner process started inside the timing; on CUDA the
    stream learner).
    """
    from tritonrl.toolkit.training.loop import LoopConfig, run_training
    from tritonrl.toolkit.training.offpolicy import OffPolicySchedule, schedule_for

    overrides: dict[str, Any] = {"compile": compile}
    if not learn:
        overrides["learning_starts"] = 10**9
    agent, env = _agent(name, num_envs, device, **overrides)
    try:
        # warm up past learning_starts so the timed part is the steady state
        quiet = {"final_eval": False, "plot": False, "tensorboard": False}
        run_training(agent, env, schedule_for(agent), LoopConfig(total_steps=1_200, **quiet))
        # the timed run counts steps from 0 again: updates from its first step (unless learn=False)
        cfg = agent.config
        schedule = OffPolicySchedule(0 if learn else 10**9, cfg.train_freq, cfg.gradient_steps)
        t0 = time.perf_counter()
        timed = LoopConfig(total_steps=steps, overlap=overlap, **quiet)
        summary = run_training(agent, env, schedule, timed)
        if device != "cpu":
            torch.cuda.synchronize()
        return summary["global_step"] / (time.perf_counter() - t0)
    finally:
        env.close()


class _Timer:
    def __init__(self) -> None:
        self.total: dict[str, float] = {}

    def wrap(self, key: str, fn: Callable) -> Callable:
        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.total[key] = self.total.get(key, 0.0) + time.perf_counter() - t

        return timed


def phases(name: str, steps: int, num_envs: int) -> dict[str, float]:
    """Seconds per env step in act, env step, replay (add + sample) and update (the rest of it)."""
    from tritonrl.toolkit.training.offpolicy import schedule_for

    agent, env = _agent(name, num_envs)
    timer = _Timer()
    try:
        schedule = schedule_for(agent)
        obs = env.obs
        n_vec = (1_200 + steps) // num_envs
        warm = 1_200 // num_envs
        for i in range(n_vec):
            if i == warm:  # time the steady state only
                agent.buffer.sample = timer.wrap("sample", agent.buffer.sample)
                agent.buffer.add = timer.wrap("add", agent.buffer.add)
                if getattr(agent.buffer, "update_priorities", None) is not None:
                    agent.buffer.update_priorities = timer.wrap("priorities", agent.buffer.update_priorities)
                act, step_env = timer.wrap("act", agent.act), timer.wrap("env", env.step)
                observe = timer.wrap("observe", agent.observe)
                after = timer.wrap("update", schedule.after_step)
            if i < warm:
                actions = agent.act(obs)
                tr = env.step(actions)
                agent.observe(obs, actions, tr.reward, tr.next_obs, tr.terminated, tr.truncated)
                schedule.after_step(agent, agent.env_steps)
            else:
                actions = act(obs)
                tr = step_env(actions)
                observe(obs, actions, tr.reward, tr.next_obs, tr.terminated, tr.truncated)
                after(agent, agent.env_steps)
            obs = tr.obs
        t = timer.total
        n = (n_vec - warm) * num_envs
        replay = t.get("add", 0.0) + t.get("sample", 0.0) + t.get("priorities", 0.0)
        return {
            "act": t["act"] / n,
            "env": t["env"] / n,
            "replay": replay / n,
            "update": (t["update"] - t.get("sample", 0.0) - t.get("priorities", 0.0)) / n,
            "observe_other": (t["observe"] - t.get("add", 0.0)) / n,
            "updates": schedule.updates,
        }
    finally:
        env.close()


def _learner(name: str, device: str = "cpu", batch: int = BATCH, compile: str = "none"):
    """An agent of 1 environment whose buffer holds 2,000 random transitions (the same for every
    call), ready for back-to-back updates."""
    agent, env = _agent(name, 1, device=device, batch_size=batch, compile=compile)
    env.close()
    g = torch.Generator().manual_seed(0)
    for _ in range(2_000):
        o = torch.randn(1, 4, generator=g)
        agent.observe(
            o,
            torch.randint(2, (1,), generator=g),
            torch.ones(1),
            torch.randn(1, 4, generator=g),
            torch.zeros(1, dtype=torch.bool),
            torch.zeros(1, dtype=torch.bool),
        )
    return agent


def learner_updates_per_s(
    name: str, device: str = "cpu", batch: int = BATCH, min_time: float = 1.0, compile: str = "none"
) -> float:
    """Back-to-back ``agent.update()`` calls per second on a buffer of 2,000 random transitions
    (``compile``: the agent's compile mode; its compilation happens before the timing)."""
    agent = _learner(name, device, batch, compile)
    for _ in range(10):
        agent.update()
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    sync()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < min_time:
        for _ in range(20):
            agent.update()
        n += 20
        sync()
    return n / (time.perf_counter() - t0)


def compiled_vs_eager(
    name: str, mode: str = "default", *, rounds: int = 8, window: float = 0.25, batch: int = BATCH
) -> dict[str, float]:
    """Learner updates/s of an eager and a compiled agent (same seed, same data) on the CPU.

    The two are timed in ``rounds`` alternating windows of ``window`` seconds each, so a load
    change on a shared machine hits both alike. Returns ``eager`` and ``compiled`` (median
    updates/s of their windows), ``ratio`` (median of the per-round ratios compiled / eager) and
    ``compile_s`` (seconds of the first compiled update: Dynamo, AOTAutograd and Inductor, forward,
    backward and optimizer graphs).
    """
    eager = _learner(name, batch=batch)
    compiled = _learner(name, batch=batch, compile=mode)
    t0 = time.perf_counter()
    compiled.update()
    compile_s = time.perf_counter() - t0
    for agent in (eager, compiled):  # warm: caches, the recompile after the first call
        for _ in range(10):
            agent.update()
    rates: dict[str, list[float]] = {"eager": [], "compiled": []}
    for _ in range(rounds):
        for key, agent in (("eager", eager), ("compiled", compiled)):
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < window:
                for _ in range(5):
                    agent.update()
                n += 5
            rates[key].append(n / (time.perf_counter() - t0))
    ratios = [c / e for c, e in zip(rates["compiled"], rates["eager"], strict=True)]
    return {
        "eager": statistics.median(rates["eager"]),
        "compiled": statistics.median(rates["compiled"]),
        "ratio": statistics.median(ratios),
        "compile_s": compile_s,
    }


def run(quick: bool = False) -> list[Row]:
    """The rows described in the module docstring."""
    steps = 3_000 if quick else 20_000
    num_envs = 8
    rows: list[Row] = []
    if torch.cuda.is_available():  # first: on a GPU machine they are the point, and a time limit cuts the end
        rows.extend(_gpu_rows(quick))
    modes = ("none",) if quick else ("none", "default")  # quick: no compilation in the loop rows
    for envs in (1, num_envs):
        rows.extend(loop_rows(envs, steps, modes))
    collect = f"{ENV_ID} env steps/s, collection only (act, step, store)"
    ref_c = reference_dqn(steps, learn=False)
    rows.append(Row(NAME, collect, "reference: single file (1 env)", ref_c, "steps/s", 1.0))
    for name, envs in (("dqn", 1), ("dqn", num_envs), ("rainbow", num_envs)):
        sps = loop_sps(name, steps, envs, learn=False)
        label = f"{name} ({envs} env{'s' if envs > 1 else ''})"
        rows.append(Row(NAME, collect, label, sps, "steps/s", sps / ref_c))
    sps = loop_sps("dqn", steps, 1, learn=False, overlap=True)  # main side: act, step, stage, hand over
    rows.append(
        Row(
            NAME,
            collect,
            "dqn (1 env), overlap",
            sps,
            "steps/s",
            sps / ref_c,
            "stored by the learner process",
        )
    )
    for name in ("dqn", "rainbow"):
        ph = phases(name, steps // 2, num_envs)
        for key in ("act", "env", "replay", "update"):
            rows.append(
                Row(
                    NAME,
                    f"{name} ({num_envs} envs): time per env step",
                    key,
                    ph[key] * 1e6,
                    "us",
                    note=f"{ph['updates']} updates" if key == "update" else "",
                )
            )
    for name in ("dqn",) if quick else ("dqn", "rainbow"):
        cmp = compiled_vs_eager(name, rounds=4 if quick else 8)
        case = f"{name} learner updates/s, batch {BATCH}, cpu: compiled vs eager"
        rows.append(Row(NAME, case, "eager", cmp["eager"], "updates/s", 1.0))
        rows.append(
            Row(
                NAME,
                case,
                "compile=default",
                cmp["compiled"],
                "updates/s",
                cmp["ratio"],
                f"first update (compilation) {cmp['compile_s']:.1f} s; alternating windows",
            )
        )
    return rows


def loop_rows(envs: int, steps: int, modes: tuple[str, ...] = ("none",)) -> list[Row]:
    """The loop rows at ``envs`` environments: the reference (and, at 1 env, the lean one), then
    ``dqn`` (and, at more, ``rainbow``) in each compile mode of ``modes``, ``steps`` timed env
    steps each."""
    plural = "s" if envs > 1 else ""
    case = f"{ENV_ID}, {envs} env{plural}: env steps/s at CleanRL's defaults"
    ref = reference_dqn(steps, num_envs=envs)
    rows = [
        Row(
            NAME,
            case,
            "reference: single file",
            ref,
            "steps/s",
            1.0,
            "vector env, host replay, numpy<->torch",
        )
    ]
    if envs == 1:
        lean = reference_dqn(steps, lean=True)
        rows.append(Row(NAME, case, "reference: lean single file", lean, "steps/s", lean / ref, "for scale"))
    loop_note = "tritonrl.toolkit.training.loop + offpolicy schedule"
    for name in ("dqn", "rainbow") if envs > 1 else ("dqn",):
        for mode in modes:
            sps = loop_sps(name, steps, envs, compile=mode)
            label = name if mode == "none" else f"{name}, compile={mode}"
            rows.append(Row(NAME, case, label, sps, "steps/s", sps / ref, loop_note))
    if envs == 1:
        sps = loop_sps("dqn", steps, envs, overlap=True)
        note = "learner process; needs a free core"
        rows.append(Row(NAME, case, "dqn, overlap", sps, "steps/s", sps / ref, note))
    return rows


def _gpu_rows(quick: bool) -> list[Row]:
    out: dict[str, float] = {}
    for dt in ("f32", "bf16"):
        with forced_dtype(dt):
            out[dt] = learner_updates_per_s(
                "rainbow", device="cuda", batch=256, min_time=1.0 if quick else 3.0
            )
    gpu = torch.cuda.get_device_name(0)
    rows: list[Row] = []
    # the whole loop on CUDA at CleanRL's settings, sequential against overlapped (the stream learner)
    steps = 3_000 if quick else 20_000
    for name, envs in (("dqn", 1), ("dqn", 8), ("rainbow", 8)):
        case = f"{ENV_ID}, {envs} env{'s' if envs > 1 else ''}, cuda: env steps/s at CleanRL's defaults"
        seq = loop_sps(name, steps, envs, device="cuda")
        over = loop_sps(name, steps, envs, overlap=True, device="cuda")
        note = f"{gpu}; the learner on its own CUDA stream; vs {name}"
        rows.append(Row(NAME, case, name, seq, "steps/s", 1.0, f"{gpu}; sequential"))
        rows.append(Row(NAME, case, f"{name}, overlap", over, "steps/s", over / seq, note))
    secs = 1.0 if quick else 3.0
    eager = learner_updates_per_s("rainbow", device="cuda", batch=256, min_time=secs)
    graphs = learner_updates_per_s(
        "rainbow", device="cuda", batch=256, min_time=secs, compile="reduce-overhead"
    )
    return rows + [
        Row(
            NAME,
            "rainbow learner updates/s, batch 256, cuda, training dtype",
            "compile=reduce-overhead (CUDA graphs)",
            graphs,
            "updates/s",
            graphs / eager,
            f"{gpu}; ratio vs eager",
        ),
        Row(NAME, "rainbow learner updates/s, batch 256, cuda", "f32", out["f32"], "updates/s", 1.0, gpu),
        Row(
            NAME,
            "rainbow learner updates/s, batch 256, cuda",
            "bf16",
            out["bf16"],
            "updates/s",
            out["bf16"] / out["f32"],
            gpu,
        ),
    ]


if __name__ == "__main__":
    import argparse

    from tritonrl.cli.bench import env_header, format_table, one_cpu_thread

    parser = argparse.ArgumentParser(description="DQN loop throughput beside a single-file reference")
    parser.add_argument("--quick", action="store_true", help="short runs, no compiled rows")
    parser.add_argument("--envs", type=int, help="only the eager loop rows at this many environments")
    args = parser.parse_args()
    print(env_header())
    with one_cpu_thread():
        if args.envs is None:
            table = run(quick=args.quick)
        else:
            table = loop_rows(args.envs, 3_000 if args.quick else 20_000)
    print(format_table(table))
