"""A quarantined PNode's credential: revoked through secure membership's authority; no authority, or a
refusal, leaves the quarantine standing and says so (`credential_revoked` false), never fails it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import nats.errors
import pytest

from computeall.orchestrator.verification.quarantine import revoke_credential
from computeall.protocol.membership_api import MembershipReply
from computeall.protocol.subjects import Subjects


class Authority:
    """Answers the membership request as the authority would (or raises as nats-py does)."""

    def __init__(self, answer: MembershipReply | Exception) -> None:
        self.answer = answer
        self.asked: list[tuple[str, dict]] = []

    async def request(self, subject: str, data: bytes, timeout: float):
        self.asked.append((subject, json.loads(data)))
        if isinstance(self.answer, Exception):
            raise self.answer
        return SimpleNamespace(data=self.answer.model_dump_json().encode())


async def test_the_authority_revokes_it():
    authority = Authority(MembershipReply(revoked=["m-7"]))
    assert await revoke_credential(authority, Subjects("ca"), "pnode-2", "spot checks: wrong output")
    ((subject, request),) = authority.asked
    assert subject == "ca.sec.pnode.revoke" and request["pnode"] == "pnode-2"


@pytest.mark.parametrize("answer", [
    nats.errors.NoRespondersError(),  # no authority runs (docker compose)
    nats.errors.TimeoutError(),
    MembershipReply(ok=False, error="no such PNode"),
    MembershipReply(revoked=[]),  # nothing of that name was a member
])
async def test_no_revocation_is_reported_not_raised(answer):
    assert not await revoke_credential(Authority(answer), Subjects("ca"), "pnode-2", "spot checks")
