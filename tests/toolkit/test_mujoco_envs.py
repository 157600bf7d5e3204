"""MuJoCo environments (the ``mujoco`` extra) through :class:`~tritonrl.toolkit.envs.vector.VecEnv`:
the simulator's state saved and restored bit for bit, damaged states refused, terminations kept
apart from truncations, and a short command-line run of each continuous agent.

A few hundred simulator steps in all: seconds on a CPU.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("gymnasium")
pytest.importorskip("mujoco", reason='needs mujoco: pip install "tritonrl[mujoco]"')

from tritonrl.cli.commands import main as cli_main
from tritonrl.toolkit.envs.vector import make_vec_env


def _actions(n: int, dim: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(2, dim, generator=g) * 2 - 1 for _ in range(n)]


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "Hopper-v5"])
def test_restored_state_continues_bit_for_bit(env_id: str) -> None:
    env = make_vec_env(env_id, 2, seed=5)
    dim = env.single_action_space.shape[0]
    for a in _actions(30, dim, 0):
        env.step(a)
    state = env.get_state()
    later = _actions(40, dim, 1)
    want = [env.step(a) for a in later]
    env.close()

    other = make_vec_env(env_id, 2, seed=99)  # another seed: nothing matches without the state
    other.step(torch.zeros(2, dim))
    other.set_state(state)
    got = [other.step(a) for a in later]
    other.close()
    for w, g in zip(want, got, strict=True):
        for name in ("obs", "reward", "next_obs", "terminated", "truncated"):
            assert torch.equal(getattr(w, name), getattr(g, name)), name
        assert w.episode_returns == g.episode_returns


def test_the_physics_is_what_the_state_restores() -> None:
    """Without the simulator's state the plain attributes alone do not continue the run: the
    comparison above could not pass by the observation alone."""
    env = make_vec_env("HalfCheetah-v5", 1, seed=5)
    for a in _actions(10, 6, 0):
        env.step(a[:1])
    state = env.get_state()
    physics = state["envs"][0][-1].pop("__mujoco__")
    assert physics.dtype == np.float64 and physics.ndim == 1
    with pytest.raises(ValueError, match="lacks a MuJoCo simulation state"):
        env.set_state(state)

    for bad, match in ((physics[:-1], "not an f64 array"), (physics.astype(np.float32), "not an f64 array")):
        state["envs"][0][-1]["__mujoco__"] = bad
        with pytest.raises(ValueError, match=match):
            env.set_state(state)
    nan = physics.copy()
    nan[3] = np.nan
    state["envs"][0][-1]["__mujoco__"] = nan
    before = env.get_state()["envs"][0][-1]["__mujoco__"]
    with pytest.raises(ValueError, match="NaN or infinite"):
        env.set_state(state)
    assert np.array_equal(env.get_state()["envs"][0][-1]["__mujoco__"], before)  # nothing changed
    env.close()


def test_a_mujoco_state_does_not_load_into_a_plain_env() -> None:
    cheetah = make_vec_env("HalfCheetah-v5", 1, seed=0)
    layers = cheetah.get_state()["envs"][0]
    cheetah.close()
    pendulum = make_vec_env("Pendulum-v1", 1, seed=0)
    state = pendulum.get_state()
    state["envs"][0][-1]["__mujoco__"] = layers[-1]["__mujoco__"]
    with pytest.raises(ValueError, match="holds a MuJoCo simulation state"):
        pendulum.set_state(state)
    pendulum.close()


def test_hopper_falls_by_termination_and_reports_the_final_observation() -> None:
    env = make_vec_env("Hopper-v5", 2, seed=0)
    ended = 0
    for a in _actions(300, 3, 2):
        t = env.step(a)
        assert not bool(t.truncated.any())  # 1,000-step limit: not reached here
        done = t.terminated
        if bool(done.any()):
            ended += int(done.sum())
            # the acting observation is the reset one, the transition's next_obs the fallen state
            assert not torch.equal(t.obs[done], t.next_obs[done])
    env.close()
    assert ended > 0


@pytest.mark.parametrize("name", ["sac", "td3"])
def test_cli_trains_on_half_cheetah(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    code = cli_main(
        [
            "train", "--no-progress", "--no-tensorboard", "--agent", name, "--env", "HalfCheetah-v5",
            "--steps", "120", "--run-dir", str(run), "--set", "learning_starts=60", "--set", "batch_size=16",
            "--set", "buffer_size=200", "--set", "hidden=16", "--eval-every", "0", "--eval-episodes", "1",
            "--log-every", "60",
        ]
    )  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err
    assert f"{name} on HalfCheetah-v5: 120 steps" in out.out
    header = (run / "metrics.csv").read_text().splitlines()[0]
    assert "losses/qf_loss" in header and (run / "checkpoint.safetensors").is_file()
