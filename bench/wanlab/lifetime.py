"""Labs still open are removed on SIGINT, SIGTERM, SIGHUP and at interpreter exit.

A handler first closes every open lab, then hands the signal to whatever handled it before
(so Ctrl-C still raises KeyboardInterrupt and SIGTERM still ends the process).
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
from typing import Self

from .netns import check_available

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Lab:
    """A lab (`WanLab`, `Machines`) lives for a `with` block: entering checks that the kernel has what a
    lab needs, registers it here (so a signal or the interpreter's exit still removes it) and builds it
    (`_build`); leaving, or a failure half-way through the build, closes it (`close`)."""

    def __enter__(self) -> Self:
        check_available()
        opened(self)
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _build(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Remove whatever the lab made so far (it is called again after a signal's close: a second call does nothing)."""
        raise NotImplementedError


_open: list[Lab] = []
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


def opened(lab: Lab) -> None:
    if not _open and threading.current_thread() is threading.main_thread():
        for signum in SIGNALS:
            if signal.getsignal(signum) != signal.SIG_IGN:  # an ignored signal (a background job's SIGINT) stays so
                _previous[signum] = signal.signal(signum, _on_signal)
    _open.append(lab)


def closed(lab: Lab) -> None:
    if lab in _open:
        _open.remove(lab)
    if not _open and threading.current_thread() is threading.main_thread():
        _restore()


atexit.register(close_all)
