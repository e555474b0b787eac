"""How `bus.connect` reads a server's refusal, whichever way nats-py happened to see it."""

from __future__ import annotations

import nats
import nats.errors
import pytest

from computeall.protocol import bus
from computeall.protocol.credentials import Credential

ANONYMOUS = Credential(role="user", name="anonymous", servers=["nats://127.0.0.1:1"])


class Connected:
    """What nats.connect returns, as far as `bus.connect` looks at it."""

    def __init__(self) -> None:
        self.options: dict = {}


def tries(monkeypatch, *outcomes: BaseException | Connected) -> list[int]:
    """nats.connect raising (or returning) `outcomes` in turn, the last one from then on; returns the
    list its calls are counted in."""
    calls: list[int] = []

    async def connect(**_options):
        calls.append(1)
        outcome = outcomes[min(len(calls), len(outcomes)) - 1]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    monkeypatch.setattr(nats, "connect", connect)
    return calls


async def test_a_refusal_seen_as_a_lost_connection_is_asked_again_and_read(monkeypatch):
    calls = tries(monkeypatch, ConnectionResetError("Connection lost"), nats.errors.Error("nats: 'Authorization Violation'"))
    with pytest.raises(bus.BusConnectError, match="Authorization Violation") as refused:
        await bus.connect(ANONYMOUS, name="test", allow_reconnect=False)
    assert refused.value.refused and len(calls) == 1 + 1 + bus.REFUSAL_RETRIES


async def test_a_refusal_read_while_the_server_reloads_is_asked_again(monkeypatch):
    """nats-server refuses a CONNECT it reads mid-reload (its users half applied); a moment later it admits it."""
    connection = Connected()
    calls = tries(monkeypatch, nats.errors.Error("nats: 'Authorization Violation'"), connection)
    assert await bus.connect(ANONYMOUS, name="test", allow_reconnect=False) is connection
    assert len(calls) == 2


async def test_a_connection_lost_every_time_ends_after_a_few_tries(monkeypatch):
    calls = tries(monkeypatch, ConnectionResetError("Connection lost"))
    with pytest.raises(bus.BusConnectError, match="Connection lost") as lost:
        await bus.connect(ANONYMOUS, name="test", allow_reconnect=False)
    assert not lost.value.refused and len(calls) == bus.HANDSHAKE_RETRIES + 1


async def test_an_unreachable_server_is_tried_once_when_reconnects_are_off(monkeypatch):
    calls = tries(monkeypatch, ConnectionRefusedError("refused"))
    with pytest.raises(bus.BusConnectError):
        await bus.connect(ANONYMOUS, name="test", allow_reconnect=False)
    assert len(calls) == 1
