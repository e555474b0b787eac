"""Remote sites: the leaf invite, the leaf's least privilege on the hub, both servers' generated configs."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from cryptography import x509

from computeall.cli.main import main
from computeall.cli.nats_server import nats_binary
from computeall.cli.security.invitations import InvitationError, invite, revoke
from computeall.cli.security.leafnodes import HUB_DOMAIN, HubJetStream, LeafListen, LeafRemote
from computeall.cli.security.roles import leaf, on_site, permissions
from computeall.cli.security.server_config import ServerSettings, member_users, server_config
from computeall.cli.security.session_grants import SessionGrant, SessionGrants
from computeall.protocol.credentials import nkey_public
from computeall.protocol.invites import Invite, InviteError
from computeall.protocol.subjects import Subjects

S = Subjects()
LEAF_URLS = ["tls://10.0.0.1:7422"]


def accepted(text: str, tmp_path) -> subprocess.CompletedProcess:
    path = tmp_path / "nats.conf"
    path.write_text(text)
    return subprocess.run([nats_binary(), "-t", "-c", str(path)], capture_output=True, text=True, timeout=30)


def users_of(text: str) -> list[dict]:
    return json.loads(re.search(r"^authorization: (\{.*?^\})$", text, re.M | re.S).group(1))["users"]


def test_a_leaf_invite_round_trips_with_its_site(security, tls):
    made = invite(security, "leaf", LEAF_URLS, tls.trust(), name="site", expires_in_s=3600, site_pnodes=2)
    got = Invite.from_token(made.token(), expect="leaf")
    assert (got.role, got.name, got.servers, got.tls.ca_sha256) == ("leaf", "site", LEAF_URLS, tls.trust().ca_sha256)
    assert [p.name for p in got.pnodes] == ["site-0", "site-1"]
    credential = got.pnodes[1].credential(["nats://127.0.0.1:4222"])
    assert (credential.role, credential.name, credential.tls) == ("pnode", "site-1", None)
    members = security.members.read()
    assert members.find(made.id).public_key == nkey_public(got.nkey_seed)
    assert [(m.name, m.site, m.public_key) for m in members.site("site")] == \
        [(p.name, "site", nkey_public(p.nkey_seed)) for p in got.pnodes]


def test_revoking_a_leaf_revokes_its_site(security, tls):
    made = invite(security, "leaf", LEAF_URLS, tls.trust(), name="site", site_pnodes=2)
    other = invite(security, "pnode", ["tls://10.0.0.1:4222"], tls.trust(), name="far")
    revoke(security, made.id)
    assert [m.name for m in security.members.read().active()] == ["far"] and other.name == "far"


def test_a_leaf_invite_names_its_pnodes_and_only_a_leaf_invite_does(security, tls):
    with pytest.raises(InvitationError, match="at least one PNode"):
        invite(security, "leaf", LEAF_URLS, tls.trust(), site_pnodes=0)
    with pytest.raises(InvitationError, match="only a leaf invite"):
        invite(security, "pnode", LEAF_URLS, tls.trust(), site_pnodes=1)
    invite(security, "pnode", LEAF_URLS, tls.trust(), name="site-0")
    with pytest.raises(InvitationError, match="a pnode named site-0 is already a member"):
        invite(security, "leaf", LEAF_URLS, tls.trust(), name="site", site_pnodes=1)


def test_a_token_for_the_other_role_or_no_token_is_refused_with_what_to_do(security, tls):
    pnode_token = invite(security, "pnode", ["tls://10.0.0.1:4222"], tls.trust()).token()
    leaf_token = invite(security, "leaf", LEAF_URLS, tls.trust(), site_pnodes=1).token()
    with pytest.raises(InviteError, match=r"admits a pnode, not a leaf; make one with `computeall invite leaf`"):
        Invite.from_token(pnode_token, expect="leaf")
    with pytest.raises(InviteError, match=r"admits a leaf, not a pnode"):
        Invite.from_token(leaf_token, expect="pnode")
    with pytest.raises(InviteError, match=r"not an invite token .*`computeall invite leaf`"):
        Invite.from_token("hello", expect="leaf")


def test_up_with_a_bad_leaf_token_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COMPUTEALL_LEAF_TOKEN", "ca-invite-1.garbage!")
    assert main(["up", "--data-dir", str(tmp_path)]) == 2
    assert "error: the invite token is damaged" in capsys.readouterr().err
    assert not (tmp_path / "nats-leaf").exists(), "nothing started"


def test_the_leaf_carries_exactly_its_sites_pnodes_and_connects_only_as_a_leaf(security, tls):
    made = invite(security, "leaf", LEAF_URLS, tls.trust(), name="site", site_pnodes=2)
    far = invite(security, "pnode", ["tls://10.0.0.1:4222"], tls.trust(), name="far")
    members = security.members.read()
    grants = SessionGrants(sessions={"s1": SessionGrant(as_of=1, pnodes=["site-0", "far"]),
                                     "s2": SessionGrant(as_of=1, pnodes=["elsewhere"])})
    users = dict(member_users(members.active(), S, grants))
    assert set(users) == {members.find(made.id).public_key, members.find(far.id).public_key}, \
        "a site's PNodes connect to their leaf, never to the hub"
    carried = users[members.find(made.id).public_key]
    site = [on_site(permissions("pnode", f"site-{i}", S, grants.reach("pnode", f"site-{i}"))) for i in range(2)]
    assert set(carried.publish) == {s for p in site for s in p.publish}
    assert set(carried.subscribe) == {s for p in site for s in p.subscribe}
    assert "$JS.hub.API.STREAM.INFO.OBJ_ca-checkpoints-s1" in carried.publish, "JetStream calls cross in the hub's domain"
    assert not any("checkpoints-s2" in s for s in carried.publish), "only the sessions the site's PNodes host"
    assert not any(s.startswith("$JS.API.") for s in carried.publish)
    assert "ca.hb.site-1" in carried.publish and "ca.hb.far" not in carried.publish
    assert "ca.pn.far.>" not in carried.subscribe and "_INBOX.orchestrator.>" not in carried.subscribe
    assert not any(s.startswith(("ca.evt", "ca.cmd", "$JS.API.STREAM.CREATE.CA_")) for s in carried.publish)
    assert carried.connection == "LEAFNODE" and users[members.find(far.id).public_key].connection == "STANDARD"

    with security.members.edit() as edited:
        next(m for m in edited.site("site") if m.name == "site-1").revoked = 1.0
    carried = dict(member_users(security.members.read().active(), S, grants))[members.find(made.id).public_key]
    assert "ca.hb.site-1" not in carried.publish and "ca.hb.site-0" in carried.publish, "a revoked site PNode no longer crosses"


def test_a_leaf_without_pnodes_may_do_nothing_rather_than_anything():
    text = server_config(ServerSettings(host="127.0.0.1", port=1, store_dir="/d"), [("UKEY", permissions("leaf", "empty", S))])
    (user,) = users_of(text)
    assert user["permissions"] == {"publish": {"deny": [">"]}, "subscribe": {"deny": [">"]}}
    assert user["allowed_connection_types"] == ["LEAFNODE"]


def test_the_hub_config_listens_for_leaves_with_tls(security, tls, tmp_path):
    users = [("UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4", leaf("site", S, ["site-0"]))]
    settings = ServerSettings(host="0.0.0.0", port=4222, store_dir=str(tmp_path / "js"), tls=tls.ensure(),
                              jetstream_domain=HUB_DOMAIN, system_user=nkey_public(security.system_seed()),
                              sections=(LeafListen("0.0.0.0", 7422),))
    text = server_config(settings, users)
    block = json.loads(re.search(r"^leafnodes: (\{.*?^\})$", text, re.M | re.S).group(1))
    assert block["port"] == 7422 and block["tls"]["cert_file"] == settings.tls.cert_file and "authorization" not in block
    assert '"domain": "hub"' in text and 'system_account: "SYS"' in text and settings.system_user in text
    result = accepted(text, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    with pytest.raises(ValueError, match="TLS only"):
        server_config(ServerSettings(host="0.0.0.0", port=1, store_dir="/d", sections=(LeafListen("0.0.0.0", 7422),)), users)


def test_the_leaf_config_dials_the_hub_with_its_credential_and_runs_no_jetstream(security, tls, tmp_path):
    made = invite(security, "leaf", LEAF_URLS, tls.trust(), name="site", site_pnodes=1)
    ca_file = tmp_path / "hub-ca.pem"
    ca_file.write_text(made.tls.ca_pem)
    settings = ServerSettings(host="127.0.0.1", port=4222, store_dir=None,
                              sections=(LeafRemote(tuple(made.servers), made.nkey_seed, str(ca_file)), HubJetStream()))
    site = made.pnodes[0]
    text = server_config(settings, [(nkey_public(site.nkey_seed), permissions("pnode", site.name, S))])
    assert "jetstream" not in text and 'mappings: {\n  "$JS.API.>": "$JS.hub.API.>"\n}' in text
    remote = json.loads(re.search(r"^leafnodes: (\{.*?^\})$", text, re.M | re.S).group(1))["remotes"][0]
    assert remote == {"urls": LEAF_URLS, "nkey": made.nkey_seed, "tls": {"ca_file": str(ca_file), "timeout": 5}}
    result = accepted(text, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_server_certificate_names_the_addresses_it_is_dialled_at(tls):
    tls.ensure()
    ca = tls.ca_file.read_bytes()
    tls.ensure(["10.1.2.3", "hub.example"])
    names = x509.load_pem_x509_certificate(tls.cert_file.read_bytes()).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    assert {"computeall-nats", "hub.example"} <= set(names.get_values_for_type(x509.DNSName))
    assert {str(a) for a in names.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "10.1.2.3"}
    assert tls.ca_file.read_bytes() == ca, "the same CA: what invites pin still holds"
    stamp = tls.cert_file.stat().st_mtime_ns
    tls.ensure(["10.1.2.3"])
    assert tls.cert_file.stat().st_mtime_ns == stamp, "made again only when an address is missing"
