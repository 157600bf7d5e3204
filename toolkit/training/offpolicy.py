"""The off-policy schedule of the shared loop: learning starts, train frequency, gradient steps.

The loop (:func:`tritonrl.toolkit.training.loop.run_training`) stores every vector step through
``agent.observe``; this schedule decides when the agent learns:

- nothing before ``learning_starts`` environment steps (summed over the vector envs);
- then, each time the global step crosses a multiple of ``train_freq``, ``gradient_steps`` calls
  of ``agent.update()``. With ``E`` environments a vector step advances the global step by ``E``,
  so several rounds can fall due at once; the update-to-data ratio stays
  ``gradient_steps / train_freq`` whatever ``E`` is.

Target-network updates (hard every ``target_update_every`` learner updates, or Polyak with
``tau < 1``) happen inside ``agent.update()``, so an agent driven by hand behaves the same. ::

    env = make_vec_env("CartPole-v1", 4, seed=1)
    agent = DQNAgent(env.single_observation_space, env.single_action_space, preset("rainbow"), num_envs=4)
    run_training(agent, env, schedule_for(agent), LoopConfig(total_steps=50_000, eval_every=5_000,
                                                             target_return=475))

The schedule lives in the core module :mod:`tritonrl.toolkit.schedule` (``schedule_for`` is its
:func:`~tritonrl.toolkit.schedule.offpolicy_schedule`), where the agents' presets name it; it is
re-exported here.
"""

from __future__ import annotations

from tritonrl.toolkit.schedule import OffPolicySchedule
from tritonrl.toolkit.schedule import offpolicy_schedule as schedule_for

__all__ = ["OffPolicySchedule", "schedule_for"]
