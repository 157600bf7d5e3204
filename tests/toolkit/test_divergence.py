"""A run that diverges or fails mid-way stops with one line, exit 1, and the last good checkpoint
(issue 15, item 4): non-finite losses or parameters, errors the agent raises, failed writes."""

from __future__ import annotations

import errno
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("gymnasium")

import tritonrl.toolkit.checkpoint as ckpt_mod
import tritonrl.toolkit.logger as logger_mod
from tritonrl.cli import main
from tritonrl.toolkit.checkpoint import load_checkpoint
from tritonrl.toolkit.envs.vector import make_vec_env
from tritonrl.toolkit.training.loop import DivergenceError, LoopConfig, TrainingError, run_training
from tritonrl.toolkit.training.onpolicy import OnPolicySchedule

TINY = {
    "dqn": [
        "--set",
        "learning_starts=100",
        "--set",
        "train_freq=4",
        "--set",
        "batch_size=16",
        "--set",
        "buffer_size=1000",
        "--set",
        "torso_width=16",
    ],
    "ppo": ["--set", "num_steps=16", "--set", "hidden=16"],
}


def _train(capsys: pytest.CaptureFixture[str], agent: str, run: Path, *args: str) -> tuple[int, list[str]]:
    code = main(
        [
            "train",
            "--no-tuned",
            "--agent",
            agent,
            "--num-envs",
            "2",
            "--no-progress",
            "--no-tensorboard",
            "--eval-episodes",
            "1",
            "--run-dir",
            str(run),
            *TINY[agent],
            *args,
        ]
    )
    return code, capsys.readouterr().err.strip().splitlines()


def _tensors(tree: Any) -> list[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, Mapping):
        return [t for v in tree.values() for t in _tensors(v)]
    if isinstance(tree, (list, tuple)):
        return [t for v in tree for t in _tensors(v)]
    return []


@pytest.mark.parametrize(("agent", "every"), [("dqn", "64"), ("ppo", "16")])
def test_a_huge_learning_rate_stops_the_run_and_keeps_the_last_good_checkpoint(
    agent: str, every: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    code, err = _train(
        capsys,
        agent,
        run,
        "--steps",
        "600",
        "--log-every",
        every,
        "--checkpoint-every",
        every,
        "--set",
        "lr=1e30",
    )
    assert code == 1
    assert len(err) == 1, err
    m = re.fullmatch(
        r"error: non-finite (losses/\w+|parameters) at step (\d+) \(lr=1e\+30\?\): stopped; "
        r"the last good checkpoint \(step (\d+)\) is kept",
        err[0],
    )
    assert m, err[0]
    state = load_checkpoint(run / "checkpoint.safetensors")
    assert state["loop"]["step"] == int(m.group(3)) < int(m.group(2))
    floats = [t for t in _tensors(state["agent"]) if t.is_floating_point()]
    assert floats and all(bool(t.isfinite().all()) for t in floats)
    rows = (run / "metrics.csv").read_text().splitlines()
    assert rows[-1].startswith(f"{m.group(2)},") and ("nan" in rows[-1] or "inf" in rows[-1])


class Toy:
    """A linear 'policy' whose weight an update can poison; no loss metric reports it."""

    def __init__(self, poison_at: int | None = None) -> None:
        self.net = torch.nn.Linear(4, 2)
        self.updates = 0
        self.poison_at = poison_at

    def act(self, obs: torch.Tensor, explore: bool = True) -> torch.Tensor:
        return torch.randint(0, 2, (obs.shape[0],))

    def observe(self, *args: Any) -> None:
        pass

    def update(self) -> dict[str, torch.Tensor]:
        self.updates += 1
        if self.updates == self.poison_at:
            with torch.no_grad():
                self.net.weight[0, 0] = float("inf")
        return {"charts/updates": torch.tensor(float(self.updates))}

    def state_dict(self) -> dict[str, Any]:
        return {"net": self.net.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.net.load_state_dict(state["net"])
        self.updates = state["updates"]


def _loop(agent: Any, run: Path | None, **kw: Any) -> dict[str, Any]:
    env = make_vec_env("CartPole-v1", 2, seed=0)
    opts: dict[str, Any] = {
        "total_steps": 64,
        "log_every": 16,
        "final_eval": False,
        "tensorboard": False,
        "plot": False,
        "run_dir": str(run) if run is not None else None,
    }
    opts.update(kw)
    try:
        return run_training(agent, env, OnPolicySchedule(4), LoopConfig(**opts))
    finally:
        env.close()


def test_non_finite_parameters_stop_the_run_even_without_a_loss_metric(tmp_path: Path) -> None:
    # updates every 4 vector steps (8 env steps): the 3rd (step 24) poisons; the flush at 32 sees it
    with pytest.raises(
        DivergenceError,
        match=r"^non-finite parameters at step 32: stopped; the last good "
        r"checkpoint \(step 16\) is kept$",
    ):
        _loop(Toy(poison_at=3), tmp_path, checkpoint_every=16)
    assert load_checkpoint(tmp_path / "checkpoint.safetensors")["loop"]["step"] == 16
    with pytest.raises(DivergenceError, match="no run folder, nothing saved"):
        _loop(Toy(poison_at=3), None)  # checked without a run folder too
    assert _loop(Toy(), None)["global_step"] == 64


def test_agent_errors_reach_the_user_as_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tritonrl.agents.ppo import PPOAgent

    real = PPOAgent.observe
    calls = {"n": 0}

    def observe(self: Any, *args: Any, **kw: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 30:  # step 60, past the checkpoint at 48
            raise ValueError("observe: next_obs holds NaN or inf (environment bug?)\nsecond line")
        return real(self, *args, **kw)

    monkeypatch.setattr(PPOAgent, "observe", observe)
    run = tmp_path / "run"
    code, err = _train(capsys, "ppo", run, "--steps", "200", "--checkpoint-every", "48", "--log-every", "16")
    assert code == 1
    assert err == [
        "error: observe: next_obs holds NaN or inf (environment bug?) (at step 58): stopped; "
        "the last good checkpoint (step 48) is kept"
    ]
    assert load_checkpoint(run / "checkpoint.safetensors")["loop"]["step"] == 48
    assert not (run / ".lock").read_text()  # released


def test_bugs_are_not_dressed_up_as_training_errors(tmp_path: Path) -> None:
    class Buggy(Toy):
        def observe(self, *args: Any) -> None:
            raise TypeError("a bug in the agent")

    with pytest.raises(TypeError, match="a bug in the agent"):
        _loop(Buggy(), tmp_path)


@pytest.mark.parametrize("target", ["checkpoint", "metrics"])
def test_a_full_disk_mid_run_is_one_line_and_keeps_the_checkpoint(
    target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    if target == "checkpoint":
        real_replace = ckpt_mod.os.replace
        saves = {"n": 0}

        def replace(src: Any, dst: Any) -> None:
            if str(dst).endswith("checkpoint.safetensors"):
                saves["n"] += 1
                if saves["n"] == 2:
                    raise OSError(errno.ENOSPC, "No space left on device", str(src), None, str(dst))
            real_replace(src, dst)

        monkeypatch.setattr(ckpt_mod.os, "replace", replace)
        bad_file, step = run / "checkpoint.safetensors", 64
    else:
        real_open = open
        appends = {"n": 0}

        def fake_open(file: Any, mode: str = "r", *a: Any, **k: Any) -> Any:
            if mode == "a" and str(file).endswith("metrics.csv"):
                appends["n"] += 1
                if appends["n"] == 2:
                    raise OSError(errno.ENOSPC, "No space left on device", str(file))
            return real_open(file, mode, *a, **k)

        monkeypatch.setattr(logger_mod, "open", fake_open, raising=False)
        bad_file, step = run / "metrics.csv", 64  # the second append
    code, err = _train(capsys, "ppo", run, "--steps", "200", "--checkpoint-every", "32", "--log-every", "16")
    assert code == 1
    assert err == [
        f"error: cannot write {bad_file}: No space left on device (at step {step}): stopped; "
        "the last good checkpoint (step 32) is kept"
    ]
    assert load_checkpoint(run / "checkpoint.safetensors")["loop"]["step"] == 32
    assert not list(run.glob(".*.tmp"))


def test_read_only_run_folder_mid_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # mkstemp in a folder made read-only (root ignores permission bits, so the error is injected)
    real_mkstemp = ckpt_mod.tempfile.mkstemp
    saves = {"n": 0}

    def mkstemp(*a: Any, **k: Any) -> Any:
        if k["prefix"] == ".checkpoint.safetensors.":
            saves["n"] += 1
            if saves["n"] == 3:
                tmp = Path(k["dir"]) / f"{k['prefix']}abc{k['suffix']}"
                raise PermissionError(errno.EACCES, "Permission denied", str(tmp))
        return real_mkstemp(*a, **k)

    monkeypatch.setattr(ckpt_mod.tempfile, "mkstemp", mkstemp)
    with pytest.raises(TrainingError) as info:
        _loop(Toy(), tmp_path, checkpoint_every=16, log_every=1000)
    assert str(info.value) == (
        f"cannot write {tmp_path / 'checkpoint.safetensors'}: Permission denied "
        "(at step 48): stopped; the last good checkpoint (step 32) is kept"
    )
    assert info.value.checkpoint_step == 32 and info.value.step == 48


def _poisoned(what: str, after: int) -> Any:
    """CartPole whose observation (or reward) turns NaN from its ``after``-th step on."""
    import gymnasium as gym

    class Poisoned(gym.Wrapper):
        t = 0

        def step(self, action: Any) -> Any:
            obs, reward, term, trunc, info = self.env.step(action)
            self.t += 1
            if self.t >= after:
                if what == "obs":
                    obs = obs * float("nan")
                else:
                    reward = float("nan")
            return obs, reward, term, trunc, info

    return Poisoned(gym.make("CartPole-v1"))


@pytest.mark.parametrize(("agent", "what"), [("dqn", "obs"), ("ppo", "obs"), ("ppo", "reward")])
def test_an_environment_emitting_nan_stops_the_run_in_one_line(
    agent: str, what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """NaN from the environment is refused at the agent's boundary: exit 1, one line, checkpoint kept."""
    import gymnasium as gym

    env_id = f"tritonrl-test/NaN{what.title()}-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=lambda: _poisoned(what, 60))
    run = tmp_path / "run"
    code = main(
        [
            "train",
            "--agent",
            agent,
            "--env",
            env_id,
            "--num-envs",
            "2",
            "--no-progress",
            "--no-tensorboard",
            "--eval-every",
            "0",
            "--eval-episodes",
            "1",
            "--run-dir",
            str(run),
            "--steps",
            "400",
            "--checkpoint-every",
            "32",
            "--log-every",
            "32",
            *TINY[agent],
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1, err
    assert len(err) == 1, err
    m = re.fullmatch(
        r"error: \w+\.(act|observe): (obs|next_obs|reward)\[[\d, ]+\] = .* is not finite "
        r"\(at step (\d+)\): stopped; the last good checkpoint \(step (\d+)\) is kept",
        err[0],
    )
    assert m, err[0]
    saved = load_checkpoint(run / "checkpoint.safetensors")
    assert saved["loop"]["step"] == int(m.group(4)) <= 120  # nothing saved after the NaN (step ~120)
    assert all(torch.isfinite(t).all() for t in _tensors(saved["agent"]) if t.is_floating_point())
