"""Who may command a session: the user its subject names, and only the session's owner, decided
from the owners the orchestrator holds in memory."""

import pytest

from computeall.orchestrator.authorization import authorize, claim_new_id
from computeall.protocol.commands import CommandEnvelope, CreateSession, PauseSession
from computeall.protocol.config import DataConfig, ReplayOf, SessionConfig
from computeall.protocol.session_state import Rejected
from computeall.protocol.subjects import Subjects, command_sender

OWNERS = {"bobs": "bob", "alices": "alice", "s1": "alice"}  # the sessions seen created


def create(sid: str = "new", replayed: str | None = None) -> CommandEnvelope:
    replay = ReplayOf(session_id=replayed, from_step=0, to_step=1) if replayed else None
    config = SessionConfig(network_yaml="x", data=DataConfig(files=["a"]), steps=2, replay_of=replay)
    return CommandEnvelope(actor="alice", session_id=sid, payload=CreateSession(config=config))


def test_the_subjects_user_commands_its_own_sessions_only():
    pause = CommandEnvelope(actor="alice", session_id="s1", payload=PauseSession())
    authorize("alice", pause, OWNERS.get)
    with pytest.raises(Rejected, match="belongs to another user"):
        authorize("alice", pause.model_copy(update={"session_id": "bobs"}), OWNERS.get)
    with pytest.raises(Rejected, match="says it is from 'bob', but user 'alice' sent it"):
        authorize("alice", pause.model_copy(update={"actor": "bob"}), OWNERS.get)
    with pytest.raises(Rejected, match="user alice has no session nope"):  # never created: nothing to command
        authorize("alice", pause.model_copy(update={"session_id": "nope"}), OWNERS.get)
    authorize("alice", create(), OWNERS.get)  # a new id may be created


async def test_a_new_id_is_the_users_who_commanded_it_first():
    async def first_commander(sid: str) -> str | None:
        return {"refused": "bob"}.get(sid)  # bob's create of it was refused: the id is still his

    await claim_new_id("alice", "new", first_commander)
    await claim_new_id("bob", "refused", first_commander)
    with pytest.raises(Rejected, match="belongs to another user"):
        await claim_new_id("alice", "refused", first_commander)


def test_a_user_replays_only_their_own_sessions():
    authorize("alice", create(replayed="alices"), OWNERS.get)
    with pytest.raises(Rejected, match="has no session bobs to replay"):
        authorize("alice", create(replayed="bobs"), OWNERS.get)


def test_the_sender_is_read_from_the_command_subject():
    s = Subjects("ca")
    assert command_sender(s, s.session_cmd("s1", "alice")) == ("alice", "s1")
    for bad in ("ca.cmd.session.s1", "ca.cmd.a.b.session.s1", "xx.cmd.alice.session.s1"):
        with pytest.raises(ValueError):
            command_sender(s, bad)
