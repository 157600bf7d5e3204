"""The off-policy schedule's names where the loop's users import them; it lives in the core module
[`tritonrl.toolkit.schedule`][tritonrl.toolkit.schedule] (``schedule_for`` is ``offpolicy_schedule``). See
docs/pages/dqn.md.
"""

from __future__ import annotations

from tritonrl.toolkit.schedule import OffPolicySchedule
from tritonrl.toolkit.schedule import offpolicy_schedule as schedule_for

__all__ = ["OffPolicySchedule", "schedule_for"]
