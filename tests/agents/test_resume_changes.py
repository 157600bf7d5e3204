"""``--resume`` with a changed ``--set`` (issue 15, item 5).

The resumed run's config is the saved config with this command's ``--set`` on top. A changed
resumable field is applied for real (the optimizer's learning rate, PPO's annealing base) and the
next checkpoint records it; a changed fixed field is refused with one line, exit 2, nothing written;
a resume without ``--set`` keeps what the original run was given.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

gym = pytest.importorskip("gymnasium")

from tritonrl.cli import main  # noqa: E402
from tritonrl.toolkit.checkpoint import CheckpointError, load_checkpoint  # noqa: E402
from tritonrl.toolkit.config import resumable_fields  # noqa: E402

DQN_SMALL = [
    "--set",
    "torso_width=16",
    "--set",
    "learning_starts=64",
    "--set",
    "train_freq=32",
    "--set",
    "gradient_steps=2",
    "--set",
    "batch_size=16",
    "--set",
    "buffer_size=512",
]
PPO_ENVS = ["--num-envs", "2"]  # the preset's default is 8; a resume must name the run's number too
PPO_SMALL = [
    *PPO_ENVS,
    "--set",
    "num_steps=32",
    "--set",
    "hidden=16",
    "--set",
    "update_epochs=1",
    "--set",
    "num_minibatches=2",
]


def _train(capsys, *args: str) -> tuple[int, list[str]]:
    code = main(["train", "--no-tuned", "--no-progress", "--no-tensorboard", "--eval-episodes", "1", *args])
    return code, capsys.readouterr().err.strip().splitlines()


def _saved(run: Path) -> dict:
    return load_checkpoint(run / "checkpoint.safetensors")["agent"]


def _group_lr(agent_state: dict) -> float:
    return agent_state["optimizer"]["optimizer"]["param_groups"][0]["lr"]


def test_dqn_resume_applies_a_new_learning_rate(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    code, _ = _train(
        capsys,
        "--agent",
        "dqn",
        "--steps",
        "160",
        "--run-dir",
        str(run),
        *DQN_SMALL,
        "--set",
        "lr=0.002",
        "--set",
        "eps_end=0.1",
    )
    assert code == 0 and _group_lr(_saved(run)) == 0.002
    code, err = _train(
        capsys,
        "--agent",
        "dqn",
        "--steps",
        "320",
        "--run-dir",
        str(run),
        "--resume",
        "--set",
        "lr=1e-4",
        "--set",
        "eps_end=0.02",
    )
    assert code == 0, err
    assert err == ["resume: applying lr (checkpoint 0.002, now 0.0001), eps_end (checkpoint 0.1, now 0.02)"]
    state = _saved(run)
    assert state["config"]["lr"] == 1e-4 and state["config"]["eps_end"] == 0.02
    assert _group_lr(state) == 1e-4  # the optimizer really ran with it, and the file says so
    assert state["config"]["torso_width"] == 16  # the first run's --set survives without repeating it


def test_dqn_resume_without_set_keeps_the_saved_config(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    assert (
        _train(
            capsys,
            "--agent",
            "dqn",
            "--steps",
            "160",
            "--run-dir",
            str(run),
            *DQN_SMALL,
            "--set",
            "lr=0.0005",
        )[0]
        == 0
    )
    code, err = _train(capsys, "--agent", "dqn", "--steps", "320", "--run-dir", str(run), "--resume")
    assert code == 0 and err == [], err  # nothing changed: nothing to report
    state = _saved(run)
    assert state["config"]["lr"] == 0.0005 and _group_lr(state) == 0.0005
    assert state["counters"]["env_steps"] >= 320


@pytest.mark.parametrize(
    "agent, small, change, what",
    [
        ("dqn", DQN_SMALL, "gamma=0.9", "gamma (checkpoint 0.99, now 0.9)"),
        ("dqn", DQN_SMALL, "n_step=3", "n_step (checkpoint 1, now 3)"),
        ("ppo", PPO_SMALL, "gamma=0.9", "gamma (checkpoint 0.99, now 0.9)"),
        ("ppo", PPO_SMALL, "hidden=32", "hidden (checkpoint (16,), now (32,))"),
    ],
)
def test_resume_refuses_a_fixed_field(
    tmp_path: Path, capsys, agent: str, small: list[str], change: str, what: str
) -> None:
    run = tmp_path / "run"
    assert _train(capsys, "--agent", agent, "--steps", "128", "--run-dir", str(run), *small)[0] == 0
    files = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    code, err = _train(
        capsys,
        "--agent",
        agent,
        "--steps",
        "256",
        "--run-dir",
        str(run),
        "--resume",
        *(PPO_ENVS if agent == "ppo" else []),
        "--set",
        change,
    )
    assert code == 2 and err == [f"error: --resume cannot change {what}: start a new run"], err
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == files  # nothing written


def test_ppo_resume_anneals_from_the_new_learning_rate(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    assert (
        _train(
            capsys, "--agent", "ppo", "--steps", "128", "--run-dir", str(run), *PPO_SMALL, "--set", "lr=0.002"
        )[0]
        == 0
    )
    code, err = _train(
        capsys,
        "--agent",
        "ppo",
        "--steps",
        "256",
        "--run-dir",
        str(run),
        "--resume",
        *PPO_ENVS,
        "--set",
        "lr=0.0004",
        "--set",
        "ent_coef=0.02",
    )
    assert code == 0, err
    assert len(err) == 1 and err[0].startswith("resume: applying ")
    # the --set changes are listed; total_steps follows --steps (the annealing horizon), not reported
    assert set(re.findall(r"(\w+) \(checkpoint", err[0])) == {"lr", "ent_coef"}
    state = _saved(run)
    cfg = state["config"]
    assert cfg["lr"] == 0.0004 and cfg["ent_coef"] == 0.02 and cfg["total_steps"] == 256
    updates = state["counters"]["updates"]
    total_updates = cfg["total_steps"] // (cfg["num_steps"] * 2)
    # the last update ran at the annealed value of the *new* base learning rate
    assert _group_lr(state) == pytest.approx(0.0004 * (1 - (updates - 1) / total_updates), rel=1e-12)


def test_ppo_resume_without_set_keeps_the_saved_config(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    assert (
        _train(
            capsys,
            "--agent",
            "ppo",
            "--steps",
            "128",
            "--run-dir",
            str(run),
            *PPO_SMALL,
            "--set",
            "lr=0.002",
            "--set",
            "anneal_lr=false",
        )[0]
        == 0
    )
    code, err = _train(
        capsys, "--agent", "ppo", "--steps", "128", "--run-dir", str(run), "--resume", *PPO_ENVS
    )
    assert code == 0 and err == [], err
    state = _saved(run)
    assert state["config"]["lr"] == 0.002 and _group_lr(state) == 0.002 and state["config"]["hidden"] == (16,)


# ----------------------------------------------------------------------------- library level


def _dqn(**kw):
    import numpy as np
    from tritonrl.agents.dqn import DQNAgent, preset

    space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    return DQNAgent(
        space,
        gym.spaces.Discrete(2),
        preset("dqn", torso_width=8, buffer_size=64, batch_size=4, **kw),
        num_envs=1,
    )


def test_load_state_dict_takes_resumable_fields_from_the_agent_and_refuses_fixed_ones() -> None:
    state = _dqn(lr=0.002).state_dict()
    agent = _dqn(lr=1e-4, eps_end=0.2)
    agent.load_state_dict(state)
    assert agent.optimizer.param_groups[0]["lr"] == 1e-4 and agent.config.eps_end == 0.2
    with pytest.raises(CheckpointError, match=r"double \(checkpoint False, now True\)"):
        _dqn(double=True).load_state_dict(state)  # nothing but the config tells it apart


def test_resumable_fields_are_declared_per_family() -> None:
    from tritonrl.agents.dqn import DQNConfig
    from tritonrl.agents.ppo import PPOConfig

    dqn, ppo = resumable_fields(DQNConfig), resumable_fields(PPOConfig)
    assert {"lr", "eps_end", "eps_decay_steps", "max_grad_norm"} <= dqn
    assert not {"gamma", "n_step", "buffer_size", "batch_size", "atoms", "torso_width", "prioritized"} & dqn
    assert {"lr", "ent_coef", "clip_coef", "max_grad_norm", "target_kl", "total_steps"} <= ppo
    assert not {"gamma", "num_steps", "hidden", "policy", "reward_scale", "normalize_obs"} & ppo


def test_training_docs_list_exactly_the_resumable_fields() -> None:
    from tritonrl.agents.dqn import DQNConfig
    from tritonrl.agents.ppo import PPOConfig

    page = (Path(__file__).resolve().parents[2] / "docs" / "pages" / "training.md").read_text()
    for family, cls in (("DQN", DQNConfig), ("PPO", PPOConfig)):
        match = re.search(rf"^- {family} family: (.+)$", page, re.M)
        assert match, f"training.md lists no resumable fields for the {family} family"
        listed = set(re.findall(r"`(\w+)`", match.group(1)))
        assert listed == set(resumable_fields(cls)), family


def test_resume_from_a_checkpoint_older_than_a_resumable_field(tmp_path: Path, capsys) -> None:
    """A checkpoint saved before ``compile`` existed resumes with its default and says so."""
    from tritonrl.toolkit.checkpoint import save_checkpoint

    run = tmp_path / "run"
    args = ("--agent", "dqn", "--run-dir", str(run))
    assert _train(capsys, *args, "--steps", "160", *DQN_SMALL)[0] == 0
    path = run / "checkpoint.safetensors"
    state = load_checkpoint(path)
    del state["agent"]["config"]["compile"]
    save_checkpoint(path, state)
    code, err = _train(capsys, *args, "--steps", "320", "--resume")
    assert code == 0, err
    assert err == ["resume: the checkpoint predates compile (using 'none')"], err
    assert _saved(run)["config"]["compile"] == "none"  # the next checkpoint has the field
