"""SAC and TD3 loop throughput on Pendulum-v1 (CPU, one torch thread, one environment), beside
single-file references.

Rows:

- env steps/s with learning at CleanRL's SAC defaults (``CLEANRL``: 256-256 networks, batch
  256, one update per env step, the actor and alpha every second update, Polyak targets every
  update): the single-file ``reference`` written in the style of CleanRL's
  ``sac_continuous_action.py`` (a gymnasium vector env of one, a numpy -> torch -> numpy round trip
  every step, a host replay buffer, separate ``qf1``/``qf2`` modules and their targets), ``sac``
  through :func:`tritonrl.toolkit.training.loop.run_training` at the same settings, eager and
  ``compile="default"``; ratio against the reference. Both warm up past ``learning_starts``
  first; the timing covers the steps after, and the compiled row's compilation (its first two
  updates) is timed apart and given in its note.
- the same for TD3 at CleanRL's ``td3_continuous_action.py`` defaults (:data:`TD3`: the actor and
  both Polyak targets every second update, Gaussian exploration and smoothing noise).
- ``sac, overlap`` / ``td3, overlap``: the same loop overlapped (``LoopConfig(overlap=True)``:
  the learner in a second process), timed alone after the side-by-side rounds, against the same
  reference rate.
- collection only (act, step, store), the SAC reference and ``sac``.
- on a GPU (first, so that a time limit cuts CPU rows, not these): learner updates/s of ``sac``
  and ``td3`` at batch 256, 256-256, on a replay of random Pendulum-shaped transitions: f32
  against bf16 (``TRITONRL_DTYPE``), and in the training dtype ``compile="default"`` and
  ``compile="reduce-overhead"`` (CUDA graphs) against eager.

``quick`` (smoke runs) times a few hundred steps with small networks, eager only.

Measured numbers: docs/pages/sac.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import numpy as np
import torch
from tritonrl.cli.bench import Row, forced_dtype, one_cpu_thread, time_loop

NAME = "sac_loop"
REQUIRES = ("gymnasium",)  # where it is missing, `tritonrl bench` skips this file in one line
ENV_ID = "Pendulum-v1"
CLEANRL = {
    "gamma": 0.99,
    "tau": 0.005,
    "batch_size": 256,
    "policy_lr": 3e-4,
    "q_lr": 1e-3,
    "policy_frequency": 2,
}
TD3 = {
    "gamma": 0.99,
    "tau": 0.005,
    "batch_size": 256,
    "lr": 3e-4,
    "policy_frequency": 2,
    "exploration_noise": 0.1,
    "policy_noise": 0.2,
    "noise_clip": 0.5,
}
"""CleanRL ``td3_continuous_action.py``'s defaults (the ``td3`` preset's, but ``learning_starts``)."""
HIDDEN = 256
STEPS = 1_000  # timed env steps per row: about a minute each at 256-256 on a loaded 2-core machine
CHUNKS = 10  # the rows of a case are timed side by side in this many rounds (interleaved)
LEARNING_STARTS = 1_000  # warm-up (CleanRL: 5,000); the timing starts after it either way
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


# ----------------------------------------------------------------------------- the reference


class _SoftQ(torch.nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(obs_dim + act_dim, hidden)
        self.fc2 = torch.nn.Linear(hidden, hidden)
        self.fc3 = torch.nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        x = torch.cat([x, a], 1)
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class _Actor(torch.nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, hidden: int, low: np.ndarray, high: np.ndarray) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(obs_dim, hidden)
        self.fc2 = torch.nn.Linear(hidden, hidden)
        self.fc_mean = torch.nn.Linear(hidden, act_dim)
        self.fc_logstd = torch.nn.Linear(hidden, act_dim)
        self.register_buffer("action_scale", torch.tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor((high + low) / 2.0, dtype=torch.float32))

    def get_action(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(self.fc2(torch.relu(self.fc1(x))))
        mean = self.fc_mean(h)
        log_std = torch.tanh(self.fc_logstd(h))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)
        normal = torch.distributions.Normal(mean, log_std.exp())
        x_t = normal.rsample()
        y_t = torch.tanh(x_t)
        action = y_t * self.action_scale + self.action_bias
        log_prob = normal.log_prob(x_t) - torch.log(self.action_scale * (1 - y_t.pow(2)) + 1e-6)
        return action, log_prob.sum(1, keepdim=True)


def reference_sac(steps: int, *, hidden: int = HIDDEN, learn: bool = True, seed: int = 0) -> Iterator[None]:
    """A single-file SAC loop at CleanRL's defaults, as a generator: the first ``next`` runs the
    warm-up of :data:`LEARNING_STARTS` random steps, each later one env step (of ``steps`` at most;
    ``learn=False``: collection only, the actor acting)."""
    import gymnasium as gym  # here, not at the top: the module imports on machines without it

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    envs = gym.wrappers.vector.RecordEpisodeStatistics(gym.vector.SyncVectorEnv([lambda: gym.make(ENV_ID)]))
    obs_dim = envs.single_observation_space.shape[0]
    act_dim = envs.single_action_space.shape[0]
    low, high = envs.single_action_space.low, envs.single_action_space.high
    actor = _Actor(obs_dim, act_dim, hidden, low, high)
    qf1, qf2 = _SoftQ(obs_dim, act_dim, hidden), _SoftQ(obs_dim, act_dim, hidden)
    qf1_t, qf2_t = _SoftQ(obs_dim, act_dim, hidden), _SoftQ(obs_dim, act_dim, hidden)
    qf1_t.load_state_dict(qf1.state_dict())
    qf2_t.load_state_dict(qf2.state_dict())
    q_opt = torch.optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=CLEANRL["q_lr"])
    a_opt = torch.optim.Adam(list(actor.parameters()), lr=CLEANRL["policy_lr"])
    target_entropy = -float(act_dim)
    log_alpha = torch.zeros(1, requires_grad=True)
    alpha = log_alpha.exp().item()
    alpha_opt = torch.optim.Adam([log_alpha], lr=CLEANRL["q_lr"])
    cap = LEARNING_STARTS + steps + 1  # the warm-up, then one step per later next()
    b_obs = np.zeros((cap, obs_dim), np.float32)
    b_next = np.zeros((cap, obs_dim), np.float32)
    b_act = np.zeros((cap, act_dim), np.float32)
    b_rew = np.zeros(cap, np.float32)
    b_done = np.zeros(cap, np.float32)
    B, gamma, tau = CLEANRL["batch_size"], CLEANRL["gamma"], CLEANRL["tau"]
    obs, _ = envs.reset(seed=seed)
    for step in range(cap):
        if step >= LEARNING_STARTS:
            yield  # the warm-up done (first), then one env step each
        if step < LEARNING_STARTS:
            actions = np.array([envs.single_action_space.sample() for _ in range(1)])
        else:
            actions, _ = actor.get_action(torch.Tensor(obs))
            actions = actions.detach().cpu().numpy()
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        real_next = next_obs.copy()  # (a vector env of one: the final observation is next_obs here)
        b_obs[step], b_next[step], b_act[step] = obs[0], real_next[0], actions[0]
        b_rew[step], b_done[step] = rewards[0], terminations[0]
        obs = next_obs
        if not learn or step < LEARNING_STARTS:
            continue
        idx = rng.integers(0, step + 1, size=B)
        o, a, n = torch.as_tensor(b_obs[idx]), torch.as_tensor(b_act[idx]), torch.as_tensor(b_next[idx])
        r, d = torch.as_tensor(b_rew[idx]), torch.as_tensor(b_done[idx])
        with torch.no_grad():
            next_a, next_logp = actor.get_action(n)
            min_t = torch.min(qf1_t(n, next_a), qf2_t(n, next_a)) - alpha * next_logp
            y = r + (1 - d) * gamma * min_t.view(-1)
        q1, q2 = qf1(o, a).view(-1), qf2(o, a).view(-1)
        qf_loss = torch.nn.functional.mse_loss(q1, y) + torch.nn.functional.mse_loss(q2, y)
        q_opt.zero_grad()
        qf_loss.backward()
        q_opt.step()
        if step % CLEANRL["policy_frequency"] == 0:
            for _ in range(CLEANRL["policy_frequency"]):
                pi, logp = actor.get_action(o)
                actor_loss = ((alpha * logp) - torch.min(qf1(o, pi), qf2(o, pi))).mean()
                a_opt.zero_grad()
                actor_loss.backward()
                a_opt.step()
                with torch.no_grad():
                    _, logp = actor.get_action(o)
                alpha_loss = (-log_alpha.exp() * (logp + target_entropy)).mean()
                alpha_opt.zero_grad()
                alpha_loss.backward()
                alpha_opt.step()
                alpha = log_alpha.exp().item()
        for net, tgt in ((qf1, qf1_t), (qf2, qf2_t)):
            for p, tp in zip(net.parameters(), tgt.parameters(), strict=True):
                tp.data.copy_(tau * p.data + (1 - tau) * tp.data)
    envs.close()


class _TD3Actor(torch.nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, hidden: int, low: np.ndarray, high: np.ndarray) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(obs_dim, hidden)
        self.fc2 = torch.nn.Linear(hidden, hidden)
        self.fc_mu = torch.nn.Linear(hidden, act_dim)
        self.register_buffer("action_scale", torch.tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor((high + low) / 2.0, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.tanh(self.fc_mu(torch.relu(self.fc2(torch.relu(self.fc1(x))))))
        return x * self.action_scale + self.action_bias


def reference_td3(steps: int, *, hidden: int = HIDDEN, seed: int = 0) -> Iterator[None]:
    """A single-file TD3 loop at CleanRL's ``td3_continuous_action.py`` defaults (:data:`TD3`), a
    generator as :func:`reference_sac`."""
    import gymnasium as gym

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    envs = gym.wrappers.vector.RecordEpisodeStatistics(gym.vector.SyncVectorEnv([lambda: gym.make(ENV_ID)]))
    obs_dim = envs.single_observation_space.shape[0]
    act_dim = envs.single_action_space.shape[0]
    low, high = envs.single_action_space.low, envs.single_action_space.high
    actor = _TD3Actor(obs_dim, act_dim, hidden, low, high)
    actor_t = _TD3Actor(obs_dim, act_dim, hidden, low, high)
    qf1, qf2 = _SoftQ(obs_dim, act_dim, hidden), _SoftQ(obs_dim, act_dim, hidden)
    qf1_t, qf2_t = _SoftQ(obs_dim, act_dim, hidden), _SoftQ(obs_dim, act_dim, hidden)
    actor_t.load_state_dict(actor.state_dict())
    qf1_t.load_state_dict(qf1.state_dict())
    qf2_t.load_state_dict(qf2.state_dict())
    q_opt = torch.optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=TD3["lr"])
    a_opt = torch.optim.Adam(list(actor.parameters()), lr=TD3["lr"])
    cap = LEARNING_STARTS + steps + 1  # the warm-up, then one step per later next()
    b_obs = np.zeros((cap, obs_dim), np.float32)
    b_next = np.zeros((cap, obs_dim), np.float32)
    b_act = np.zeros((cap, act_dim), np.float32)
    b_rew = np.zeros(cap, np.float32)
    b_done = np.zeros(cap, np.float32)
    B, gamma, tau = TD3["batch_size"], TD3["gamma"], TD3["tau"]
    obs, _ = envs.reset(seed=seed)
    for step in range(cap):
        if step >= LEARNING_STARTS:
            yield  # the warm-up done (first), then one env step each
        if step < LEARNING_STARTS:
            actions = np.array([envs.single_action_space.sample() for _ in range(1)])
        else:
            with torch.no_grad():
                actions = actor(torch.Tensor(obs))
                actions += torch.normal(0, actor.action_scale * TD3["exploration_noise"])
                actions = actions.cpu().numpy().clip(low, high)
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        b_obs[step], b_next[step], b_act[step] = obs[0], next_obs[0], actions[0]
        b_rew[step], b_done[step] = rewards[0], terminations[0]
        obs = next_obs
        if step < LEARNING_STARTS:
            continue
        idx = rng.integers(0, step + 1, size=B)
        o, a, n = torch.as_tensor(b_obs[idx]), torch.as_tensor(b_act[idx]), torch.as_tensor(b_next[idx])
        r, d = torch.as_tensor(b_rew[idx]), torch.as_tensor(b_done[idx])
        with torch.no_grad():
            noise = (torch.randn_like(a) * TD3["policy_noise"]).clamp(-TD3["noise_clip"], TD3["noise_clip"])
            next_a = (actor_t(n) + noise * actor_t.action_scale).clamp(float(low[0]), float(high[0]))
            min_t = torch.min(qf1_t(n, next_a), qf2_t(n, next_a))
            y = r + (1 - d) * gamma * min_t.view(-1)
        q1, q2 = qf1(o, a).view(-1), qf2(o, a).view(-1)
        qf_loss = torch.nn.functional.mse_loss(q1, y) + torch.nn.functional.mse_loss(q2, y)
        q_opt.zero_grad()
        qf_loss.backward()
        q_opt.step()
        if step % TD3["policy_frequency"] == 0:
            actor_loss = -qf1(o, actor(o)).mean()
            a_opt.zero_grad()
            actor_loss.backward()
            a_opt.step()
            for net, tgt in ((actor, actor_t), (qf1, qf1_t), (qf2, qf2_t)):
                for p, tp in zip(net.parameters(), tgt.parameters(), strict=True):
                    tp.data.copy_(tau * p.data + (1 - tau) * tp.data)
    envs.close()


# ----------------------------------------------------------------------------- ours


class _Loop:
    """The ``name`` preset (``"sac"`` or ``"td3"``) through the shared loop at its reference's
    settings: :meth:`warm_up` runs the same random warm-up, then (``learn``) two updates, which
    compile every region of a compiled agent; :meth:`run` steps on (no logging, no evaluation)."""

    def __init__(
        self, name: str, steps: int, *, hidden: int, learn: bool, compile: str, overlap: bool = False
    ) -> None:
        from tritonrl.agents.sac import SACAgent, TD3Agent, preset
        from tritonrl.toolkit.envs.vector import make_vec_env

        self.env = make_vec_env(ENV_ID, 1, seed=0)
        cfg = preset(
            name,
            hidden=(hidden, hidden),
            learning_starts=LEARNING_STARTS,
            buffer_size=LEARNING_STARTS + steps + 2,
            compile=compile,
        )
        agent_class = SACAgent if name == "sac" else TD3Agent
        space = self.env.single_observation_space, self.env.single_action_space
        self.agent = agent_class(*space, cfg, num_envs=1, seed=0)
        self.learn = learn
        self.overlap = overlap

    def _steps(self, n: int, learning_starts: int, overlap: bool = False) -> None:
        from tritonrl.toolkit.training.loop import LoopConfig, run_training
        from tritonrl.toolkit.training.offpolicy import OffPolicySchedule

        quiet = LoopConfig(total_steps=n, final_eval=False, plot=False, tensorboard=False, overlap=overlap)
        run_training(self.agent, self.env, OffPolicySchedule(learning_starts, 1, 1), quiet)

    def warm_up(self) -> float:
        """The random warm-up, then the first two updates (of both parities: the actor steps every
        second one); the seconds of those two (a compiled agent's compilation)."""
        self._steps(LEARNING_STARTS, 10**9)
        if not self.learn:
            return 0.0
        t0 = time.perf_counter()
        self.agent.update()
        self.agent.update()
        return time.perf_counter() - t0

    def run(self, n: int) -> None:
        """``n`` more env steps (an update after each with ``learn``; each call counts its steps
        from 0 again, so each gets a schedule of its own; with ``overlap`` each call starts its
        learner process)."""
        self._steps(n, 0 if self.learn else 10**9, self.overlap)

    def close(self) -> None:
        self.env.close()


def loop_sps(
    steps: int,
    *,
    name: str = "sac",
    hidden: int = HIDDEN,
    learn: bool = True,
    compile: str = "none",
    overlap: bool = False,
) -> tuple[float, float]:
    """``(env steps per second, compile seconds)`` of :class:`_Loop` alone: ``steps`` timed env
    steps after its warm-up (whose compilation the rate excludes; ``overlap``: the learner
    process starts inside the timing)."""
    loop = _Loop(name, steps, hidden=hidden, learn=learn, compile=compile, overlap=overlap)
    try:
        compile_s = loop.warm_up()
        t0 = time.perf_counter()
        loop.run(steps)
        return steps / (time.perf_counter() - t0), compile_s
    finally:
        loop.close()


def interleaved(runners: dict[str, Callable[[int], None]], steps: int, chunks: int) -> dict[str, float]:
    """Env steps per second of each runner (``runner(n)`` steps ``n`` env steps), timed side by
    side: ``steps`` each, in ``chunks`` rounds of ``steps // chunks``, the runners' order rotated
    each round, so that a load change on a shared machine hits every runner alike."""
    n = steps // chunks
    spent = dict.fromkeys(runners, 0.0)
    keys = list(runners)
    for i in range(chunks):
        for key in keys[i % len(keys) :] + keys[: i % len(keys)]:
            t0 = time.perf_counter()
            runners[key](n)
            spent[key] += time.perf_counter() - t0
    return {key: n * chunks / spent[key] for key in keys}


def _reference_runner(gen: Iterator[None]) -> Callable[[int], None]:
    next(gen)  # the warm-up

    def run(n: int) -> None:
        for _ in range(n):
            next(gen)

    return run


def learner_updates_per_s(
    name: str, *, device: str = "cuda", compile: str = "none", min_time: float = 1.0, hidden: int = HIDDEN
) -> float:
    """Back-to-back ``update()`` calls per second of ``name`` (batch 256) on ``device``, on a
    replay of 2,000 random transitions with Pendulum's shapes (3-d observations, one action in
    [-2, 2]); a compiled agent's compilation (its first updates) happens before the timing."""
    from gymnasium import spaces
    from tritonrl.agents.sac import SACAgent, TD3Agent, preset

    obs_space = spaces.Box(-8.0, 8.0, (3,), np.float32)
    act_space = spaces.Box(-2.0, 2.0, (1,), np.float32)
    cfg = preset(name, hidden=(hidden, hidden), learning_starts=256, buffer_size=2_000, compile=compile)
    agent = (SACAgent if name == "sac" else TD3Agent)(
        obs_space, act_space, cfg, num_envs=1, device=device, seed=0
    )
    g = torch.Generator().manual_seed(0)
    for _ in range(2_000):
        agent.observe(
            torch.randn(1, 3, generator=g),
            torch.rand(1, 1, generator=g) * 4 - 2,
            torch.randn(1, generator=g),
            torch.randn(1, 3, generator=g),
            torch.zeros(1, dtype=torch.bool),
            torch.zeros(1, dtype=torch.bool),
        )
    for _ in range(10):  # both parities of the delayed actor step, compiled and warm
        agent.update()
    return 1.0 / time_loop(agent.update, device, block=20, min_time=min_time)["median"]


def gpu_rows(quick: bool) -> list[Row]:
    """The GPU rows of the module docstring (CUDA only)."""
    secs = 1.0 if quick else 3.0
    gpu = torch.cuda.get_device_name(0)
    rows: list[Row] = []
    for name in ("sac", "td3"):
        rates: dict[str, float] = {}
        for dt in ("f32", "bf16"):
            with forced_dtype(dt):
                rates[dt] = learner_updates_per_s(name, min_time=secs)
        case = f"{name} learner updates/s, batch 256, {HIDDEN}-{HIDDEN}, cuda"
        rows.append(Row(NAME, case, "f32", rates["f32"], "updates/s", 1.0, gpu))
        rows.append(Row(NAME, case, "bf16", rates["bf16"], "updates/s", rates["bf16"] / rates["f32"], gpu))
        eager = learner_updates_per_s(name, min_time=secs)
        case = f"{name} learner updates/s, batch 256, cuda, training dtype: compiled vs eager"
        rows.append(Row(NAME, case, "eager", eager, "updates/s", 1.0, gpu))
        for mode in ("default", "reduce-overhead"):
            rate = learner_updates_per_s(name, compile=mode, min_time=secs)
            label = f"compile={mode}" + (" (CUDA graphs)" if mode == "reduce-overhead" else "")
            rows.append(Row(NAME, case, label, rate, "updates/s", rate / eager, gpu))
    return rows


def run(quick: bool = False) -> list[Row]:
    """The rows described in the module docstring."""
    steps, hidden, chunks = (300, 32, 3) if quick else (STEPS, HIDDEN, CHUNKS)
    modes = ("none",) if quick else ("none", "default")
    rows: list[Row] = gpu_rows(quick) if torch.cuda.is_available() else []
    note = "tritonrl.toolkit.training.loop + offpolicy schedule"
    with one_cpu_thread():
        for name, reference in (("sac", reference_sac), ("td3", reference_td3)):
            case = f"{ENV_ID}, 1 env, {hidden}-{hidden}: env steps/s at CleanRL's {name.upper()} defaults"
            loops = {mode: _Loop(name, steps, hidden=hidden, learn=True, compile=mode) for mode in modes}
            try:
                compile_s = {mode: loop.warm_up() for mode, loop in loops.items()}
                runners = {"ref": _reference_runner(reference(steps, hidden=hidden))}
                runners.update({mode: loop.run for mode, loop in loops.items()})
                rates = interleaved(runners, steps, chunks)
            finally:
                for loop in loops.values():
                    loop.close()
            ref = rates["ref"]
            rows.append(Row(NAME, case, "reference: single file", ref, "steps/s", 1.0, "CleanRL style"))
            for mode in modes:
                label = name if mode == "none" else f"{name}, compile={mode}"
                more = "" if mode == "none" else f"; compilation {compile_s[mode]:.0f} s, not timed"
                rows.append(Row(NAME, case, label, rates[mode], "steps/s", rates[mode] / ref, note + more))
            # overlapped (the learner in a second process, one sync point per env step at
            # train_freq 1): timed alone, after the side-by-side rounds
            sps, _ = loop_sps(steps, name=name, hidden=hidden, overlap=True)
            more = "; timed alone after the others; a sync point every env step (train_freq 1)"
            rows.append(Row(NAME, case, f"{name}, overlap", sps, "steps/s", sps / ref, note + more))
        case = f"{ENV_ID}, 1 env, {hidden}-{hidden}: env steps/s, collection only"
        loop = _Loop("sac", steps, hidden=hidden, learn=False, compile="none")
        try:
            loop.warm_up()
            runners = {
                "ref": _reference_runner(reference_sac(steps, hidden=hidden, learn=False)),
                "sac": loop.run,
            }
            rates = interleaved(runners, steps, chunks)
        finally:
            loop.close()
        rows.append(Row(NAME, case, "reference: single file", rates["ref"], "steps/s", 1.0, "CleanRL style"))
        rows.append(Row(NAME, case, "sac", rates["sac"], "steps/s", rates["sac"] / rates["ref"], note))
    return rows
