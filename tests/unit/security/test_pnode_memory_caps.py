"""The most memory a PNode may offer is its credential's record's, not its own word: an invite's
--memory, what `up` gave the PNodes it starts, else the stated default."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from computeall.cli import supervisor as supervisor_module
from computeall.cli.security.authority import Authority
from computeall.cli.security.invitations import InvitationError, invite
from computeall.cli.supervisor import ServiceSpec, Supervisor
from computeall.pnode.options import share_of_ram
from computeall.protocol.membership_api import DEFAULT_PNODE_MEMORY, PNodeMemory

SERVERS = ["tls://10.0.0.1:4222"]


def test_an_invites_memory_is_the_pnodes_cap_and_the_default_applies_without_one(security, trust):
    invite(security, "pnode", SERVERS, trust, name="small", memory="2GiB")
    invite(security, "pnode", SERVERS, trust, name="plain")
    members = security.members.read()
    assert members.pnode_memory("small") == 2 << 30
    assert members.pnode_memory("plain") == DEFAULT_PNODE_MEMORY
    assert members.pnode_memory("nobody") == DEFAULT_PNODE_MEMORY, "no record: the default too"


def test_a_revoked_record_no_longer_counts_and_of_two_the_smaller_does(security, trust):
    security.issue("pnode", "twice", SERVERS, memory="64GiB")
    with security.members.edit() as members:
        members.members[0].revoked = time.time()
    assert security.members.read().pnode_memory("twice") == DEFAULT_PNODE_MEMORY
    security.issue("pnode", "twice", SERVERS, memory="64GiB")  # a new credential for the name
    invite(security, "pnode", SERVERS, trust, name="elsewhere", memory="1GiB")
    with security.members.edit() as members:  # two active credentials of one name: which connected is unknown
        members.members[-1].name = "twice"
    assert security.members.read().pnode_memory("twice") == 1 << 30


def test_an_invite_with_a_memory_that_is_no_size_is_refused(security, trust):
    with pytest.raises(InvitationError, match="--memory: 'lots' is not a size"):
        invite(security, "pnode", SERVERS, trust, name="far", memory="lots")
    assert security.members.read().members == []


async def test_the_authority_answers_the_cap_of_the_record(security, trust):
    invite(security, "pnode", SERVERS, trust, name="small", memory="3GiB")
    authority = Authority(SimpleNamespace(security=security))
    assert (await authority._pnode_memory(PNodeMemory(pnode="small"))).memory_bytes == 3 << 30
    assert (await authority._pnode_memory(PNodeMemory(pnode="other"))).memory_bytes == DEFAULT_PNODE_MEMORY


def test_a_local_pnode_is_capped_at_what_it_was_given(security):
    security.issue("pnode", "pnode-0", SERVERS, memory="8GiB")
    security.issue("pnode", "pnode-0", SERVERS, memory="4GiB")  # `up` again, giving less: the record follows
    assert security.members.read().pnode_memory("pnode-0") == 4 << 30


def test_up_gives_its_pnodes_a_memory_and_records_it_as_their_cap(tmp_path, monkeypatch):
    """Without --memory a PNode offers its share of the RAM: `up` says it on the command line and
    in the PNode's record alike, so the PNode cannot be counted at more than it was given."""
    started, capped = [], {}

    class Credentials:
        def credential_file(self, role, name=None, memory=None):
            capped[name] = memory
            return tmp_path / f"{name}.json"

    monkeypatch.setattr(supervisor_module.subprocess, "Popen", lambda argv, **_: started.append(argv) or
                        SimpleNamespace(pid=1, poll=lambda: None))
    supervisor = Supervisor(tmp_path, "nats://127.0.0.1:4222")
    supervisor.credentials = Credentials()
    supervisor.start([ServiceSpec("pnode-0", "pnode", ["--name", "pnode-0", "--processes-on-machine", "2"]),
                      ServiceSpec("pnode-1", "pnode", ["--name", "pnode-1", "--memory", "3GiB"])])
    offers = [argv[argv.index("--memory") + 1] for argv in started]
    assert offers == [str(share_of_ram(2)), "3GiB"]
    assert capped == {"pnode-0": str(share_of_ram(2)), "pnode-1": "3GiB"}
