"""A session as an aggregate: commands that check its state and return the events to record (one
method per command, declared with `@handles`: session_commands.py derives the rest of the system's
view of each command from it), and a fold that applies each recorded event (one handler per event type).

Nothing about a session is kept anywhere else: the orchestrator rebuilds this from CA_LOG
after any crash, and `computeall session show` folds the same events. The rules live here,
so the orchestrator, its drivers and the CLI cannot disagree about them. A command records
nothing when its effect is already in the log (JetStream redelivers: handlers are idempotent).
The aggregate does no I/O: `session_log.SessionLog` keeps one current from CA_LOG.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel

from .commands import CreateSession, DeleteSession, PauseSession, ResumeSession, StartSession, StopSession, ValidateSession
from .config import SessionConfig
from .events import (
    Allocated,
    CheckpointCommitted,
    CheckpointDiscarded,
    CheckpointPruned,
    DeleteRequested,
    EventEnvelope,
    PauseRequested,
    PNodeQuarantined,
    Reallocated,
    ResultsDiscarded,
    RolledBack,
    SamplesGenerated,
    SessionClaimed,
    SessionCompleted,
    SessionCreated,
    SessionDeleted,
    SessionEvent,
    SessionFailed,
    SessionPaused,
    SessionQueued,
    SessionResumed,
    SessionStarted,
    SessionStopped,
    StepCompleted,
    StopRequested,
    ValidationCompleted,
    ValidationRequested,
    VerificationSeeded,
)
from .session_commands import Rejected, handles
from .session_status import TERMINAL, SessionStatus

__all__ = ["TERMINAL", "Rejected", "RunningSlots", "SessionState", "SessionStatus", "fold"]

NEW, CREATED, RUNNING, PAUSED = SessionStatus.NEW, SessionStatus.CREATED, SessionStatus.RUNNING, SessionStatus.PAUSED
QUEUED, DELETED = SessionStatus.QUEUED, SessionStatus.DELETED


@dataclass(frozen=True)
class RunningSlots:
    """What a command that makes a session run needs to know of its owner's other sessions: how many
    run now, and how many a user may run at once (the orchestrator counts; the aggregate decides)."""

    running: int = 0
    limit: float = float("inf")

    @property
    def free(self) -> bool:
        return self.running < self.limit

    def reason(self, owner: str | None) -> str:
        return f"{owner} has {self.running} sessions running (limit {self.limit:.0f})"


UNLIMITED = RunningSlots()


# event type -> what the fold does with it; events not named here (metrics, failover history,
# rejections) change nothing a command decides on
_APPLY: dict[type[BaseModel], Callable[["SessionState", Any], None]] = {}


def applies(*event_types: type[BaseModel]):
    """Register the decorated method as the fold's handler of each of `event_types`."""
    def register(handler):
        for event_type in event_types:
            _APPLY[event_type] = handler
        return handler
    return register


class SessionState(BaseModel):
    id: str
    status: SessionStatus = NEW
    owner: str | None = None
    config: SessionConfig | None = None
    next_step: int = 0  # the first step not yet recorded as completed
    last_loss: float | None = None
    last_seq: int = 0  # stream sequence of the newest event: the expected sequence of the next append
    claimed_by: str | None = None
    pause_requested: bool = False
    stop_requested: bool = False
    delete_requested: bool = False  # deleted while running: deleted once it stops
    validation_requested: bool = False
    checkpoints: list[CheckpointCommitted] = []  # committed and not pruned, oldest first
    allocation: dict[str, str] = {}  # vnode -> pnode (of the first replica)
    pnodes: list[str] = []  # every PNode of the allocation, over all replicas
    failure: str | None = None
    pause_reason: str | None = None
    queue_reason: str | None = None  # while queued: why it does not run yet
    auto_resume: bool = False  # paused by the orchestrator (capacity), resumes by itself
    fuse_heads: bool = True  # the config's setting, or the last resume's that changed it
    verify_seed: int | None = None  # the check stream's seed, drawn once
    quarantined: list[str] = []  # PNodes caught computing wrong results: they get no more work
    # whose results the parameters may hold: now, and in each committed checkpoint (by step)
    pnodes_in_state: list[str] = []
    checkpoint_pnodes: dict[int, list[str]] = {}
    last_sampled_step: int = -1  # the newest step whose samples are recorded: a re-run never samples it again

    @property
    def last_checkpoint(self) -> CheckpointCommitted | None:
        return self.checkpoints[-1] if self.checkpoints else None

    @property
    def checkpoint_step(self) -> int:
        """Where the newest committed checkpoint resumes training (0: there is none)."""
        return self.last_checkpoint.step if self.last_checkpoint else 0

    def clean_checkpoint(self, pnodes: set[str]) -> int:
        """The newest checkpoint no result of `pnodes` can have reached (0: the initial state)."""
        clean = [c.step for c in self.checkpoints if not pnodes & set(self.checkpoint_pnodes.get(c.step, []))]
        return clean[-1] if clean else 0

    @property
    def waits_for_capacity(self) -> bool:
        return self.status == PAUSED and self.auto_resume

    # -- commands from users: each returns the events to record, or raises Rejected ------
    # `@handles` declares each method as its command's (session_commands.py): the states that allow it
    # are checked before the method runs. A command that makes the session run is given its owner's
    # `RunningSlots`: with none free the session is queued instead, and the orchestrator starts it
    # (`admit`) once one frees.
    @handles(CreateSession, effects=(SessionCreated,), allowed={NEW},
             repeat=lambda s, config, owner, **_: s.config == config and s.owner == owner,  # the same create again
             refusal=lambda s: f"session {s.id} already exists")
    def create(self, config: SessionConfig, owner: str, start: bool = True,
               slots: RunningSlots = UNLIMITED) -> list[SessionEvent]:
        return [SessionCreated(config=config, owner=owner), *(_run(owner, slots, SessionStarted()) if start else [])]

    @handles(StartSession, effects=(SessionStarted, SessionQueued), allowed={CREATED})
    def start(self, slots: RunningSlots = UNLIMITED) -> list[SessionEvent]:
        return _run(self.owner, slots, SessionStarted())

    @handles(PauseSession, effects=(PauseRequested, SessionPaused), allowed={RUNNING})
    def pause(self) -> list[SessionEvent]:
        return [] if self.pause_requested else [PauseRequested()]  # the driver pauses at the next step boundary

    @handles(ResumeSession, effects=(SessionResumed, SessionQueued), allowed={PAUSED})
    def resume(self, fuse_heads: bool | None = None, slots: RunningSlots = UNLIMITED) -> list[SessionEvent]:
        return _run(self.owner, slots, SessionResumed(fuse_heads=fuse_heads), fuse_heads)

    @handles(StopSession, effects=(StopRequested, SessionStopped), allowed={CREATED, QUEUED, RUNNING, PAUSED})
    def stop(self) -> list[SessionEvent]:
        if self.status == RUNNING:
            return [] if self.stop_requested else [StopRequested()]  # the driver stops at the next step boundary
        return [SessionStopped(step=self.checkpoint_step)]  # nothing runs: the last checkpoint (if any) stands

    @handles(ValidateSession, effects=(ValidationRequested,), allowed={RUNNING}, hint="; resume it first")
    def validate(self) -> list[SessionEvent]:
        return [] if self.validation_requested else [ValidationRequested()]

    @handles(DeleteSession, effects=(DeleteRequested, SessionDeleted), allowed=set(SessionStatus) - {NEW, DELETED},
             repeat=lambda s: s.status == DELETED)
    def delete(self) -> list[SessionEvent]:
        """Deleted at once, or (running) stopped at the next step boundary and deleted then."""
        if self.status != RUNNING:
            return [SessionDeleted()]
        return [*([] if self.stop_requested else [StopRequested()]), *([] if self.delete_requested else [DeleteRequested()])]

    # -- decisions of the orchestrator and its drivers (pure state logic) -----------------
    def claim(self, orchestrator: str, takeover_from: str | None) -> list[SessionEvent]:
        """What a driver records to take the session up. Nothing when it ended meanwhile or someone
        else claimed it first; a stop or pause asked while nobody drove it ends it at the last
        checkpoint; else the claim, resuming from that checkpoint."""
        if self.status != RUNNING or self.claimed_by != takeover_from:
            return []
        return self.at_boundary(self.checkpoint_step) or [
            SessionClaimed(orchestrator=orchestrator, resume_from_step=self.checkpoint_step)
        ]

    def at_boundary(self, step: int) -> list[SessionEvent]:
        """What a pending stop (it wins) or pause records before `step`; the driver checkpoints `step` first."""
        if self.stop_requested:
            return [SessionStopped(step=step), *([SessionDeleted()] if self.delete_requested else [])]
        if self.pause_requested:
            return [SessionPaused(step=step)]
        return []

    def pause_for_capacity(self, reason: str) -> list[SessionEvent]:
        """The live PNodes cannot hold the network: pause at the last checkpoint until they can."""
        return [SessionPaused(step=self.checkpoint_step, reason=f"not enough capacity: {reason}", auto_resume=True)]

    def resume_for_capacity(self) -> list[SessionEvent]:
        """Capacity is back: the orchestrator resumes what it paused itself (nothing a user paused)."""
        return [SessionResumed()] if self.waits_for_capacity else []

    def admit(self) -> list[SessionEvent]:
        """A running slot of its owner freed: the orchestrator starts the queued session."""
        return [SessionStarted()] if self.status == QUEUED else []

    # -- the fold ---------------------------------------------------------------------------
    def apply(self, event: EventEnvelope, seq: int) -> None:
        self.last_seq = max(self.last_seq, seq)
        handler = _APPLY.get(type(event.payload))
        if handler is not None:
            handler(self, event.payload)

    @applies(SessionCreated)
    def _on_created(self, e: SessionCreated) -> None:
        self.status, self.owner, self.config, self.fuse_heads = CREATED, e.owner, e.config, e.config.fuse_heads

    @applies(SessionStarted)
    def _on_started(self, e: SessionStarted) -> None:
        self.status, self.queue_reason = RUNNING, None

    @applies(SessionQueued)
    def _on_queued(self, e: SessionQueued) -> None:
        self.status, self.queue_reason, self.pause_reason, self.auto_resume = QUEUED, e.reason, None, False
        if e.fuse_heads is not None:
            self.fuse_heads = e.fuse_heads

    @applies(SessionClaimed)
    def _on_claimed(self, e: SessionClaimed) -> None:
        self.claimed_by = e.orchestrator
        self.pnodes_in_state = self.checkpoint_pnodes.get(e.resume_from_step, [])

    @applies(Allocated, Reallocated)
    def _on_allocated(self, e: Allocated) -> None:
        self.allocation = {p.vnode: p.pnode for p in e.placements if p.replica == 0}
        self.pnodes = list(e.pnodes)
        self.pnodes_in_state = sorted(set(self.pnodes_in_state) | set(e.pnodes))

    @applies(RolledBack)
    def _on_rolled_back(self, e: RolledBack) -> None:
        self.pnodes_in_state = sorted(set(self.checkpoint_pnodes.get(e.to_step, [])) | set(self.pnodes))

    @applies(StepCompleted)
    def _on_step(self, e: StepCompleted) -> None:
        self.next_step, self.last_loss = max(self.next_step, e.step + 1), e.loss

    @applies(PauseRequested)
    def _on_pause_requested(self, e: PauseRequested) -> None:
        self.pause_requested = True

    @applies(StopRequested)
    def _on_stop_requested(self, e: StopRequested) -> None:
        self.stop_requested = True

    @applies(DeleteRequested)
    def _on_delete_requested(self, e: DeleteRequested) -> None:
        self.delete_requested = True

    @applies(ValidationRequested)
    def _on_validation_requested(self, e: ValidationRequested) -> None:
        self.validation_requested = True

    @applies(ValidationCompleted)
    def _on_validation_completed(self, e: ValidationCompleted) -> None:
        self.validation_requested = False

    @applies(SessionPaused)
    def _on_paused(self, e: SessionPaused) -> None:
        self.status, self.pause_requested, self.claimed_by = PAUSED, False, None
        self.pause_reason, self.auto_resume = e.reason, e.auto_resume

    @applies(SessionResumed)
    def _on_resumed(self, e: SessionResumed) -> None:
        self.status, self.pause_reason, self.auto_resume = RUNNING, None, False
        if e.fuse_heads is not None:
            self.fuse_heads = e.fuse_heads

    @applies(CheckpointCommitted)
    def _on_checkpoint(self, e: CheckpointCommitted) -> None:
        self.checkpoints.append(e)
        self.checkpoint_pnodes[e.step] = self.pnodes_in_state

    @applies(SamplesGenerated)
    def _on_samples(self, e: SamplesGenerated) -> None:
        self.last_sampled_step = max(self.last_sampled_step, e.step)

    @applies(CheckpointPruned, CheckpointDiscarded)
    def _on_pruned(self, e: CheckpointPruned | CheckpointDiscarded) -> None:
        self.checkpoints = [c for c in self.checkpoints if c.step != e.step]
        self.checkpoint_pnodes.pop(e.step, None)

    @applies(VerificationSeeded)
    def _on_verification_seeded(self, e: VerificationSeeded) -> None:
        self.verify_seed = e.seed

    @applies(PNodeQuarantined)
    def _on_quarantined(self, e: PNodeQuarantined) -> None:
        self.quarantined = sorted(set(self.quarantined) | {e.pnode})

    @applies(ResultsDiscarded)
    def _on_results_discarded(self, e: ResultsDiscarded) -> None:
        """The steps from `from_step` on are run and recorded again; later checkpoints no longer count."""
        self.next_step = min(self.next_step, e.from_step)
        self.checkpoints = [c for c in self.checkpoints if c.step <= e.from_step]
        self.checkpoint_pnodes = {s: p for s, p in self.checkpoint_pnodes.items() if s <= e.from_step}
        self.last_sampled_step = min(self.last_sampled_step, e.from_step)  # samples of discarded states are taken again

    @applies(SessionStopped)
    def _on_stopped(self, e: SessionStopped) -> None:
        self.status, self.claimed_by, self.queue_reason = SessionStatus.STOPPED, None, None

    @applies(SessionCompleted)
    def _on_completed(self, e: SessionCompleted) -> None:
        self.status, self.claimed_by = SessionStatus.COMPLETED, None

    @applies(SessionFailed)
    def _on_failed(self, e: SessionFailed) -> None:
        self.status, self.claimed_by, self.failure = SessionStatus.FAILED, None, e.reason

    @applies(SessionDeleted)
    def _on_deleted(self, e: SessionDeleted) -> None:
        self.status, self.claimed_by, self.queue_reason, self.delete_requested = DELETED, None, None, False


def _run(owner: str | None, slots: RunningSlots, event: SessionEvent, fuse_heads: bool | None = None) -> list[SessionEvent]:
    """`event` (started, resumed) when the owner has a running slot free, else the session queues."""
    return [event] if slots.free else [SessionQueued(reason=slots.reason(owner), fuse_heads=fuse_heads)]


def fold(session_id: str, events: list[tuple[int, EventEnvelope]]) -> SessionState:
    state = SessionState(id=session_id)
    for seq, event in events:
        state.apply(event, seq)
    return state
