"""Data-parallel training loop on 2 gloo ranks (CPU): run folder, metrics, agreement, checkpoints.

The loop-level tests drive :func:`run_training` on two spawned ranks (:func:`dist_run.run_ranks`)
with :class:`RankToyAgent`: random actions from a per-rank generator, a small network whose
"gradients" are averaged across ranks (so its weights stay identical on every rank, as a real
data-parallel agent's do) and a per-rank counter (its own part, like a replay buffer). The CLI
tests (``torchrun`` subprocesses) are in test_distributed_cli.py.
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("gymnasium", reason="gymnasium is not installed (benchmarks/fetch-wheels.sh brings it)")

from dist_run import run_ranks
from helpers import assert_one_row_per_step
from tritonrl.agents.dqn import DQNAgent
from tritonrl.agents.dqn import preset as dqn_preset
from tritonrl.agents.ppo import PPOAgent
from tritonrl.agents.ppo import preset as ppo_preset
from tritonrl.toolkit import lifecycle
from tritonrl.toolkit.checkpoint import load_checkpoint
from tritonrl.toolkit.distributed import SINGLE_PROCESS, DistContext
from tritonrl.toolkit.envs.vector import make_vec_env
from tritonrl.toolkit.logger import read_csv
from tritonrl.toolkit.runfolder import RunFolderBusy, RunLock
from tritonrl.toolkit.training import ranks
from tritonrl.toolkit.training import run as run_module
from tritonrl.toolkit.training.loop import (
    SAME_AS_RANK_0,
    DivergenceError,
    LoopConfig,
    merge_episode_stats,
    run_training,
)
from tritonrl.toolkit.training.offpolicy import schedule_for as offpolicy_schedule
from tritonrl.toolkit.training.onpolicy import OnPolicySchedule

LOCAL_ENVS = 2


class RankToyAgent:
    """A data-parallel toy: shared weights (averaged "gradients"), per-rank counter and generator."""

    def __init__(self, ctx: DistContext, *, nan_at_update: int | None = None) -> None:
        self.dist = ctx
        torch.manual_seed(0)  # identical initial weights on every rank
        self.net = torch.nn.Linear(4, 2)
        self.generator = torch.Generator().manual_seed(1000 + ctx.rank)
        self.seen = torch.zeros(())  # this rank's own part
        self.obs_sum = torch.zeros(4)
        self.updates = 0
        self.nan_at_update = nan_at_update

    def act(self, obs: torch.Tensor, explore: bool = True) -> torch.Tensor:
        if not explore:
            return self.net(obs).argmax(-1)
        return torch.randint(0, 2, (obs.shape[0],), generator=self.generator)

    def observe(self, obs, action, reward, next_obs, terminated, truncated) -> None:
        self.seen += obs.shape[0]
        self.obs_sum += obs.sum(0)

    def update(self) -> dict[str, torch.Tensor]:
        grads = [torch.outer(torch.ones(2), self.obs_sum / self.seen), torch.ones(2) * 0.1]
        self.dist.all_reduce_mean_(grads)
        with torch.no_grad():
            self.net.weight -= 0.01 * grads[0]
            self.net.bias -= 0.01 * grads[1]
        self.updates += 1
        if self.nan_at_update is not None and self.updates >= self.nan_at_update:
            with torch.no_grad():
                self.net.weight[0, 0] = float("nan")  # this rank only: the others stay finite
        return {"losses/toy": self.net.weight.abs().sum()}

    def state_dict(self) -> dict[str, Any]:
        return {
            "net": dict(self.net.state_dict()),
            "updates": self.updates,
            "seen": self.seen,
            "obs_sum": self.obs_sum,
            "generator": self.generator.get_state(),
        }

    def check_state_dict(self, state: Mapping[str, Any], *, rank_parts: bool = True) -> None:
        keys = {"net", "updates"} | ({"seen", "obs_sum", "generator"} if rank_parts else set())
        missing = keys - state.keys()
        if missing:
            raise ValueError(f"agent state lacks {sorted(missing)}")

    def load_state_dict(self, state: Mapping[str, Any], *, rank_parts: bool = True) -> None:
        self.check_state_dict(state, rank_parts=rank_parts)
        self.net.load_state_dict(state["net"])
        self.updates = state["updates"]
        if rank_parts:
            self.seen = state["seen"].clone()
            self.obs_sum = state["obs_sum"].clone()
            self.generator.set_state(state["generator"])
        else:
            self.seen = torch.zeros(())
            self.obs_sum = torch.zeros(4)


class Recording:
    """A VecEnv that records its finished episodes by local vector step."""

    def __init__(self, env: Any) -> None:
        self.inner = env
        self.vector_steps = 0
        self.episodes: list[tuple[int, float, int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def step(self, actions: torch.Tensor) -> Any:
        tr = self.inner.step(actions)
        self.vector_steps += 1
        self.episodes += [
            (self.vector_steps, r, n) for r, n in zip(tr.episode_returns, tr.episode_lengths, strict=True)
        ]
        return tr


def _env(ctx: DistContext, seed: int = 3) -> Recording:
    return Recording(make_vec_env("CartPole-v1", LOCAL_ENVS, seed + ctx.rank * LOCAL_ENVS))


def _cfg(run_dir: Path, **kw: Any) -> LoopConfig:
    base: dict[str, Any] = {
        "total_steps": 800,
        "seed": 3,
        "run_dir": str(run_dir),
        "log_every": 80,
        "eval_every": 0,
        "final_eval": False,
        "checkpoint_every": 400,
        "tensorboard": False,
        "plot": False,
    }
    return LoopConfig(**{**base, **kw})


def _forbid_writes_off_rank_0(ctx: DistContext) -> None:
    """Make every writer of the run folder fail on ranks other than 0."""
    if ctx.is_main:
        return

    def boom(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"rank {ctx.rank} wrote to the run folder")

    for name in ("save_checkpoint", "MetricLogger", "move_aside", "remove_stale_temps", "repair_csv"):
        setattr(lifecycle, name, boom)  # the run lifecycle: every write to the folder
    run_module._plot = boom


def _rank_state(agent: RankToyAgent) -> dict[str, Any]:
    return {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in agent.state_dict().items()}


# -- 1. the run folder, the gathered metrics, exact resume on the same number of ranks ------------


def _train_split_and_resume(ctx: DistContext, root: str) -> dict[str, Any]:
    _forbid_writes_off_rank_0(ctx)
    out: dict[str, Any] = {}
    for name, kw in (("full", {}), ("split", {"stop_at": 400})):
        env, agent = _env(ctx), RankToyAgent(ctx)
        summary = run_training(agent, env, OnPolicySchedule(4), _cfg(Path(root) / name, **kw))
        out[name] = {"summary": summary, "episodes": env.episodes, "state": _rank_state(agent)}
    torch.manual_seed(12345)  # disturb the global RNGs between the stop and the resume
    env, agent = _env(ctx), RankToyAgent(ctx)
    summary = run_training(agent, env, OnPolicySchedule(4), _cfg(Path(root) / "split", resume=True))
    out["resumed"] = {"summary": summary, "state": _rank_state(agent)}
    out["two"] = _train_one_segment(ctx, f"{root}/two")  # resumed on other numbers of ranks below
    return out


@pytest.fixture(scope="module")
def toy_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """The 2-rank toy runs (one launch of 2 ranks for the tests that read them)."""
    root = tmp_path_factory.mktemp("toy")
    return root, run_ranks(_train_split_and_resume, 2, str(root))


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return [{k: v for k, v in r.items() if k != "charts/SPS"} for r in csv.DictReader(f)]


def _same_state(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    if a.keys() != b.keys():
        return False
    for k, v in a.items():
        w = b[k]
        if isinstance(v, Mapping):
            if not _same_state(v, w):
                return False
        elif isinstance(v, torch.Tensor):
            if not torch.equal(v, w):
                return False
        elif v != w:
            return False
    return True


def test_two_ranks_rank0_writes_metrics_of_both_ranks_and_resumes_exactly(toy_runs) -> None:
    tmp_path, res = toy_runs
    full = [r["full"] for r in res]
    # the global step counts both ranks' envs; both ranks agree on the summary
    for r in full:
        assert r["summary"]["global_step"] == 800 and r["summary"]["stopped"] is None
    # weights are the averaged ones on both ranks; the per-rank parts differ
    s0, s1 = full[0]["state"], full[1]["state"]
    assert all(torch.equal(s0["net"][k], s1["net"][k]) for k in s0["net"])
    assert not torch.equal(s0["obs_sum"], s1["obs_sum"])

    # metrics.csv: every flush's episodic return is the mean over both ranks' episodes of that interval
    rows = read_csv(tmp_path / "full" / "metrics.csv")
    flushes = [int(r["global_step"]) for r in rows]
    assert flushes == list(range(80, 801, 80))
    step = LOCAL_ENVS * 2  # a vector step of every rank
    rank1_mattered = False
    for prev, row in zip([0, *flushes], rows, strict=False):
        now = int(row["global_step"])
        per_rank = [[ret for v, ret, _ in r["episodes"] if prev < v * step <= now] for r in full]
        both = per_rank[0] + per_rank[1]
        if not both:
            assert "charts/episodic_return" not in row
            continue
        assert row["charts/episodic_return"] == pytest.approx(sum(both) / len(both), rel=1e-12)
        if per_rank[0] and per_rank[1] and sum(per_rank[0]) / len(per_rank[0]) != sum(both) / len(both):
            rank1_mattered = True
    assert rank1_mattered  # the rows are not rank 0's episodes alone
    assert full[0]["summary"]["recent_return"] == full[1]["summary"]["recent_return"]

    # one checkpoint, written by rank 0: rank 0's sections, world size 2, rank 1's own parts
    ckpt = load_checkpoint(tmp_path / "full" / "checkpoint.safetensors")
    assert ckpt["meta"]["world_size"] == 2 and len(ckpt["ranks"]) == 1
    part = ckpt["ranks"][0]
    assert set(part) == {"agent", "env", "rng"}
    assert part["agent"]["net"] == {SAME_AS_RANK_0: True}  # the shared weights are stored once
    assert part["agent"]["updates"] == {SAME_AS_RANK_0: True}
    assert torch.equal(part["agent"]["obs_sum"], s1["obs_sum"])
    assert torch.equal(ckpt["agent"]["obs_sum"], s0["obs_sum"])
    assert part["env"]["num_envs"] == LOCAL_ENVS and part["env"]["obs"] is not None
    assert not torch.equal(part["env"]["obs"], ckpt["env"]["obs"])
    assert sorted(p.name for p in (tmp_path / "full").iterdir()) == [
        ".lock",
        "checkpoint.safetensors",
        "metrics.csv",
    ]

    # stopped at 400 and resumed on 2 ranks: the same run as the one that never stopped
    for r in res:
        assert r["split"]["summary"]["stopped"] == "stop_at"
        assert r["resumed"]["summary"]["global_step"] == 800
        assert r["resumed"]["summary"]["checkpoint_step"] == 800
    for rank in range(2):
        assert _same_state(res[rank]["full"]["state"], res[rank]["resumed"]["state"]), rank
    assert _rows(tmp_path / "full" / "metrics.csv") == _rows(tmp_path / "split" / "metrics.csv")


# -- 2. resume on another number of ranks -------------------------------------------------------


def _resume_on_ranks(ctx: DistContext, run_dir: str, total: int) -> dict[str, Any]:
    env, agent = _env(ctx), RankToyAgent(ctx)
    schedule = OnPolicySchedule(4)
    summary = run_training(agent, env, schedule, _cfg(Path(run_dir), total_steps=total, resume=True))
    return {"summary": summary, "state": _rank_state(agent)}


def _train_one_segment(ctx: DistContext, run_dir: str) -> dict[str, Any]:
    env, agent = _env(ctx), RankToyAgent(ctx)
    summary = run_training(agent, env, OnPolicySchedule(4), _cfg(Path(run_dir), total_steps=424))
    return {"summary": summary, "state": _rank_state(agent)}


def test_checkpoint_of_two_ranks_resumes_on_one_and_one_on_two(toy_runs, capsys) -> None:
    """N != M: the shared state (weights, counters, schedule) carries over, each rank's own part
    starts fresh, the on-policy rollout restarts, one notice line; the run then goes on."""
    two = toy_runs[0] / "two"
    saved = [r["two"] for r in toy_runs[1]]  # 424 = 106 vector steps: mid-rollout
    ckpt = load_checkpoint(two / "checkpoint.safetensors")
    assert ckpt["schedule"]["vector_steps"] == 106 and ckpt["loop"]["step"] == 424

    # 2 -> 1 (this process, SINGLE_PROCESS)
    env = Recording(make_vec_env("CartPole-v1", 2 * LOCAL_ENVS, 3))
    agent, schedule = RankToyAgent(SINGLE_PROCESS), OnPolicySchedule(4)
    probe: dict[str, Any] = {}
    original = schedule.after_step

    def after_step(a: Any, step: int) -> list:
        if not probe:  # the first step after the resume: what was loaded
            probe.update(seen=float(a.seen), vector_steps=schedule.vector_steps, updates=a.updates)
            probe["net"] = {k: v.clone() for k, v in a.net.state_dict().items()}
        return original(a, step)

    schedule.after_step = after_step  # type: ignore[method-assign]
    summary = run_training(agent, env, schedule, _cfg(two, total_steps=600, resume=True))
    err = capsys.readouterr().err
    assert err.count("notice:") == 1 and "written by 2 ranks, this run has 1" in err
    assert summary["global_step"] == 600 and summary["stopped"] is None
    assert probe["updates"] == saved[0]["state"]["updates"]
    assert all(torch.equal(probe["net"][k], saved[0]["state"]["net"][k]) for k in probe["net"])
    assert probe["seen"] == 2 * LOCAL_ENVS  # fresh per-rank part: the one step since the resume
    assert probe["vector_steps"] == 106 - 106 % 4  # the rollout restarted at a boundary
    assert env.vector_steps == (600 - 424) // (2 * LOCAL_ENVS)

    # 1 -> 2: a single-process checkpoint (this run's) goes on on two ranks
    res = run_ranks(_resume_on_ranks, 2, str(two), 800)
    for r in res:
        assert r["summary"]["global_step"] == 800 and r["summary"]["stopped"] is None
    s0, s1 = res[0]["state"], res[1]["state"]
    assert all(torch.equal(s0["net"][k], s1["net"][k]) for k in s0["net"])
    assert float(s0["seen"]) == float(s1["seen"]) == (800 - 600) // 2  # fresh on both ranks
    assert load_checkpoint(two / "checkpoint.safetensors")["meta"]["world_size"] == 2


# -- 3. stop, divergence and errors agreed across ranks -------------------------------------------


def _stop_on_rank_1(ctx: DistContext, run_dir: str) -> dict[str, Any]:
    env = _env(ctx)
    agent = RankToyAgent(ctx)
    should_stop = (lambda: agent.updates >= 30) if ctx.rank == 1 else (lambda: False)
    summary = run_training(agent, env, OnPolicySchedule(4), _cfg(Path(run_dir)), should_stop=should_stop)
    return {"summary": summary, "vector_steps": env.vector_steps}


def _diverge_on_rank_1(ctx: DistContext, run_dir: str) -> str:
    agent = RankToyAgent(ctx, nan_at_update=30 if ctx.rank == 1 else None)
    try:
        run_training(agent, _env(ctx), OnPolicySchedule(4), _cfg(Path(run_dir), checkpoint_every=160))
    except DivergenceError as exc:
        return f"{exc.step} {exc.checkpoint_step} {exc}"
    return "no error"


def _busy(ctx: DistContext, run_dir: str) -> str:
    try:
        run_training(RankToyAgent(ctx), _env(ctx), OnPolicySchedule(4), _cfg(Path(run_dir)))
    except RunFolderBusy as exc:
        return f"busy: {exc}"
    return "no error"


def _evaluate_on_rank_0(ctx: DistContext, run_dir: str) -> dict[str, Any]:
    class Evaluator:
        def evaluate_policy(self, policy: Any, episodes: int, seed: int) -> dict[str, Any]:
            assert ctx.is_main, "evaluated off rank 0"
            return {"mean_return": 1.0 * agent.updates}

    agent = RankToyAgent(ctx)
    cfg = _cfg(Path(run_dir), eval_every=96, target_return=40.0, checkpoint_every=0)
    return run_training(agent, _env(ctx), OnPolicySchedule(4), cfg, evaluator=Evaluator())


def _final_eval_after_resume(ctx: DistContext, run_dir: str) -> dict[str, Any]:
    """Stopped at 80 (a checkpoint), resumed to 160: the last step is a flush and the final evaluation."""

    class Evaluator:
        def evaluate_policy(self, policy: Any, episodes: int, seed: int) -> dict[str, Any]:
            return {"mean_return": 2.0}

    for kw in ({"stop_at": 80}, {"resume": True}):
        cfg = _cfg(Path(run_dir), total_steps=160, checkpoint_every=80, final_eval=True, **kw)
        summary = run_training(RankToyAgent(ctx), _env(ctx), OnPolicySchedule(4), cfg, evaluator=Evaluator())
    return summary


def _stop_diverge_busy_eval(ctx: DistContext, root: str) -> dict[str, Any]:
    return {
        "stop": _stop_on_rank_1(ctx, f"{root}/stop"),
        "diverge": _diverge_on_rank_1(ctx, f"{root}/diverge"),
        "busy": _busy(ctx, f"{root}/busy"),
        "eval": _evaluate_on_rank_0(ctx, f"{root}/eval"),
        "final": _final_eval_after_resume(ctx, f"{root}/final"),
    }


def test_stop_divergence_errors_and_evaluation_are_agreed_by_every_rank(tmp_path: Path) -> None:
    with RunLock(tmp_path / "busy"):  # another trainer holds this folder: every rank fails at once
        res = run_ranks(_stop_diverge_busy_eval, 2, str(tmp_path))

    # should_stop set on rank 1 only (after 30 updates = 120 vector steps = step 480): both ranks
    # stop at the next flush (480 is one), with the same step, a checkpoint, no further steps
    stops = [r["stop"] for r in res]
    for s in stops:
        assert s["summary"]["stopped"] == "should_stop" and s["summary"]["global_step"] == 480
        assert s["summary"]["checkpoint_step"] == 480 and s["vector_steps"] == 120
    assert load_checkpoint(tmp_path / "stop" / "checkpoint.safetensors")["loop"]["step"] == 480

    # a NaN weight on rank 1 alone (from update 30, step 480): both ranks raise at that flush,
    # naming rank 1; the checkpoint of step 320 is the last good one and stays
    for text in (r["diverge"] for r in res):
        assert text.startswith("480 320 non-finite parameters on rank 1 at step 480"), text
    assert load_checkpoint(tmp_path / "diverge" / "checkpoint.safetensors")["loop"]["step"] == 320

    assert all(r["busy"].startswith("busy: ") and "in use by" in r["busy"] for r in res)

    # evaluation on rank 0 only; its result and the target stop reach rank 1 (40 updates: step 640)
    ev = [r["eval"] for r in res]
    assert ev[0]["evaluations"] == ev[1]["evaluations"] and ev[0]["evaluations"][-1] == (672, 42.0)
    assert ev[0]["reached_target_at"] == ev[1]["reached_target_at"] == 672
    assert ev[0]["global_step"] == ev[1]["global_step"] == 672

    # the final evaluation of a resumed run joins the last flush's row: one row per step
    assert [r["final"]["evaluations"] for r in res] == [[(160, 2.0)]] * 2
    rows = read_csv(tmp_path / "final" / "metrics.csv")
    assert assert_one_row_per_step(tmp_path / "final" / "metrics.csv") == [80, 160]
    assert rows[-1]["eval/mean_return"] == 2.0 and "losses/toy" in rows[-1]


# -- 4. real agents: exact resume on 2 ranks, and on 1 rank -----------------------------------

DQN_TINY_CONFIG = {
    "torso_width": 32,
    "batch_size": 32,
    "buffer_size": 2_000,
    "learning_starts": 200,
    "train_freq": 64,
    "gradient_steps": 8,
    "target_update_every": 16,
}
PPO_TINY_CONFIG = {
    "num_steps": 8,
    "num_minibatches": 2,
    "update_epochs": 2,
    "hidden": (16,),
    "total_steps": 800,
}
REAL = {  # family: (total steps, stop and checkpoint at)
    "dqn": (1_600, 800),
    "ppo": (320, 160),
}


def _real_agent(family: str, env: Any, ctx: DistContext, num_envs: int) -> tuple[Any, Any]:
    """A DQN or PPO agent of the tiny configs above (this rank's ``num_envs``) and its schedule."""
    if family == "dqn":
        cfg = dataclasses.replace(dqn_preset("dqn"), **DQN_TINY_CONFIG)
        agent = DQNAgent(
            env.single_observation_space, env.single_action_space, cfg, num_envs=num_envs, seed=3, dist=ctx
        )
        return agent, offpolicy_schedule(agent)
    cfg = dataclasses.replace(ppo_preset("ppo"), **PPO_TINY_CONFIG)
    agent = PPOAgent(
        env.single_observation_space, env.single_action_space, cfg, num_envs=num_envs, seed=3, dist=ctx
    )
    return agent, OnPolicySchedule(cfg.num_steps)


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    """``{path: leaf}`` of a state (tensors as they are, other leaves as values)."""
    if isinstance(tree, Mapping):
        return {k: v for key, sub in tree.items() for k, v in _flat(sub, f"{prefix}.{key}").items()}
    if isinstance(tree, (list, tuple)):
        return {k: v for i, sub in enumerate(tree) for k, v in _flat(sub, f"{prefix}.{i}").items()}
    return {prefix: tree}


def _real_split_and_resume(ctx: DistContext, root: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for family, (total, stop) in REAL.items():
        for name, kw in (("full", {}), ("split", {"stop_at": stop}), ("split", {"resume": True})):
            if kw.get("resume"):
                torch.manual_seed(12345)  # disturb the global RNGs between the stop and the resume
            env = make_vec_env("CartPole-v1", LOCAL_ENVS, 3 + ctx.rank * LOCAL_ENVS)
            agent, schedule = _real_agent(family, env, ctx, LOCAL_ENVS)
            cfg = _cfg(
                Path(root) / family / name, total_steps=total, checkpoint_every=stop, log_every=64, **kw
            )
            summary = run_training(agent, env, schedule, cfg)
            key = "resumed" if kw.get("resume") else name
            out[f"{family}/{key}"] = {"summary": summary, "state": _flat(agent.state_dict())}
    out["dqn/800"] = _real_dqn_to(ctx, f"{root}/one", 800)  # resumed on 1 rank below
    return out


def _same_flat(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """The paths where two flat states differ."""
    differ = sorted(a.keys() ^ b.keys())
    for k in a.keys() & b.keys():
        x, y = a[k], b[k]
        same = torch.equal(x, y) if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) else x == y
        if not same:
            differ.append(k)
    return differ


def test_real_agents_resume_exactly_on_two_ranks_and_go_on_on_one(tmp_path: Path, capsys) -> None:
    """DQN (each rank's replay buffer) and PPO (each rank's rollout), 2 ranks x 2 envs: stopped at
    the checkpoint and resumed on 2 ranks, each rank ends bit for bit where the uninterrupted run
    ends, with the same metrics; the 2-rank checkpoint then goes on on 1 rank x 4 envs from the
    shared state (weights equal to the saved ones, replay refilled before the next update)."""
    res = run_ranks(_real_split_and_resume, 2, str(tmp_path))
    for family, (total, _) in REAL.items():
        for rank in range(2):
            full, resumed = res[rank][f"{family}/full"], res[rank][f"{family}/resumed"]
            assert resumed["summary"]["global_step"] == total
            assert _same_flat(full["state"], resumed["state"]) == [], (family, rank)
        assert _rows(tmp_path / family / "full" / "metrics.csv") == _rows(
            tmp_path / family / "split" / "metrics.csv"
        )
        assert any(
            r.get("losses/td_loss") or r.get("losses/policy_loss")
            for r in _rows(tmp_path / family / "full" / "metrics.csv")
        )
        # the ranks hold the same weights (averaged gradients) but their own data
        s0, s1 = res[0][f"{family}/full"]["state"], res[1][f"{family}/full"]["state"]
        assert _same_flat(s0, s1), family  # something (replay, generator) differs ...
        weights = [k for k in s0 if ".net." in k or ".policy." in k or ".online." in k]
        assert weights and all(torch.equal(s0[k], s1[k]) for k in weights), family  # ... not the weights

    # 2 -> 1: a DQN checkpoint of 2 ranks x 2 envs at step 800 goes on on 1 rank x 4 envs
    run = tmp_path / "one"
    saved = res[0]["dqn/800"]
    env = make_vec_env("CartPole-v1", 2 * LOCAL_ENVS, 3)
    agent, schedule = _real_agent("dqn", env, SINGLE_PROCESS, 2 * LOCAL_ENVS)
    capsys.readouterr()
    seen: list[tuple[int, int]] = []
    first: dict[str, Any] = {}
    original = schedule.after_step

    def after_step(a: Any, step: int) -> list:
        if not first:  # what the resume loaded
            first.update({k: v.clone() for k, v in _flat(a.state_dict()).items() if k.startswith(".online.")})
        out = original(a, step)
        seen.append((step, a.updates))
        return out

    schedule.after_step = after_step  # type: ignore[method-assign]
    cfg = _cfg(run, total_steps=1_600, checkpoint_every=800, log_every=64, resume=True)
    summary = run_training(agent, env, schedule, cfg)
    err = capsys.readouterr().err
    assert err.count("notice:") == 1 and "written by 2 ranks, this run has 1" in err, err
    assert summary["global_step"] == 1_600
    assert first and all(torch.equal(v, saved["state"][k]) for k, v in first.items())
    refill = 800 + schedule.learning_starts  # the fresh replay refills before the next update
    assert all(u == saved["updates"] for step, u in seen if step < refill)
    assert seen[-1][1] > saved["updates"]  # then learning goes on


def _real_dqn_to(ctx: DistContext, run_dir: str, total: int) -> dict[str, Any]:
    env = make_vec_env("CartPole-v1", LOCAL_ENVS, 3 + ctx.rank * LOCAL_ENVS)
    agent, schedule = _real_agent("dqn", env, ctx, LOCAL_ENVS)
    cfg = _cfg(Path(run_dir), total_steps=total, checkpoint_every=total, log_every=64)
    run_training(agent, env, schedule, cfg)
    return {"updates": agent.updates, "state": _flat(agent.state_dict())}


# -- 5. pieces ----------------------------------------------------------------------------------


def test_merge_episode_stats_weights_by_episode_count() -> None:
    merged = merge_episode_stats(
        [
            {"episodes": 3, "mean_return": 1.0, "mean_sharpe": 2.0},
            None,
            {"episodes": 0},
            {"episodes": 1, "mean_return": 5.0, "mean_sharpe": 6.0},
        ]
    )
    assert merged == {"episodes": 4, "mean_return": 2.0, "mean_sharpe": 3.0}
    assert merge_episode_stats([None, {}]) == {}
    assert merge_episode_stats([{"return": 1.0}, {"return": 3.0}]) == {"return": 2.0}  # no counts


def test_rank_parts_store_what_rank_0_holds_once_and_come_back_whole() -> None:
    base = {"w": torch.ones(3), "n": 4, "opt": {"m": [torch.zeros(2), 1.5]}, "buf": torch.arange(4)}
    mine = {"w": torch.ones(3), "n": 4, "opt": {"m": [torch.zeros(2), 2.5]}, "buf": torch.arange(5)}
    marked = ranks.shared_marker(mine, base)
    marker = {SAME_AS_RANK_0: True}
    assert marked["w"] == marker and marked["n"] == marker and marked["opt"]["m"][0] == marker
    assert marked["opt"]["m"][1] == 2.5 and torch.equal(marked["buf"], torch.arange(5))
    assert ranks.shared_marker(base, base) == marker
    back = ranks.fill_shared(marked, base)
    assert _same_state(
        {k: v for k, v in back.items() if k != "opt"}, {k: v for k, v in mine.items() if k != "opt"}
    )
    assert torch.equal(back["opt"]["m"][0], torch.zeros(2)) and back["opt"]["m"][1] == 2.5
    with pytest.raises(ValueError, match="rank 0 has no such entry"):
        ranks.fill_shared({"x": {"y": marker}}, {"x": 3})


# -- 6. the CLI under torchrun ------------------------------------------------------------------
#
# torchrun subprocesses, 2 ranks on gloo, one torch thread each. Each launch costs ~10 s on a busy
# 2-core machine (three Python processes importing torch).
