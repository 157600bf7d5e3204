"""The on-policy schedule of the shared loop: collect a rollout of T vector steps, then update once.

``update()`` of an on-policy agent (PPO) runs its epochs over the rollout it has stored through
``observe``; this schedule only decides when. ::

    run_training(agent, env, OnPolicySchedule(agent.config.num_steps), LoopConfig(total_steps=...))

The schedule lives in the core module :mod:`tritonrl.toolkit.schedule` (``schedule_for`` is its
:func:`~tritonrl.toolkit.schedule.onpolicy_schedule`), where the agents' presets name it; it is
re-exported here.
"""

from __future__ import annotations

from tritonrl.toolkit.schedule import OnPolicySchedule
from tritonrl.toolkit.schedule import onpolicy_schedule as schedule_for

__all__ = ["OnPolicySchedule", "schedule_for"]
