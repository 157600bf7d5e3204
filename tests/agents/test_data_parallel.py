"""Data-parallel agents (PPO, DQN, SAC, TD3) on 2 gloo ranks: N ranks x E envs learn as 1 rank x N*E envs.

Each 2-rank run (:func:`dist_run.run_ranks`, fresh processes) is compared with one process holding
the union of the ranks' data. The agreement is to f32 rounding, not bit for bit: a rank's loss is
the mean over its half of a batch and the all-reduce averages the two halves' gradients, where one
process sums the whole batch in another order. The tolerance, ``rtol=1e-5`` plus ``atol=1e-6``
times the tensor's largest magnitude, bounds that reordering: a gradient sums ~32 per-sample terms
and another order moves it by a few f32 ulp of its scale (measured: at most 0.18 of the tolerance);
Adam's first step, ``lr * g / (|g| + eps)``, amplifies that error by up to ``lr / eps`` (100 for
PPO) where ``|g|`` is near ``eps``, so the parameters use more of it (measured: at most 0.33). A
real difference is far outside: the update moves the parameters by ~1e6 tolerances, and a
gradient that is not averaged is off by ~50%. After the update the ranks hold the *same*
parameters, bit for bit: they apply the same all-reduced gradient.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

import gymnasium as gym
from dist_run import run_ranks
from tritonrl.agents.dqn import DQNAgent
from tritonrl.agents.dqn import preset as dqn_preset
from tritonrl.agents.ppo import PPOAgent
from tritonrl.agents.ppo import preset as ppo_preset
from tritonrl.agents.sac import SACAgent, TD3Agent
from tritonrl.agents.sac import preset as sac_preset
from tritonrl.toolkit.distributed import SINGLE_PROCESS, DistContext, DistributedError
from tritonrl.toolkit.optim import MasterWeightOptimizer
from tritonrl.toolkit.precision import training_dtype
from tritonrl.toolkit.replay import PrioritizedReplayBuffer, ReplayBatch
from tritonrl.toolkit.replay.rollout import RunningMeanStd

OBS = gym.spaces.Box(-10.0, 10.0, (4,), np.float32)
ACT = gym.spaces.Discrete(3)
T, E = 8, 4  # rollout steps; global environments (2 per rank)
B = 8  # DQN global batch (4 per rank)


def _close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """f32 agreement up to summation order (see the module docstring)."""
    scale = float(want.abs().max()) if want.numel() else 0.0
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6 * max(scale, 1e-3), msg=what)


def _same(a: list[torch.Tensor], b: list[torch.Tensor], what: str) -> None:
    """Bit-for-bit equal lists of tensors."""
    assert len(a) == len(b), what
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        assert x.dtype == y.dtype and torch.equal(x, y), f"{what}: tensor {i} differs"


# ----------------------------------------------------------------------------- PPO


def _ppo_config(**kw: object) -> object:
    base: dict[str, object] = dict(
        hidden=(16, 16), num_steps=T, update_epochs=1, num_minibatches=1, anneal_lr=False, norm_adv=False
    )
    return ppo_preset("ppo", **{**base, **kw})


def _ppo_rollout(seed: int = 3) -> dict[str, torch.Tensor]:
    """A fixed rollout of ``E`` environments (``[T, E, ...]``) for the initial ``seed=0`` policy:
    the old log-probs are the policy's own on envs 0-1 (rank 0's: approximate KL ~0) and noisy
    on envs 2-3 (rank 1's: a large KL), so that ranks disagree unless the KL is all-reduced."""
    agent = PPOAgent(OBS, ACT, _ppo_config(), num_envs=E, seed=0, dist=SINGLE_PROCESS)
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(T, E, 4, generator=g) * 2.0
    actions = torch.randint(3, (T, E), generator=g)
    with torch.no_grad():
        logp, _, value = agent.net.evaluate(obs.reshape(-1, 4), actions.reshape(-1))
    noise = torch.randn(T, E, generator=g) * 0.5
    noise[:, :2] = 0.0
    truncated = torch.rand(T, E, generator=g) < 0.1
    last = torch.zeros(T, E, dtype=torch.bool)
    last[-1] = True
    return {
        "obs": obs,
        "actions": actions,
        "logprobs": logp.reshape(T, E) + noise,
        "values": value.reshape(T, E) + 0.1 * torch.randn(T, E, generator=g),
        "rewards": torch.randn(T, E, generator=g),
        "terminated": torch.rand(T, E, generator=g) < 0.1,
        "truncated": truncated,
        "starts": torch.rand(T, E, generator=g) < 0.1,
        "next_values": torch.randn(T, E, generator=g),
        "has_next_value": truncated | last,
    }


def _fill_rollout(agent: PPOAgent, data: dict[str, torch.Tensor], envs: slice) -> None:
    """Write ``data[:, envs]`` into the agent's rollout, as ``T`` observe calls would."""
    b = agent.buffer
    for name, value in data.items():
        getattr(b, name).copy_(value[:, envs])
    b.pos = b.num_steps


def _ppo_update(agent: PPOAgent, data: dict[str, torch.Tensor], envs: slice) -> dict[str, object]:
    _fill_rollout(agent, data, envs)
    metrics = agent.update()
    params = list(agent.net.parameters())
    return {
        "params": [p.detach().clone() for p in params],
        "grads": [p.grad.clone() for p in params],  # the averaged gradient (clip_and_step clips a copy)
        "epochs": float(metrics["losses/epochs"]),
        "kl": float(metrics["losses/approx_kl"]),
    }


PPO_CASES: dict[str, dict[str, object]] = {
    "plain": {},
    "norm_adv": {"norm_adv": True},
    # rank 0's own KL is ~0, rank 1's far above: only the mean (0.5 x rank 1's) decides, and it
    # exceeds target_kl (set below) after the first of three epochs on every rank
    "target_kl": {"norm_adv": True, "update_epochs": 3},
}


def _target_kl(data: dict[str, torch.Tensor]) -> float:
    """A ``target_kl`` below the global first-epoch KL (half of rank 1's) and far above rank 0's."""
    agent = PPOAgent(OBS, ACT, _ppo_config(), num_envs=E, seed=0, dist=SINGLE_PROCESS)
    with torch.no_grad():
        logp, _, _ = agent.net.evaluate(data["obs"].reshape(-1, 4), data["actions"].reshape(-1))
    logratio = logp.reshape(T, E)[:, 2:] - data["logprobs"][:, 2:]
    kl_rank1 = float(((logratio.exp() - 1) - logratio).mean())
    return kl_rank1 / 4


def _ppo_ranks(ctx: DistContext, data: dict[str, torch.Tensor], target_kl: float) -> dict[str, object]:
    envs = slice(2 * ctx.rank, 2 * ctx.rank + 2)
    out: dict[str, object] = {}
    for name, kw in PPO_CASES.items():
        if name == "target_kl":
            kw = {**kw, "target_kl": target_kl}
        agent = PPOAgent(OBS, ACT, _ppo_config(**kw), num_envs=2, seed=0, dist=ctx)
        out[name] = _ppo_update(agent, data, envs)
    # observation statistics: each rank acts on its own observations; pooled at the update
    agent = PPOAgent(OBS, ACT, _ppo_config(normalize_obs=True, num_steps=2), num_envs=2, seed=0, dist=ctx)
    for t in range(2):
        obs = data["obs"][t, envs] * (1 + t)
        action = agent.act(obs)
        agent.observe(
            obs,
            action,
            data["rewards"][t, envs],
            obs,
            data["terminated"][t, envs],
            data["truncated"][t, envs],
        )
    agent.update()
    assert agent.obs_rms is not None
    out["obs_rms"] = {k: v.clone() for k, v in agent.obs_rms.state_dict().items()}
    out["env_steps"] = agent.env_steps
    agent.act(data["obs"][2, envs])  # this rank's statistics move on from the pooled ones
    out["state"] = agent.state_dict()
    return out


def test_ppo_two_ranks_update_equals_one_process_on_the_union() -> None:
    data = _ppo_rollout()
    target_kl = _target_kl(data)
    ranks = run_ranks(_ppo_ranks, 2, data, target_kl)
    for name, kw in PPO_CASES.items():
        if name == "target_kl":
            kw = {**kw, "target_kl": target_kl}
        single = PPOAgent(OBS, ACT, _ppo_config(**kw), num_envs=E, seed=0, dist=SINGLE_PROCESS)
        want = _ppo_update(single, data, slice(0, E))
        r0, r1 = ranks[0][name], ranks[1][name]
        _same(r0["params"], r1["params"], f"{name}: parameters of rank 0 and rank 1")
        _same(r0["grads"], r1["grads"], f"{name}: averaged gradients of rank 0 and rank 1")
        for i, (g, w) in enumerate(zip(r0["grads"], want["grads"], strict=True)):
            _close(g, w, f"{name}: gradient {i}")
        for i, (p, w) in enumerate(zip(r0["params"], want["params"], strict=True)):
            _close(p, w, f"{name}: parameter {i}")
        assert r0["epochs"] == r1["epochs"] == want["epochs"], name
    # the KL stop is global: one epoch of three, although rank 0's own KL is ~0
    assert ranks[0]["target_kl"]["epochs"] == 1.0
    assert ranks[0]["target_kl"]["kl"] < target_kl < ranks[1]["target_kl"]["kl"]
    # pooled observation statistics: the same on both ranks, those of the union of observations
    _same(list(ranks[0]["obs_rms"].values()), list(ranks[1]["obs_rms"].values()), "obs_rms of the ranks")
    union = RunningMeanStd((4,))
    union.update(torch.cat([data["obs"][0], data["obs"][1] * 2]))
    for key in ("mean", "var", "count"):
        _close(ranks[0]["obs_rms"][key], union.state_dict()[key], f"pooled obs_rms {key}")
    assert ranks[0]["env_steps"] == ranks[1]["env_steps"] == 2 * E  # global steps: 2 x 4 envs

    # a 2-rank checkpoint resumed on one process (M != N): shared parts only, own parts fresh
    state = ranks[1]["state"]
    one = PPOAgent(
        OBS, ACT, _ppo_config(normalize_obs=True, num_steps=2), num_envs=E, seed=5, dist=SINGLE_PROCESS
    )
    with pytest.raises(ValueError, match="num_envs=2"):
        one.check_state_dict(state)  # this rank's parts do not fit 4 environments
    shared = {k: v for k, v in state.items() if k not in PPOAgent.rank_part_keys}  # what is loaded
    one.check_state_dict(shared, rank_parts=False)
    one.load_state_dict(shared, rank_parts=False)
    _same(list(one.net.state_dict().values()), list(state["policy"].values()), "loaded policy")
    assert one.obs_rms is not None
    _same(list(one.obs_rms.state_dict().values()), list(ranks[0]["obs_rms"].values()), "loaded obs_rms")
    assert one.buffer.pos == 0 and one.env_steps == state["counters"]["env_steps"]
    # the same rank's whole state (an exact resume of that rank): its own statistics come back
    own = PPOAgent(OBS, ACT, _ppo_config(normalize_obs=True, num_steps=2), num_envs=2, dist=SINGLE_PROCESS)
    own.load_state_dict(state)
    assert own.obs_rms is not None
    current = state["obs_rms_rank"]["current"]
    _same(list(own.obs_rms.state_dict().values()), list(current.values()), "this rank's obs_rms")
    assert not torch.equal(current["mean"], state["obs_rms"]["mean"])
    assert one.updates == 1 and bool(one.starts.all())
    saved_opt = state["optimizer"]["optimizer"]["state"]
    for i, per_param in one.optimizer.optimizer.state_dict()["state"].items():
        _same(list(per_param.values()), list(saved_opt[i].values()), f"optimizer state {i}")


def test_ppo_rank_parts_false_keeps_shared_parts_and_empties_own_parts() -> None:
    cfg = _ppo_config(policy="lstm", hidden=(8,), memory_size=8, seq_len=4, normalize_obs=True)
    a = PPOAgent(OBS, ACT, cfg, num_envs=E, seed=0)
    g = torch.Generator().manual_seed(0)
    for _ in range(T + 3):  # one update, then a partial rollout and a live memory
        obs = torch.randn(E, 4, generator=g)
        action = a.act(obs)
        a.observe(
            obs,
            action,
            torch.randn(E, generator=g),
            obs,
            torch.zeros(E, dtype=torch.bool),
            torch.zeros(E, dtype=torch.bool),
        )
        if a.buffer.full:
            a.update()
    state = a.state_dict()
    b = PPOAgent(OBS, ACT, cfg, num_envs=2, seed=1)
    b.load_state_dict(state, rank_parts=False)
    _same(list(b.net.state_dict().values()), list(a.net.state_dict().values()), "policy")
    assert b.obs_rms is not None and a.obs_rms is not None
    _same(list(b.obs_rms.state_dict().values()), list(a.obs_rms.state_dict().values()), "obs_rms")
    assert (b.env_steps, b.updates) == (a.env_steps, a.updates) and a.buffer.pos == 3
    assert b.buffer.pos == 0 and bool(b.starts.all()) and b.segment_states == [None, None]
    assert all(bool((s == 0).all()) for s in b.state)
    assert b.current_lr() == a.current_lr()
    a.load_state_dict(state, rank_parts=False)  # into a used agent: its own parts are emptied
    assert a.buffer.pos == 0 and all(bool((s == 0).all()) for s in a.state)


# ----------------------------------------------------------------------------- DQN


def _dqn_config(**kw: object) -> object:
    base: dict[str, object] = dict(
        double=True, torso_width=16, buffer_size=16, batch_size=B, target_update_every=1, eps_decay_steps=40
    )
    return dqn_preset("dqn", **{**base, **kw})


def _dqn_batches(seed: int = 4) -> list[ReplayBatch]:
    """Two fixed global batches of ``B`` transitions (the first half is rank 0's)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(2):
        done = torch.rand(B, generator=g) < 0.25
        out.append(
            ReplayBatch(
                obs=torch.randn(B, 4, generator=g),
                action=torch.randint(3, (B,), generator=g),
                reward=torch.randn(B, generator=g),
                next_obs=torch.randn(B, 4, generator=g),
                discount=torch.where(done, 0.0, 0.99),
                indices=torch.arange(B),
                weights=torch.ones(B),
            )
        )
    return out


def _half(batch: ReplayBatch, rows: slice) -> ReplayBatch:
    return ReplayBatch(*(t[rows] for t in batch))


def _dqn_run(agent: DQNAgent, batches: list[ReplayBatch], rows: slice, num_envs: int) -> dict[str, object]:
    """Two updates on ``batches[k][rows]`` (replay sampling replaced by the fixed batches) after
    ``k`` observe calls, recording epsilon along the way."""
    eps = []
    g = torch.Generator().manual_seed(9)
    for _ in range(3):  # transitions to satisfy update()'s size check; epsilon after each call
        obs = torch.randn(num_envs, 4, generator=g).numpy()
        agent.observe(
            obs,
            np.zeros(num_envs, np.int64),
            np.zeros(num_envs, np.float32),
            obs,
            np.zeros(num_envs, bool),
            np.zeros(num_envs, bool),
        )
        eps.append(agent.epsilon())
    fixed = iter(_half(b, rows) for b in batches)

    def sample(batch_size: int, generator: torch.Generator | None = None) -> ReplayBatch:
        assert batch_size == agent.batch_size
        return next(fixed)

    agent.buffer.sample = sample  # type: ignore[method-assign]
    metrics = [agent.update() for _ in batches]
    return {
        "online": [p.detach().clone() for p in agent.online.parameters()],
        "target": [p.detach().clone() for p in agent.target.parameters()],
        "grad_norm": [m["losses/grad_norm"] for m in metrics],
        "eps": eps,
        "env_steps": agent.env_steps,
    }


def _dqn_ranks(ctx: DistContext, batches: list[ReplayBatch]) -> dict[str, object]:
    rows = slice(4 * ctx.rank, 4 * ctx.rank + 4)
    agent = DQNAgent(OBS, ACT, _dqn_config(), num_envs=2, seed=0, dist=ctx)
    out = _dqn_run(agent, batches, rows, 2)
    out["sizes"] = (agent.batch_size, agent.buffer_size, agent.buffer.capacity)
    errors = []
    for bad in ({"batch_size": 5, "buffer_size": 16}, {"batch_size": 4, "buffer_size": 15}):
        try:
            DQNAgent(OBS, ACT, _dqn_config(**bad), num_envs=2, seed=0, dist=ctx)
        except DistributedError as exc:
            errors.append(str(exc))
    out["errors"] = errors
    return out


def test_dqn_two_ranks_update_equals_one_process_on_the_union() -> None:
    batches = _dqn_batches()
    ranks = run_ranks(_dqn_ranks, 2, batches)
    single = DQNAgent(OBS, ACT, _dqn_config(), num_envs=E, seed=0, dist=SINGLE_PROCESS)
    want = _dqn_run(single, batches, slice(0, B), E)
    r0, r1 = ranks
    for net in ("online", "target"):
        _same(r0[net], r1[net], f"{net} network of rank 0 and rank 1")
        for i, (p, w) in enumerate(zip(r0[net], want[net], strict=True)):
            _close(p, w, f"{net} parameter {i}")
    for got, w in zip(r0["grad_norm"], want["grad_norm"], strict=True):
        _close(got, w, "global gradient norm")
    # epsilon counts every rank's steps: 2 ranks x 2 envs per observe = one process with 4 envs
    assert r0["eps"] == r1["eps"] == want["eps"] and r0["env_steps"] == want["env_steps"] == 3 * E
    assert r0["sizes"] == (B // 2, 8, 8)
    for out in ranks:
        assert len(out["errors"]) == 2
        assert "batch_size=5 is not divisible by the world size 2" in out["errors"][0]
        assert "buffer_size=15 is not divisible by the world size 2" in out["errors"][1]


def test_dqn_rank_parts_false_loads_weights_and_starts_an_empty_replay() -> None:
    cfg = _dqn_config(prioritized=True, icm=True, icm_hidden=8, icm_embed=4, batch_size=4)
    a = DQNAgent(OBS, ACT, cfg, num_envs=2, seed=0)
    g = torch.Generator().manual_seed(0)
    for _ in range(4):
        obs = torch.randn(2, 4, generator=g).numpy()
        a.observe(obs, np.array([0, 2]), np.ones(2, np.float32), obs, np.zeros(2, bool), np.zeros(2, bool))
    for _ in range(3):
        a.update()
    state = a.state_dict()
    b = DQNAgent(OBS, ACT, cfg, num_envs=1, seed=1)
    shared = {k: v for k, v in state.items() if k not in DQNAgent.rank_part_keys}  # what is loaded
    b.check_state_dict(shared, rank_parts=False)
    b.load_state_dict(shared, rank_parts=False)
    for net in ("online", "target", "icm_module"):
        _same(list(getattr(b, net).state_dict().values()), list(getattr(a, net).state_dict().values()), net)
    _same(b.optimizer.masters, a.optimizer.masters, "optimizer masters")
    assert b.optimizer.optimizer.state_dict()["state"][0]["step"] == 3
    assert len(b.buffer) == 0 and b.icm_buffer is not None and len(b.icm_buffer) == 0
    assert isinstance(b.buffer, PrioritizedReplayBuffer) and b.buffer.sample_calls == a.updates == 3
    assert (b.env_steps, b.updates, b.epsilon()) == (a.env_steps, a.updates, a.epsilon())
    a.load_state_dict(state, rank_parts=False)  # a used agent: its replay is emptied
    assert len(a.buffer) == 0 and a.icm_buffer is not None and len(a.icm_buffer) == 0
    a.load_state_dict(a.state_dict())  # the rebuilt empty replays round-trip
    assert len(a.buffer) == 0 and a.buffer.sample_calls == 3


# ----------------------------------------------------------------------------- construction


def _construction(ctx: DistContext) -> dict[str, object]:
    out: dict[str, object] = {}
    errors = []
    for build in (
        lambda: PPOAgent(OBS, ACT, _ppo_config(lr=1e-3 * (ctx.rank + 1)), num_envs=2, dist=ctx),
        lambda: DQNAgent(OBS, ACT, _dqn_config(gamma=(0.9, 0.95)[ctx.rank]), num_envs=2, dist=ctx),
        lambda: DQNAgent(OBS, ACT, _dqn_config(), num_envs=1 + ctx.rank, dist=ctx),
    ):
        try:
            build()
        except DistributedError as exc:
            errors.append(str(exc))
    out["errors"] = errors
    # different seeds: every rank starts from rank 0's weights (seed 0); generators differ
    ppo = PPOAgent(OBS, ACT, _ppo_config(), num_envs=2, seed=ctx.rank, dist=ctx)
    dqn = DQNAgent(
        OBS, ACT, _dqn_config(icm=True, icm_hidden=8, icm_embed=4), num_envs=2, seed=ctx.rank, dist=ctx
    )
    out["ppo"] = [p.detach().clone() for p in ppo.net.parameters()]
    out["dqn"] = [t.detach().clone() for t in (*dqn.online.parameters(), *dqn.target.parameters())]
    out["icm"] = [p.detach().clone() for p in dqn.icm_module.parameters()]  # type: ignore[union-attr]
    out["draw"] = torch.rand(4, generator=dqn.generator)
    return out


def test_ranks_must_agree_and_start_from_rank_0s_weights() -> None:
    ranks = run_ranks(_construction, 2)
    for out in ranks:
        ppo_lr, dqn_gamma, envs = out["errors"]
        assert "agent config differs across ranks: lr: rank 0 has 0.001, rank 1 has 0.002" in ppo_lr
        assert "agent config differs across ranks: gamma: rank 0 has 0.9, rank 1 has 0.95" in dqn_gamma
        assert "agent environments differs across ranks: num_envs: rank 0 has 1, rank 1 has 2" in envs
    ppo0 = PPOAgent(OBS, ACT, _ppo_config(), num_envs=2, seed=0, dist=SINGLE_PROCESS)
    dqn0 = DQNAgent(
        OBS, ACT, _dqn_config(icm=True, icm_hidden=8, icm_embed=4), num_envs=2, seed=0, dist=SINGLE_PROCESS
    )
    for out in ranks:
        _same(out["ppo"], [p.detach() for p in ppo0.net.parameters()], "PPO parameters")
        _same(out["dqn"], [t.detach() for t in (*dqn0.online.parameters(), *dqn0.target.parameters())], "DQN")
        _same(out["icm"], [p.detach() for p in dqn0.icm_module.parameters()], "ICM")  # type: ignore[union-attr]
    assert not torch.equal(ranks[0]["draw"], ranks[1]["draw"])  # each rank samples its own stream
    assert torch.equal(ranks[0]["draw"], torch.rand(4, generator=dqn0.generator))  # rank 0 = one process


# ----------------------------------------------------------------------------- bf16


def _bf16_and_optimizer_ranks(ctx: DistContext) -> dict[str, object]:
    """Both bf16 checks in one pair of processes (a spawn costs seconds)."""
    return {"optimizer": _optimizer_ranks(ctx), "bf16": _bf16_ranks(ctx)}


@pytest.fixture(scope="module")
def bf16_ranks() -> list[dict[str, object]]:
    return run_ranks(_bf16_and_optimizer_ranks, 2)


def _bf16_ranks(ctx: DistContext) -> dict[str, object]:
    os.environ["TRITONRL_DTYPE"] = "bf16"  # this rank's process only (spawned fresh)
    training_dtype.cache_clear()  # type: ignore[attr-defined]
    g = torch.Generator().manual_seed(10 + ctx.rank)  # each rank its own data
    ppo = PPOAgent(
        OBS,
        ACT,
        _ppo_config(num_steps=4, norm_adv=True, normalize_obs=True),
        num_envs=2,
        seed=ctx.rank,
        dist=ctx,
    )
    for _ in range(4):
        obs = torch.randn(2, 4, generator=g)
        ppo.observe(
            obs,
            ppo.act(obs),
            torch.randn(2, generator=g),
            obs,
            torch.zeros(2, dtype=torch.bool),
            torch.zeros(2, dtype=torch.bool),
        )
    ppo.update()
    dqn = DQNAgent(
        OBS,
        ACT,
        _dqn_config(tau=0.5, icm=True, icm_hidden=8, icm_embed=4, batch_size=4),
        num_envs=2,
        seed=ctx.rank,
        dist=ctx,
    )
    for _ in range(4):
        obs = torch.randn(2, 4, generator=g).numpy()
        dqn.observe(obs, np.array([0, 1]), np.ones(2, np.float32), obs, np.zeros(2, bool), np.zeros(2, bool))
    dqn.update()
    assert dqn.icm_module is not None and dqn._target_master is not None
    return {
        "dtype": str(ppo.dtype),
        "ppo": [t.detach().clone() for t in (*ppo.net.parameters(), *ppo.optimizer.masters)],
        "dqn": [
            t.detach().clone()
            for t in (
                *dqn.online.parameters(),
                *dqn.target.parameters(),
                *dqn.optimizer.masters,
                *dqn._target_master,
                *dqn.icm_module.parameters(),
                *dqn.icm_optimizer.masters,
            )
        ],
    }


def test_bf16_two_rank_updates_keep_the_ranks_identical(bf16_ranks: list[dict[str, object]]) -> None:
    r0, r1 = (out["bf16"] for out in bf16_ranks)
    assert r0["dtype"] == "torch.bfloat16"
    assert {t.dtype for t in r0["ppo"]} == {torch.bfloat16, torch.float32}  # parameters and masters
    _same(r0["ppo"], r1["ppo"], "bf16 PPO parameters and masters")
    _same(r0["dqn"], r1["dqn"], "bf16 DQN online, target, masters, ICM")


# ----------------------------------------------------------------------------- optimizer


def _optimizer_ranks(ctx: DistContext) -> dict[str, torch.Tensor]:
    # bf16 gradients 1 and 1 + 2^-7 (both exact in bf16): their mean 1 + 2^-8 is not a bf16 value
    grad = torch.full((1,), 1.0 + ctx.rank * 2.0**-7, dtype=torch.bfloat16)
    p = torch.nn.Parameter(torch.zeros(1, dtype=torch.bfloat16))
    opt = MasterWeightOptimizer([p], torch.optim.SGD, dist=ctx, lr=1.0)
    p.grad = grad.clone()
    norm = opt.clip_grad_norm_(10.0)
    master_grad = opt.masters[0].grad.clone()  # type: ignore[union-attr]
    opt.step()
    fused = MasterWeightOptimizer(
        [torch.nn.Parameter(torch.zeros(1, dtype=torch.bfloat16))], dist=ctx, fused=True
    )
    fused.params[0].grad = grad.clone()
    return {
        "norm": norm,
        "master_grad": master_grad,
        "master": opt.masters[0].detach().clone(),
        "fused_norm": fused.clip_and_step(10.0),
    }


def test_optimizer_averages_the_f32_master_gradients(bf16_ranks: list[dict[str, object]]) -> None:
    mean = torch.tensor([1.0 + 2.0**-8])
    for out in (ranks["optimizer"] for ranks in bf16_ranks):
        assert out["master_grad"].dtype == torch.float32
        # exact: two ranks summed in f32, halved
        torch.testing.assert_close(out["master_grad"], mean, rtol=0, atol=0)
        torch.testing.assert_close(out["norm"], mean[0], rtol=0, atol=0)  # exact: the norm of one element
        torch.testing.assert_close(out["master"], -mean, rtol=0, atol=0)  # exact: SGD lr 1 on the f32 mean
        # exact: the norm of one element
        torch.testing.assert_close(out["fused_norm"], mean[0], rtol=0, atol=0)


def test_running_mean_std_merge_pools_two_streams() -> None:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(50, 3, generator=g) + 5.0, torch.randn(30, 3, generator=g) * 3.0
    a, b, both = (
        RunningMeanStd((3,), epsilon=0.0),
        RunningMeanStd((3,), epsilon=0.0),
        RunningMeanStd((3,), epsilon=0.0),
    )
    a.update(x)
    b.update(y)
    both.update(torch.cat([x, y]))
    a.merge(b)
    for key in ("mean", "var", "count"):
        torch.testing.assert_close(a.state_dict()[key], both.state_dict()[key], rtol=1e-5, atol=1e-5)
    empty, other = RunningMeanStd((3,), epsilon=0.0), RunningMeanStd((3,), epsilon=0.0)
    empty.merge(other)  # nothing into nothing: no NaN
    assert bool(torch.isfinite(empty.var).all()) and float(empty.count) == 0.0


# ----------------------------------------------------------------------------- SAC / TD3

BOX = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)  # rescaled onto [-1, 1] by the agents
OFF_UPDATES = 3  # updates 0 and 2 step the actor (policy_frequency=2); update 1 does not


def _off_config(kind: str) -> object:
    base: dict[str, object] = dict(hidden=(8, 8), buffer_size=16, batch_size=B, learning_starts=0)
    return sac_preset(kind, **base)


def _off_data(seed: int = 5) -> dict[str, list[torch.Tensor]]:
    """Fixed global batches (one per update; rows ``4r:4r+4`` are rank ``r``'s) and a fixed
    sequence of global noise draws ``[B, 2]`` (one per ``_randn`` call, more than any update uses)."""
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(OFF_UPDATES):
        done = torch.rand(B, generator=g) < 0.25
        batches.append(
            ReplayBatch(
                obs=torch.randn(B, 4, generator=g),
                action=torch.rand(B, 2, generator=g) * 2.0 - 1.0,
                reward=torch.randn(B, generator=g),
                next_obs=torch.randn(B, 4, generator=g),
                discount=torch.where(done, 0.0, 0.99),
                indices=torch.arange(B),
                weights=torch.ones(B),
            )
        )
    return {"batches": batches, "noise": [torch.randn(B, 2, generator=g) for _ in range(8 * OFF_UPDATES)]}


def _off_nets(agent: SACAgent | TD3Agent) -> dict[str, torch.nn.Module]:
    if isinstance(agent, SACAgent):
        return {
            "actor": agent.actor,
            "critic": agent.critic,
            "critic_target": agent.critic_target,
            "log_alpha": agent.log_alpha,
        }
    return {
        "actor": agent.actor,
        "critic": agent.critic,
        "critic_target": agent.critic_target,
        "actor_target": agent.actor_target,
    }


def _off_run(agent: SACAgent | TD3Agent, data: dict[str, list[torch.Tensor]], rows: slice) -> list[object]:
    """``OFF_UPDATES`` updates on ``batches[k][rows]`` with the noise rows ``rows`` of the fixed
    draws (replay sampling and the agent's generator replaced); after each update, every
    network's parameters and the gradients its last step applied (the all-reduced mean)."""
    g = torch.Generator().manual_seed(9)
    n = agent.num_envs
    for _ in range(3):  # transitions to satisfy update()'s size check
        obs = torch.randn(n, 4, generator=g).numpy()
        agent.observe(
            obs,
            np.zeros((n, 2), np.float32),
            np.zeros(n, np.float32),
            obs,
            np.zeros(n, bool),
            np.zeros(n, bool),
        )
    fixed = iter(ReplayBatch(*(t[rows] for t in b)) for b in data["batches"])
    noise = iter(z[rows] for z in data["noise"])

    def sample(batch_size: int, generator: torch.Generator | None = None) -> ReplayBatch:
        assert batch_size == agent.batch_size
        return next(fixed)

    def randn(count: int) -> torch.Tensor:
        z = next(noise)
        assert z.shape[0] == count
        return z

    agent.buffer.sample = sample  # type: ignore[method-assign]
    agent._randn = randn  # type: ignore[method-assign]
    out: list[object] = []
    for _ in range(OFF_UPDATES):
        metrics = agent.update()
        step: dict[str, object] = {"actor_stepped": "losses/actor_loss" in metrics}
        for name, net in _off_nets(agent).items():
            params = list(net.parameters())
            step[name] = [p.detach().clone() for p in params]
            step[f"{name}.grad"] = [p.grad.clone() for p in params if p.grad is not None]
        out.append(step)
    return out


def _off_ranks(ctx: DistContext, data: dict[str, list[torch.Tensor]]) -> dict[str, object]:
    rows = slice(4 * ctx.rank, 4 * ctx.rank + 4)
    out: dict[str, object] = {}
    for kind, cls in (("sac", SACAgent), ("td3", TD3Agent)):
        agent = cls(OBS, BOX, _off_config(kind), num_envs=2, seed=0, dist=ctx)
        out[kind] = _off_run(agent, data, rows)
        out[f"{kind}.sizes"] = (agent.batch_size, agent.buffer_size)
    return out


@pytest.fixture(scope="module")
def off_ranks() -> tuple[dict[str, list[torch.Tensor]], list[dict[str, object]]]:
    """SAC and TD3 on 2 ranks, in one pair of processes (a spawn costs seconds)."""
    data = _off_data()
    return data, run_ranks(_off_ranks, 2, data)


@pytest.mark.parametrize("kind", ["sac", "td3"])
def test_sac_td3_two_ranks_update_equals_one_process_on_the_union(
    kind: str, off_ranks: tuple[dict[str, list[torch.Tensor]], list[dict[str, object]]]
) -> None:
    """Three updates of the critics, the actor (updates 0 and 2: the delayed step; SAC takes two
    actor and ``log_alpha`` steps at update 0) and the targets on 2 ranks equal one process on the
    union of the ranks' batches and noise, within the module's tolerance (the critics' Adam
    ``lr / eps`` is 1e5, but no gradient here is near ``eps``). Both parametrizations share one
    2-rank spawn: ~14 s here in all (shared 2-core machine, load 3), the DQN one ~22 s."""
    data, ranks = off_ranks
    cls = SACAgent if kind == "sac" else TD3Agent
    single = cls(OBS, BOX, _off_config(kind), num_envs=E, seed=0, dist=SINGLE_PROCESS)
    want = _off_run(single, data, slice(0, B))
    r0, r1 = ranks[0][kind], ranks[1][kind]
    assert [s["actor_stepped"] for s in want] == [True, False, True]  # the delayed actor update
    names = ("actor", "critic", "critic_target", "log_alpha" if kind == "sac" else "actor_target")
    for k, (a, b, w) in enumerate(zip(r0, r1, want, strict=True)):
        assert a["actor_stepped"] == b["actor_stepped"] == w["actor_stepped"]
        for name in names:
            _same(a[name], b[name], f"update {k}: {name} of rank 0 and rank 1")
            _same(a[f"{name}.grad"], b[f"{name}.grad"], f"update {k}: {name} gradients of the ranks")
            assert len(a[f"{name}.grad"]) == len(w[f"{name}.grad"]), (k, name)
            for i, (g, gw) in enumerate(zip(a[f"{name}.grad"], w[f"{name}.grad"], strict=True)):
                _close(g, gw, f"update {k}: {name} gradient {i}")
            for i, (p, pw) in enumerate(zip(a[name], w[name], strict=True)):
                _close(p, pw, f"update {k}: {name} parameter {i}")
    # the trainable networks have gradients (the targets none); log_alpha moved
    assert all(len(want[0][f"{n}.grad"]) > 0 for n in ("actor", "critic"))
    if kind == "sac":
        assert len(want[0]["log_alpha.grad"]) == 1 and float(want[0]["log_alpha"][0]) != 0.0
    for out in ranks:
        assert out[f"{kind}.sizes"] == (B // 2, 8)
