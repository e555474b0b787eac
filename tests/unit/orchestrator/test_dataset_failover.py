"""A dataset service that the bus fails mid-request (its streams electing leaders after a machine died) says
so, and what asked it asks again: the orchestrator preparing a session for the bus's patience, then
`BusUnavailable` (the driver ends without failing the session, which is taken up again), a PNode's batch
through `through_failover`. A refusal is still the session's. Seen failing a session taken over after a
machine's loss: tests/integration/test_bus_machines.py."""

from __future__ import annotations

import asyncio

import pytest

from computeall.orchestrator.errors import SessionError
from computeall.orchestrator.preparation import dataset_call
from computeall.protocol.bus_failover import BusUnavailable, through_failover
from computeall.protocol.dataset_api import DatasetReply
from computeall.protocol.dataset_client import DatasetBusError, DatasetError, _reply


def scripted(*outcomes):
    it = iter(outcomes)

    async def call():
        outcome = next(it)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return call


def test_a_reply_says_whether_the_bus_failed_the_service():
    with pytest.raises(DatasetBusError):
        _reply(DatasetReply(ok=False, error="the bus failed it", transient=True).model_dump_json().encode())
    with pytest.raises(DatasetError) as refused:
        _reply(DatasetReply(ok=False, error="no such dataset").model_dump_json().encode())
    assert not isinstance(refused.value, DatasetBusError)


def test_the_orchestrator_asks_again_while_the_bus_fails_the_service():
    call = scripted(DatasetBusError("failing over"), DatasetBusError("failing over"), {"name": "d"})
    assert asyncio.run(dataset_call(call, patience_s=5.0)) == {"name": "d"}


def test_past_the_patience_it_is_the_bus_that_is_unavailable_never_the_session():
    call = scripted(*[DatasetBusError("failing over")] * 50)
    with pytest.raises(BusUnavailable):
        asyncio.run(dataset_call(call, patience_s=0.3))


def test_a_refusal_is_still_the_sessions():
    with pytest.raises(SessionError, match="dataset: no such dataset"):
        asyncio.run(dataset_call(scripted(DatasetError("no such dataset"))))


def test_a_pnode_asks_for_its_batch_again():
    call = scripted(DatasetBusError("failing over"), (b"i64", [1, 2], b""))
    assert asyncio.run(through_failover(call, "batch 0 of step 3", 5.0)) == (b"i64", [1, 2], b"")
