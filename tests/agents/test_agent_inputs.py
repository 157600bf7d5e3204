"""What enters an agent: NaN/inf inputs and out-of-range actions are refused at act/observe, before
anything is stored (host inputs) or before anything is learned (deferred, accelerator inputs)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from tritonrl.toolkit.pytree import leaves

gym = pytest.importorskip("gymnasium")

from tritonrl.agents.dqn import DQNAgent  # noqa: E402  (imports gymnasium)
from tritonrl.agents.dqn import preset as dqn_preset  # noqa: E402
from tritonrl.agents.ppo import PPOAgent  # noqa: E402
from tritonrl.agents.ppo import preset as ppo_preset  # noqa: E402

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
DISCRETE = gym.spaces.Discrete(3)
BOX = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
E = 2
DQN_SMALL = {"torso_width": 16, "batch_size": 4, "buffer_size": 64, "learning_starts": 4}
PPO_TINY = {
    "num_steps": 8,
    "seq_len": 4,
    "num_minibatches": 2,
    "update_epochs": 1,
    "hidden": (8,),
    "memory_size": 16,
    "mamba_headdim": 8,
    "total_steps": 1000,
    "normalize_obs": True,
}
AGENTS = ["dqn", "rainbow", "qrdqn", "ppo", "ppo-continuous", "ppo-squashed", "ppo-lstm", "ppo-mamba"]


def _make(name: str):
    if name in ("dqn", "rainbow", "qrdqn"):
        return DQNAgent(OBS, DISCRETE, dqn_preset(name, **DQN_SMALL), num_envs=E, seed=0)
    extra = {"squash": True} if name == "ppo-squashed" else {}
    base = ppo_preset("ppo-continuous" if name == "ppo-squashed" else name)
    cfg = dataclasses.replace(base, **PPO_TINY, **extra)
    act = DISCRETE if cfg.policy in ("discrete", "lstm", "mamba") else BOX
    return PPOAgent(OBS, act, cfg, num_envs=E, seed=0)


def _discrete(agent) -> bool:
    return isinstance(agent, DQNAgent) or isinstance(agent.action_space, gym.spaces.Discrete)


def _snapshot(agent) -> dict:
    """Everything a step may change: storage, counters, observation statistics, memories."""
    if isinstance(agent, DQNAgent):
        b = agent.buffer
        return {
            "n": (len(b), b.steps, b.pending, agent.env_steps),
            "obs": b._obs.clone(),
            "next": b._next_obs.clone(),
            "reward": b._reward.clone(),
        }
    b = agent.buffer
    snap = {
        "n": (b.pos, agent.env_steps),
        "obs": b.obs.clone(),
        "rewards": b.rewards.clone(),
        "pending": agent._pending,
    }
    if agent.obs_rms is not None:
        snap["rms"] = (agent.obs_rms.mean.clone(), agent.obs_rms.var.clone(), float(agent.obs_rms.count))
    return snap


def _same(a: dict, b: dict) -> bool:
    for k in a:
        x, y = a[k], b[k]
        if x is y:
            continue
        if isinstance(x, torch.Tensor):
            if not torch.equal(x, y):
                return False
        elif isinstance(x, tuple) and x and isinstance(x[0], torch.Tensor):
            pairs = zip(x, y, strict=True)
            if not all(torch.equal(p, q) if isinstance(p, torch.Tensor) else p == q for p, q in pairs):
                return False
        elif x is not y and x != y:
            return False
    return True


def _step_args(agent):
    obs = torch.randn(E, 4)
    action = agent.act(obs)
    return {
        "obs": obs,
        "action": action,
        "reward": torch.ones(E),
        "next_obs": torch.randn(E, 4),
        "terminated": torch.zeros(E, dtype=torch.bool),
        "truncated": torch.zeros(E, dtype=torch.bool),
    }


def _observe(agent, args: dict) -> None:
    agent.observe(
        args["obs"], args["action"], args["reward"], args["next_obs"], args["terminated"], args["truncated"]
    )


def _bad(agent, case: str) -> tuple[dict, str]:
    """Valid step arguments with one bad entry, and the message fragment expected."""
    args = _step_args(agent)
    if case == "nan obs":
        # the obs act saw, modified in place since: the in-place change must be noticed
        args["obs"][1, 2] = float("nan")
        return args, r"\.observe: obs\[1, 2\] = nan is not finite"
    if case == "inf next_obs":
        args["next_obs"][0, 3] = float("inf")
        return args, r"\.observe: next_obs\[0, 3\] = inf is not finite"
    if case == "nan reward":
        args["reward"] = torch.tensor([1.0, float("nan")])
        return args, r"\.observe: reward\[1\] = nan is not finite"
    if case == "action -1":
        if _discrete(agent):
            args["action"] = torch.tensor([0, -1])
            return args, r"\.observe: action\[1\] = -1 is outside Discrete\(3\) \(0 <= a < 3\)"
        args["action"] = torch.tensor([[0.0, 0.5], [float("nan"), 0.0]])
        return args, r"\.observe: action\[1, 0\] = nan is not finite"
    if case == "action n":
        if _discrete(agent):
            args["action"] = np.array([3, 0])
            return args, r"\.observe: action\[0\] = 3 is outside Discrete\(3\)"
        if agent.inputs.rule.bounded:
            args["action"] = torch.tensor([[0.0, 2.5], [0.0, 0.0]])
            return args, r"\.observe: action\[0, 1\] = 2\.5 is outside the bounds \[-2, 2\] of dimension 1"
        args["action"] = torch.tensor([[0.0, 0.0], [0.0, float("-inf")]])
        return args, r"\.observe: action\[1, 1\] = -inf is not finite"
    raise AssertionError(case)


CASES = ["nan obs", "inf next_obs", "nan reward", "action -1", "action n"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", AGENTS)
def test_observe_refuses_bad_input_and_stores_nothing(name: str, case: str) -> None:
    agent = _make(name)
    _observe(agent, _step_args(agent))  # one good step first: storage is not empty
    args, match = _bad(agent, case)
    before = _snapshot(agent)
    with pytest.raises(ValueError, match=match) as info:
        _observe(agent, args)
    assert "\n" not in str(info.value)
    assert _same(before, _snapshot(agent))
    # the agent goes on: a good step is accepted
    _observe(agent, _step_args(agent))


@pytest.mark.parametrize("name", AGENTS)
def test_act_refuses_nan_obs_before_anything_changes(name: str) -> None:
    agent = _make(name)
    _observe(agent, _step_args(agent))
    obs = np.zeros((E, 4), np.float32)
    obs[1, 0] = np.inf
    before = _snapshot(agent)
    state = [t.clone() for t in _state_leaves(agent)]
    with pytest.raises(ValueError, match=r"\.act: obs\[1, 0\] = inf is not finite"):
        agent.act(obs)
    assert _same(before, _snapshot(agent))
    assert all(torch.equal(a, b) for a, b in zip(state, _state_leaves(agent), strict=True))


def _state_leaves(agent) -> list[torch.Tensor]:
    if isinstance(agent, DQNAgent) or not agent.recurrent:
        return []
    return leaves(agent.state)


def test_multidiscrete_actions_are_checked_per_dimension() -> None:
    agent = DQNAgent(OBS, gym.spaces.MultiDiscrete([3, 2]), dqn_preset("dqn", **DQN_SMALL), num_envs=E)
    obs = torch.randn(E, 4)
    a = agent.act(obs)
    ok = torch.tensor([[2, 1], [0, 0]])
    no = torch.zeros(E, dtype=torch.bool)
    agent.observe(obs, ok, torch.zeros(E), obs, no, no)
    bad = torch.tensor([[2, 1], [0, 2]])  # 2 is fine in dimension 0, not in dimension 1
    with pytest.raises(
        ValueError,
        match=r"action\[1, 1\] = 2 is outside MultiDiscrete\(\[3, 2\]\) "
        r"\(0 <= a\[\.\.\., 1\] < 2\)",
    ):
        agent.observe(
            obs, bad, torch.zeros(E), obs, torch.zeros(E, dtype=torch.bool), torch.zeros(E, dtype=torch.bool)
        )
    assert a.shape == (E, 2)


def test_numpy_and_list_inputs_are_checked_too() -> None:
    agent = _make("ppo")
    obs = np.zeros((E, 4), np.float32)
    action = agent.act(obs)
    done = np.zeros(E, bool)
    with pytest.raises(ValueError, match=r"PPOAgent.observe: reward\[1\] = nan is not finite"):
        agent.observe(obs, action, [0.0, float("nan")], obs, done, done)
    bad_next = obs.copy()
    bad_next[0, 1] = -np.inf
    with pytest.raises(ValueError, match=r"PPOAgent.observe: next_obs\[0, 1\] = -inf is not finite"):
        agent.observe(obs, action, np.zeros(E), bad_next, done, done)
    with pytest.raises(ValueError, match=r"PPOAgent.observe: action\[1\] = 7 is outside Discrete\(3\)"):
        agent.observe(obs, [0, 7], np.zeros(E), obs, done, done)
    agent.observe(obs, action.numpy(), np.zeros(E), obs, done, done)
    assert agent.buffer.pos == 1


def test_float_actions_for_a_discrete_space_are_refused() -> None:
    agent = _make("dqn")
    args = _step_args(agent)
    args["action"] = torch.tensor([0.0, 1.0])
    with pytest.raises(ValueError, match="action has dtype torch.float32"):
        _observe(agent, args)


def test_huge_finite_observations_are_not_mistaken_for_inf() -> None:
    # The fast path sums the entries; a sum that overflows is re-checked entry by entry.
    agent = _make("dqn")
    obs = torch.full((E, 4), 3e38)
    agent.act(obs)
    agent.observe(
        obs,
        torch.tensor([0, 1]),
        torch.zeros(E),
        obs,
        torch.zeros(E, dtype=torch.bool),
        torch.zeros(E, dtype=torch.bool),
    )
    assert agent.env_steps == E


# ----------------------------------------------------------------------------- deferred checks


@pytest.mark.parametrize("name", ["dqn", "rainbow", "ppo", "ppo-squashed", "ppo-lstm"])
def test_deferred_checks_raise_at_update_before_learning(name: str) -> None:
    # The accelerator path, forced on CPU: no check reads a value on the step. With
    # check_at_update, a device-side flag is read once, when update() starts, which refuses to
    # learn from the bad data.
    agent = _make(name)
    agent.inputs.mode = "deferred"
    agent.inputs.check_at_update = True
    steps = 8 if isinstance(agent, PPOAgent) else 6
    for t in range(steps):
        args = _step_args(agent)
        if t == 2:
            args["next_obs"][1, 1] = float("nan")
        _observe(agent, args)  # no error: deferred
    params = agent.online.parameters() if isinstance(agent, DQNAgent) else agent.net.parameters()
    before = [p.detach().clone() for p in params]
    match = r"\.observe: next_obs held NaN or inf at a step since the last check \(deferred check on cpu"
    with pytest.raises(ValueError, match=match):
        agent.update()
    with pytest.raises(ValueError, match=match):  # it stays failed
        agent.check_inputs()
    params = agent.online.parameters() if isinstance(agent, DQNAgent) else agent.net.parameters()
    assert all(torch.equal(a, b) for a, b in zip(before, params, strict=True))


@pytest.mark.parametrize("name", ["dqn", "ppo", "ppo-squashed"])
def test_deferred_checks_name_each_argument(name: str) -> None:
    for case, arg in [
        ("nan obs", "obs"),
        ("inf next_obs", "next_obs"),
        ("action -1", "action"),
        ("action n", "action"),
    ]:
        agent = _make(name)
        agent.inputs.mode = "deferred"
        args, _ = _bad(agent, case)
        _observe(agent, args)
        with pytest.raises(ValueError, match=rf"\.observe: {arg} held "):
            agent.check_inputs()
    agent = _make(name)
    agent.inputs.mode = "deferred"
    agent.act(torch.full((E, 4), float("nan")))  # no error: deferred
    with pytest.raises(ValueError, match=r"\.act: obs held NaN or inf"):
        agent.check_inputs()


@pytest.mark.parametrize("name", ["dqn", "ppo"])
def test_by_default_update_reads_no_flag_and_check_inputs_raises(name: str) -> None:
    # The default: update() stays free of host reads (it learns from whatever was stored); the
    # flag is read by check_inputs(), which the loop calls at every log interval and before
    # every checkpoint.
    agent = _make(name)
    agent.inputs.mode = "deferred"
    assert not agent.inputs.check_at_update
    steps = 8 if isinstance(agent, PPOAgent) else 6
    for t in range(steps):
        args = _step_args(agent)
        if t == 2:
            args["next_obs"][1, 1] = float("nan")
        _observe(agent, args)
    agent.update()  # no error
    with pytest.raises(ValueError, match=r"\.observe: next_obs held NaN or inf"):
        agent.check_inputs()


def test_deferred_checks_pass_good_data_and_sync_once_per_round() -> None:
    agent = _make("dqn")
    agent.inputs.mode = "deferred"
    agent.inputs.check_at_update = True
    for _ in range(6):
        _observe(agent, _step_args(agent))
    assert agent.inputs.pending
    agent.update()  # reads the flag once ...
    assert not agent.inputs.pending
    agent.update()  # ... and not again until new inputs arrive
    agent.check_inputs()


def test_input_check_mode_is_validated() -> None:
    agent = _make("ppo")
    with pytest.raises(ValueError, match="mode='lazy'"):
        agent.inputs.mode = "lazy"


class _HostReads:
    """Counts reads of tensor values on the host (``.item()``, ``bool(t)``, ``int(t)``): on an
    accelerator each one is a synchronisation."""

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        reads = self.reads = []

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if func in (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.is_nonzero.default):
                    reads.append(func)
                return func(*args, **(kwargs or {}))

        self.mode = Mode()


class _NoChecks:
    pending = False

    def obs(self, call, name, x):
        return x

    def reward(self, call, x):
        return x

    def action(self, call, x):
        return x

    def acted(self, action):
        return None

    def same(self, call, name, given, expected, what, fix):
        return None


@pytest.mark.parametrize("name", ["dqn", "rainbow", "ppo", "ppo-squashed", "ppo-lstm"])
def test_deferred_checks_read_nothing_on_the_host(name: str) -> None:
    # The accelerator path adds no host read (no sync) to act/observe: the same steps read the
    # host exactly as often as with no checks at all (PPO reads a CPU `truncated` flag itself).
    counts = []
    for guard in ("deferred", None):
        agent = _make(name)
        if guard is None:
            agent.inputs = _NoChecks()
        else:
            agent.inputs.mode = guard
        torch.manual_seed(0)
        steps = [_step_args(agent) for _ in range(3)]  # (acts outside the counted region)
        probe = _HostReads()
        with probe.mode:
            for args in steps:
                agent.act(args["obs"])
                _observe(agent, {**args, "action": args["action"].clone()})
        counts.append(len(probe.reads))
    assert counts[0] == counts[1]


def test_check_inputs_reports_a_rejected_priority_update() -> None:
    """With prioritized replay checked lazily (the accelerator default: update_priorities reads
    nothing back), a batch of NaN priorities changes nothing and check_inputs() -- which the loop
    calls at every log interval -- raises for it, once."""
    agent = DQNAgent(OBS, DISCRETE, dqn_preset("dqn", prioritized=True, **DQN_SMALL), num_envs=E, seed=0)
    agent.buffer.check_priorities = False
    for _ in range(6):
        _observe(agent, _step_args(agent))
    agent.update()
    agent.check_inputs()  # nothing rejected yet
    before = agent.buffer.priorities().clone()
    agent.buffer.update_priorities(torch.tensor([0, 1]), torch.tensor([1.0, float("nan")]))
    assert torch.equal(agent.buffer.priorities(), before)
    with pytest.raises(ValueError, match="rejected 1 batch"):
        agent.check_inputs()
    agent.check_inputs()  # reported once


# ----------------------------------------------------------------------------- shapes and dtypes

from tritonrl.agents.dqn import PIXEL_PRESETS  # noqa: E402
from tritonrl.agents.dqn import PRESETS as DQN_PRESETS  # noqa: E402

MULTI = gym.spaces.MultiDiscrete([3, 2])
DQN_FAMILY = [p.name for p in DQN_PRESETS if p not in PIXEL_PRESETS] + ["factored", "icm"]
ROWS = 4  # environments the agents below are built for


def _family(name: str, num_envs: int = ROWS):
    """A DQN-family agent (every preset, the factored head, ICM) or a PPO agent."""
    if name in DQN_FAMILY:
        base = "dqn" if name in ("factored", "icm") else name
        cfg = dqn_preset(base, **DQN_SMALL, **({"icm": True} if name == "icm" else {}))
        return DQNAgent(OBS, MULTI if name == "factored" else DISCRETE, cfg, num_envs=num_envs, seed=0)
    cfg = dataclasses.replace(ppo_preset(name), **PPO_TINY)
    act = DISCRETE if cfg.policy in ("discrete", "lstm", "mamba") else BOX
    return PPOAgent(OBS, act, cfg, num_envs=num_envs, seed=0)


@pytest.mark.parametrize("rows", [3, 5, 1])
@pytest.mark.parametrize("name", DQN_FAMILY + ["ppo", "ppo-continuous", "ppo-lstm"])
def test_act_refuses_another_number_of_rows(name: str, rows: int) -> None:
    agent = _family(name)
    before = (agent.env_steps, agent.generator.get_state().clone())
    msg = (
        rf"Agent\.act: obs has shape \({rows}, 4\), expected \({ROWS}, 4\) "
        rf"\(one per environment, num_envs={ROWS}\)"
    )
    with pytest.raises(ValueError, match=msg) as info:
        agent.act(torch.zeros(rows, 4))
    assert "\n" not in str(info.value)
    assert agent.env_steps == before[0] and torch.equal(agent.generator.get_state(), before[1])
    assert agent.act(torch.zeros(ROWS, 4)).shape[0] == ROWS


@pytest.mark.parametrize("name", DQN_FAMILY + ["ppo", "ppo-lstm"])
def test_eval_policy_acts_for_any_number_of_rows(name: str) -> None:
    # evaluation runs its own environments (one per episode): eval_policy is act's greedy twin
    agent = _family(name)
    obs = torch.randn(ROWS, 4, generator=torch.Generator().manual_seed(0))
    greedy = agent.eval_policy()
    for rows in (1, 3, 7):
        assert greedy(torch.randn(rows, 4)).shape[0] == rows
    if isinstance(agent, DQNAgent):  # stateless: the same actions as act(explore=False)
        assert torch.equal(agent.eval_policy()(obs), agent.act(obs, explore=False))


def _good_step(agent) -> list:
    obs = torch.randn(ROWS, 4)
    no = torch.zeros(ROWS, dtype=torch.bool)
    return [obs, agent.act(obs), torch.ones(ROWS), torch.randn(ROWS, 4), no, no.clone()]


_OBSERVE_CASES = {
    # case: (argument index, bad value from a good step, error type, message fragment)
    "float terminated": (
        4,
        lambda s: s[4].float(),
        TypeError,
        r"terminated must be boolean, got dtype torch\.float32",
    ),
    "numpy float truncated": (
        5,
        lambda s: np.zeros(ROWS),
        TypeError,
        r"truncated must be boolean, got dtype float64",
    ),
    "int terminated": (
        4,
        lambda s: s[4].long(),
        TypeError,
        r"terminated must be boolean, got dtype torch\.int64",
    ),
    "bool reward": (2, lambda s: s[4], TypeError, r"reward must be real numbers, got dtype torch\.bool"),
    "reward 3 rows": (2, lambda s: s[2][:3], ValueError, r"reward has shape \(3,\), expected \(4,\)"),
    "reward [E, 1]": (2, lambda s: s[2][:, None], ValueError, r"reward has shape \(4, 1\), expected \(4,\)"),
    "scalar reward": (2, lambda s: 1.0, ValueError, r"reward has shape \(\), expected \(4,\)"),
    "terminated 5 rows": (
        4,
        lambda s: torch.zeros(5, dtype=torch.bool),
        ValueError,
        r"terminated has shape \(5,\)",
    ),
    "next_obs 3 rows": (3, lambda s: s[3][:3], ValueError, r"next_obs has shape \(3, 4\), expected \(4, 4\)"),
    "obs 3 rows": (0, lambda s: s[0][:3], ValueError, r"obs has shape \(3, 4\), expected \(4, 4\)"),
    "action 3 rows": (1, lambda s: s[1][:3], ValueError, r"action has shape \(3,( \d)?\), expected \(4,"),
}


@pytest.mark.parametrize("case", list(_OBSERVE_CASES))
@pytest.mark.parametrize("name", DQN_FAMILY + ["ppo", "ppo-continuous", "ppo-lstm"])
def test_observe_refuses_wrong_shapes_and_dtypes_before_any_op(name: str, case: str) -> None:
    """One line naming the call, the argument, what was expected and what came; nothing stored.
    Both families refuse a float ``terminated`` (DQN's replay stores flags as bool; PPO would have
    cast it)."""
    agent = _family(name)
    agent.observe(*_good_step(agent))
    step = _good_step(agent)
    i, bad, error, fragment = _OBSERVE_CASES[case]
    step[i] = bad(step)
    before = _snapshot(agent)
    owner = "DQNAgent" if isinstance(agent, DQNAgent) else "PPOAgent"
    with pytest.raises(error, match=rf"^{owner}\.observe: {fragment}") as info:
        agent.observe(*step)
    assert "\n" not in str(info.value)
    assert _same(before, _snapshot(agent))
    agent.observe(*_good_step(agent))  # and goes on


def test_agent_replays_know_the_action_space_but_the_agent_adds_unchecked() -> None:
    # The agent's own guard checked the step: its replays add with check=False (no second pass).
    # Used directly, they check values against the space.
    agent = _family("icm")
    assert agent.buffer.num_actions == 3 and agent.icm_buffer.num_actions == 3
    assert _family("factored").buffer.num_actions == (3, 2)
    calls = []
    for buf in (agent.buffer, agent.icm_buffer):
        buf.inputs.obs = lambda *a: calls.append(a)  # type: ignore[method-assign]
    agent.observe(*_good_step(agent))
    assert calls == [] and len(agent.buffer) == ROWS
    direct = DQNAgent(OBS, DISCRETE, dqn_preset("dqn", **DQN_SMALL), num_envs=ROWS).buffer
    step = _good_step(_family("dqn"))
    step[1] = torch.tensor([0, 3, 0, 0])
    with pytest.raises(ValueError, match=r"ReplayBuffer\.add: action\[1\] = 3 is outside Discrete\(3\)"):
        direct.add(*step)


@pytest.mark.parametrize("name", ["dqn", "ppo"])
def test_observe_checks_numpy_and_list_steps_too(name: str) -> None:
    agent = _family(name)
    obs = np.zeros((ROWS, 4), np.float32)
    action = agent.act(obs).numpy()
    no = np.zeros(ROWS, bool)
    owner = type(agent).__name__
    with pytest.raises(ValueError, match=rf"{owner}\.observe: reward has shape \(3,\), expected \(4,\)"):
        agent.observe(obs, action, np.zeros(3, np.float32), obs, no, no)
    with pytest.raises(TypeError, match=rf"{owner}\.observe: terminated must be boolean, got dtype float32"):
        agent.observe(obs, action, np.zeros(ROWS, np.float32), obs, no.astype(np.float32), no)
    with pytest.raises(TypeError, match=rf"{owner}\.observe: truncated must be boolean, got dtype int64"):
        agent.observe(obs, action, [0.0] * ROWS, obs, [False] * ROWS, [0] * ROWS)
    with pytest.raises(
        ValueError, match=rf"{owner}\.observe: next_obs has shape \(4, 3\), expected \(4, 4\)"
    ):
        agent.observe(obs, action, np.zeros(ROWS), obs[:, :3], no, no)
    agent.observe(obs, action.tolist(), [1.0] * ROWS, obs, [False] * ROWS, no)  # lists are fine
    assert agent.env_steps == ROWS
