"""Config values that cannot work are refused when the agent is built, in one line; so is a
``TRITONRL_BACKEND`` that cannot run; the command line says so with exit status 2 before training."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

gym = pytest.importorskip("gymnasium")

from tritonrl.agents.dqn import DQNConfig  # noqa: E402  (imports gymnasium)
from tritonrl.agents.ppo import PPOConfig  # noqa: E402
from tritonrl.cli import main  # noqa: E402
from tritonrl.cli.registry import get_agent  # noqa: E402
from tritonrl.kernels.backend import backend_override  # noqa: E402
from tritonrl.toolkit.checks import check_config, numeric_fields  # noqa: E402
from tritonrl.toolkit.config import apply_overrides  # noqa: E402

OBS = gym.spaces.Box(-math.inf, math.inf, (4,), "float32")
DISCRETE = gym.spaces.Discrete(2)

# (agent preset, field, value as given to --set, fragment of the one-line error)
BAD = [
    ("dqn", "lr", "inf", "lr=inf must be a finite number"),
    ("dqn", "lr", "nan", "lr=nan must be a finite number"),
    ("dqn", "lr", "0", "lr=0.0 must be > 0"),
    ("dqn", "lr", "-1e-3", "lr=-0.001 must be > 0"),
    ("dqn", "torso_width", "0", "torso_width=0 must be >= 1"),
    ("dqn", "torso_depth", "-2", "torso_depth=-2 must be >= 1"),
    ("dqn", "torso_hidden", "120,0", "torso_hidden=(120, 0): each item must be >= 1, got 0"),
    ("dqn", "torso_hidden", "()", "torso_hidden=() has no layer"),
    ("dqn", "torso_hidden", "64,1.5", "torso_hidden='1.5' is not a valid int"),
    ("dqn", "head_hidden", "0", "head_hidden=0 must be >= 1"),
    ("dqn", "attention_heads", "0", "attention_heads=0 must be >= 1"),
    ("dqn", "icm_embed", "0", "icm_embed=0 must be >= 1"),
    ("dqn", "icm_hidden", "-8", "icm_hidden=-8 must be >= 1"),
    ("dqn", "batch_size", "0", "batch_size=0 must be >= 1"),
    ("dqn", "buffer_size", "-5", "buffer_size=-5 must be >= 1"),
    ("dqn", "buffer_size", "1.5", "buffer_size='1.5' is not a valid int"),
    ("dqn", "buffer_size", "inf", "buffer_size='inf' is not a valid int"),
    ("dqn", "gamma", "1.5", "gamma=1.5 must be in (0,1]"),
    ("dqn", "gamma", "nan", "gamma=nan must be a finite number"),
    ("dqn", "tau", "0", "tau=0.0 must be in (0,1]"),
    ("dqn", "eps_end", "2", "eps_end=2.0 must be in [0,1]"),
    ("dqn", "per_alpha", "-0.1", "per_alpha=-0.1 must be in [0,1]"),
    ("dqn", "per_eps", "0", "per_eps=0.0 must be in (0,1]"),
    ("dqn", "noisy_sigma0", "nan", "noisy_sigma0=nan must be a finite number"),
    ("dqn", "v_min", "-inf", "v_min=-inf must be a finite number"),
    ("dqn", "max_grad_norm", "0", "max_grad_norm=0.0 must be > 0"),
    ("dqn", "learning_starts", "-1", "learning_starts=-1 must be >= 0"),
    ("dqn", "train_freq", "0", "train_freq=0 must be >= 1"),
    ("c51", "atoms", "1", "atoms=1 must be >= 2"),
    ("qrdqn", "kappa", "-1", "kappa=-1.0 must be >= 0"),
    ("ppo", "hidden", "0", "hidden=(0,): each item must be >= 1, got 0"),
    ("ppo", "hidden", "64,-4", "hidden=(64, -4): each item must be >= 1, got -4"),
    ("ppo", "lr", "inf", "lr=inf must be a finite number"),
    ("ppo", "lr", "nan", "lr=nan must be a finite number"),
    ("ppo", "lr", "0", "lr=0.0 must be > 0"),
    ("ppo", "num_steps", "0", "num_steps=0 must be >= 1"),
    ("ppo", "update_epochs", "0", "update_epochs=0 must be >= 1"),
    ("ppo", "num_minibatches", "-1", "num_minibatches=-1 must be >= 1"),
    ("ppo", "clip_coef", "0", "clip_coef=0.0 must be > 0"),
    ("ppo", "gamma", "1.01", "gamma=1.01 must be in [0,1]"),
    ("ppo", "gae_lambda", "-0.5", "gae_lambda=-0.5 must be in [0,1]"),
    ("ppo", "obs_clip", "0", "obs_clip=0.0 must be > 0"),
    ("ppo", "reward_scale", "nan", "reward_scale=nan must be a finite number"),
    ("ppo", "ent_coef", "-0.1", "ent_coef=-0.1 must be >= 0"),
    ("ppo", "target_kl", "-1", "target_kl=-1.0 must be > 0"),
    ("ppo", "max_grad_norm", "inf", "max_grad_norm=inf must be a finite number"),
    ("ppo", "log_std_init", "inf", "log_std_init=inf must be a finite number"),
    ("ppo-lstm", "memory_size", "0", "memory_size=0 must be >= 1"),
    ("ppo-lstm", "hidden", "0", "hidden=(0,): each item must be >= 1, got 0"),
    ("ppo-mamba", "mamba_headdim", "0", "mamba_headdim=0 must be >= 1"),
    ("ppo-mamba", "mamba_d_state", "-1", "mamba_d_state=-1 must be >= 1"),
    ("ppo-mamba", "mamba_expand", "0", "mamba_expand=0 must be >= 1"),
    ("ppo-flow", "flow_hidden", "0", "flow_hidden=0 must be >= 1"),
    ("ppo-flow", "flow_layers", "0", "flow_layers=0 must be >= 1"),
    ("ppo", "seq_len", "-1", "seq_len=-1 must be >= 0"),
    (
        "ppo-mamba",
        "mamba_headdim",
        "7",
        "mamba_expand * memory_size = 64 must be a multiple of mamba_headdim=7",
    ),
]


def _build(name: str, overrides: dict[str, str]):
    spec = get_agent(name)
    act = (
        DISCRETE
        if name in ("dqn", "c51", "qrdqn", "ppo", "ppo-lstm", "ppo-mamba")
        else gym.spaces.Box(-1.0, 1.0, (1,), "float32")
    )
    return spec.build(OBS, act, num_envs=1, device="cpu", seed=0, total_steps=1000, overrides=overrides)


@pytest.mark.parametrize(
    ("name", "key", "value", "fragment"), BAD, ids=[f"{a}-{k}={v}" for a, k, v, _ in BAD]
)
def test_bad_config_values_are_refused_in_one_line(name: str, key: str, value: str, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        _build(name, {key: value})
    message = str(info.value)
    assert fragment in message and "\n" not in message


@pytest.mark.parametrize("cls", [DQNConfig, PPOConfig])
def test_every_numeric_field_has_a_range(cls) -> None:
    # A numeric field added without a range, or a range left for a removed field, fails here.
    fields = numeric_fields(cls)
    assert len(fields) >= 20
    table = __import__(cls.__module__, fromlist=["_RANGES"])._RANGES
    assert sorted(fields) == sorted(table)


def test_check_config_needs_a_range_for_each_numeric_field() -> None:
    @dataclasses.dataclass(frozen=True)
    class Cfg:
        width: int = 4
        rate: float | None = None
        name: str = "x"

    check_config(Cfg(), {"width": "[1, inf)", "rate": "(0, 1)"})
    with pytest.raises(ValueError, match=r"rate=1\.0 must be in \(0,1\)"):
        check_config(Cfg(rate=1.0), {"width": "[1, inf)", "rate": "(0, 1)"})
    with pytest.raises(KeyError, match="width"):
        check_config(Cfg(), {"rate": "(0, 1)"})


def test_python_values_are_checked_too() -> None:
    with pytest.raises(ValueError, match="lr=inf must be a finite number"):
        dataclasses.replace(DQNConfig(), lr=float("inf"))
    with pytest.raises(ValueError, match="torso_width=1.5 must be an int"):
        DQNConfig(torso_width=1.5)
    with pytest.raises(ValueError, match="batch_size=True must be an int"):
        DQNConfig(batch_size=True)
    with pytest.raises(ValueError, match=r"hidden=\(64, 0\): each item must be >= 1, got 0"):
        PPOConfig(hidden=(64, 0))
    with pytest.raises(ValueError, match="torso_width=30 must be divisible by attention_heads=4"):
        DQNConfig(torso="attention", torso_width=30, attention_heads=4)
    assert PPOConfig(hidden=()).hidden == ()  # no hidden layer: a linear policy, allowed


def test_integral_float_strings_are_accepted_for_int_fields() -> None:
    cfg = apply_overrides(DQNConfig(), {"buffer_size": "1e5", "batch_size": "32.0", "train_freq": "1_000"})
    assert (cfg.buffer_size, cfg.batch_size, cfg.train_freq) == (100_000, 32, 1000)
    cfg = apply_overrides(DQNConfig(), {"buffer_size": "123456789012345678"})  # exact, no float rounding
    assert cfg.buffer_size == 123456789012345678


def test_a_replay_that_cannot_fit_is_refused_with_its_size() -> None:
    with pytest.raises(ValueError) as info:
        get_agent("dqn").build(OBS, DISCRETE, overrides={"buffer_size": "1e11"})
    msg = str(info.value)
    # 1e11 transitions x (2 observations x 4 f32 + int64 action + 2 f32) = 4.8 TB
    assert msg.startswith("buffer_size=100000000000 needs 4.8 TB (observations 3.2 TB, actions 800.0 GB")
    assert "this machine has" in msg and "available" in msg and "\n" not in msg
    with pytest.raises(ValueError, match=r"priorities 2\.\d TB"):
        get_agent("rainbow").build(OBS, DISCRETE, overrides={"buffer_size": "1e11"})


# ----------------------------------------------------------------------------- TRITONRL_BACKEND


def test_backend_override_is_the_one_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITONRL_BACKEND", raising=False)
    assert backend_override("cpu") == "auto"
    monkeypatch.setenv("TRITONRL_BACKEND", " Torch ")
    assert backend_override("cpu") == "torch"
    monkeypatch.setenv("TRITONRL_BACKEND", "bogus")
    with pytest.raises(
        ValueError, match="TRITONRL_BACKEND='bogus' is not a backend; allowed values: auto, triton, torch"
    ):
        backend_override()
    monkeypatch.setenv("TRITONRL_BACKEND", "triton")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="TRITONRL_BACKEND=triton but tensors live on cpu"):
        backend_override("cpu")
    assert backend_override("cuda:0") == "triton"  # never queries CUDA
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert backend_override("cpu") == "triton"


@pytest.mark.parametrize("name", ["dqn", "ppo"])
def test_agents_check_the_backend_when_built(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    # PPO on CPU runs no kernel op: without this check it ignored a bad value.
    monkeypatch.setenv("TRITONRL_BACKEND", "bogus")
    with pytest.raises(ValueError, match="TRITONRL_BACKEND='bogus'"):
        _build(name, {})


# ----------------------------------------------------------------------------- the command line


CLI = [
    ({}, ["--agent", "ppo", "--set", "hidden=0"], "hidden=(0,): each item must be >= 1, got 0"),
    ({}, ["--agent", "ppo", "--set", "lr=inf"], "lr=inf must be a finite number"),
    ({}, ["--agent", "dqn", "--set", "lr=nan"], "lr=nan must be a finite number"),
    (
        {},
        ["--agent", "dqn", "--set", "torso=resmlp", "--set", "torso_hidden=120,84"],
        "torso_hidden=(120, 84) is for the mlp or a conv torso, not torso='resmlp'",
    ),
    ({}, ["--agent", "dqn", "--set", "buffer_size=1e11"], "buffer_size=100000000000 needs 4.8 TB"),
    ({}, ["--agent", "dqn", "--set", "buffer_size=2.5"], "buffer_size='2.5' is not a valid int"),
    (
        {"TRITONRL_BACKEND": "bogus"},
        ["--agent", "ppo"],
        "TRITONRL_BACKEND='bogus' is not a backend; allowed values: auto, triton, torch",
    ),
    (
        {"TRITONRL_BACKEND": "triton", "TRITON_INTERPRET": "0"},
        ["--agent", "ppo"],
        "TRITONRL_BACKEND=triton but tensors live on cpu",
    ),
    (
        {"TRITONRL_BACKEND": "triton", "TRITON_INTERPRET": "0"},
        ["--agent", "rainbow"],
        "TRITONRL_BACKEND=triton but tensors live on cpu",
    ),
]


@pytest.mark.parametrize(("env", "argv", "fragment"), CLI, ids=[" ".join(a[1:]) + str(e) for e, a, _ in CLI])
def test_cli_refuses_before_training(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch, env, argv, fragment
) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    run_dir = tmp_path / "run"
    code = main(
        [
            "train",
            "--no-progress",
            "--no-tensorboard",
            "--env",
            "CartPole-v1",
            "--steps",
            "200",
            "--run-dir",
            str(run_dir),
            *argv,
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: ") and fragment in err[0], err
    assert not run_dir.exists()


def test_network_builders_refuse_bad_sizes() -> None:
    # Used directly (outside a config), the builders refuse sizes that cannot make a layer.
    from tritonrl.agents.nets.torsos import MLP, build_torso

    with pytest.raises(ValueError, match="attention heads=0 must be >= 1"):
        build_torso((3, 4), "attention", width=16, heads=0)
    with pytest.raises(ValueError, match=r"torso width=0 and depth=2 must be >= 1"):
        build_torso((4,), "mlp", width=0)
    with pytest.raises(ValueError, match=r"hidden=\(8, 0\): layer sizes must be >= 1"):
        MLP(4, (8, 0))


def test_check_memory_refuses_only_what_cannot_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    from tritonrl.toolkit import checks

    checks.check_memory("buffer_size=10", {"observations": 1_000}, "cpu")  # fits: nothing raised
    monkeypatch.setattr(checks, "available_memory", lambda device: 1_500)
    expected = (
        r"^capacity=7 needs 2\.0 kB \(observations 1\.5 kB, actions 500 B\) on cpu; this machine "
        r"has 1\.5 kB available$"
    )
    with pytest.raises(ValueError, match=expected):
        checks.check_memory("capacity=7", {"observations": 1_500, "actions": 500}, "cpu")
    monkeypatch.setattr(checks, "available_memory", lambda device: None)  # unknown: never refused
    checks.check_memory("capacity=7", {"observations": 10**18}, "cuda:0")
    assert checks.format_bytes(3.2e12) == "3.2 TB" and checks.format_bytes(999) == "999 B"


@pytest.mark.parametrize("cls", [DQNConfig, PPOConfig], ids=["dqn", "ppo"])
def test_a_checkpoint_older_than_a_resumable_field_still_reads(cls: type) -> None:
    """A config saved before a resumable field existed (``compile`` came later) reads back with
    that field's default; a missing fixed field is still refused (it cannot be guessed)."""
    from tritonrl.toolkit.config import check_config_dict, resumable_fields

    saved = cls().to_dict()
    assert "compile" in resumable_fields(cls)
    del saved["compile"]
    check_config_dict(cls, saved)
    assert cls.from_dict(saved).compile == "none"
    del saved["gamma"]
    with pytest.raises(ValueError, match="lacks field.*gamma"):
        check_config_dict(cls, saved)
