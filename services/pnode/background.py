"""Work beside the steps (text samples, spot checks) on threads of their own, at a low CPU priority.

On a machine with a core to spare such work costs the steps nothing; on one with no core to spare
it waits for the steps, not the other way round.
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
