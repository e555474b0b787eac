"""Work beside the steps that nothing waits for (text samples) on threads of their own, at a low CPU
priority: on a machine with a core to spare it costs the steps nothing; on one with no core to spare
it waits for the steps, not the other way round. (Spot checks are waited for, two steps behind:
`checks.check_executor` runs them at normal priority.)
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

NICE = 10  # a tenth of a compute thread's share of a busy core; 19 would starve them behind other work


def background_executor(thread_name: str) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name, initializer=_low_priority)


def _low_priority() -> None:
    """Nice this thread (Linux schedules threads one by one; threads it starts inherit it)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
    except (AttributeError, OSError):  # not Linux, or not allowed: the work just competes as an equal
        pass
