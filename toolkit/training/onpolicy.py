"""The on-policy schedule's names where the loop's users import them; it lives in the core module
[`tritonrl.toolkit.schedule`][tritonrl.toolkit.schedule] (``schedule_for`` is ``onpolicy_schedule``). See
docs/pages/ppo.md.
"""

from __future__ import annotations

from tritonrl.toolkit.schedule import OnPolicySchedule
from tritonrl.toolkit.schedule import onpolicy_schedule as schedule_for

__all__ = ["OnPolicySchedule", "schedule_for"]
