"""Labs still open are removed on SIGINT, SIGTERM, SIGHUP and at interpreter exit.

A handler first closes every open lab, then hands the signal to whatever handled it before
(so Ctrl-C still raises KeyboardInterrupt and SIGTERM still ends the process).
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .lab import WanLab

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_open: list[WanLab] = []
_previous: dict[int, object] = {}


def close_all() -> None:
    for lab in list(reversed(_open)):
        lab.close()


def _on_signal(signum: int, frame) -> None:
    close_all()
    previous = _previous.get(signum, signal.SIG_DFL)
    _restore()
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:
        os.kill(os.getpid(), signum)  # the default action, now that nothing is left behind


def _restore() -> None:
    for signum, previous in _previous.items():
        signal.signal(signum, previous)
    _previous.clear()


def opened(lab: WanLab) -> None:
    if not _open and threading.current_thread() is threading.main_thread():
        for signum in SIGNALS:
            _previous[signum] = signal.signal(signum, _on_signal)
    _open.append(lab)


def closed(lab: WanLab) -> None:
    if lab in _open:
        _open.remove(lab)
    if not _open and threading.current_thread() is threading.main_thread():
        _restore()


atexit.register(close_all)
