"""The members a deployment's server accepts, and the local credentials issued from them."""

import time

from computeall.cli.security.deployment import Security
from computeall.cli.security.members import Member
from computeall.protocol.credentials import new_nkey_seed, nkey_public


def test_a_local_identity_is_created_once_and_kept(tmp_path):
    security = Security(tmp_path)
    first = security.issue("orchestrator", "orchestrator", ["nats://h:1"])
    again = security.issue("orchestrator", "orchestrator", ["nats://h:2"])
    assert again.nkey_seed == first.nkey_seed and again.servers == ["nats://h:2"]
    members = security.members.read().members
    assert [(m.role, m.name, m.source) for m in members] == [("orchestrator", "orchestrator", "local")]
    assert members[0].public_key == nkey_public(first.nkey_seed)


def test_a_revoked_local_identity_stays_revoked(tmp_path):
    security = Security(tmp_path)
    issued = security.issue("pnode", "pnode-0", ["nats://h:1"])
    with security.members.edit() as members:
        members.members[0].revoked = time.time()
    assert security.issue("pnode", "pnode-0", ["nats://h:1"]).nkey_seed == issued.nkey_seed
    assert security.members.read().active() == []


def test_expiry_and_revocation_make_a_member_inactive():
    member = Member(role="pnode", name="p", public_key=nkey_public(new_nkey_seed()), source="invite", expires=100.0)
    assert member.active(now=99.0) and not member.active(now=100.0)
    assert not member.model_copy(update={"revoked": 1.0}).active(now=0.0)
