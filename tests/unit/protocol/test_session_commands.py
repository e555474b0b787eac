"""A session command is declared once, by its method on the aggregate (`@handles`); the orchestrator's
decision, the CLI's verbs, the GraphQL mutations and the commands a session allows (the dashboard's
buttons) are derived from that declaration, and agree with what the aggregate does."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest

from computeall.cli.main import build_parser
from computeall.monitor.server import schema
from computeall.protocol.commands import Command, CreateSession, ResumeSession
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.events import (EventEnvelope, SessionCompleted, SessionCreated, SessionDeleted, SessionFailed,
                                        SessionPaused, SessionQueued, SessionStarted, SessionStopped)
from computeall.protocol.session_commands import COMMANDS, allowed_verbs, decide, handles, session_verbs
from computeall.protocol.session_state import Rejected, RunningSlots, SessionState
from computeall.protocol.session_status import SessionStatus

ROOT = Path(__file__).resolve().parents[3]
CONFIG = SessionConfig(network_yaml="name: t\n", data=DataConfig(files=["corpus.txt"]), steps=12)
FREE, FULL = RunningSlots(running=0, limit=2), RunningSlots(running=2, limit=2)
CREATED = SessionCreated(config=CONFIG, owner="alice")
# a session in each status, as its events leave it
LIVES = {
    SessionStatus.NEW: [],
    SessionStatus.CREATED: [CREATED],
    SessionStatus.QUEUED: [CREATED, SessionQueued(reason="alice has 2 sessions running (limit 2)")],
    SessionStatus.RUNNING: [CREATED, SessionStarted()],
    SessionStatus.PAUSED: [CREATED, SessionStarted(), SessionPaused(step=0)],
    SessionStatus.STOPPED: [CREATED, SessionStopped(step=0)],
    SessionStatus.COMPLETED: [CREATED, SessionStarted(), SessionCompleted(steps=12, final_loss=None)],
    SessionStatus.FAILED: [CREATED, SessionStarted(), SessionFailed(reason="x")],
    SessionStatus.DELETED: [CREATED, SessionDeleted()],
}


def session(status: SessionStatus) -> SessionState:
    state = SessionState(id="s1")
    for seq, payload in enumerate(LIVES[status], start=1):
        state.apply(EventEnvelope(actor="alice", session_id="s1", payload=payload), seq)
    assert state.status == status
    return state


def example(model: type) -> object:
    return model(config=CONFIG.model_copy(update={"seed": 7})) if model is CreateSession else model()


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.capitalize() for word in rest)


def test_every_command_has_its_method_on_the_aggregate():
    commands = typing.get_args(typing.get_args(Command)[0])
    missing = [c.__name__ for c in commands if c not in COMMANDS]
    assert not missing, f"{missing} have no `@handles` method on SessionState: declare the method that decides each"
    assert set(COMMANDS) == set(commands)
    assert set(LIVES) == set(SessionStatus), "a session in every status"


@pytest.mark.parametrize("status", list(SessionStatus))
@pytest.mark.parametrize("model", list(COMMANDS), ids=lambda m: m.__name__)
@pytest.mark.parametrize("slots", [FREE, FULL], ids=["slot free", "slots full"])
def test_the_declaration_is_what_the_aggregate_does(model, status, slots):
    """Allowed: the command records its declared effect (or nothing, a repeat); else it is refused."""
    spec, state = COMMANDS[model], session(status)
    try:
        events = decide(state, example(model), "alice", slots)
    except Rejected:
        assert status not in spec.allowed, f"{spec.verb} is declared allowed when {status}, but refused"
        return
    assert status in spec.allowed or events == [], f"{spec.verb} is declared refused when {status}, but recorded {events}"
    assert not events or any(isinstance(e, spec.effects) for e in events), \
        f"{spec.verb} when {status} recorded {events}, none of its declared effects {spec.effects}"


@pytest.mark.parametrize("status", list(SessionStatus))
def test_the_commands_a_session_allows_are_the_ones_the_aggregate_takes(status):
    """What the dashboard enables (`Session.commands`) is what the orchestrator would take from it."""
    taken = []
    for verb, spec in session_verbs().items():
        try:
            if decide(session(status), example(spec.model), "alice", FREE):
                taken.append(verb)
        except Rejected:
            pass
    assert taken == allowed_verbs(status)


def test_a_method_must_take_its_commands_fields():
    with pytest.raises(TypeError, match="fuse_heads"):
        handles(ResumeSession, effects=(), allowed={SessionStatus.PAUSED})(lambda self, slots: [])


def test_the_cli_has_a_verb_per_command_with_an_option_per_field():
    parser = build_parser()
    assert parser.parse_args(["session", "resume", "s1", "--no-fuse-heads"]).fuse_heads is False
    assert parser.parse_args(["session", "resume", "s1"]).fuse_heads is None
    for verb, spec in session_verbs().items():
        args = parser.parse_args(["session", verb, "s1"])
        assert (args.verb, args.session_id) == (verb, "s1")
        assert all(getattr(args, name) is None for name in spec.fields)


def test_graphql_has_a_mutation_per_command_with_its_fields_as_arguments():
    built = schema()
    mutations = built.mutation_type.fields
    for verb, spec in session_verbs().items():
        assert set(mutations[f"{verb}Session"].args) == {"id", *map(camel, spec.fields)}
    creating = [spec for spec in COMMANDS.values() if spec.creates]
    assert [s.model for s in creating] == [CreateSession]
    assert set(mutations["createSession"].args) == set(map(camel, COMMANDS[CreateSession].fields))
    assert list(built.type_map["SessionCommand"].values) == list(session_verbs())


def test_the_dashboard_restates_no_rule():
    controls = (ROOT / "web" / "src" / "components" / "SessionControls.vue").read_text()
    spelled = [s.value for s in SessionStatus if re.search(rf"[\"']{s.value}[\"']", controls)]
    assert not spelled, f"SessionControls.vue decides by the statuses {spelled}: it reads `Session.commands`"
    assert "commands.includes" in controls
