"""The security state the servers of a bus spanning machines share: copies merged in any order agree, a
revocation is forever, a session's latest placement wins, a server's latest record wins; a machine's files
take the merge without losing what was written meanwhile, and are not rewritten when nothing is new; an
authority's round merges both ways through the bucket, and merges again when another wrote first.
The real servers and their bucket: tests/integration/test_bus_machines.py."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

from computeall.cli.security.bus_state import BusServer, BusServers, LocalState, SharedState
from computeall.cli.security.bus_sync import STATE_KEY, BusSync, SyncReply, SyncRequest
from computeall.cli.security.deployment import Security
from computeall.cli.security.members import Member, Members
from computeall.cli.security.session_grants import SessionGrant, SessionGrants
from computeall.protocol.credentials import new_nkey_seed, nkey_public
from computeall.protocol.subjects import Subjects


def member(name: str, **fields) -> Member:
    return Member(role="pnode", name=name, public_key=nkey_public(new_nkey_seed()), source="invite", created=1.0, **fields)


def server(name: str, since: float, host: str = "10.0.0.1") -> BusServer:
    return BusServer(name=name, machine=name, route=f"nats-route://{host}:6222", since=since)


P1, P2 = member("p1"), member("p2")
REVOKED_P1 = P1.model_copy(update={"revoked": 5.0})
CAPPED_P2 = P2.model_copy(update={"memory": "4GiB", "updated": 7.0})


def states() -> list[SharedState]:
    return [
        SharedState(members=Members(members=[P1, P2]),
                    grants=SessionGrants(sessions={"s": SessionGrant(as_of=3, pnodes=["p1"])}),
                    servers=BusServers(servers={"a": server("a", 1.0)})),
        SharedState(members=Members(members=[REVOKED_P1]),
                    grants=SessionGrants(sessions={"s": SessionGrant(as_of=9, pnodes=["p2"]),
                                                   "t": SessionGrant(as_of=1, pnodes=[])}),
                    servers=BusServers(servers={"a": server("a", 4.0, "10.0.0.9"), "b": server("b", 2.0)})),
        SharedState(members=Members(members=[CAPPED_P2]),
                    grants=SessionGrants(sessions={"s": SessionGrant(as_of=5, pnodes=["p1", "p2"])})),
    ]


def test_copies_merged_in_any_order_agree():
    merged = {order: _merge_all([states()[i] for i in order]) for order in itertools.permutations(range(3))}
    assert len(set(m.model_dump_json() for m in merged.values())) == 1
    one = next(iter(merged.values()))
    assert one.merge(one) == one, "merging what is known already changes nothing"


def test_a_revocation_is_forever_and_the_last_change_of_a_record_wins():
    merged = _merge_all(states())
    by_name = {m.name: m for m in merged.members.members}
    assert by_name["p1"].revoked == 5.0, "a copy that never saw the revocation does not bring p1 back"
    assert by_name["p2"].memory == "4GiB", "the record changed last"
    assert merged.grants.sessions["s"] == SessionGrant(as_of=9, pnodes=["p2"]), "the latest placement"
    assert set(merged.grants.sessions) == {"s", "t"}
    assert merged.servers.servers["a"].route == "nats-route://10.0.0.9:6222", "the server's latest record"
    assert merged.servers.routes() == ["nats-route://10.0.0.1:6222", "nats-route://10.0.0.9:6222"]


def _merge_all(parts: list[SharedState]) -> SharedState:
    out = SharedState()
    for part in parts:
        out = out.merge(part)
    return out


def test_a_machine_takes_the_merge_without_losing_its_own_edits(tmp_path):
    security = Security(tmp_path / "security")
    local = LocalState(security)
    with security.members.edit() as members:
        members.members.append(P1)
    assert local.absorb(states()[1]) is True
    assert [m.revoked for m in security.members.read().members] == [5.0]
    assert security.grants.read().sessions["s"].as_of == 9
    assert set(local.servers.read().servers) == {"a", "b"}

    stamps = [path.stat().st_mtime_ns for path in (security.members.path, security.grants.path, local.servers.path)]
    assert local.absorb(states()[1]) is False, "nothing new"
    assert stamps == [path.stat().st_mtime_ns for path in (security.members.path, security.grants.path, local.servers.path)], \
        "files with nothing new are not written (the authority applies what it sees written)"


class FakeKV:
    """One key with revisions; `update` checks the revision as JetStream does, and another writer may get
    there first once (`race`)."""

    def __init__(self, value: SharedState | None = None, race: SharedState | None = None) -> None:
        self.value, self.revision = (value.model_dump_json().encode(), 1) if value else (None, 0)
        self.race = race

    async def get(self, key: str):
        assert key == STATE_KEY
        if self.value is None:
            raise KeyNotFoundError
        return type("Entry", (), {"value": self.value, "revision": self.revision})()

    async def create(self, key: str, value: bytes) -> int:
        return await self.update(key, value, last=0)

    async def update(self, key: str, value: bytes, last: int) -> int:
        if self.race is not None:  # another authority's write lands first (it merged with what was there)
            merged = self.state().merge(self.race) if self.value else self.race
            self.value, self.revision, self.race = merged.model_dump_json().encode(), self.revision + 1, None
        if last != self.revision:
            raise KeyWrongLastSequenceError
        self.value, self.revision = value, self.revision + 1
        return self.revision

    def state(self) -> SharedState:
        return SharedState.model_validate_json(self.value)


def sync_for(tmp_path, kv: FakeKV) -> tuple[BusSync, list[int]]:
    applied: list[int] = []

    async def apply() -> None:
        applied.append(1)

    sync = BusSync(nc=None, subjects=Subjects("ca"), local=LocalState(Security(tmp_path / "security")), server_name="a",
                   apply=apply, live_servers=lambda: {"a"})
    sync._kv = kv
    return sync, applied


@pytest.mark.parametrize("race", [False, True])
def test_a_round_merges_both_ways_and_merges_again_when_another_wrote_first(tmp_path, race):
    theirs, later = states()[1], states()[2]
    kv = FakeKV(theirs, race=later if race else None)
    sync, applied = sync_for(tmp_path, kv)
    with sync.local.security.members.edit() as members:
        members.members.append(P2)  # an invite made on this machine
    revision = asyncio.run(sync.round())
    in_bucket = kv.state()
    names = {m.name for m in in_bucket.members.members}
    assert names == {"p1", "p2"}, "this machine's member went up, the bucket's came down"
    assert {m.name for m in sync.local.security.members.read().members} == names
    if race:
        assert {m.memory for m in in_bucket.members.members if m.name == "p2"} == {"4GiB"}, "the other's write is kept"
    assert revision == kv.revision and applied, "the server took the merged state"

    applied.clear()
    assert asyncio.run(sync.round()) == revision and not applied, "a round with nothing new writes and reloads nothing"


class SyncMessage:
    def __init__(self, state: SharedState, reply: str) -> None:
        self.data = SyncRequest(state=state).model_dump_json().encode()
        self.reply = reply
        self.answers: list[bytes] = []

    async def respond(self, data: bytes) -> None:
        self.answers.append(data)


def test_another_authoritys_change_is_merged_applied_and_confirmed_without_the_bucket(tmp_path):
    sync, applied = sync_for(tmp_path, kv=None)  # no bucket: a change spreads while its leader is being elected
    msg = SyncMessage(states()[1], reply="_INBOX.authority.authority.abc")
    asyncio.run(sync._on_sync(msg))
    assert {m.name for m in sync.local.security.members.read().members} == {"p1"} and applied
    assert [SyncReply.model_validate_json(a).server for a in msg.answers] == ["a"]


def test_a_sync_request_from_anyone_but_an_authority_is_ignored(tmp_path):
    sync, applied = sync_for(tmp_path, kv=None)
    for reply in ("_INBOX.admin.operator.abc", "_INBOX.pnode.p1.abc", "ca.sec.users"):
        msg = SyncMessage(states()[1], reply=reply)
        asyncio.run(sync._on_sync(msg))
        assert not msg.answers and not applied
    assert sync.local.security.members.read().members == []
