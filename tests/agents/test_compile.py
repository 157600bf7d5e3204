"""``compile = "default" | "reduce-overhead"``: compiled agents learn what eager agents learn and
resume exactly (:mod:`tritonrl.toolkit.compile`).

Compilation is slow on a CPU (Dynamo, AOTAutograd and Inductor's C++ build: about 10-25 s per
agent the first time, a second or two from Inductor's cache after that), so the tests here are few
and small. Tolerance of compiled against eager (f32): ``atol=1e-5, rtol=1e-5`` on parameters,
``atol=1e-5, rtol=1e-4`` on metrics. The two runs make the same operations on the same numbers
except for f32 rounding: Inductor fuses and reorders elementwise ops and reductions, and the
compiled optimizer step runs Adam as foreach ops where eager runs the fused Adam kernel. Measured
after 4-5 updates (lr 2.3e-3 DQN, 1e-3 PPO): parameters within 3e-7 of eager, metrics within 3e-5
relative except where a value is near 0 (PPO's approx_kl ~ 1e-4: absolute terms then). The
bounds leave a 30x margin; a wrong graph (a missed term, stale noise, a step skipped) moves
parameters by ~lr = 1e-3.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch._dynamo.utils import counters

gym = pytest.importorskip("gymnasium")

from tritonrl.agents.dqn import DQNAgent, DQNConfig  # noqa: E402  (imports gymnasium)
from tritonrl.agents.dqn import preset as dqn_preset  # noqa: E402
from tritonrl.agents.ppo import PPOAgent, PPOConfig  # noqa: E402
from tritonrl.agents.ppo import preset as ppo_preset  # noqa: E402
from tritonrl.toolkit.compile import Compiled  # noqa: E402
from tritonrl.toolkit.config import apply_overrides  # noqa: E402

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
DISCRETE = gym.spaces.Discrete(3)
E = 2
DQN_SMALL = {"torso_width": 32, "batch_size": 16, "buffer_size": 256, "atoms": 11, "target_update_every": 2}
PPO_SMALL = {
    "num_steps": 16,
    "num_minibatches": 2,
    "update_epochs": 2,
    "hidden": (32,),
    "total_steps": 10_000,
}
PARAMS = {"atol": 1e-5, "rtol": 1e-5}
METRICS = {"atol": 1e-5, "rtol": 1e-4}


def _dqn(name: str, mode: str, **kw: Any) -> DQNAgent:
    cfg = dqn_preset(name, **{**DQN_SMALL, **kw}, compile=mode)
    return DQNAgent(OBS, DISCRETE, cfg, num_envs=E, seed=0)


def _ppo(mode: str) -> PPOAgent:
    cfg = dataclasses.replace(ppo_preset("ppo"), **PPO_SMALL, compile=mode)
    return PPOAgent(OBS, DISCRETE, cfg, num_envs=E, seed=0)


def _observe(agents: list[Any], g: torch.Generator, steps: int) -> None:
    """The same random transitions into every agent (actions from the first agent)."""
    for _ in range(steps):
        obs = torch.randn(E, 4, generator=g)
        action = agents[0].act(obs)
        reward, next_obs = torch.randn(E, generator=g), torch.randn(E, 4, generator=g)
        done = torch.rand(E, generator=g) < 0.1
        for i, agent in enumerate(agents):
            if i:  # PPO keeps what act() computed for observe(): every agent acts on the obs
                agent.act(obs)
            agent.observe(obs, action.clone(), reward, next_obs, done, torch.zeros(E, dtype=torch.bool))


def _params(agent: Any) -> list[torch.Tensor]:
    net = agent.online if isinstance(agent, DQNAgent) else agent.net
    return [p.detach().clone() for p in net.parameters()]


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], **tol: float) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], msg=k, **tol)


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.parametrize("name", ["dqn", "rainbow", "dqn-no-clip"])
def test_compiled_dqn_updates_match_eager(name: str) -> None:
    # dqn-no-clip: max_grad_norm=None, the step without a norm (no losses/grad_norm metric)
    kw: dict[str, Any] = {"max_grad_norm": None} if name == "dqn-no-clip" else {}
    name = name.removesuffix("-no-clip")
    eager, compiled = _dqn(name, "none", **kw), _dqn(name, "default", **kw)
    _observe([eager, compiled], torch.Generator().manual_seed(1), 20)
    for _ in range(4):
        _close(eager.update(), compiled.update(), **METRICS)
        for a, b in zip(_params(eager), _params(compiled), strict=True):
            torch.testing.assert_close(a, b, **PARAMS)
    obs = torch.randn(5, 4)  # a new batch size: a new acting graph (static shapes)
    torch.testing.assert_close(eager.q_values(obs), compiled.q_values(obs), **METRICS)
    # the acting forward is compiled on CUDA only; compile it here too, to test that graph
    assert not compiled._act_q.compiled
    compiled._act_q = Compiled(compiled._online_q, "default", compiled.device)
    for explore in (True, False):
        torch.testing.assert_close(
            eager.q_values(obs, explore=explore), compiled.q_values(obs, explore=explore), **METRICS
        )
    if name == "rainbow":  # the priorities written from the compiled loss
        torch.testing.assert_close(eager.buffer.priorities(), compiled.buffer.priorities(), **METRICS)


def test_compiled_ppo_updates_match_eager_and_reduce_overhead_runs_on_cpu() -> None:
    # On a CPU "reduce-overhead" is "default": Inductor skips CUDA graphs for CPU graphs.
    skips = counters["inductor"]["cudagraph_skips"]
    eager, compiled = _ppo("none"), _ppo("reduce-overhead")
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        _observe([eager, compiled], g, PPO_SMALL["num_steps"])
        _close(eager.update(), compiled.update(), **METRICS)
        for a, b in zip(_params(eager), _params(compiled), strict=True):
            torch.testing.assert_close(a, b, **PARAMS)
    assert counters["inductor"]["cudagraph_skips"] > skips


@pytest.mark.parametrize("name", ["ppo-lstm", "ppo-gru"])
def test_compiled_recurrent_ppo_matches_eager(name: str) -> None:
    # LSTM/GRU: the split recurrence runs eagerly (its layout's size changes with the data) and
    # hands its features to the compiled loss; updates with new layouts must not recompile the
    # loss without end (fullgraph: a graph break or the recompile limit would raise).
    small = {**PPO_SMALL, "seq_len": 8, "memory_size": 16, "hidden": (16,)}
    eager, compiled = (
        PPOAgent(OBS, DISCRETE, dataclasses.replace(ppo_preset(name), **small, compile=m), num_envs=E, seed=0)
        for m in ("none", "default")
    )
    assert compiled._learn.fullgraph
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        _observe([eager, compiled], g, PPO_SMALL["num_steps"])
        _close(eager.update(), compiled.update(), **METRICS)
        for a, b in zip(_params(eager), _params(compiled), strict=True):
            torch.testing.assert_close(a, b, **PARAMS)


@pytest.mark.parametrize("kind", ["rainbow", "ppo"])
def test_compiled_agent_resumes_exactly(kind: str, tmp_path: Path) -> None:
    # Checkpoint a compiled agent, load it into a fresh process-like agent (DQNAgent.load builds it
    # from the saved config, compile mode included); both then see the same steps and must make
    # the same updates, bit for bit.
    make = (lambda: _dqn("rainbow", "default")) if kind == "rainbow" else (lambda: _ppo("default"))
    steps = 20 if kind == "rainbow" else PPO_SMALL["num_steps"]
    first = make()
    g = torch.Generator().manual_seed(1)
    _observe([first], g, steps)
    first.update()
    first.save(tmp_path / "agent.safetensors")
    resumed = type(first).load(tmp_path / "agent.safetensors")
    assert resumed.config.compile == "default"
    for _ in range(2):
        _observe([first, resumed], g, steps)
        _same(first.update(), resumed.update())
    for a, b in zip(_params(first), _params(resumed), strict=True):
        assert torch.equal(a, b)
    obs = torch.randn(E, 4)
    assert torch.equal(first.act(obs, explore=False), resumed.act(obs, explore=False))


def test_a_resume_may_switch_compile_on() -> None:
    # compile is resumable: an eager checkpoint loads into a compiled agent, which goes on as the
    # eager one does (to f32 rounding).
    eager = _dqn("dqn", "none")
    g = torch.Generator().manual_seed(1)
    _observe([eager], g, 20)
    eager.update()
    compiled = _dqn("dqn", "default")
    compiled.load_state_dict(eager.state_dict())
    assert compiled.config.compile == "default"
    _observe([eager, compiled], g, 4)
    _close(eager.update(), compiled.update(), **METRICS)
    for a, b in zip(_params(eager), _params(compiled), strict=True):
        torch.testing.assert_close(a, b, **PARAMS)


@pytest.mark.parametrize("cls", [DQNConfig, PPOConfig])
def test_compile_mode_is_checked(cls: type) -> None:
    with pytest.raises(
        ValueError, match=r"compile='fast' is not one of \('none', 'default', 'reduce-overhead'\)"
    ):
        cls(compile="fast")
    assert apply_overrides(cls(), {"compile": "reduce-overhead"}).compile == "reduce-overhead"
    assert cls().compile == "none"
