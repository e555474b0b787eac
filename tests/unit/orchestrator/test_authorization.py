"""Who may command a session: the user its subject names, and only the session's owner."""

import pytest

from computeall.orchestrator.authorization import authorize
from computeall.protocol.commands import CommandEnvelope, CreateSession, PauseSession
from computeall.protocol.config import DataConfig, ReplayOf, SessionConfig
from computeall.protocol.session_state import Rejected, SessionState
from computeall.protocol.subjects import Subjects, command_sender


def state(owner: str | None) -> SessionState:
    s = SessionState(id="s1")
    s.owner = owner
    return s


async def owners(sid: str) -> str | None:
    return {"bobs": "bob", "alices": "alice", "s1": "alice"}.get(sid)


async def test_the_subjects_user_commands_its_own_sessions_only():
    pause = CommandEnvelope(actor="alice", session_id="s1", payload=PauseSession())
    await authorize("alice", pause, state("alice"), owners)
    with pytest.raises(Rejected, match="belongs to another user"):
        await authorize("alice", pause, state("bob"), owners)
    with pytest.raises(Rejected, match="says it is from 'bob', but user 'alice' sent it"):
        await authorize("alice", pause.model_copy(update={"actor": "bob"}), state("bob"), owners)
    with pytest.raises(Rejected, match="belongs to another user"):  # no SessionCreated: its first command says
        await authorize("bob", pause.model_copy(update={"actor": "bob"}), state(None), owners)


async def test_a_user_replays_only_their_own_sessions():
    def create(replayed: str) -> CommandEnvelope:
        config = SessionConfig(network_yaml="x", data=DataConfig(files=["a"]), steps=2,
                               replay_of=ReplayOf(session_id=replayed, from_step=0, to_step=1))
        return CommandEnvelope(actor="alice", session_id="s1", payload=CreateSession(config=config))

    await authorize("alice", create("alices"), state(None), owners)
    with pytest.raises(Rejected, match="has no session bobs to replay"):
        await authorize("alice", create("bobs"), state(None), owners)


def test_the_sender_is_read_from_the_command_subject():
    s = Subjects("ca")
    assert command_sender(s, s.session_cmd("s1", "alice")) == ("alice", "s1")
    for bad in ("ca.cmd.session.s1", "ca.cmd.a.b.session.s1", "xx.cmd.alice.session.s1"):
        with pytest.raises(ValueError):
            command_sender(s, bad)
