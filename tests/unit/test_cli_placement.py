"""The command line of issue 31's items: `--stages` reaches the session config (or is refused saying
why), and `session create` fails at once with the orchestrator's reason when the create is refused."""

import asyncio
from pathlib import Path

import pytest

from computeall.cli.commands.run import session_config
from computeall.cli.commands.session import _await_effect
from computeall.cli.errors import UserError
from computeall.cli.main import build_parser
from computeall.protocol.events import CommandRejected, EventEnvelope, SessionCreated

NETWORK = Path(__file__).resolve().parents[2] / "examples" / "networks" / "micro-gpt.yaml"


def parse(*flags: str):
    return build_parser().parse_args(["session", "create", "--network", str(NETWORK), "--data", str(NETWORK), *flags])


def test_stages_reach_the_session_config():
    assert session_config(parse()).pipeline.stages == "auto"
    assert session_config(parse("--stages", "3")).pipeline.stages == 3


def test_a_stage_count_that_cannot_be_is_refused_saying_why(capsys):
    with pytest.raises(SystemExit):
        parse("--stages", "three")
    assert "--stages takes a number or auto, not 'three'" in capsys.readouterr().err
    with pytest.raises(UserError, match=r"^pipeline.stages: give a number of stages \(1 or more\) or auto, not 0$"):
        session_config(parse("--stages", "0"))


class Refusing:
    """The part of the CLI's client `session create` waits on: the session's events as they come."""

    def __init__(self, *payloads) -> None:
        self.events = [EventEnvelope(session_id="s1", payload=p) for p in payloads]

    async def follow(self, sid: str):
        for seq, event in enumerate(self.events, 1):
            yield seq, event
        await asyncio.sleep(3600)  # the stream stays open, as the real one does


def test_session_create_fails_at_once_with_the_reason_of_a_refused_create():
    reason = "data: no dataset named 'alices' is yours or public"
    client = Refusing(CommandRejected(command_id="other", command_type="StopSession", reason="not this one"),
                      CommandRejected(command_id="c1", command_type="CreateSession", reason=reason))
    with pytest.raises(UserError, match=f"^rejected: {reason}$"):
        asyncio.run(_await_effect(client, "s1", "c1", (SessionCreated,), after_seq=0, timeout=5))


def test_session_create_returns_once_the_session_is_created():
    client = Refusing(SessionCreated(config=session_config(parse()), owner="local"))
    assert asyncio.run(_await_effect(client, "s1", "c1", (SessionCreated,), after_seq=0, timeout=5)) == "SessionCreated"
