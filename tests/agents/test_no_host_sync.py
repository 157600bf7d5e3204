"""No host synchronisation in a learner step or an acting step (CONTRIBUTING.md, "No host syncs in a step").

``update()`` and ``act()`` of every agent run under :class:`HostReads`, which fails on every read
of a tensor's value by the host: ``aten._local_scalar_dense`` (what ``.item()``, ``bool(t)``,
``float(t)`` and ``int(t)`` dispatch to) through a ``TorchDispatchMode``, and, since a CPU
tensor's ``.tolist()``, ``.numpy()``, ``__array__`` and ``.cpu()`` never reach the dispatcher,
those methods patched on ``torch.Tensor``, together with ``.to("cpu")``. On an accelerator each of
these is a device-to-host copy that waits for the device.

What a CPU run can and cannot prove:

- Inputs are tensors on the agent's device, and the agents run their accelerator defaults,
  forced on the CPU: ``inputs.mode = "deferred"`` (NaN/inf and action checks fold into a
  device-side flag instead of being read at once) and, for prioritized replay,
  ``check_priorities = False`` (rejected priority batches are counted on the device). On a CPU
  both default to checking at once, which reads host memory and costs no sync there. Host inputs
  (numpy arrays) are a documented host path and not covered.
- ``.to(d)`` with a ``torch.device`` object ``d`` cannot be told from a move to the agent's own
  device when both are the CPU; the code under test writes host moves as ``.cpu()`` or
  ``.to("cpu")``, which are caught.
- The replay buffer's CPU fast path reads and writes its storage through numpy views (host
  memory, where the storage lives on a CPU; a CUDA buffer has none): the test switches the views
  off, so that the gather runs the ``index_select`` a CUDA buffer runs.
- The DQN agent's CPU acting path reads its exploration draws on the host (a numpy select
  between the random and the greedy actions, the greedy forward skipped when every environment
  explores); a CUDA agent never takes it (chosen once from the device): the test switches it off,
  so that acting runs the tensor ``where`` a CUDA agent runs.
- The CPU implementations of ``per_sample`` and ``per_update`` (the priority tree of
  prioritized replay) work on numpy views of the tree, host memory by design; they run with the
  guard lifted (see :meth:`HostReads.lifted`). On CUDA their Triton launchers read no tensor
  value (``kernels/sumtree/fused.py``: shapes and Python scalars only).
- ``target_kl`` (PPO's early stop) reads the KL once per epoch by design; it is off by default
  and stays off here.
- The LSTM and GRU policies split their training sequences at episode starts into a padded
  layout whose size the host must know: ``PPOAgent._minibatch_layouts`` reads the layouts of all
  the minibatches of an update in one transfer, the documented read of their updates. The test
  lets exactly that call read (once per update) and nothing else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

gym = pytest.importorskip("gymnasium")

from helpers import HostReadError, HostReads  # noqa: E402  (tests/helpers.py: shared with other tests)
from tritonrl.agents.dqn import DQNAgent  # noqa: E402  (imports gymnasium)
from tritonrl.agents.dqn import preset as dqn_preset  # noqa: E402
from tritonrl.agents.ppo import PPOAgent  # noqa: E402
from tritonrl.agents.ppo import preset as ppo_preset  # noqa: E402
from tritonrl.agents.sac import SACAgent, TD3Agent  # noqa: E402
from tritonrl.agents.sac import preset as sac_preset  # noqa: E402
from tritonrl.toolkit.logger import MetricLogger  # noqa: E402
from tritonrl.toolkit.replay import ReplayBuffer, prioritized  # noqa: E402

# ----------------------------------------------------------------------------- the guard can fail


SYNCS: dict[str, Callable[[torch.Tensor], object]] = {
    "item": lambda t: t.sum().item(),
    "bool": lambda t: bool(t.sum() > 0),
    "float": lambda t: float(t.sum()),
    "int": lambda t: int(t.argmax()),
    "tolist": lambda t: t.tolist(),
    "numpy": lambda t: t.numpy(),
    "np.asarray": lambda t: np.asarray(t),
    "cpu": lambda t: t.cpu(),
    "to('cpu')": lambda t: t.to("cpu"),
    "to(device='cpu')": lambda t: t.to(device="cpu"),
}


@pytest.mark.parametrize("name", list(SYNCS))
def test_the_guard_catches_each_kind_of_host_read(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    t = torch.arange(6.0).reshape(2, 3)
    with pytest.raises(HostReadError), HostReads():
        SYNCS[name](t)
    SYNCS[name](t)  # outside the guard: allowed again


def test_the_guard_lets_device_work_through_and_can_be_lifted(monkeypatch: pytest.MonkeyPatch) -> None:
    t = torch.randn(4, 3)
    with HostReads() as guard:
        out = (t @ t.T).relu().sum(0).argmax()  # stays a tensor: no read
        flag = torch.isfinite(t).all()
        with guard.lifted():
            assert t.sum().item() == pytest.approx(float(t.sum()))
        with pytest.raises(HostReadError):
            bool(flag)
    assert out.shape == ()


# ----------------------------------------------------------------------------- agents

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
DISCRETE = gym.spaces.Discrete(3)
BOX = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
E = 2
DQN_SMALL = {"torso_width": 16, "batch_size": 4, "buffer_size": 64, "atoms": 11, "quantiles": 8}
DQN_CASES: dict[str, tuple[str, dict[str, Any], gym.Space]] = {
    "dqn": ("dqn", {}, DISCRETE),
    "double": ("double", {}, DISCRETE),
    "dueling": ("dueling", {}, DISCRETE),
    "noisy": ("noisy", {}, DISCRETE),
    "c51": ("c51", {}, DISCRETE),
    "qrdqn": ("qrdqn", {}, DISCRETE),
    "rainbow": ("rainbow", {}, DISCRETE),
    "per": ("dqn", {"prioritized": True, "n_step": 3}, DISCRETE),
    "factored": ("double", {"dueling": True}, gym.spaces.MultiDiscrete([3, 2])),
    "icm": ("dqn", {"icm": True, "icm_embed": 8, "icm_hidden": 16}, DISCRETE),
    "resmlp-rmsnorm": ("dqn", {"torso": "resmlp", "torso_norm": "rmsnorm"}, DISCRETE),
}
PPO_TINY = {
    "num_steps": 8,
    "seq_len": 4,
    "num_minibatches": 2,
    "update_epochs": 2,
    "hidden": (8,),
    "memory_size": 16,
    "mamba_headdim": 8,
    "total_steps": 1000,
    "normalize_obs": True,
}
PPO_CASES: dict[str, tuple[str, dict[str, Any], gym.Space]] = {
    "discrete": ("ppo", {}, DISCRETE),
    "continuous": ("ppo-continuous", {"ent_coef": 0.01}, BOX),
    "squashed": ("ppo-continuous", {"squash": True, "ent_coef": 0.01}, BOX),
    "lstm": ("ppo-lstm", {}, DISCRETE),
    "lstm-box": ("ppo-lstm", {}, BOX),
    "gru": ("ppo-gru", {}, DISCRETE),
    "gru-box": ("ppo-gru", {}, BOX),
    "flow": ("ppo-flow", {"ent_coef": 0.01}, BOX),
    "mamba": ("ppo-mamba", {}, DISCRETE),
}


def _accelerator_defaults(agent: Any) -> None:
    """The defaults an agent has on an accelerator, forced on the CPU (see the module docstring)."""
    agent.inputs.mode = "deferred"
    assert not agent.inputs.check_at_update
    if getattr(agent.config, "prioritized", False):
        agent.buffer.check_priorities = False
    for buffer in (agent.buffer, getattr(agent, "icm_buffer", None)):
        if isinstance(buffer, ReplayBuffer):  # without its numpy views of CPU storage (see above)
            assert buffer._views is not None
            buffer._views = None
    if isinstance(agent, DQNAgent):  # the host exploration path of a CPU agent (see above)
        assert agent._host_explore == (not agent.factored)
        agent._host_explore = False


def _step(agent: Any, g: torch.Generator) -> None:
    obs = torch.randn(E, 4, generator=g)
    action = agent.act(obs)
    agent.observe(
        obs,
        action,
        torch.randn(E, generator=g),
        torch.randn(E, 4, generator=g),
        torch.rand(E, generator=g) < 0.2,
        torch.zeros(E, dtype=torch.bool),
    )


def _lift_host_kernels(guard: HostReads, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the sum-tree ops' CPU implementations (numpy views of host memory) with the guard lifted."""
    names = ("per_sample", "per_update", "per_sample_unchecked", "per_update_unchecked")
    assert all(hasattr(prioritized, n) for n in names)  # the buffer's calls: a renamed one fails here
    for name in names:
        original = getattr(prioritized, name)

        def lifted(*args: Any, _original: Callable[..., Any] = original, **kwargs: Any) -> Any:
            with guard.lifted():
                return _original(*args, **kwargs)

        monkeypatch.setattr(prioritized, name, lifted)


def _check_step(
    agent: Any, monkeypatch: pytest.MonkeyPatch, guard: HostReads | None = None
) -> dict[str, torch.Tensor]:
    obs = torch.randn(E, 4)
    guard = guard if guard is not None else HostReads()
    _lift_host_kernels(guard, monkeypatch)
    with guard:
        metrics = agent.update()
        agent.act(obs)
        agent.act(obs, explore=False)
    for name, value in metrics.items():
        assert isinstance(value, torch.Tensor) and value.device == agent.device, name
    return metrics


@pytest.mark.parametrize("case", list(DQN_CASES))
def test_dqn_update_and_act_read_nothing_on_the_host(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    name, extra, space = DQN_CASES[case]
    agent = DQNAgent(OBS, space, dqn_preset(name, **{**DQN_SMALL, **extra}), num_envs=E, seed=0)
    _accelerator_defaults(agent)
    g = torch.Generator().manual_seed(0)
    for _ in range(6):
        _step(agent, g)
    agent.update()  # one update outside the guard, then new inputs: flags pending again
    _step(agent, g)
    assert agent.inputs.pending
    metrics = _check_step(agent, monkeypatch)
    assert "losses/td_loss" in metrics and ("losses/icm_forward" in metrics) == (case == "icm")


@pytest.mark.parametrize("name", ["dqn-minatar", "rainbow-minatar"])
def test_dqn_on_pixels_updates_and_acts_without_host_reads(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The frame replay's sample (the stacks gathered by frame_stack_sample) and priority update,
    the conv torso's update and the uint8 acting path read nothing on the host. The sum tree's
    device-generic torch paths run in place of its numpy CPU paths (what a GPU runs; the torch
    update's validity flag is read with the guard lifted, as in tests/toolkit/test_frame_replay.py)."""
    from tritonrl.kernels.sumtree import cpu as sumtree_cpu

    space = gym.spaces.Box(0, 1, (4, 10, 10), np.uint8)
    cfg = dqn_preset(name, batch_size=4, buffer_size=64, learning_starts=0, atoms=11)
    agent = DQNAgent(space, DISCRETE, cfg, num_envs=E, seed=0)
    agent.inputs.mode = "deferred"
    agent._host_explore = False  # the tensor where of a CUDA agent (see the module docstring)
    if cfg.prioritized:
        agent.buffer.check_priorities = False
    g = torch.Generator().manual_seed(0)
    for t in range(12):
        obs = torch.randint(0, 2, (E, 4, 10, 10), dtype=torch.uint8, generator=g)
        nxt = torch.randint(0, 2, (E, 4, 10, 10), dtype=torch.uint8, generator=g)
        done = torch.full((E,), t % 5 == 4)
        agent.observe(
            obs, agent.act(obs), torch.rand(E, generator=g), nxt, done, torch.zeros(E, dtype=torch.bool)
        )
    guard = HostReads()
    torch_update = sumtree_cpu._per_update_torch

    def update(*args: Any) -> None:
        with guard.lifted():
            torch_update(*args)

    monkeypatch.setattr(sumtree_cpu, "_per_sample_cpu", sumtree_cpu._per_sample_torch)
    monkeypatch.setattr(sumtree_cpu, "_per_update_cpu", update)
    obs = torch.randint(0, 2, (E, 4, 10, 10), dtype=torch.uint8, generator=g)
    with guard:
        metrics = agent.update()
        agent.act(obs)
        agent.act(obs, explore=False)
    assert "losses/td_loss" in metrics and all(v.device == agent.device for v in metrics.values())


SAC_SMALL = {"hidden": (16,), "batch_size": 4, "buffer_size": 64, "learning_starts": 8}
SAC_CASES: dict[str, tuple[type, str, dict[str, Any], gym.Space]] = {
    "sac": (SACAgent, "sac", {}, BOX),
    "sac-fixed-alpha": (SACAgent, "sac", {"autotune": False}, BOX),
    "sac-2x3": (SACAgent, "sac", {}, gym.spaces.Box(-1.0, 3.0, (2, 3), np.float32)),
    "td3": (TD3Agent, "td3", {}, BOX),
}


@pytest.mark.parametrize("case", list(SAC_CASES))
def test_sac_and_td3_update_and_act_read_nothing_on_the_host(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cls, name, extra, space = SAC_CASES[case]
    agent = cls(OBS, space, sac_preset(name, **{**SAC_SMALL, **extra}), num_envs=E, seed=0)
    _accelerator_defaults(agent)
    g = torch.Generator().manual_seed(0)

    def step() -> None:  # _step with this action space
        obs = torch.randn(E, 4, generator=g)
        agent.observe(obs, agent.act(obs), torch.randn(E, generator=g), torch.randn(E, 4, generator=g),
                      torch.rand(E, generator=g) < 0.2, torch.zeros(E, dtype=torch.bool))  # fmt: skip

    for _ in range(6):
        step()
    agent.update()  # update 0 (with the actor) outside the guard; then one without, one with
    step()
    assert agent.inputs.pending and agent.env_steps > agent.config.learning_starts  # the policy acts
    metrics = _check_step(agent, monkeypatch)
    assert "losses/qf_loss" in metrics and "losses/actor_loss" not in metrics
    metrics = _check_step(agent, monkeypatch)
    assert "losses/actor_loss" in metrics


@pytest.mark.parametrize("case", list(PPO_CASES))
def test_ppo_update_and_act_read_nothing_on_the_host(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    name, extra, space = PPO_CASES[case]
    cfg = dataclasses.replace(ppo_preset(name), **{**PPO_TINY, **extra})
    agent = PPOAgent(OBS, space, cfg, num_envs=E, seed=0)
    _accelerator_defaults(agent)
    g = torch.Generator().manual_seed(0)
    for _ in range(cfg.num_steps):
        _step(agent, g)
    assert agent.inputs.pending
    splits = cfg.policy in ("lstm", "gru")
    guard, reads = HostReads(), []
    if splits:  # the documented read: the layouts of the update's minibatches, in one call
        original = PPOAgent._minibatch_layouts

        def layouts(*args: Any) -> list[list[tuple[int, int]]]:
            reads.append(args)
            with guard.lifted():
                return original(*args)

        monkeypatch.setattr(PPOAgent, "_minibatch_layouts", staticmethod(layouts))
    metrics = _check_step(agent, monkeypatch, guard)
    assert len(reads) == (1 if splits else 0)
    assert {"losses/policy_loss", "losses/grad_norm", "charts/learning_rate"} <= set(metrics)


def test_ppo_on_pixels_updates_and_acts_without_host_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shared conv torso's update and the uint8 acting path (the bytes' dtype checked as
    metadata, converted and scaled on the device) read nothing on the host."""
    space = gym.spaces.Box(0, 1, (4, 10, 10), np.uint8)
    cfg = ppo_preset("ppo-atari", torso="minatar", num_steps=8, num_minibatches=2, update_epochs=2)
    agent = PPOAgent(space, DISCRETE, cfg, num_envs=E, seed=0)
    _accelerator_defaults(agent)
    g = torch.Generator().manual_seed(0)
    for t in range(cfg.num_steps):
        obs = torch.randint(0, 2, (E, 4, 10, 10), dtype=torch.uint8, generator=g)
        nxt = torch.randint(0, 2, (E, 4, 10, 10), dtype=torch.uint8, generator=g)
        done = torch.full((E,), t % 5 == 4)
        agent.observe(
            obs, agent.act(obs), torch.rand(E, generator=g), nxt, done, torch.zeros(E, dtype=torch.bool)
        )
    obs = torch.randint(0, 2, (E, 4, 10, 10), dtype=torch.uint8, generator=g)
    with HostReads():
        metrics = agent.update()
        agent.act(obs)
        agent.act(obs, explore=False)
    assert "losses/policy_loss" in metrics and all(v.device == agent.device for v in metrics.values())


@pytest.mark.parametrize("name", ["ppo-lstm", "ppo-gru"])
def test_ppo_recurrent_layout_is_the_documented_host_read(name: str) -> None:
    # Without the lifted layouts call, the update of a splitting policy reads exactly there.
    cfg = dataclasses.replace(ppo_preset(name), **PPO_TINY)
    agent = PPOAgent(OBS, DISCRETE, cfg, num_envs=E, seed=0)
    _accelerator_defaults(agent)
    g = torch.Generator().manual_seed(0)
    for _ in range(cfg.num_steps):
        _step(agent, g)
    with pytest.raises(HostReadError, match="tolist"), HostReads():
        agent.update()


def test_ppo_target_kl_is_the_documented_host_read(monkeypatch: pytest.MonkeyPatch) -> None:
    # The early stop needs the KL's value on the host: one read per epoch, only with target_kl.
    cfg = dataclasses.replace(ppo_preset("ppo"), **PPO_TINY, target_kl=0.5)
    agent = PPOAgent(OBS, DISCRETE, cfg, num_envs=E, seed=0)
    _accelerator_defaults(agent)
    g = torch.Generator().manual_seed(0)
    for _ in range(cfg.num_steps):
        _step(agent, g)
    with pytest.raises(HostReadError, match="_local_scalar_dense"), HostReads():
        agent.update()


def test_metrics_stay_on_the_device_until_the_log_interval(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The loop's logger keeps running sums as tensors (log reads nothing); flush is the one read.
    logger = MetricLogger(tmp_path, tensorboard=False)
    metrics = {"losses/td_loss": torch.tensor(0.5), "values/q": torch.tensor(2.0)}
    with HostReads():
        for step in range(3):
            logger.log(step, metrics)
    with pytest.raises(HostReadError), HostReads():
        logger.flush(3)
    assert logger.flush(3) == {"losses/td_loss": 0.5, "values/q": 2.0}
