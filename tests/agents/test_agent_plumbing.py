"""The plumbing both agent families share (issue 14, items 1 and 2): the config (de)serialiser,
the one override path, the checkpoint header and its check, the generator reseed, the Agent
protocol, and the explicit Preset registry."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

gym = pytest.importorskip("gymnasium")

from tritonrl.toolkit.checkpoint import CheckpointError, load_checkpoint, save_checkpoint  # noqa: E402
from tritonrl.toolkit.config import Config, apply_overrides, check_config_dict  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BOUNDED = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
DQN_SMALL = {"torso_width": 8, "torso_depth": 1, "buffer_size": 32, "batch_size": 4, "learning_starts": 0}
PPO_SMALL = {"hidden": (8,), "num_steps": 4, "num_minibatches": 1, "update_epochs": 1}


@dataclasses.dataclass(frozen=True)
class Nested(Config):
    hidden: tuple[int, ...] = (64, 64)
    pairs: tuple[tuple[int, int], ...] = ((1, 2), (3, 4))
    grid: tuple[tuple[float, ...], ...] = ((0.5,), (1.0, 2.0))
    pair: tuple[int, str] = (7, "x")
    maybe: tuple[int, ...] | None = None
    name: str = "n"
    rate: float = 0.1


# ----------------------------------------------------------------------------- the serialiser


@pytest.mark.parametrize(
    "cfg",
    [
        Nested(),
        Nested(hidden=(), pairs=(), maybe=(3,), grid=((),)),
        Nested(pairs=((5, 6),), maybe=(1, 2, 3), pair=(0, "y")),
    ],
)
def test_config_round_trips_through_json_and_a_checkpoint_with_tuples(cfg: Nested, tmp_path: Path) -> None:
    values = cfg.to_dict()
    assert values["pairs"] == cfg.pairs and isinstance(values["pairs"], tuple)  # kept as they are
    through_json = json.loads(json.dumps(values))  # tuples come back as (nested) lists
    assert isinstance(through_json["pairs"], list)
    back = Nested.from_dict(through_json)
    assert back == cfg
    assert all(isinstance(p, tuple) for p in back.pairs) and all(isinstance(g, tuple) for g in back.grid)
    assert back.maybe is None or isinstance(back.maybe, tuple)
    save_checkpoint(tmp_path / "c.safetensors", {"config": values})
    assert Nested.from_dict(load_checkpoint(tmp_path / "c.safetensors")["config"]) == cfg
    check_config_dict(Nested, through_json)  # lists stand for tuples in a saved config


def test_config_from_dict_refuses_unknown_fields_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"^unknown Nested field\(s\) \['lrr'\]; known: \[") as info:
        Nested.from_dict({"lrr": 1})
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="Nested values must be a dict, got list"):
        Nested.from_dict([1])  # type: ignore[arg-type]


def test_agent_configs_use_the_one_serialiser() -> None:
    from tritonrl.agents.dqn import DQNConfig, preset
    from tritonrl.agents.ppo import PPOConfig
    from tritonrl.agents.ppo import preset as ppo_preset

    for cfg in (preset("rainbow"), ppo_preset("ppo-lstm"), PPOConfig(hidden=(32, 16, 8))):
        assert type(cfg).to_dict is Config.to_dict
        assert type(cfg).from_dict.__func__ is Config.from_dict.__func__
        assert type(cfg).from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert DQNConfig.from_dict({"tags": ["a", "b"]}).tags == ("a", "b")
    assert PPOConfig.from_dict({"hidden": [4, 4]}).hidden == (4, 4)


def test_python_overrides_pass_through_to_the_config_checks() -> None:
    # one override path for strings (--set) and Python values (preset(name, **overrides)): a Python
    # value is never coerced (1.5 is not silently truncated to 1), the config's checks judge it
    from tritonrl.agents.dqn import DQNConfig, preset
    from tritonrl.agents.ppo import preset as ppo_preset

    with pytest.raises(ValueError, match="torso_width=1.5 must be an int"):
        preset("dqn", torso_width=1.5)
    with pytest.raises(ValueError, match="unknown config key 'lrr' for PPOConfig"):
        ppo_preset("ppo", lrr=1.0)
    assert ppo_preset("ppo", hidden=[32, 32], target_kl=None).hidden == (32, 32)
    assert apply_overrides(DQNConfig(), {"head_hidden": "none", "noisy": "on"}).noisy is True
    typed = preset("dqn", lr=1e-4, double=True)
    assert typed == apply_overrides(preset("dqn"), {"lr": "1e-4", "double": "1"})


# ----------------------------------------------------------------------------- the header


def _dqn(obs_space=BOUNDED, num_envs=2, seed=0, **kw):
    from tritonrl.agents.dqn import DQNAgent, preset

    cfg = preset("dqn", **{**DQN_SMALL, **kw})
    return DQNAgent(obs_space, gym.spaces.Discrete(2), cfg, num_envs=num_envs, seed=seed)


def _ppo(obs_space=BOUNDED, num_envs=2, seed=0, **kw):
    from tritonrl.agents.ppo import PPOAgent, preset

    return PPOAgent(
        obs_space, gym.spaces.Discrete(2), preset("ppo", **{**PPO_SMALL, **kw}), num_envs=num_envs, seed=seed
    )


MAKERS = {"dqn": _dqn, "ppo": _ppo}


@pytest.mark.parametrize("kind", ["dqn", "ppo"])
def test_every_agent_state_starts_with_the_one_header(kind: str) -> None:
    from tritonrl.toolkit.agent import checkpoint_header
    from tritonrl.toolkit.envs.vector import space_to_json

    agent = MAKERS[kind](seed=5)
    state = agent.state_dict()
    header = checkpoint_header(kind, agent.config, BOUNDED, gym.spaces.Discrete(2), 2, 5)
    assert list(header) == ["agent", "config", "observation_space", "action_space", "num_envs", "seed"]
    assert {k: state[k] for k in header} == header
    assert state["observation_space"] == space_to_json(BOUNDED)
    assert state["observation_space"]["low"] == [-1.0] * 3


@pytest.mark.parametrize("kind", ["dqn", "ppo"])
def test_header_check_names_what_differs(kind: str) -> None:
    make = MAKERS[kind]
    state = make().state_dict()
    cases = [
        (
            make(obs_space=gym.spaces.Box(-1.0, 1.0, (4,), np.float32)),
            "agent state: observation shape [3] does not match this agent's [4]",
        ),
        (make(obs_space=gym.spaces.Box(-2.0, 2.0, (3,), np.float32)), "agent state: observation space {"),
        (make(num_envs=3), "agent state: saved with num_envs=2, this agent has 3"),
        (MAKERS["ppo" if kind == "dqn" else "dqn"](), f"agent state: holds a {kind!r} agent, not a"),
    ]
    for agent, words in cases:
        with pytest.raises(CheckpointError) as info:
            agent.load_state_dict(state)
        assert str(info.value).startswith(words) and "\n" not in str(info.value), str(info.value)
    from tritonrl.toolkit.agent import check_header

    with pytest.raises(CheckpointError, match=r"^x: action space \{'type': 'Discrete', 'n': 2"):
        check_header(
            state,
            kind=kind,
            observation_space=BOUNDED,
            action_space=gym.spaces.Discrete(3),
            num_envs=2,
            where="x",
        )
    missing = r"^x: the observation space \('observation_space'\) is missing"
    with pytest.raises(CheckpointError, match=missing):
        check_header(
            {k: v for k, v in state.items() if k != "observation_space"},
            kind=kind,
            observation_space=BOUNDED,
            action_space=gym.spaces.Discrete(2),
            num_envs=2,
            where="x",
        )


@pytest.mark.parametrize("kind", ["dqn", "ppo"])
def test_load_keeps_the_saved_spaces_bounds_included(kind: str, tmp_path: Path) -> None:
    # DQNAgent.load used to rebuild a Box(-inf, inf) of the saved shape; now both families rebuild
    # the saved spaces, so the loaded agent takes the same checkpoint back and acts the same
    from tritonrl.agents.dqn import DQNAgent
    from tritonrl.agents.ppo import PPOAgent

    agent = MAKERS[kind](seed=3)
    agent.save(tmp_path / "a.safetensors")
    twin = {"dqn": DQNAgent, "ppo": PPOAgent}[kind].load(tmp_path / "a.safetensors")
    assert twin.observation_space == BOUNDED and twin.action_space == gym.spaces.Discrete(2)
    assert np.array_equal(twin.observation_space.low, BOUNDED.low)
    assert (twin.num_envs, twin.seed, twin.config) == (2, 3, agent.config)
    twin.load_state_dict(agent.state_dict())  # the header of the original fits the twin exactly
    obs = torch.rand(2, 3) * 2 - 1
    assert torch.equal(twin.act(obs, explore=False), agent.act(obs, explore=False))


@pytest.mark.parametrize("kind", ["dqn", "ppo"])
def test_a_generator_state_of_another_device_type_is_reseeded_the_same_way(kind: str) -> None:
    from tritonrl.toolkit.seeding import RESEED_STRIDE

    state = MAKERS[kind](seed=4).state_dict()
    state["counters"] = {**state["counters"], "updates": 6}
    state["generator"] = torch.zeros(16, dtype=torch.uint8)  # the shape of a CUDA generator state
    agent = MAKERS[kind](seed=4)
    agent.load_state_dict(state)
    expected = torch.Generator().manual_seed(4 + RESEED_STRIDE * 6).get_state()
    assert agent.updates == 6 and torch.equal(agent.generator.get_state(), expected)


def test_agents_follow_the_agent_protocol() -> None:
    from tritonrl.toolkit.agent import Agent, AgentBase

    for make in MAKERS.values():
        agent = make()
        assert isinstance(agent, Agent) and isinstance(agent, AgentBase)
    assert not isinstance(object(), Agent)


def test_replay_validate_and_apply_are_public() -> None:
    from tritonrl.toolkit.replay import PrioritizedReplayBuffer

    a = PrioritizedReplayBuffer(16, (3,), num_envs=1)
    for i in range(5):
        a.add(
            torch.full((1, 3), float(i)),
            torch.zeros(1, dtype=torch.int64),
            torch.ones(1),
            torch.zeros(1, 3),
            torch.zeros(1, dtype=torch.bool),
            torch.zeros(1, dtype=torch.bool),
        )
    b = PrioritizedReplayBuffer(16, (3,), num_envs=1)
    staged = b.parse_state(a.state_dict())
    assert len(b) == 0  # parsing changes nothing
    b.apply_state(staged)
    assert len(b) == 5 and torch.equal(b.priorities(), a.priorities())
    with pytest.raises(ValueError, match="another configuration"):
        PrioritizedReplayBuffer(8, (3,), num_envs=1).parse_state(a.state_dict())


# ----------------------------------------------------------------------------- the constructor prologue


def _families() -> dict[str, tuple[type, str]]:
    """``{agent class name: (class, its first preset)}`` over every built-in preset."""
    from tritonrl.agents import dqn, ppo, sac

    out: dict[str, tuple[type, str]] = {}
    for p in (*dqn.PRESETS, *ppo.PRESETS, *sac.PRESETS):
        out.setdefault(p.agent.__name__, (p.agent, p.name))
    return out


def test_every_agent_family_is_checked_for_its_default_config() -> None:
    # a new agent class joins the parametrisation below (one default per agent: issue 42, item 7)
    assert sorted(_families()) == ["DQNAgent", "PPOAgent", "SACAgent", "TD3Agent"]


@pytest.mark.parametrize("cls_name", ["DQNAgent", "PPOAgent", "SACAgent", "TD3Agent"])
def test_an_agent_built_without_a_config_runs_its_first_preset(cls_name: str) -> None:
    from tritonrl.cli.registry import get_agent

    agent_cls, name = _families()[cls_name]
    assert name == {"DQNAgent": "dqn", "PPOAgent": "ppo", "SACAgent": "sac", "TD3Agent": "td3"}[cls_name]
    continuous = cls_name in ("SACAgent", "TD3Agent")
    agent = agent_cls(BOUNDED, BOUNDED if continuous else gym.spaces.Discrete(2))
    assert agent.config == get_agent(name).config
    assert (agent.num_envs, agent.seed, agent.env_steps, agent.updates) == (1, 0, 0, 0)


@pytest.mark.parametrize("kind", ["dqn", "ppo"])
@pytest.mark.parametrize("num_envs", [0, -1, True, 2.0])
def test_both_families_refuse_num_envs_alike(kind: str, num_envs) -> None:
    with pytest.raises(ValueError, match=rf"^num_envs must be a positive int, got {num_envs!r}$"):
        MAKERS[kind](num_envs=num_envs)


@pytest.mark.parametrize("kind", ["dqn", "ppo"])
def test_both_families_refuse_another_config_class_alike(kind: str) -> None:
    from tritonrl.agents.dqn import DQNAgent, DQNConfig
    from tritonrl.agents.ppo import PPOAgent, PPOConfig

    agent_cls, other, own = {
        "dqn": (DQNAgent, PPOConfig, "DQNConfig"),
        "ppo": (PPOAgent, DQNConfig, "PPOConfig"),
    }[kind]
    with pytest.raises(TypeError, match=f"config must be a {own}, got {other.__name__}"):
        agent_cls(BOUNDED, gym.spaces.Discrete(2), other())


# ----------------------------------------------------------------------------- the registry


def test_the_registry_holds_exactly_the_agent_modules_presets() -> None:
    from tritonrl.agents import dqn, ppo, sac
    from tritonrl.cli.registry import get_agent, list_agents
    from tritonrl.toolkit.training import offpolicy, onpolicy

    names = [p.name for p in (*dqn.PRESETS, *ppo.PRESETS, *sac.PRESETS)]
    assert len(set(names)) == len(names) == 24
    assert [p.name for p in list_agents()] == sorted(names)
    for p in (*dqn.PRESETS, *ppo.PRESETS, *sac.PRESETS):
        assert get_agent(p.name) is p
    agent = get_agent("rainbow").build(BOUNDED, gym.spaces.Discrete(2), num_envs=2, overrides=DQN_SMALL)
    assert isinstance(get_agent("rainbow").schedule(agent), offpolicy.OffPolicySchedule)
    assert agent.config.tags == ("rainbow",) and agent.config.prioritized
    ppo_agent = get_agent("ppo").build(
        BOUNDED,
        gym.spaces.Discrete(2),
        num_envs=2,
        total_steps=640,
        overrides={"num_steps": "4", "hidden": "8"},
    )
    # the steps_field (total_steps) follows --steps
    assert ppo_agent.config.total_steps == 640 and ppo_agent.config.hidden == (8,)
    assert isinstance(get_agent("ppo").schedule(ppo_agent), onpolicy.OnPolicySchedule)
    with pytest.raises(ValueError, match="unknown agent 'nope'; known agents: c51, double, dqn"):
        get_agent("nope")


def test_a_preset_of_your_own_registers_and_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    from tritonrl.cli import registry
    from tritonrl.cli.registry import get_agent, register_agent
    from tritonrl.toolkit.preset import Preset, find_preset
    from tritonrl.toolkit.training.onpolicy import schedule_for

    @dataclasses.dataclass(frozen=True)
    class ToyConfig(Config):
        width: int = 4
        total_steps: int = 10
        num_steps: int = 2

    class Toy:
        def __init__(self, obs_space, act_space, config, *, num_envs, device, seed):
            self.config, self.num_envs, self.seed = config, num_envs, seed

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._registry()))
    toy = Preset(
        "toy",
        "a toy",
        ToyConfig(),
        agent=Toy,
        kind="onpolicy",
        schedule=schedule_for,
        default_steps=500,
        steps_field="total_steps",
    )
    register_agent(toy)
    assert get_agent("toy") is toy and "toy" in [p.name for p in registry.list_agents()]
    built = get_agent("toy").build(
        None,
        None,
        num_envs=3,
        seed=2,
        total_steps=99,
        overrides={"width": "8"},
        config={"width": 1, "total_steps": 1, "num_steps": 5},
    )
    assert built.config == ToyConfig(width=8, total_steps=99, num_steps=5) and built.num_envs == 3
    assert find_preset([toy], "toy") is toy
    with pytest.raises(ValueError, match="unknown Toy preset 'toi'; choose one of toy"):
        find_preset([toy], "toi", "Toy")
    with pytest.raises(TypeError, match="register_agent takes a Preset, got dict"):
        register_agent({"name": "x"})  # type: ignore[arg-type]
    bad = [
        ({"kind": "sideways"}, ValueError, "kind must be one of"),
        ({"name": ""}, ValueError, "preset name must be a non-empty string"),
        ({"steps_field": "steps"}, ValueError, "steps_field='steps' is not a field of ToyConfig"),
        ({"default_num_envs": 0}, ValueError, "default_num_envs must be an int >= 1, got 0"),
        ({"agent": 3}, TypeError, "agent must be callable"),
        ({"config": ToyConfig}, TypeError, "config must be a config dataclass instance"),
    ]
    for change, exc, words in bad:
        with pytest.raises(exc, match=words):
            dataclasses.replace(toy, **change)


def test_toolkit_imports_no_agent_and_the_registry_imports_them_lazily() -> None:
    importers = sorted(
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "toolkit").rglob("*.py")
        if "tritonrl.agents"
        in "".join(
            line for line in p.read_text().splitlines(True) if line.lstrip().startswith(("import", "from"))
        )
    )
    assert importers == []  # the command line (tritonrl/cli/) builds the presets, above toolkit
    code = (
        "import sys, tritonrl.toolkit, tritonrl.cli.registry, tritonrl.cli.train; "
        "print(sorted(m for m in sys.modules if m.startswith('tritonrl.agents')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.strip() == "[]", out.stderr
