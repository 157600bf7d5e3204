"""PPO (clipped surrogate) with discrete, continuous, LSTM, GRU, normalizing-flow and Mamba2 policies.

The algorithm, top to bottom: collect ``num_steps`` vector steps into a :class:`RolloutBuffer`
(``act`` samples and remembers log-prob and value; ``observe`` stores the transition and, where
an episode was truncated, the value of its real final observation); compute GAE in f32 with
terminations and truncations kept apart (:func:`tritonrl.toolkit.replay.rollout.compute_gae`); then
``update_epochs`` passes over shuffled minibatches of the clipped objective::

    ratio  = exp(log pi(a|s) - log pi_old(a|s))
    L_pi   = mean(max(-A * ratio, -A * clip(ratio, 1 - eps, 1 + eps)))       # A normalised per minibatch
    L_v    = 0.5 * mean(max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2))   # or unclipped
    loss   = L_pi - ent_coef * entropy + vf_coef * L_v

with gradient-norm clipping, linear learning-rate annealing and an optional early stop of the
epochs once the approximate KL exceeds ``target_kl``. Recurrent policies (LSTM, GRU, Mamba2) train
on sequence minibatches of ``seq_len`` steps starting from the memory stored when the segment was
collected, with the memory reset where an episode starts (LSTM and GRU: each sequence split at its
episode starts, all pieces run through one fused recurrence; see
:meth:`tritonrl.agents.nets.recurrent.LSTMCore.sequence`), and act one step at a time, the memory
carried per environment and reset where an episode ended.

The agent is a plain object; :func:`tritonrl.toolkit.training.loop.run_training` drives it with the on-policy
schedule, and you can drive it yourself::

    agent = PPOAgent(env.single_observation_space, env.single_action_space, preset("ppo"), num_envs=8)
    for _ in range(agent.config.num_steps):
        action = agent.act(obs)
        tr = env.step(action)
        agent.observe(obs, action, tr.reward, tr.next_obs, tr.terminated, tr.truncated)
        obs = tr.obs
    metrics = agent.update()        # dict of f32 scalar tensors on the device

Precision: parameters live in ``training_dtype(device)`` and are optimized through f32 master
weights (:class:`tritonrl.toolkit.optim.MasterWeightOptimizer`), so bf16 learns like f32. Observations are
normalised (optionally, running statistics in f32) and cast once, where they enter; log-probs,
values, rewards, advantages, returns and the loss are f32.

Data-parallel (``dist``, a :class:`tritonrl.toolkit.distributed.DistContext` of N ranks, each
stepping ``num_envs`` of the run's ``N * num_envs`` environments): N ranks follow the algorithm of
one process with all the environments. Every rank starts from rank 0's parameters; each
minibatch is the union of one local minibatch per rank (``num_minibatches`` per rank, the same
count everywhere), whose gradients are averaged (:class:`~tritonrl.toolkit.optim.MasterWeightOptimizer`'s
``dist``) and whose advantages are normalised with the global mean and standard deviation; the
``target_kl`` stop reads the mean approximate KL of the ranks (every rank stops in the same
epoch); the observation statistics are pooled across the ranks at each :meth:`PPOAgent.update`
(so that every rank normalises alike afterwards; between updates each rank adds its own
observations); ``env_steps`` and the learning-rate annealing count the environments of every rank.

Modules: :mod:`~tritonrl.agents.ppo.config` (the config), :mod:`~tritonrl.agents.ppo.network` (the
policy), :mod:`~tritonrl.agents.ppo.agent` (act, observe, loss, update),
:mod:`~tritonrl.agents.ppo.presets` and :mod:`~tritonrl.agents.ppo.state` (checkpoint parts).
"""

from tritonrl.agents.ppo.agent import PPOAgent
from tritonrl.agents.ppo.config import AGENT_KIND, POLICIES, PPOConfig
from tritonrl.agents.ppo.presets import PRESETS, preset

__all__ = ["AGENT_KIND", "POLICIES", "PPOAgent", "PRESETS", "PPOConfig", "preset"]
