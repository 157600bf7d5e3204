"""``DQNAgent.load`` / ``PPOAgent.load`` and the loop's resume on the wrong file: one short line.

A run folder's checkpoint (format ``tritonrl-train``) loads as an agent (its agent section); any
other file is a one-line ``CheckpointError`` that names the file and never embeds the state (the
issue saw a 78,861-character message); a missing section of a training checkpoint is named in
words.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

gym = pytest.importorskip("gymnasium")

from tritonrl.cli import main  # noqa: E402
from tritonrl.toolkit.checkpoint import CheckpointError, load_checkpoint, save_checkpoint  # noqa: E402

SMALL = {
    "dqn": [
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
    ],
    "ppo": ["--num-envs", "2", "--set", "num_steps=32", "--set", "hidden=16", "--set", "update_epochs=1"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    out = {}
    for agent in ("dqn", "ppo"):
        run = tmp_path_factory.mktemp(agent) / "run"
        code = main(
            [
                "train",
                "--agent",
                agent,
                "--steps",
                "128",
                "--run-dir",
                str(run),
                "--no-progress",
                "--no-tensorboard",
                "--eval-episodes",
                "1",
                *SMALL[agent],
            ]
        )
        assert code == 0
        out[agent] = run / "checkpoint.safetensors"
    return out


def _classes():
    from tritonrl.agents.dqn import DQNAgent
    from tritonrl.agents.ppo import PPOAgent

    return {"dqn": DQNAgent, "ppo": PPOAgent}


def _one_line(exc: pytest.ExceptionInfo, path: Path) -> str:
    msg = str(exc.value)
    assert msg.startswith(str(path)) and "\n" not in msg and len(msg) < 300, msg
    return msg


@pytest.mark.parametrize("kind", ["dqn", "ppo"])
def test_load_takes_the_agent_section_of_a_run_checkpoint(runs, kind: str) -> None:
    agent = _classes()[kind].load(runs[kind])
    saved = load_checkpoint(runs[kind])["agent"]
    assert agent.env_steps == saved["counters"]["env_steps"] > 0
    own = agent.state_dict()
    net = "online" if kind == "dqn" else "policy"
    for name, tensor in saved[net].items():
        assert torch.equal(own[net][name], tensor), name


@pytest.mark.parametrize("kind, other", [("dqn", "ppo"), ("ppo", "dqn")])
def test_load_of_another_agents_run_is_one_short_line(runs, kind: str, other: str) -> None:
    with pytest.raises(CheckpointError) as info:
        _classes()[kind].load(runs[other])
    assert f"holds a {other!r} agent, not a {kind!r} agent" in _one_line(info, runs[other])


@pytest.mark.parametrize("kind", ["dqn", "ppo"])
def test_load_of_wrong_files_is_one_short_line(tmp_path: Path, runs, kind: str) -> None:
    cls = _classes()[kind]
    train = "tritonrl-train"
    states = {
        "counters.safetensors": {"step": 3, "w": torch.ones(3)},
        "big-state.safetensors": {"agent": {"x": torch.zeros(3), "blob": "y" * 90_000}},
        "no-agent-section.safetensors": {"format": train, "loop": {}},
        "agent-section-list.safetensors": {"format": train, "agent": [1]},
        "half-agent.safetensors": {"agent": kind, "config": {"lr": 1.0}},
    }
    cases = {
        "text.safetensors": lambda p: p.write_text("hello world, not a checkpoint"),
        **{name: (lambda p, st=st: save_checkpoint(p, st)) for name, st in states.items()},
    }
    for name, write in cases.items():
        path = tmp_path / name
        write(path)
        with pytest.raises(CheckpointError) as info:
            cls.load(path)
        msg = _one_line(info, path)
        if name == "no-agent-section.safetensors":
            assert "the agent section ('agent') is missing" in msg


@pytest.mark.parametrize(
    "section, words",
    [
        ("loop", "the loop counters section ('loop') is missing"),
        ("rng", "the random generator states section ('rng') is missing"),
        ("schedule", "the update schedule section ('schedule') is missing"),
        ("env", "the environment state section ('env') is missing"),
    ],
)
def test_resume_names_a_missing_section_in_words(
    tmp_path: Path, runs, capsys, section: str, words: str
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    state = load_checkpoint(runs["dqn"])
    del state[section]
    save_checkpoint(run / "checkpoint.safetensors", state)
    before = (run / "checkpoint.safetensors").read_bytes()
    code = main(
        [
            "train",
            "--agent",
            "dqn",
            "--steps",
            "256",
            "--run-dir",
            str(run),
            "--resume",
            "--no-progress",
            "--no-tensorboard",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0] == f"error: {run / 'checkpoint.safetensors'}: {words}", err
    assert (run / "checkpoint.safetensors").read_bytes() == before


@pytest.mark.parametrize(
    "section, value, words",
    [
        ("meta", [["agent", "dqn"]], "the run identity section ('meta') is a list, not a dict"),
        ("agent", "dqn", "the agent section ('agent') is a str, not a dict"),
        ("format", "tritonrl-checkpoint", "not a training-run checkpoint (no format 'tritonrl-train')"),
    ],
)
def test_resume_refuses_a_section_of_the_wrong_type(
    tmp_path: Path, runs, capsys, section: str, value, words: str
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    save_checkpoint(run / "checkpoint.safetensors", {**load_checkpoint(runs["dqn"]), section: value})
    code = main(
        [
            "train",
            "--agent",
            "dqn",
            "--steps",
            "256",
            "--run-dir",
            str(run),
            "--resume",
            "--no-progress",
            "--no-tensorboard",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: {run / 'checkpoint.safetensors'}: ") and words in err[0], err


def test_library_resume_checks_every_section_before_loading_any(tmp_path: Path, runs) -> None:
    """run_training's resume: a damaged later section (RNG) leaves agent and schedule untouched."""
    from tritonrl.agents.dqn import DQNAgent
    from tritonrl.toolkit.envs.vector import make_vec_env
    from tritonrl.toolkit.training.loop import LoopConfig, run_training
    from tritonrl.toolkit.training.offpolicy import schedule_for

    state = load_checkpoint(runs["dqn"])
    state["rng"] = {**state["rng"], "torch": state["rng"]["torch"][:10]}
    run = tmp_path / "run"
    save_checkpoint(run / "checkpoint.safetensors", state)
    env = make_vec_env("CartPole-v1", 4, seed=1)
    try:
        agent = DQNAgent.load(runs["dqn"])
        agent = DQNAgent(env.single_observation_space, env.single_action_space, agent.config, num_envs=4)
        schedule = schedule_for(agent)
        before = (agent.env_steps, [p.clone() for p in agent.online.parameters()], schedule.state_dict())
        with pytest.raises(CheckpointError, match="random generator states: does not fit"):
            run_training(
                agent,
                env,
                schedule,
                LoopConfig(total_steps=256, run_dir=str(run), resume=True, tensorboard=False, plot=False),
            )
        assert agent.env_steps == before[0] and schedule.state_dict() == before[2]
        assert all(torch.equal(a, b) for a, b in zip(agent.online.parameters(), before[1], strict=True))
    finally:
        env.close()
