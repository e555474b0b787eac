"""One table of control requests (`member.CONTROL`) answers for the real PNode and the simulated one."""

from __future__ import annotations

import typing

import pytest

from computeall.pnode.member import CONTROL
from computeall.pnode.node import PNode
from computeall.pnode.simulated import NO_SPOT_CHECKS, SimulatedPNode
from computeall.protocol.credentials import Credential
from computeall.protocol.pnode_api import PNodeRequest, Recompute, RunStep, SendCheckMaterial, Unload
from computeall.protocol.subjects import Subjects
from computeall.protocol.verification import CheckItem

KINDS = (PNode, SimulatedPNode)


def test_every_request_of_the_protocol_has_one_answer():
    union = typing.get_args(PNodeRequest)[0]
    assert set(CONTROL) == set(typing.get_args(union))


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_every_kind_of_pnode_answers_every_request(kind):
    """What `BusMember` leaves to a kind of PNode, each kind does; nothing falls through unanswered."""
    for request_type, control in CONTROL.items():
        assert callable(getattr(kind, control.method, None)), f"{kind.__name__} does not answer {request_type.__name__}"


def simulated() -> SimulatedPNode:
    return SimulatedPNode(Credential(role="pnode", name="p1", servers=["nats://h:1"]), 1 << 30, Subjects("ca"), 1e9)


async def test_a_request_about_a_session_without_a_plan_says_so():
    for request in (RunStep(session_id="s", step=0), Unload(session_id="s")):
        reply = await simulated().dispatch(request)
        assert (reply.ok, reply.state_lost, reply.error) == (False, True, "no plan loaded for session s")


async def test_a_simulated_pnode_refuses_spot_checks_by_name():
    pnode = simulated()
    pnode.stages["s"] = object()  # any stage: the answer does not look at it
    item = CheckItem(step=0, micro=0, vnode="embed", pnode="p0", checker="p1", backward=False)
    for request in (SendCheckMaterial(session_id="s", check_id="0/0/embed", to="p2"), Recompute(session_id="s", item=item)):
        with pytest.raises(ValueError, match=NO_SPOT_CHECKS):
            await pnode.dispatch(request)
