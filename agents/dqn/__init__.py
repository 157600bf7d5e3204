"""The DQN family in one agent: DQN, double, dueling, noisy, n-step, PER, C51, QR-DQN, Rainbow.

One :class:`DQNConfig` switches the pieces on; the named presets (:data:`PRESETS`, one
:class:`tritonrl.toolkit.preset.Preset` each) are configs:

| preset | what is on |
| --- | --- |
| ``dqn`` | Q-learning with a target network and epsilon-greedy exploration (Mnih et al., 2015) |
| ``double`` | + double Q targets (the online network picks ``a*``, the target evaluates it) |
| ``dueling`` | + dueling head ``V(s) + A(s, a) - mean A`` |
| ``noisy`` | + noisy linear layers in the head; no epsilon |
| ``c51`` | categorical return distribution on ``atoms`` fixed atoms, projected target |
| ``qrdqn`` | ``quantiles`` quantile estimates, quantile Huber loss |
| ``rainbow`` | double + dueling + noisy + n-step + prioritized replay + C51 |

``icm=True`` attaches curiosity (:mod:`tritonrl.agents.icm`) to any preset; a MultiDiscrete action space
selects the factored (branching) head (:mod:`tritonrl.agents.nets.factored`).

The agent is a plain object, driven by :mod:`tritonrl.toolkit.training.offpolicy` or by your own loop::

    agent = DQNAgent(env.observation_space, env.action_space, preset("rainbow"), device="cpu", seed=0)
    action = agent.act(obs)                      # [E] int64 ([E, D] for MultiDiscrete)
    agent.observe(obs, action, reward, next_obs, terminated, truncated)
    metrics = agent.update()                     # one gradient step; dict of f32 tensors

Precision: parameters and stored observations live in ``training_dtype(device)``; observations
are cast once where they enter (``act``, the replay buffer); network outputs are upcast to f32
once, at the loss; TD targets, losses and priorities are f32. The optimizer keeps f32 master
weights (:class:`tritonrl.toolkit.optim.MasterWeightOptimizer`) so bf16 updates do not vanish, and Polyak
target updates in bf16 run on f32 copies for the same reason.

Data-parallel (``dist``, a :class:`tritonrl.toolkit.distributed.DistContext` of N ranks, each
stepping ``num_envs`` of the run's environments with its own replay): ``buffer_size`` and
``batch_size`` are the run's, each rank keeping ``buffer_size / N`` transitions and sampling
``batch_size / N`` of each global batch (both must divide by N, else a
:class:`~tritonrl.toolkit.distributed.DistributedError`). Every rank starts from rank 0's
parameters (the target network and masters follow from them); the Q (and ICM) gradients are
averaged across the ranks before each clip and step, so every rank takes the same step; target
updates count updates, and the PER ``beta`` schedule sampled batches, the same on every rank;
epsilon counts the environment steps of every rank (``env_steps`` advances by
``num_envs * N`` per :meth:`DQNAgent.observe`). PER priorities stay with the rank that sampled them.
Exploration, noisy-layer noise and replay sampling draw from each rank's own generator.

Modules: :mod:`~tritonrl.agents.dqn.config` (the config), :mod:`~tritonrl.agents.dqn.network`
(torso + head), :mod:`~tritonrl.agents.dqn.agent` (act, observe, loss, update),
:mod:`~tritonrl.agents.dqn.presets`, :mod:`~tritonrl.agents.dqn.plumbing` (spaces, replays) and
:mod:`~tritonrl.agents.dqn.state` (checkpoint parts).
"""

from tritonrl.agents.dqn.agent import DQNAgent
from tritonrl.agents.dqn.config import AGENT_KIND, DQNConfig
from tritonrl.agents.dqn.network import QNetwork
from tritonrl.agents.dqn.presets import PRESETS, preset

__all__ = ["AGENT_KIND", "DQNAgent", "DQNConfig", "PRESETS", "QNetwork", "preset"]
