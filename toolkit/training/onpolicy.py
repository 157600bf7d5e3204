"""The on-policy schedule of the shared loop: collect a rollout of T vector steps, then update once.

The on-policy schedule's names where the loop's users import them: the schedule itself lives in
the core module :mod:`tritonrl.toolkit.schedule` (``schedule_for`` is its ``onpolicy_schedule``).
Layer: training. Guide: docs/pages/ppo.md.
"""

from __future__ import annotations

from tritonrl.toolkit.schedule import OnPolicySchedule
from tritonrl.toolkit.schedule import onpolicy_schedule as schedule_for

__all__ = ["OnPolicySchedule", "schedule_for"]
