"""Partial loads (issue 15, item 8): a damaged agent state is refused before anything changes.

For each agent kind, every key path of a valid state (nested dicts, lists and tuples, down to
each tensor and scalar) is deleted, and separately replaced with a value of the wrong type; each
damaged state must raise ``CheckpointError`` with a one-line message, and the agent it was loaded
into must be bit-identical afterwards (every tensor ``torch.equal``, every scalar equal). The
schedules and the vector env's state get the same treatment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch

gym = pytest.importorskip("gymnasium")

from tritonrl.toolkit.checkpoint import CheckpointError  # noqa: E402

Path = tuple[Any, ...]
_DELETE = object()


def _paths(tree: Any, prefix: Path = ()) -> Iterator[Path]:
    """Every key path of a nested dict / list / tuple, containers before their contents."""
    if isinstance(tree, dict):
        items = list(tree.items())
    elif isinstance(tree, (list, tuple)):
        items = list(enumerate(tree))
    else:
        return
    for key, value in items:
        yield (*prefix, key)
        yield from _paths(value, (*prefix, key))


def _edit(tree: Any, path: Path, new: Any) -> Any:
    """A copy of ``tree`` (containers along ``path`` copied, leaves shared) with the entry at
    ``path`` replaced by ``new``, or deleted when ``new`` is ``_DELETE``."""
    key, rest = path[0], path[1:]
    if isinstance(tree, dict):
        out: Any = dict(tree)
    else:
        out = list(tree)
    if rest:
        out[key] = _edit(tree[key], rest, new)
    elif new is _DELETE:
        del out[key]
    else:
        out[key] = new
    return tuple(out) if isinstance(tree, tuple) else out


def _get(tree: Any, path: Path) -> Any:
    for key in path:
        tree = tree[key]
    return tree


def _wrong_types(value: Any) -> list[Any]:
    """Values of another type than ``value`` (an int also gets a float)."""
    if isinstance(value, str):
        return [7]
    if isinstance(value, bool) or value is None or isinstance(value, (float, torch.Tensor, np.ndarray)):
        return ["x"]
    if isinstance(value, int):
        return ["x", 2.5]
    return [7]  # dicts, lists, tuples


def _clone(tree: Any) -> Any:
    if isinstance(tree, torch.Tensor):
        return tree.detach().clone()
    if isinstance(tree, np.ndarray):
        return tree.copy()
    if isinstance(tree, dict):
        return {k: _clone(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_clone(v) for v in tree)
    return tree


def _assert_identical(a: Any, b: Any, where: str) -> None:
    assert type(a) is type(b) or isinstance(a, dict) and isinstance(b, dict), where
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), where
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            _assert_identical(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_identical(x, y, f"{where}.{i}")
    else:
        assert a == b, where


def _damage_table(valid: dict, skip: Callable[[Path], bool] = lambda p: False) -> list[tuple[str, dict]]:
    cases = []
    for path in _paths(valid):
        name = ".".join(map(str, path))
        if not skip(path):
            cases.append((f"delete {name}", _edit(valid, path, _DELETE)))
        for wrong in _wrong_types(_get(valid, path)):
            cases.append((f"{name} = {wrong!r}", _edit(valid, path, wrong)))
    return cases


def _check_every_damage_refused(target: Any, valid: dict, skip: Callable[[Path], bool]) -> int:
    before = _clone(target.state_dict())
    cases = _damage_table(valid, skip)
    for name, damaged in cases:
        with pytest.raises(CheckpointError) as info:
            target.load_state_dict(damaged)
        msg = str(info.value)
        assert "\n" not in msg and len(msg) < 400, (name, msg)
        _assert_identical(before, target.state_dict(), f"after '{name}': state")
    # the undamaged state loads and changes the agent: the comparisons above could fail
    target.load_state_dict(valid)
    with pytest.raises(AssertionError):
        _assert_identical(before, target.state_dict(), "state")
    return len(cases)


def _optional(path: Path) -> bool:
    """Deletions that leave a valid state: an entry of ``tags`` (free-form labels, a resumable
    field: a shorter tuple is still a valid config) and a whole resumable or backfilled config
    field (a checkpoint older than the field reads back with its default)."""
    from tritonrl.agents.dqn import DQNConfig
    from tritonrl.agents.ppo import PPOConfig
    from tritonrl.toolkit.config import backfilled_fields, resumable_fields

    if len(path) == 3 and path[:2] == ("config", "tags"):
        return True
    optional = {
        *resumable_fields(DQNConfig),
        *resumable_fields(PPOConfig),
        *backfilled_fields(DQNConfig),
        *backfilled_fields(PPOConfig),
    }
    return len(path) == 2 and path[0] == "config" and path[1] in optional


# ----------------------------------------------------------------------------- DQN family

DQN_SMALL = {
    "torso_width": 16,
    "torso_depth": 1,
    "buffer_size": 64,
    "batch_size": 8,
    "learning_starts": 0,
    "atoms": 11,
    "target_update_every": 2,
}


def _dqn(name: str, seed: int, steps: int, **kw: Any):
    from tritonrl.agents.dqn import DQNAgent, preset

    obs_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    agent = DQNAgent(
        obs_space, gym.spaces.Discrete(2), preset(name, **{**DQN_SMALL, **kw}), num_envs=2, seed=seed
    )
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((2, 3)).astype(np.float32)
    for t in range(steps):
        action = agent.act(torch.as_tensor(obs))
        nxt = rng.standard_normal((2, 3)).astype(np.float32)
        done = np.array([t % 5 == 4, False])
        agent.observe(obs, action, rng.standard_normal(2).astype(np.float32), nxt, done, np.zeros(2, bool))
        obs = nxt
    for _ in range(3):
        agent.update()
    return agent


@pytest.mark.parametrize(
    "name, kw", [("dqn", {}), ("rainbow", {}), ("dqn", {"icm": True})], ids=["dqn", "rainbow-per", "dqn-icm"]
)
def test_dqn_damaged_state_is_refused_untouched(name: str, kw: dict) -> None:
    source = _dqn(name, seed=1, steps=13, **kw)
    target = _dqn(name, seed=2, steps=9, **kw)
    valid = _clone(source.state_dict())
    n = _check_every_damage_refused(target, valid, _optional)
    assert n > 150  # the walk really covered the state


# ----------------------------------------------------------------------------- PPO

PPO_SMALL = {
    "num_steps": 8,
    "seq_len": 4,
    "num_minibatches": 2,
    "update_epochs": 1,
    "hidden": (8,),
    "memory_size": 8,
}


def _ppo(name: str, seed: int, steps: int):
    from tritonrl.agents.ppo import PPOAgent, preset

    obs_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    agent = PPOAgent(obs_space, gym.spaces.Discrete(2), preset(name, **PPO_SMALL), num_envs=2, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    obs = torch.randn(2, 3, generator=gen)
    for t in range(steps):
        action = agent.act(obs)
        nxt = torch.randn(2, 3, generator=gen)
        agent.observe(
            obs,
            action,
            torch.randn(2, generator=gen),
            nxt,
            torch.tensor([t % 5 == 4, False]),
            torch.zeros(2, dtype=torch.bool),
        )
        obs = nxt
        if agent.buffer.full:
            agent.update()
    return agent


@pytest.mark.parametrize("name", ["ppo", "ppo-lstm"])
def test_ppo_damaged_state_is_refused_untouched(name: str) -> None:
    source = _ppo(name, seed=1, steps=11)
    target = _ppo(name, seed=2, steps=10)
    valid = _clone(source.state_dict())
    n = _check_every_damage_refused(target, valid, _optional)
    assert n > 100


# ----------------------------------------------------------------------------- schedules, env


@pytest.mark.parametrize("kind", ["offpolicy", "onpolicy"])
def test_damaged_schedule_state_is_refused_untouched(kind: str) -> None:
    from tritonrl.toolkit.training.offpolicy import OffPolicySchedule
    from tritonrl.toolkit.training.onpolicy import OnPolicySchedule

    make = (lambda: OffPolicySchedule(100, 4, 2)) if kind == "offpolicy" else (lambda: OnPolicySchedule(8))
    source, target = make(), make()
    if kind == "offpolicy":
        source.last_step, source.rounds, source.updates = 120, 5, 10
        target.last_step = 7
    else:
        source.vector_steps, source.updates = 19, 2
        target.vector_steps = 3
    valid = source.state_dict()
    before = target.state_dict()
    for name, damaged in _damage_table(valid):
        with pytest.raises(ValueError):
            target.load_state_dict(damaged)
        assert target.state_dict() == before, name
    target.load_state_dict(valid)
    assert target.state_dict() == valid


def test_damaged_env_state_is_refused_untouched() -> None:
    from tritonrl.toolkit.envs.vector import make_vec_env

    source, target = make_vec_env("CartPole-v1", 2, seed=1), make_vec_env("CartPole-v1", 2, seed=5)
    try:
        for env in (source, target):
            env.reset()
            for _ in range(3):
                env.step(torch.ones(2, dtype=torch.int64))
        valid = source.get_state()
        before = _clone(target.get_state())

        count = 0
        for path in _paths(valid):
            # inside a wrapper layer (envs.i.j.name) a value is a plain attribute of any kind: only
            # the structure above it and the generator states in it can be checked
            if path[0] == "envs" and len(path) >= 4 and (len(path) < 5 or path[4] != "__generator__"):
                continue
            for new in (_DELETE, *_wrong_types(_get(valid, path))):
                with pytest.raises(ValueError):
                    target.set_state(_edit(valid, path, new))
                _assert_identical(before, target.get_state(), f"after {path} -> {new!r}")
                count += 1
        assert count > 20
        target.set_state(valid)
        _assert_identical(_clone(valid), target.get_state(), "restored")
    finally:
        source.close()
        target.close()
