"""What a PNode answers: a pass that gave up waiting for its inputs says so (`starved`), so the
orchestrator can tell it from a PNode that never answers; the testing fault `mute` plays the latter."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from computeall.pnode.member import BusMember, InputsNeverCame, pass_deadline
from computeall.protocol.credentials import Credential
from computeall.protocol.faults import FaultSpec
from computeall.protocol.pnode_api import ApplyStep, PNodeReply, RunStep
from computeall.protocol.subjects import Subjects


class Bus:
    def __init__(self) -> None:
        self.published: list[tuple[str, bytes]] = []

    async def publish(self, subject: str, data: bytes) -> None:
        self.published.append((subject, data))


class Member(BusMember):
    async def dispatch(self, request) -> PNodeReply:
        if isinstance(request, RunStep):
            raise InputsNeverCame(f"train step {request.step}: inputs of [(0, 'b0.attn')] did not arrive within 5.0s")
        return PNodeReply(ok=True, pnode=self.name, step=request.step)


def member(fault: FaultSpec | None = None) -> Member:
    m = Member(Credential(role="pnode", name="p1", servers=["nats://h:1"]), 1 << 30, "cpu", Subjects("ca"), fault=fault)
    m.nc = Bus()
    return m


async def ask(m: Member, request) -> PNodeReply | None:
    await m._handle_ctl(SimpleNamespace(data=request.model_dump_json().encode(), reply="_INBOX.orchestrator.o.1"))
    replies = [data for subject, data in m.nc.published if subject == "_INBOX.orchestrator.o.1"]
    return PNodeReply.model_validate_json(replies[0]) if replies else None


async def test_a_pass_whose_inputs_never_came_answers_starved():
    reply = await ask(member(), RunStep(session_id="s", step=4, give_up_s=5.0))
    assert (reply.ok, reply.starved, reply.pnode, reply.step) == (False, True, "p1", 4)
    assert "did not arrive within 5.0s" in reply.error


async def test_a_muted_pnode_takes_the_request_and_never_answers():
    m = member(FaultSpec.parse("mute:ApplyStep@3"))
    assert (await ask(m, ApplyStep(session_id="s", step=2, lr=0.1))).ok, "before step 3 it answers"
    m.nc.published.clear()
    assert await ask(m, ApplyStep(session_id="s", step=3, lr=0.1)) is None
    assert m.pending == 0 and m.nc.published == []
    assert (await ask(m, RunStep(session_id="s", step=3))).starved, "other kinds are answered"


def test_a_pass_gives_up_when_the_orchestrator_says_or_at_the_pnodes_own_limit():
    assert pass_deadline(RunStep(session_id="s", step=1, give_up_s=12.5), 600.0) == 12.5
    assert pass_deadline(RunStep(session_id="s", step=1), 600.0) == 600.0
    assert pass_deadline(RunStep(session_id="s", step=1, give_up_s=900.0), 600.0) == 600.0


def test_the_mute_fault_is_parsed_and_checked():
    spec = FaultSpec.parse("mute:RunStep@3")
    assert (spec.request, spec.from_step, str(spec)) == ("RunStep", 3, "mute:RunStep@3")
    assert not spec.mutes("RunStep", 2) and spec.mutes("RunStep", 3) and not spec.mutes("ApplyStep", 3)
    assert FaultSpec.parse("mute:Reset").mutes("Reset", None), "a request without a step: always"
    for bad in ("mute:Nothing", "mute:RunStep@soon", "mute:"):
        with pytest.raises(ValueError, match=r"or mute:REQUEST\[@STEP\]"):
            FaultSpec.parse(bad)
