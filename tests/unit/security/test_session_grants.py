"""Session grants: a PNode reaches the checkpoint bucket of the sessions it hosts (put and get, never
purge), the orchestrators every placed session's, nobody else any; the latest placement wins; where
no authority follows placement, every bucket is granted and the deployment's other streams are not.
The real server enforces them: tests/integration/test_security_storage.py."""

import json
import re

import pytest

from computeall.cli.security.deployment import Security
from computeall.cli.security.members import Member
from computeall.cli.security.roles import ROLES, permissions
from computeall.cli.security.server_config import ServerSettings, member_users, server_config
from computeall.cli.security.session_grants import EVERY_SESSION, SessionGrant, SessionGrants
from computeall.protocol.credentials import new_nkey_seed, nkey_public
from computeall.protocol.membership_api import SessionHosts
from computeall.protocol.object_store import checkpoint_bucket, uploads_bucket
from computeall.protocol.subjects import Subjects

S = Subjects("ca")
GRANTS = SessionGrants(sessions={"s1": SessionGrant(as_of=4, pnodes=["p1", "p2"]), "s2": SessionGrant(as_of=9, pnodes=["p2"]),
                                 "done": SessionGrant(as_of=12, pnodes=[])})


def buckets(subjects: tuple[str, ...]) -> set[str]:
    return {m.group(1) for s in subjects for m in [re.match(r"^\$O\.([^.]+)\.>$", s)] if m}


def test_a_pnode_reaches_the_buckets_of_the_sessions_it_hosts_and_no_other():
    assert GRANTS.reach("pnode", "p1") == ("s1",) and GRANTS.reach("pnode", "p2") == ("s1", "s2")
    assert GRANTS.reach("pnode", "p3") == ()
    p = permissions("pnode", "p1", S, GRANTS.reach("pnode", "p1"))
    assert buckets(p.publish) == {"ca-checkpoints-s1"}
    assert f"$JS.API.STREAM.INFO.OBJ_{checkpoint_bucket(S, 's1')}" in p.publish
    assert not any(f"STREAM.{op}." in s for s in p.publish for op in ("PURGE", "DELETE", "CREATE", "UPDATE")), \
        "it may not delete an object, nor touch the stream"
    assert not any("uploads" in s for s in p.publish), "the weights it starts from are copied into the session's bucket"
    assert buckets(permissions("pnode", "p3", S).publish) == set()


def test_the_orchestrators_manage_every_placed_sessions_bucket_and_no_one_else_any():
    reach = GRANTS.reach("orchestrator", "o")
    assert reach == ("done", "s1", "s2"), "an ended session's too: its owner reads its checkpoints through them"
    p = permissions("orchestrator", "o", S, reach)
    assert {checkpoint_bucket(S, s) for s in reach} <= buckets(p.publish)
    assert f"$JS.API.STREAM.PURGE.OBJ_{checkpoint_bucket(S, 's1')}" in p.publish
    assert f"$JS.API.STREAM.CREATE.OBJ_{checkpoint_bucket(S, 's1')}" in p.publish
    assert "ca.sec.session.hosts" in p.publish
    for role in set(ROLES) - {"orchestrator", "pnode", "superuser"}:
        assert GRANTS.reach(role, "x") == ()
        assert not any("checkpoints" in s for s in permissions(role, "x", S).publish), role
        assert "ca.sec.session.hosts" not in permissions(role, "x", S).publish, role


def test_the_latest_placement_wins():
    grants = SessionGrants()
    assert grants.host(SessionHosts(session_id="s", pnodes=["a", "b", "a"], as_of=10))
    assert grants.sessions["s"].pnodes == ["a", "b"]
    assert not grants.host(SessionHosts(session_id="s", pnodes=[], as_of=9)), "a driver that lost the session"
    assert grants.reach("pnode", "a") == ("s",)
    assert grants.host(SessionHosts(session_id="s", pnodes=["c"], as_of=12))
    assert grants.reach("pnode", "a") == () and grants.reach("pnode", "c") == ("s",)


def test_a_request_names_one_session_and_pnodes_by_their_tokens():
    for bad in ({"session_id": "s.>", "pnodes": [], "as_of": 1}, {"session_id": "s", "pnodes": ["*"], "as_of": 1},
                {"session_id": "s", "pnodes": [], "as_of": -1}):
        with pytest.raises(ValueError):
            SessionHosts(**bad)


def test_the_server_config_carries_the_grants_kept_in_the_security_dir(tmp_path):
    security = Security(tmp_path)
    with security.grants.edit() as grants:
        grants.host(SessionHosts(session_id="s1", pnodes=["p1"], as_of=3))
    keys = {name: nkey_public(new_nkey_seed()) for name in ("p1", "p2")}
    members = [Member(role="pnode", name=name, public_key=key, source="local") for name, key in keys.items()]
    users = dict(member_users(members, S, security.grants.read()))
    assert buckets(users[keys["p1"]].publish) == {"ca-checkpoints-s1"} and buckets(users[keys["p2"]].publish) == set()


def test_where_nothing_follows_placement_every_bucket_is_granted_but_not_the_other_streams():
    p = permissions("pnode", "p1", S, EVERY_SESSION.reach("pnode", "p1"), users=["alice"])
    assert "$O.*.>" in p.publish and "$JS.API.STREAM.INFO.*" in p.publish
    assert not any("PURGE" in s for s in p.publish)
    alices = uploads_bucket(S, "alice")
    for denied in ("$JS.API.CONSUMER.CREATE.CA_LOG.>", "$JS.API.DIRECT.GET.CA_TEL", f"$O.{alices}.>", "$O.ca-datasets.>",
                   f"$JS.API.STREAM.INFO.OBJ_{alices}"):
        assert denied in p.publish_deny, denied
    text = server_config(ServerSettings(host="127.0.0.1", port=1, store_dir="/d"), [("UKEY", p)])
    block = json.loads(text.split("authorization: ", 1)[1].split("\n}\n", 1)[0] + "\n}")["users"][0]["permissions"]
    assert block["publish"]["deny"] == list(p.publish_deny) and "$O.*.>" in block["publish"]["allow"]
