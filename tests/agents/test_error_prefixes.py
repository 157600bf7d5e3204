"""Every refusal of a bad argument of a public agent method starts with ``<AgentClass>.<method>: ``
(issue 42, item 7): ``DQNAgent.act: obs has shape ...``, whichever family and whichever check
(shapes, dtypes, values, image bytes, the action ``act`` sampled)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

gym = pytest.importorskip("gymnasium")

from tritonrl.agents.dqn import DQNAgent  # noqa: E402  (imports gymnasium)
from tritonrl.agents.dqn import preset as dqn_preset  # noqa: E402
from tritonrl.agents.ppo import PPOAgent  # noqa: E402
from tritonrl.agents.ppo import preset as ppo_preset  # noqa: E402
from tritonrl.agents.sac import SACAgent, TD3Agent  # noqa: E402
from tritonrl.agents.sac import preset as sac_preset  # noqa: E402

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
BOX = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
PIXELS = gym.spaces.Box(0, 1, (4, 10, 10), np.uint8)
E = 2


def _make(family: str) -> Any:
    if family == "dqn":
        cfg = dqn_preset("dqn", torso_width=8, buffer_size=32, batch_size=4, learning_starts=0)
        return DQNAgent(OBS, gym.spaces.Discrete(3), cfg, num_envs=E)
    if family == "dqn-pixels":
        cfg = dqn_preset("dqn-minatar", buffer_size=32, batch_size=4, learning_starts=0)
        return DQNAgent(PIXELS, gym.spaces.Discrete(3), cfg, num_envs=E)
    if family == "ppo":
        return PPOAgent(OBS, gym.spaces.Discrete(3), ppo_preset("ppo", num_steps=4, hidden=(8,)), num_envs=E)
    if family == "ppo-pixels":
        return PPOAgent(PIXELS, gym.spaces.Discrete(3), ppo_preset("ppo-minatar", num_steps=4), num_envs=E)
    cls = {"sac": SACAgent, "td3": TD3Agent}[family]
    return cls(OBS, BOX, sac_preset(family, hidden=(8,), buffer_size=32, batch_size=4), num_envs=E)


def _obs(agent: Any, rows: int = E, bad: str = "") -> Any:
    """Observations for ``agent``: ``bad`` = ``"shape"`` (a wrong last dim), ``"nan"``, ``"float"``
    (image observations as floats)."""
    shape = tuple(agent.obs_shape)
    if bad == "shape":
        shape = (*shape[:-1], shape[-1] + 1)
    if getattr(agent, "pixel_scale", None) is not None and bad != "float":
        return torch.zeros((rows, *shape), dtype=torch.uint8)
    x = torch.zeros((rows, *shape))
    if bad == "nan":
        x[-1, 0] = float("nan")
    return x


def _step(agent: Any, **change: Any) -> dict[str, Any]:
    obs = _obs(agent)
    action = agent.act(obs)
    step = {
        "obs": obs,
        "action": action,
        "reward": torch.zeros(E),
        "next_obs": _obs(agent),
        "terminated": torch.zeros(E, dtype=torch.bool),
        "truncated": torch.zeros(E, dtype=torch.bool),
    }
    for k, v in change.items():
        step[k] = v(step) if callable(v) else v
    return step


def _observe(agent: Any, **change: Any) -> None:
    agent.observe(*_step(agent, **change).values())


def _outside(agent: Any) -> torch.Tensor:
    space = agent.action_space
    if isinstance(space, gym.spaces.Discrete):
        return torch.full((E,), int(space.n))
    return torch.full((E, *space.shape), 5.0)


def _steps(agent: Any) -> None:
    """``observe_steps`` with a block whose ``reward`` holds one step fewer than ``obs``."""
    s = _step(agent)
    block = {k: torch.stack([v, v]) for k, v in s.items()}
    block["reward"] = block["reward"][:1]
    agent.observe_steps(*block.values())


Case = tuple[str, str, type, Callable[[Any], Any]]
CASES: list[Case] = [
    ("act", "obs with a wrong last dim", ValueError, lambda a: a.act(_obs(a, bad="shape"))),
    ("act", "obs with a row too many", ValueError, lambda a: a.act(_obs(a, rows=E + 1))),
    ("act", "NaN obs", ValueError, lambda a: a.act(_obs(a, bad="nan"))),
    ("observe", "a reward row short", ValueError, lambda a: _observe(a, reward=torch.zeros(E - 1))),
    ("observe", "float flags", TypeError, lambda a: _observe(a, terminated=torch.zeros(E))),
    ("observe", "NaN next_obs", ValueError, lambda a: _observe(a, next_obs=_obs(a, bad="nan"))),
    ("observe", "an action outside the space", ValueError, lambda a: _observe(a, action=_outside(a))),
    ("observe_steps", "blocks of other lengths", ValueError, _steps),
    ("q_values", "obs with a wrong last dim", ValueError, lambda a: a.q_values(_obs(a, 3, bad="shape"))),
    ("eval_policy", "obs with a wrong last dim", ValueError, lambda a: a.eval_policy()(_obs(a, 3, "shape"))),
    ("eval_policy", "NaN obs", ValueError, lambda a: a.eval_policy()(_obs(a, 3, bad="nan"))),
]
PIXEL_CASES: list[Case] = [
    ("act", "float images", TypeError, lambda a: a.act(_obs(a, bad="float"))),
    ("act", "images of another size", ValueError, lambda a: a.act(_obs(a, bad="shape"))),
    ("observe", "float images", TypeError, lambda a: _observe(a, obs=_obs(a, bad="float"))),
    ("observe", "float next images", TypeError, lambda a: _observe(a, next_obs=_obs(a, bad="float"))),
    ("q_values", "float images", TypeError, lambda a: a.q_values(_obs(a, bad="float"))),
    ("eval_policy", "float images", TypeError, lambda a: a.eval_policy()(_obs(a, 3, bad="float"))),
]
FAMILIES = ["dqn", "ppo", "sac", "td3"]
HAS = {"observe_steps": ("dqn", "ppo"), "q_values": ("dqn",)}  # methods only some families have


def _params(families: list[str], cases: list[Case]) -> list[Any]:
    return [
        pytest.param(f, c, id=f"{f}-{c[0]}-{c[1].replace(' ', '_')}")
        for f in families
        for c in cases
        if f.split("-")[0] in HAS.get(c[0], (f.split("-")[0],))
    ]


@pytest.mark.parametrize(
    ("family", "case"), _params(FAMILIES, CASES) + _params(["dqn-pixels", "ppo-pixels"], PIXEL_CASES)
)
def test_refusals_name_the_agent_class_and_the_method(family: str, case: Case) -> None:
    method, _, error, call = case
    agent = _make(family)
    with pytest.raises(error) as info:
        call(agent)
    prefix = f"{type(agent).__name__}.{method}: "
    assert str(info.value).startswith(prefix), str(info.value)
    assert "\n" not in str(info.value)


def test_ppo_refuses_another_action_than_act_sampled_with_its_prefix() -> None:
    agent = _make("ppo")
    with pytest.raises(ValueError, match=r"^PPOAgent\.observe: action differs in rows \[0, 1\]"):
        _observe(agent, action=lambda s: (s["action"] + 1) % 3)
