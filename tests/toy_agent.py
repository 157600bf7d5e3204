"""Toy agents: :class:`ToyAgent` for loop tests (random actions, a counter that 'learns', enough to
test resume) and :class:`ToyMarketAgent`, an agent of the agent protocol defined outside ``agents/``
(the collector and ``train --env market:...`` drive it, :func:`toy_market_preset`)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
from torch import nn
from tritonrl.toolkit.acting import SnapshotPolicy
from tritonrl.toolkit.agent import AgentBase, join_ranks
from tritonrl.toolkit.checks import ActionRule, InputGuard
from tritonrl.toolkit.config import Config, resumable
from tritonrl.toolkit.policy import PolicyModule
from tritonrl.toolkit.precision import training_dtype
from tritonrl.toolkit.preset import MarketPreset, Preset
from tritonrl.toolkit.runstate import check_module_tensors, load_into_module, section
from tritonrl.toolkit.seeding import rank_seed
from tritonrl.toolkit.training.offpolicy import OffPolicySchedule


class ToyAgent:
    """Random actions from torch's global RNG; a counter that 'learns' (enough to test resume)."""

    def __init__(self, n_actions: int) -> None:
        self.n = n_actions
        self.seen = torch.zeros(())
        self.reward_sum = torch.zeros(())
        self.updates = 0

    def act(self, obs: torch.Tensor, explore: bool = True) -> torch.Tensor:
        if not explore:
            return torch.zeros(obs.shape[0], dtype=torch.long)
        return torch.randint(0, self.n, (obs.shape[0],))

    def observe(self, obs, action, reward, next_obs, terminated, truncated) -> None:
        self.seen += obs.shape[0]
        self.reward_sum += reward.sum() + next_obs.sum() * 1e-3

    def update(self) -> dict[str, torch.Tensor]:
        self.updates += 1
        return {"losses/toy": self.reward_sum / self.seen, "losses/noise": torch.rand(())}

    def state_dict(self) -> dict[str, Any]:
        return {"seen": self.seen, "reward_sum": self.reward_sum, "updates": self.updates}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.seen = state["seen"].clone()
        self.reward_sum = state["reward_sum"].clone()
        self.updates = state["updates"]


# ----------------------------------------------------------------------------- a toy of the protocol


@dataclass(frozen=True)
class ToyMarketConfig(Config):
    """A linear softmax policy over Discrete actions, nudged by each step's rewards."""

    lr: float = resumable(0.05)
    """Step size of the plain gradient step of :meth:`ToyMarketAgent.update`."""
    eps: float = 0.1
    """Probability of a uniform random action when exploring."""
    learning_starts: int = 0
    """Environment steps before the first update (the schedule of :func:`toy_market_preset`)."""
    train_freq: int = 32
    """Environment steps between two updates."""
    snapshot: bool = True
    """Act from an f32 snapshot (:class:`tritonrl.toolkit.acting.SnapshotPolicy`); ``False``: the
    learner acts (``AgentBase``'s default)."""

    @property
    def action_kind(self) -> str:
        """Discrete positions (what ``env_config_for`` reads)."""
        return "discrete"


class ToyPolicy(PolicyModule):
    """A linear policy as a policy module: the argmax of ``net(obs)``."""

    family = "toy"
    extra_outputs = ("logits",)

    def __init__(self, net: nn.Module, observation_space: gym.Space, action_space: gym.Space) -> None:
        super().__init__(observation_space, action_space)
        self.net = net

    def mirrors(self) -> list[torch.Tensor]:
        return [*self.net.parameters(), *self.net.buffers()]

    def act(self, obs: torch.Tensor, *state: torch.Tensor) -> torch.Tensor:
        return self.net(obs.to(torch.float32)).argmax(-1)

    def outputs(self, obs: torch.Tensor, *state: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.net(obs.to(torch.float32))
        return {"action": logits.argmax(-1), "logits": logits}


class ToyMarketAgent(AgentBase):
    """An agent of the protocol written outside ``agents/``: act, observe, update, acting_policy,
    checkpoints through :class:`tritonrl.toolkit.agent.AgentBase`. Exploration draws from its own
    generator; ``update`` raises the log-probability of the last step's actions by their rewards
    (plus a small pull of the logits towards 0)."""

    kind = "toy-market"
    config_class = ToyMarketConfig

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: ToyMarketConfig | None = None,
        *,
        num_envs: int = 1,
        device: torch.device | str = "cpu",
        seed: int = 0,
        dist: Any = None,
    ) -> None:
        self.config = config if config is not None else ToyMarketConfig()
        self.observation_space, self.action_space = observation_space, action_space
        self.num_envs, self.seed, self.device = num_envs, int(seed), torch.device(device)
        self.dist = join_ranks(
            dist,
            kind=self.kind,
            config=self.config,
            observation_space=observation_space,
            action_space=action_space,
            num_envs=num_envs,
            device=self.device,
        )
        self.dtype = training_dtype(self.device)
        self.n = int(action_space.n)
        self.inputs = InputGuard("ToyMarketAgent", ActionRule.discrete(self.n))
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(rank_seed(self.seed, self.dist.rank))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.net = nn.Linear(observation_space.shape[0], self.n).to(self.device, self.dtype)
        self.env_steps = self.updates = 0
        self.last: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def choose(self, net: nn.Module, x: torch.Tensor, explore: bool) -> torch.Tensor:
        """Greedy actions of ``net`` for ``x``, each replaced by a random one with probability ``eps``."""
        greedy = net(x).argmax(-1)
        if not explore:
            return greedy
        rand = torch.randint(self.n, greedy.shape, generator=self.generator, device=self.device)
        pick = torch.rand(greedy.shape, generator=self.generator, device=self.device) < self.config.eps
        return torch.where(pick, rand, greedy)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, explore: bool = True) -> torch.Tensor:
        return self.choose(self.net, obs.to(self.device, self.dtype), explore)

    def policy(self) -> ToyPolicy:
        net = copy.deepcopy(self.net).float().requires_grad_(False)
        return ToyPolicy(net, self.observation_space, self.action_space).eval()

    def learner_tensors(self) -> list[torch.Tensor]:
        return [*self.net.parameters(), *self.net.buffers()]

    def acting_policy(self, sync_every: int = 1) -> Any:
        if not self.config.snapshot:
            return super().acting_policy(sync_every)
        return SnapshotPolicy(
            self.policy(),
            lambda policy, obs: self.choose(policy.net, obs.float(), True),
            self.learner_tensors,
            lambda: self.updates,
            sync_every=sync_every,
        )

    def observe(self, obs, action, reward, next_obs, terminated, truncated) -> None:
        self.inputs.reward("observe", reward)
        self.inputs.action("observe", action)
        self.last = (
            obs.to(self.dtype),
            torch.as_tensor(action),
            torch.as_tensor(reward, dtype=torch.float32),
        )
        self.env_steps += self.num_envs

    def update(self) -> dict[str, torch.Tensor]:
        assert self.last is not None, "update before any observe"
        obs, action, reward = self.last
        logits = self.net(obs).float()
        logp = torch.log_softmax(logits, -1).gather(1, action[:, None]).squeeze(1)
        loss = -(reward * logp).mean() + 1e-3 * logits.square().mean()  # the L2 term: every update moves
        self.net.zero_grad()
        loss.backward()
        with torch.no_grad():
            for p in self.net.parameters():
                p -= self.config.lr * p.grad
        self.updates += 1
        return {"losses/toy": loss.detach()}

    def _state_parts(self) -> dict[str, Any]:
        return {"net": self.net.state_dict()}

    def _check_parts(self, state: Mapping[str, Any], where: str, rank_parts: bool) -> dict[str, Any]:
        check_module_tensors(self.net, section(state, "net", where, "the network"), where=where)
        return {}

    def _load_parts(self, state: Mapping[str, Any], staged: dict[str, Any], rank_parts: bool) -> None:
        load_into_module(self.net, state["net"])


def toy_market_preset(**config: Any) -> Preset:
    """A preset of :class:`ToyMarketAgent` (``toy-market``) with market defaults of its own: 4
    environments, 512 steps, an evaluation every 256, and ``lr`` 0.02 on market data."""
    cfg = ToyMarketConfig(**config)
    return Preset(
        "toy-market",
        "a linear toy agent of the agent protocol",
        cfg,
        agent=ToyMarketAgent,
        kind="offpolicy",
        schedule=lambda agent: OffPolicySchedule(agent.config.learning_starts, agent.config.train_freq),
        market=MarketPreset(
            overrides={"lr": 0.02}, default_num_envs=4, default_steps=512, default_eval_every=256
        ),
    )
