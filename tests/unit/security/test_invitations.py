"""Invitations: a token is a member only its holder can connect as, until revoked or expired."""

from __future__ import annotations

import time

import pytest

from computeall.cli.security.invitations import InvitationError, invitations, invite, revoke, state
from computeall.protocol.credentials import nkey_public
from computeall.protocol.invites import Invite, InviteError

SERVERS = ["tls://10.0.0.1:4222"]


def test_the_token_carries_a_pnode_credential_the_server_knows(security, trust):
    made = invite(security, "pnode", SERVERS, trust, name="far", memory="4GiB")
    joined = Invite.from_token(made.token())
    credential = joined.credential()
    assert (credential.role, credential.name, credential.servers) == ("pnode", "far", SERVERS)
    assert credential.tls.ca_sha256 == trust.ca_sha256 and joined.memory == "4GiB"
    member = security.members.read().find(made.id)
    assert member.public_key == nkey_public(credential.nkey_seed) and state(member) == "active"


def test_a_name_already_taken_is_refused(security, trust):
    invite(security, "pnode", SERVERS, trust, name="far")
    with pytest.raises(InvitationError, match="a pnode named far is already a member"):
        invite(security, "pnode", SERVERS, trust, name="far")


def test_revoked_and_expired_invitations_are_not_active(security, trust):
    kept, revoked = (invite(security, "pnode", SERVERS, trust) for _ in range(2))
    short = invite(security, "pnode", SERVERS, trust, expires_in_s=60)
    revoke(security, revoked.id)
    states = {m.id: state(m, now=time.time() + 120) for m in invitations(security)}
    assert states == {kept.id: "active", revoked.id: "revoked", short.id: "expired"}
    assert {m.id for m in security.members.read().active()} >= {kept.id, short.id}
    with pytest.raises(InvitationError, match="no invitation nope"):
        revoke(security, "nope")


def test_a_token_that_cannot_be_used_says_why(security, trust):
    token = invite(security, "pnode", SERVERS, trust, expires_in_s=60).token()
    with pytest.raises(InviteError, match="expired"):
        Invite.from_token(token, now=time.time() + 120)
    with pytest.raises(InviteError, match="damaged"):
        Invite.from_token(token[:-20])
    with pytest.raises(InviteError, match="not an invite token"):
        Invite.from_token("hello")
    forged = Invite.from_token(token).model_copy(update={"tls": trust.model_copy(update={"ca_sha256": "0" * 64})})
    with pytest.raises(InviteError, match="damaged"):  # a CA that does not match its pinned fingerprint
        Invite.from_token(forged.token())
