"""The one vocabulary of a session's status: the fold decides it, everyone else reads it."""

from __future__ import annotations

from enum import StrEnum


class SessionStatus(StrEnum):
    """A str enum: each member equals its value ("running"), in comparisons, JSON and f-strings alike."""

    NEW = "new"  # nothing recorded yet
    CREATED = "created"  # created with start=False: waits for a start
    QUEUED = "queued"  # asked to run while its owner had every running slot taken: starts when one frees
    RUNNING = "running"  # a driver steps it (or will claim it)
    PAUSED = "paused"  # at a checkpoint; resumes by command, or by itself when paused for capacity
    STOPPED = "stopped"
    COMPLETED = "completed"
    FAILED = "failed"
    DELETED = "deleted"  # its owner deleted it: its events stay in the log, lists and views leave it out


TERMINAL = frozenset({SessionStatus.STOPPED, SessionStatus.COMPLETED, SessionStatus.FAILED, SessionStatus.DELETED})
