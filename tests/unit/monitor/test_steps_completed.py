"""One step count everywhere: the monitor's `step` of a session is steps completed, the session
fold's `next_step` (what `session list` prints as done/total), after every event of whole lives
(rollbacks, re-runs and discarded results included); and the reason shown is the one standing now.
A deleted session is no longer served at all."""

from __future__ import annotations

from computeall.monitor import store
from computeall.monitor.db import Database
from computeall.monitor.projector import Message, project
from computeall.monitor.reads import session
from computeall.protocol.events import EventEnvelope, SessionPaused, SessionResumed
from computeall.protocol.session_state import SessionState
from computeall.protocol.session_status import SessionStatus

from .test_session_story import STORIES, db, messages  # noqa: F401  (db: the fixture)


def monitor_step(database: Database, sid: str) -> int | None:
    """The session's step as served; None when it is not served (deleted)."""
    row = session(database.con, database.con.execute("SELECT owner FROM sessions WHERE id = ?", [sid]).fetchone()[0], sid)
    return row["step"] if row else None


def served_step(fold: SessionState) -> int | None:
    return None if fold.status == SessionStatus.DELETED else fold.next_step


def test_steps_completed_after_every_event_is_the_folds_next_step(db):
    folds = {sid: SessionState(id=sid) for sid in STORIES}
    for sid, env, msg in messages():
        batch = project([msg])
        db.transaction(lambda con: store.apply(db, con, batch, []))
        folds[sid].apply(env, msg.seq)
        assert monitor_step(db, sid) == served_step(folds[sid]), f"{sid} after {env.type}"
    # the stories cover what moves it other than a new step: a re-run after a rollback, discarded results
    assert {sid: fold.next_step for sid, fold in folds.items()} == {"stopped": 4, "completed": 1, "failed": 0, "deleted": 1}


def test_in_one_batch_too(db):
    batch = project([msg for _, _, msg in messages()])
    db.transaction(lambda con: store.apply(db, con, batch, []))
    for sid, payloads in STORIES.items():
        fold = SessionState(id=sid)
        for seq, payload in enumerate(payloads, 1):
            fold.apply(EventEnvelope(session_id=sid, payload=payload), seq)
        assert monitor_step(db, sid) == served_step(fold), sid


def test_a_resume_clears_the_pause_reason(db):
    # the fold forgets why it paused once it runs again; the dashboard must not keep showing it
    why = "not enough capacity: embed needs 2 GiB"
    first = [m for sid, _, m in messages() if sid == "stopped"][:2]  # created, started
    for batch_messages, reason in (([*first, log(3, SessionPaused(step=0, reason=why, auto_resume=True))], why),
                                   ([log(4, SessionResumed())], None)):
        batch = project(batch_messages)
        db.transaction(lambda con: store.apply(db, con, batch, []))
        assert db.con.execute("SELECT reason FROM sessions WHERE id = 'stopped'").fetchone() == (reason,)


def log(seq: int, payload) -> Message:
    env = EventEnvelope(session_id="stopped", payload=payload)
    return Message("CA_LOG", seq, f"ca.evt.session.stopped.{env.type}", env.model_dump_json().encode())
