"""Settings tuned per (preset, environment) (issue 45): the `Tuned` record and its checks, the
``preset(name, env=...)`` functions, and ``train`` applying the entry under ``--set`` (not on a resume)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

pytest.importorskip("gymnasium")

from tritonrl.agents import dqn, ppo, sac
from tritonrl.cli import main
from tritonrl.toolkit.checkpoint import load_checkpoint
from tritonrl.toolkit.config import apply_overrides
from tritonrl.toolkit.preset import Tuned, find_preset

ACROBOT = {
    "lr": 6.3e-4,
    "batch_size": 128,
    "train_freq": 4,
    "gradient_steps": 4,
    "target_update_every": 250,
    "eps_end": 0.1,
    "eps_decay_steps": 12_000,
    "torso_width": 256,
}
SMALL = ["--set", "learning_starts=32", "--set", "buffer_size=256", "--set", "batch_size=16"]


def _train(capsys, run: Path, agent: str, *args: str) -> tuple[dict, list[str]]:
    code = main(
        ["train", "--no-progress", "--no-tensorboard", "--eval-episodes", "1", "--env", "Acrobot-v1"]
        + ["--agent", agent, "--run-dir", str(run), *args]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 0, err
    return load_checkpoint(run / "checkpoint.safetensors", tensors=False)["agent"]["config"], err


@pytest.mark.parametrize("name", ["dqn", "double"])
def test_preset_with_env_returns_the_tuned_config(name: str) -> None:
    cfg = dqn.preset(name, env="Acrobot-v1")
    assert {k: getattr(cfg, k) for k in ACROBOT} == ACROBOT
    assert cfg == apply_overrides(dqn.preset(name), ACROBOT)  # nothing else changes
    assert dqn.preset(name, env="Acrobot-v1", lr=1e-3).lr == 1e-3  # field overrides on top
    tuned = find_preset(dqn.PRESETS, name).tuned["Acrobot-v1"]
    assert tuned.steps == 100_000 and tuned.budget == 50_000
    assert tuned.source == "rl-baselines3-zoo hyperparams/dqn.yml (Acrobot-v1)"


def test_no_entry_leaves_the_preset_unchanged() -> None:
    assert dqn.preset("rainbow", env="CartPole-v1") == dqn.preset("rainbow") == dqn.PRESETS[6].config
    assert dqn.preset("c51", env="Acrobot-v1") == dqn.preset("c51")  # entries are per preset
    assert ppo.preset("ppo", env="Pendulum-v1") == ppo.preset("ppo")
    assert ppo.preset("ppo-continuous", env="Acrobot-v1") == ppo.preset("ppo-continuous")
    assert sac.preset("sac", env="InvertedPendulum-v5") == sac.preset("sac")


def test_a_tuned_entry_is_checked_when_the_preset_is_made() -> None:
    double = find_preset(dqn.PRESETS, "double")
    bad = [
        (
            {"E-v0": Tuned({"nope": 1}, "x")},
            ValueError,
            r"tuned overrides \['nope'\] for E-v0 are not fields of DQNConfig",
        ),
        ({"E-v0": Tuned({"gamma": 2.0}, "x")}, ValueError, "'double': tuned settings for E-v0: .*gamma"),
        ({"": Tuned({}, "x")}, ValueError, "tuned keys must be non-empty env ids"),
        ({"E-v0": {"lr": 1e-3}}, TypeError, r"tuned\['E-v0'\] must be a Tuned, got dict"),
    ]
    for tuned, exc, words in bad:
        with pytest.raises(exc, match=words):
            dataclasses.replace(double, tuned=tuned)
    with pytest.raises(ValueError, match="non-empty source"):
        Tuned({"lr": 1e-3}, "")
    for name in ("steps", "budget", "num_envs"):
        with pytest.raises(ValueError, match=f"tuned {name} must be an int >= 1 or None, got 0"):
            Tuned({"lr": 1e-3}, "x", **{name: 0})


@pytest.mark.parametrize("family", [dqn, ppo, sac])
def test_every_entry_builds_and_names_its_source(family) -> None:
    entries = [(p, env, t) for p in family.PRESETS for env, t in p.tuned.items()]
    assert entries, f"{family.__name__} has no tuned entry"
    for p, env, tuned in entries:
        cfg = family.preset(p.name, env=env)
        assert {k: getattr(cfg, k) for k in tuned.overrides} == dict(tuned.overrides), (p.name, env)
        assert cfg != p.config, (p.name, env)  # an entry changes something
        if tuned.source.startswith("rl-baselines3-zoo"):  # the zoo's file, and its entry for the env
            assert tuned.source.startswith("rl-baselines3-zoo hyperparams/") and f"({env})" in tuned.source
        elif tuned.source.startswith("a sweep here"):  # measured here: where the runs are shown
            assert "docs/pages/results.md" in tuned.source, tuned.source
        else:  # a paper: its authors and year
            assert re.match(r"[A-Z][a-z]+ et al\. \(\d{4}\)", tuned.source), tuned.source


def test_train_applies_the_entry_under_set_and_not_on_a_resume(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    config, err = _train(capsys, run, "double", "--steps", "64", *SMALL, "--set", "lr=1e-3")
    assert err[0].startswith(
        "tuned settings for double on Acrobot-v1 (rl-baselines3-zoo hyperparams/dqn.yml (Acrobot-v1)"
    )
    assert err[0].endswith("; --set replaces lr, batch_size") and "torso_width=256" in err[0]
    assert config["lr"] == 1e-3 and config["batch_size"] == 16  # the user wins
    assert config["torso_width"] == 256 and config["eps_decay_steps"] == 12_000  # the entry otherwise
    # a resume starts from the saved config: the entry is not applied again, nor announced
    config, err = _train(capsys, run, "double", "--steps", "128", "--resume")
    assert config["lr"] == 1e-3 and config["batch_size"] == 16 and config["torso_width"] == 256
    assert not any(line.startswith("tuned settings") for line in err)


def test_train_without_an_entry_builds_the_preset_as_before(tmp_path: Path, capsys) -> None:
    config, err = _train(capsys, tmp_path / "run", "c51", "--steps", "64", *SMALL)
    expected = apply_overrides(
        dqn.preset("c51"), {"learning_starts": 32, "buffer_size": 256, "batch_size": 16}
    )
    assert config == expected.to_dict()
    assert not any(line.startswith("tuned settings") for line in err)


def test_no_tuned_trains_the_preset_where_an_entry_exists(tmp_path: Path, capsys, monkeypatch) -> None:
    double = find_preset(dqn.PRESETS, "double")
    entry = dataclasses.replace(double.tuned["Acrobot-v1"], num_envs=2)
    monkeypatch.setitem(double.tuned, "Acrobot-v1", entry)
    run = tmp_path / "run"
    config, err = _train(capsys, run, "double", "--no-tuned", "--steps", "64", *SMALL)
    expected = apply_overrides(
        dqn.preset("double"), {"learning_starts": 32, "buffer_size": 256, "batch_size": 16}
    )
    assert config == expected.to_dict()  # not the entry's lr, width or exploration
    assert not any(line.startswith("tuned settings") for line in err)
    state = load_checkpoint(run / "checkpoint.safetensors", tensors=False)
    assert state["meta"]["num_envs"] == str(double.default_num_envs) != str(entry.num_envs)


def test_train_takes_steps_and_envs_from_the_entry_unless_given(tmp_path: Path, capsys, monkeypatch) -> None:
    double = find_preset(dqn.PRESETS, "double")
    small = dataclasses.replace(double.tuned["Acrobot-v1"], budget=96, num_envs=2)
    monkeypatch.setitem(double.tuned, "Acrobot-v1", small)
    run = tmp_path / "run"
    _, err = _train(capsys, run, "double", *SMALL)
    assert err[0].endswith("; 96 steps; 2 envs"), err[0]
    state = load_checkpoint(run / "checkpoint.safetensors", tensors=False)
    assert state["loop"]["step"] == 96 and state["meta"]["num_envs"] == "2"
    _, err = _train(capsys, tmp_path / "given", "double", "--steps", "64", "--num-envs", "4", *SMALL)
    assert err[0].endswith("; --set replaces batch_size"), err[0]  # the flags win, and say nothing
    state = load_checkpoint(tmp_path / "given" / "checkpoint.safetensors", tensors=False)
    assert state["loop"]["step"] == 64 and state["meta"]["num_envs"] == "4"
    monkeypatch.setitem(double.tuned, "Acrobot-v1", dataclasses.replace(small, budget=32, num_envs=1))
    _, err = _train(capsys, tmp_path / "one", "double", *SMALL)
    assert err[0].endswith("; 32 steps; 1 env"), err[0]


def test_train_says_when_an_entry_s_annealed_rate_ends_before_the_run(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    double = find_preset(dqn.PRESETS, "double")
    entry = double.tuned["Acrobot-v1"]
    annealed = dataclasses.replace(
        entry, overrides={**entry.overrides, "lr_final": 0.0, "lr_decay_steps": 48}
    )
    monkeypatch.setitem(double.tuned, "Acrobot-v1", annealed)
    _, err = _train(capsys, tmp_path / "long", "double", "--steps", "64", *SMALL)
    assert err[0].endswith("; the rate holds at its final value from step 48 on (--set lr_decay_steps=64)")
    _, err = _train(capsys, tmp_path / "within", "double", "--steps", "48", *SMALL)
    assert "the rate holds" not in err[0]  # the schedule ends with the run: nothing to say
    _, err = _train(capsys, tmp_path / "set", "double", "--steps", "64", *SMALL, "--set", "lr_decay_steps=64")
    assert "the rate holds" not in err[0] and "--set replaces batch_size, lr_decay_steps" in err[0]


def test_the_training_page_lists_every_entry() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "pages" / "training.md").read_text()
    rows = [
        line
        for line in page.splitlines()
        if line.startswith("| `") and ("hyperparams/" in line or "et al." in line or "a sweep here" in line)
    ]
    for family in (dqn, ppo, sac):
        for p in family.PRESETS:
            for env in p.tuned:
                assert any(f"`{p.name}`" in r and f"`{env}`" in r for r in rows), (p.name, env)


def test_the_box2d_extra_builds_the_lunar_lander_of_the_entries() -> None:
    pytest.importorskip("Box2D", reason="the box2d extra is not installed")
    pytest.importorskip("pygame", reason="the box2d extra is not installed")
    import gymnasium as gym

    assert ("dqn", "LunarLander-v3") in {(p.name, env) for p in dqn.PRESETS for env in p.tuned}
    env = gym.make("LunarLander-v3")
    obs, _ = env.reset(seed=0)
    assert obs.shape == (8,) and env.action_space.n == 4
    env.close()
