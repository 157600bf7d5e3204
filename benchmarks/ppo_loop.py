"""PPO throughput per policy kind (CPU, one torch thread), beside a single-file reference.

First, at CleanRL's defaults (4 environments x 128 steps, 4 epochs x 4 minibatches, 2x64 tanh
MLPs, lr 2.5e-4): the single-file reference and tritonrl's ``ppo`` preset through
:func:`tritonrl.toolkit.training.loop.run_training`, env steps/s, ratio against the reference;
``ppo, overlap``: the same run with ``LoopConfig(overlap=True)`` (the update in a second process
while the next rollout is collected one update behind), against the reference and against the
sequential run.

Then, for each policy kind (discrete on CartPole-v1, continuous and flow on Pendulum-v1, lstm,
mamba and gru on CartPoleNoVel-v1; 8 environments, each preset's rollout length):

- ``env only``: the vector env stepped with random actions (the floor every loop pays);
- ``collect``: ``act`` + env step + ``observe`` (env steps/s); ratio against ``env only``;
- ``train``: the whole loop through :func:`tritonrl.toolkit.training.loop.run_training` (collection and
  updates,
  no evaluation), env steps/s; ratio against the reference (discrete) or ``env only``;
- ``update``: milliseconds per ``update()`` (all epochs over one rollout) and per 1,000
  transitions in ``extra``; ratio against the discrete policy's update.

Recurrent vs feed-forward at the same sizes (lstm, gru): the recurrent preset beside a
feed-forward policy with the same config except the core (``policy="discrete"``, hidden layers
= the encoder's plus one of the memory's width, so the same depth and width; same rollout,
epochs, minibatches, observation normalisation), on the same env, in one process: ``update``
(alternating rounds, ratio = median of the rounds' feed-forward / recurrent times: >= 0.5 means
"within 2x"), ``collect`` (act + step + observe, alternating rounds) and ``train``
(``run_training``, env steps/s, ratio recurrent / feed-forward).

For the mamba policy, two more: ``core step`` (microseconds of one acting step of the memory,
``Mamba2Core.step`` at 1 and 8 environments, against the feed-forward core's MLP at the same
batch: the per-step overhead of acting), and ``train vs ppo`` (its training loop's env steps/s
against the discrete policy's ``train`` row: the goal is >= 0.5).

Compiled vs eager (``compile="default"``, CPU): ``update`` and ``collect`` of a compiled agent
against an eager one, timed in alternating rounds in one process (ratio: the median of the
rounds' ratios, > 1 = compiled faster), with the seconds the first compiled update took; every
kind in a full run, the discrete policy with ``quick``.

The ``reference`` rows are the common single-file PPO shape: a gymnasium vector env with numpy
arrays, a numpy -> torch conversion every step, torch storage, the same network sizes and the
same update arithmetic (4 epochs x 4 minibatches), written plainly in one function.

On a CUDA machine, extra rows time ``collect`` and ``update`` on the GPU for the discrete and
mamba policies in the device's training dtype against f32 (forced), ratio bf16 vs f32, and the
whole loop at CleanRL's settings on CUDA (4 and 8 envs), sequential against overlapped (the
stream learner: each update on a CUDA stream of its own while the next rollout is collected).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

import numpy as np
import torch
from torch import nn
from tritonrl.cli.bench import Row, forced_dtype, one_cpu_thread, time_fn

NAME = "ppo_loop"
REQUIRES = ("gymnasium",)  # where it is missing, `tritonrl bench` skips this file in one line
NUM_ENVS = 8
KINDS = [
    ("discrete", "ppo", "CartPole-v1"),
    ("continuous", "ppo-continuous", "Pendulum-v1"),
    ("flow", "ppo-flow", "Pendulum-v1"),
    ("lstm", "ppo-lstm", "CartPoleNoVel-v1"),
    ("mamba", "ppo-mamba", "CartPoleNoVel-v1"),
    ("gru", "ppo-gru", "CartPoleNoVel-v1"),  # last: _cuda_rows picks KINDS[4]
]


REF_ENVS = 4  # CleanRL ppo.py's default num_envs


def _reference_sps(total_steps: int, num_steps: int = 128, num_envs: int = REF_ENVS) -> float:
    """A plain single-file PPO loop on CartPole-v1 at CleanRL's defaults (discrete, 2x64 tanh MLPs,
    4 envs x 128 steps, 4 epochs x 4 minibatches, lr 2.5e-4 annealed, clipped value loss, advantage
    normalisation, grad clip 0.5), env steps/s."""
    import gymnasium as gym  # here, not at the top: the module imports on machines without it

    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(num_envs)])
    envs = gym.wrappers.vector.RecordEpisodeStatistics(envs)
    torch.manual_seed(0)

    def layer(i: int, o: int, std: float = np.sqrt(2)) -> nn.Linear:
        lin = nn.Linear(i, o)
        nn.init.orthogonal_(lin.weight, std)
        nn.init.zeros_(lin.bias)
        return lin

    critic = nn.Sequential(layer(4, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, 1, 1.0))
    actor = nn.Sequential(layer(4, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, 2, 0.01))
    params = list(critic.parameters()) + list(actor.parameters())
    lr = 2.5e-4
    opt = torch.optim.Adam(params, lr=lr, eps=1e-5)
    T, E = num_steps, num_envs
    obs_buf, act_buf = torch.zeros(T, E, 4), torch.zeros(T, E, dtype=torch.long)
    logp_buf, rew_buf, done_buf, val_buf = (torch.zeros(T, E) for _ in range(4))
    next_obs = torch.Tensor(envs.reset(seed=0)[0])
    next_done = torch.zeros(E)
    n_updates = max(1, total_steps // (T * E))
    start = time.perf_counter()
    steps = 0
    for update in range(n_updates):
        opt.param_groups[0]["lr"] = (1.0 - update / n_updates) * lr
        for t in range(T):
            obs_buf[t], done_buf[t] = next_obs, next_done
            with torch.no_grad():
                dist = torch.distributions.Categorical(logits=actor(next_obs))
                action = dist.sample()
                val_buf[t] = critic(next_obs).flatten()
            act_buf[t], logp_buf[t] = action, dist.log_prob(action)
            o, r, term, trunc, _ = envs.step(action.cpu().numpy())
            rew_buf[t] = torch.tensor(r).view(-1)
            next_obs, next_done = torch.Tensor(o), torch.Tensor(np.logical_or(term, trunc))
        with torch.no_grad():
            last = critic(next_obs).reshape(1, -1)[0]
            adv = torch.zeros(T, E)
            gae = torch.zeros(E)
            for t in reversed(range(T)):
                nv, nd = (last, next_done) if t == T - 1 else (val_buf[t + 1], done_buf[t + 1])
                delta = rew_buf[t] + 0.99 * nv * (1 - nd) - val_buf[t]
                gae = delta + 0.99 * 0.95 * (1 - nd) * gae
                adv[t] = gae
            ret = adv + val_buf
        b = [x.reshape(T * E, *x.shape[2:]) for x in (obs_buf, act_buf, logp_buf, adv, ret, val_buf)]
        for _ in range(4):
            for idx in torch.randperm(T * E).split(T * E // 4):
                dist = torch.distributions.Categorical(logits=actor(b[0][idx]))
                ratio = (dist.log_prob(b[1][idx]) - b[2][idx]).exp()
                a = (b[3][idx] - b[3][idx].mean()) / (b[3][idx].std() + 1e-8)
                pg = torch.max(-a * ratio, -a * ratio.clamp(0.8, 1.2)).mean()
                v_new = critic(b[0][idx]).flatten()
                v_clip = b[5][idx] + (v_new - b[5][idx]).clamp(-0.2, 0.2)
                v = 0.5 * torch.max((v_new - b[4][idx]).square(), (v_clip - b[4][idx]).square()).mean()
                loss = pg - 0.01 * dist.entropy().mean() + 0.5 * v
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(params, 0.5)
                opt.step()
        steps += T * E
    envs.close()
    return steps / (time.perf_counter() - start)


def _env_only_sps(env_id: str, steps: int) -> float:
    from tritonrl.toolkit.envs.vector import make_vec_env

    env = make_vec_env(env_id, NUM_ENVS, seed=0)
    space = env.single_action_space
    space.seed(0)
    actions = [torch.as_tensor(np.stack([space.sample() for _ in range(NUM_ENVS)])) for _ in range(64)]
    start = time.perf_counter()
    for i in range(steps // NUM_ENVS):
        env.step(actions[i % 64])
    sps = (steps // NUM_ENVS) * NUM_ENVS / (time.perf_counter() - start)
    env.close()
    return sps


def _agent(
    preset_name: str, env_id: str, steps: int, device: str = "cpu", num_envs: int = NUM_ENVS, **overrides
):
    from tritonrl.agents.ppo import PPOAgent, preset
    from tritonrl.toolkit.envs.vector import make_vec_env

    cfg = dataclasses.replace(preset(preset_name), total_steps=steps, **overrides)
    env = make_vec_env(env_id, num_envs, seed=0, device=device)
    agent = PPOAgent(
        env.single_observation_space, env.single_action_space, cfg, num_envs=num_envs, seed=0, device=device
    )
    return agent, env


def train_sps(
    preset_name: str,
    env_id: str,
    steps: int,
    num_envs: int = NUM_ENVS,
    overlap: bool = False,
    device: str = "cpu",
    **overrides: Any,
) -> float:
    """Env steps/s of ``run_training`` (collection and updates, no evaluation, no logging files);
    ``overlap``: ``LoopConfig(overlap=True)``, the learner in a second process on the CPU (started
    inside the timing), on a CUDA stream of its own on CUDA."""
    from tritonrl.toolkit.training.loop import LoopConfig, run_training
    from tritonrl.toolkit.training.onpolicy import OnPolicySchedule

    agent, env = _agent(preset_name, env_id, steps, device=device, num_envs=num_envs, **overrides)
    try:
        quiet = {"final_eval": False, "plot": False, "tensorboard": False, "overlap": overlap}
        summary = run_training(
            agent, env, OnPolicySchedule(agent.config.num_steps), LoopConfig(total_steps=steps, **quiet)
        )
    finally:
        env.close()
    return float(summary["sps"])


def _collect(agent, env) -> float:
    obs = env.obs
    start = time.perf_counter()
    for _ in range(agent.config.num_steps):
        action = agent.act(obs)
        tr = env.step(action)
        agent.observe(obs, action, tr.reward, tr.next_obs, tr.terminated, tr.truncated)
        obs = tr.obs
    return time.perf_counter() - start


def _alternating_rounds(agents: dict[str, tuple[Any, Any]], rounds: int) -> dict[str, dict[str, list[float]]]:
    """Seconds of each agent's rollout collection and update, the agents taking turns in every
    round (so a load change hits all of them alike); closes the envs."""
    times: dict[str, dict[str, list[float]]] = {k: {"update": [], "collect": []} for k in agents}
    for _ in range(rounds):
        for key, (agent, env) in agents.items():
            times[key]["collect"].append(_collect(agent, env))
            t0 = time.perf_counter()
            agent.update()
            times[key]["update"].append(time.perf_counter() - t0)
    for _, env in agents.values():
        env.close()
    return times


def _timed(preset_name: str, env_id: str, device: str, reps: int) -> tuple[float, float, str]:
    """(collect env steps/s, ms per update, dtype) on ``device``."""
    agent, env = _agent(preset_name, env_id, 10**6, device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    _collect(agent, env)
    agent.update()
    t_collect, t_update = [], []
    for _ in range(reps):
        sync()
        t_collect.append(_collect(agent, env))
        sync()
        start = time.perf_counter()
        agent.update()
        sync()
        t_update.append(time.perf_counter() - start)
    env.close()
    n = agent.config.num_steps * NUM_ENVS
    dtype = str(agent.dtype).removeprefix("torch.")
    return n / float(np.median(t_collect)), float(np.median(t_update)) * 1e3, dtype


RECURRENT = ("lstm", "gru")


def feedforward_twin(preset_name: str) -> dict[str, Any]:
    """Overrides that turn the recurrent preset ``preset_name`` into a feed-forward policy of the
    same sizes: same rollout, epochs, minibatches and optimisation; hidden = encoder + memory width."""
    cfg = _preset(preset_name)
    return {"policy": "discrete", "hidden": (*cfg.hidden, cfg.memory_size), "seq_len": 0}


def recurrent_vs_feedforward(preset_name: str, env_id: str, rounds: int = 3) -> dict[str, float]:
    """Update and collection times of the recurrent preset and its :func:`feedforward_twin`, in
    alternating rounds in one process (medians in ms, ``*_ratio``: median of feed-forward /
    recurrent per round, > 1 = recurrent faster)."""
    agents = {
        "recurrent": _agent(preset_name, env_id, 10**6),
        "feedforward": _agent(preset_name, env_id, 10**6, **feedforward_twin(preset_name)),
    }
    for agent, env in agents.values():  # warm up outside the timing
        _collect(agent, env)
        agent.update()
    times = _alternating_rounds(agents, rounds)
    out: dict[str, float] = {}
    for what in ("update", "collect"):
        r, f = times["recurrent"][what], times["feedforward"][what]
        out[f"{what}_recurrent"] = statistics.median(r) * 1e3
        out[f"{what}_feedforward"] = statistics.median(f) * 1e3
        out[f"{what}_ratio"] = statistics.median([y / x for x, y in zip(r, f, strict=True)])
    return out


def _recurrent_rows(kind: str, preset_name: str, env_id: str, quick: bool) -> list[Row]:
    """The rows of :func:`recurrent_vs_feedforward` and of both training loops, for one kind."""
    cmp = recurrent_vs_feedforward(preset_name, env_id, rounds=2 if quick else 5)
    cfg = _preset(preset_name)
    n = cfg.num_steps * NUM_ENVS
    case = f"{kind} vs feed-forward, same sizes ({env_id})"
    sizes = f"{n} transitions, {cfg.update_epochs} epochs x {cfg.num_minibatches} minibatches"
    steps = n * (2 if quick else 4)
    goal = "; goal ratio >= 0.5" if kind == "lstm" else ""  # the stated goals are the LSTM's
    ff_sps = train_sps(preset_name, env_id, steps, **feedforward_twin(preset_name))
    sps = train_sps(preset_name, env_id, steps)
    return [
        Row(NAME, case, "update feed-forward", cmp["update_feedforward"], "ms/update", 1.0, sizes),
        Row(
            NAME,
            case,
            f"update {kind}",
            cmp["update_recurrent"],
            "ms/update",
            cmp["update_ratio"],
            "alternating rounds" + goal,
        ),
        Row(NAME, case, "collect feed-forward", cmp["collect_feedforward"], "ms/rollout", 1.0),
        Row(NAME, case, f"collect {kind}", cmp["collect_recurrent"], "ms/rollout", cmp["collect_ratio"]),
        Row(NAME, case, "train feed-forward", ff_sps, "env steps/s", 1.0, "run_training"),
        Row(
            NAME,
            case,
            f"train {kind}",
            sps,
            "env steps/s",
            sps / ff_sps,
            "run_training" + goal,
        ),
    ]


def compiled_vs_eager(
    preset_name: str, env_id: str, mode: str = "default", rounds: int = 3
) -> dict[str, float]:
    """Update and collection times of an eager and a compiled agent (CPU), alternating rounds.

    Returns ``update_eager`` / ``update_compiled`` (median ms per update), ``update_ratio``
    (median of the rounds' eager / compiled), the same for ``collect`` (ms per rollout) and
    ``compile_s`` (seconds of the first rollout and update of the compiled agent: its compilation).
    """
    agents = {
        key: _agent(preset_name, env_id, 10**6, compile=m)
        for key, m in (("eager", "none"), ("compiled", mode))
    }
    start = time.perf_counter()
    for key in ("compiled", "eager"):  # compile (and warm up) outside the timing
        agent, env = agents[key]
        _collect(agent, env)
        agent.update()
        if key == "compiled":
            compile_s = time.perf_counter() - start
    times = _alternating_rounds(agents, rounds)
    out = {"compile_s": compile_s}
    for what in ("update", "collect"):
        e, c = times["eager"][what], times["compiled"][what]
        out[f"{what}_eager"] = statistics.median(e) * 1e3
        out[f"{what}_compiled"] = statistics.median(c) * 1e3
        out[f"{what}_ratio"] = statistics.median([x / y for x, y in zip(e, c, strict=True)])
    return out


def _cuda_rows(reps: int) -> list[Row]:
    rows = []
    for kind, preset_name, env_id in (KINDS[0], KINDS[4]):
        case = f"{kind} {env_id} cuda"
        with forced_dtype("f32"):
            sps32, ms32, _ = _timed(preset_name, env_id, "cuda", reps)
        sps, ms, dtype = _timed(preset_name, env_id, "cuda", reps)
        rows += [
            Row(NAME, case, "collect f32", sps32, "env steps/s"),
            Row(NAME, case, f"collect {dtype}", sps, "env steps/s", ratio=sps / sps32, note="vs f32"),
            Row(NAME, case, "update f32", ms32, "ms/update"),
            Row(NAME, case, f"update {dtype}", ms, "ms/update", ratio=ms32 / ms, note="vs f32"),
        ]
    # the whole loop on CUDA at CleanRL's settings, sequential against overlapped (the stream learner)
    steps = 8_192 if reps == 1 else 40_960
    for envs in (REF_ENVS, NUM_ENVS):
        case = f"discrete CartPole-v1, {envs} envs, cuda, training dtype"
        seq = train_sps("ppo", "CartPole-v1", steps, num_envs=envs, device="cuda", lr=2.5e-4)
        over = train_sps("ppo", "CartPole-v1", steps, num_envs=envs, overlap=True, device="cuda", lr=2.5e-4)
        note = "overlap=True: the learner on its own CUDA stream, acting one rollout behind; vs ppo"
        rows += [
            Row(NAME, case, "ppo", seq, "env steps/s", note="run_training, sequential"),
            Row(NAME, case, "ppo, overlap", over, "env steps/s", ratio=over / seq, note=note),
        ]
    return rows


def run(quick: bool = False) -> list[Row]:
    """One row per measurement (see the module docstring). ``quick``: one rollout per timing."""
    with one_cpu_thread():
        return _run(quick)


def _run(quick: bool) -> list[Row]:
    rows: list[Row] = []
    reps = 1 if quick else 3
    if torch.cuda.is_available():  # first: on a GPU machine they are the point, and a time limit cuts the end
        rows += _cuda_rows(reps)
    ref_rows, ref = _reference_rows(quick)
    rows += ref_rows
    update_base = None
    train_by_kind: dict[str, float] = {}
    for kind, preset_name, env_id in KINDS:
        kind_rows, update_base, train_by_kind[kind] = _kind_rows(
            kind, preset_name, env_id, quick=quick, reps=reps, ref=ref, update_base=update_base
        )
        rows += kind_rows
    for kind, preset_name, env_id in KINDS:
        if kind in RECURRENT:
            rows += _recurrent_rows(kind, preset_name, env_id, quick)
    rows += _mamba_rows(train_by_kind)
    for kind, preset_name, env_id in KINDS[:1] if quick else KINDS:
        rows += _compiled_rows(kind, preset_name, env_id, quick)
    return rows


def _reference_rows(quick: bool) -> tuple[list[Row], float]:
    """The single-file reference against ``ppo`` sequential and overlapped, at CleanRL's defaults
    (4 envs) and at 1 and :data:`NUM_ENVS` envs (the other settings CleanRL's); the rows and the
    reference speed at :data:`NUM_ENVS` (env steps/s)."""
    ref_steps = 8_192 if quick else 40_960
    rows: list[Row] = []
    ref = 0.0
    # CleanRL's defaults: 128 steps per env, 4 epochs x 4 minibatches, 2x64 tanh MLPs, lr 2.5e-4
    for envs in (REF_ENVS, 1, NUM_ENVS):
        ref = _reference_sps(ref_steps, num_envs=envs)
        case = f"discrete CartPole-v1, {envs} env{'s' if envs > 1 else ''}"
        if envs == REF_ENVS:
            case += " (CleanRL defaults)"
        rows.append(Row(NAME, case, "reference", ref, "env steps/s", note="single-file PPO loop"))
        ours = train_sps("ppo", "CartPole-v1", ref_steps, num_envs=envs, lr=2.5e-4)
        rows.append(
            Row(NAME, case, "ppo", ours, "env steps/s", ratio=ours / ref, note="run_training; vs reference")
        )
        over = train_sps("ppo", "CartPole-v1", ref_steps, num_envs=envs, overlap=True, lr=2.5e-4)
        note = "overlap=True (learner process, acting one rollout behind); vs reference"
        rows.append(Row(NAME, case, "ppo, overlap", over, "env steps/s", ratio=over / ref, note=note))
        rows.append(
            Row(
                NAME, case, "ppo, overlap / sequential", over, "env steps/s", ratio=over / ours, note="vs ppo"
            )
        )
    return rows, ref


def _kind_rows(
    kind: str, preset_name: str, env_id: str, *, quick: bool, reps: int, ref: float, update_base: float | None
) -> tuple[list[Row], float, float]:
    """Env only, collect, update and train rows of one policy kind; the rows, the update time that
    later kinds are compared with (the first kind's) and the train speed (env steps/s)."""
    case = f"{kind} {env_id}"
    env_sps = _env_only_sps(env_id, 4_096 if quick else 16_384)
    rows = [Row(NAME, case, "env only", env_sps, "env steps/s", note="random actions")]
    collect_sps, upd_ms, _ = _timed(preset_name, env_id, "cpu", reps)
    n = _preset(preset_name).num_steps * NUM_ENVS
    rows.append(
        Row(
            NAME,
            case,
            "collect",
            collect_sps,
            "env steps/s",
            ratio=collect_sps / env_sps,
            note="act + step + observe; ratio vs env only",
        )
    )
    update_base = update_base or upd_ms
    rows.append(
        Row(
            NAME,
            case,
            "update",
            upd_ms,
            "ms/update",
            ratio=update_base / upd_ms,
            note=f"{n} transitions; ratio vs discrete",
            extra={"ms_per_1k_transitions": upd_ms / n * 1000},
        )
    )
    steps = n * (2 if quick else 4)
    sps = train_sps(preset_name, env_id, steps)
    base = ref if kind == "discrete" else env_sps
    rows.append(
        Row(
            NAME,
            case,
            "train",
            sps,
            "env steps/s",
            ratio=sps / base,
            note="run_training; ratio vs " + ("reference" if kind == "discrete" else "env only"),
        )
    )
    return rows, update_base, sps


def _compiled_rows(kind: str, preset_name: str, env_id: str, quick: bool) -> list[Row]:
    """An eager and a compiled agent of one kind, update and collection, in alternating rounds."""
    cmp = compiled_vs_eager(preset_name, env_id, rounds=2 if quick else 5)
    case = f"{kind} {env_id}: compiled vs eager"
    note = f"first rollout + update (compilation) {cmp['compile_s']:.0f} s; alternating rounds"
    return [
        Row(NAME, case, "update eager", cmp["update_eager"], "ms/update", 1.0),
        Row(
            NAME,
            case,
            "update compile=default",
            cmp["update_compiled"],
            "ms/update",
            cmp["update_ratio"],
            note,
        ),
        Row(NAME, case, "collect eager", cmp["collect_eager"], "ms/rollout", 1.0),
        Row(
            NAME,
            case,
            "collect compile=default",
            cmp["collect_compiled"],
            "ms/rollout",
            cmp["collect_ratio"],
        ),
    ]


def core_step_us(policy: str, num_envs: int) -> float:
    """Median microseconds of one acting step of a PPO preset's core (``core.step`` for memories,
    the MLP core's forward otherwise) on CartPoleNoVel-v1 observations, under ``torch.no_grad``."""
    agent, env = _agent(policy, "CartPoleNoVel-v1", 10**6, num_envs=num_envs)
    env.close()
    core = agent.net.core
    x = torch.randn(num_envs, agent.obs_dim, dtype=agent.dtype)
    state = agent.net.initial_state(num_envs)
    starts = torch.zeros(num_envs, dtype=torch.bool)
    if getattr(core, "recurrent", False):

        def fn() -> object:
            return core.step(x, state, starts)
    else:

        def fn() -> object:
            return core(x)

    with torch.no_grad():
        return time_fn(fn)["median"] * 1e6


def _mamba_rows(train_by_kind: dict[str, float]) -> list[Row]:
    """The mamba policy's acting step (1 and 8 envs, vs the MLP core) and its training loop against
    the feed-forward one (issue 17's goal: >= 0.5x)."""
    case = "mamba CartPoleNoVel-v1"
    rows = []
    for num_envs in (1, NUM_ENVS):
        us, ff = core_step_us("ppo-mamba", num_envs), core_step_us("ppo", num_envs)
        note = f"Mamba2Core.step, {num_envs} env{'s' if num_envs > 1 else ''}; ratio: MLP core / this"
        rows.append(Row(NAME, case, f"core step {num_envs}", us, "us/step", ratio=ff / us, note=note))
    if "mamba" in train_by_kind and "discrete" in train_by_kind:
        sps = train_by_kind["mamba"]
        ratio = sps / train_by_kind["discrete"]
        rows.append(
            Row(
                NAME,
                case,
                "train vs ppo",
                sps,
                "env steps/s",
                ratio=ratio,
                note="vs the discrete train row; goal >= 0.5",
            )
        )
    return rows


def _preset(name: str):
    from tritonrl.agents.ppo import preset

    return preset(name)
