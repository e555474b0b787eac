"""Joining a bus spanning machines: a server invite carries the routes and only a server invite does; the
kit goes only to the invited server asking as itself; its routes speak mutual TLS with the deployment's CA
(the config nats-server accepts); the server certificate serves both ends of a route; the `server` role may
only ask to join. The real servers: tests/integration/test_bus_machines.py."""

from __future__ import annotations

import subprocess

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from computeall.cli.nats_server import nats_binary
from computeall.cli.security.bus_join import ServerJoin, joining_server
from computeall.protocol.credentials import inbox_owner
from computeall.protocol.responder import Refused
from computeall.cli.security.bus_state import BusServer
from computeall.cli.security.invitations import invite
from computeall.cli.security.roles import permissions
from computeall.cli.security.server_config import ClusterSettings, ServerSettings, server_config
from computeall.cli.security.tls import DeploymentTls
from computeall.protocol.invites import Invite, InviteError
from computeall.protocol.membership_api import SERVER_JOIN, membership_subject
from computeall.protocol.subjects import Subjects

S = Subjects()
ROUTES = ["nats-route://10.0.0.1:6222"]


def test_a_server_invite_names_the_routes_and_only_it_does(security, tls):
    made = invite(security, "server", ["tls://10.0.0.1:4222"], tls.trust(), "b", 3600, routes=ROUTES)
    back = Invite.from_token(made.token(), expect="server")
    assert (back.role, back.name, back.routes) == ("server", "b", ROUTES)
    assert back.credential().identity == "server:b"
    with pytest.raises(InviteError, match="admits a server, not a pnode"):
        Invite.from_token(made.token(), expect="pnode")
    with pytest.raises(ValueError, match="names the bus's routes"):
        Invite(id="x", role="server", name="b", servers=["tls://h:4222"], nkey_seed=made.nkey_seed, tls=tls.trust())
    with pytest.raises(ValueError, match="only a server invite"):
        Invite(id="x", role="pnode", name="p", servers=["tls://h:4222"], nkey_seed=made.nkey_seed, tls=tls.trust(),
               routes=ROUTES)


def request(name: str) -> ServerJoin:
    return ServerJoin(server=BusServer(name=name, machine="m", route="nats-route://10.0.0.2:6222"))


def test_the_kit_goes_to_the_invited_server_asking_as_itself():
    assert joining_server(inbox_owner("_INBOX.server.b.x1y2"), request("b")) == "b"
    with pytest.raises(Refused, match="no server's inbox"):
        joining_server(inbox_owner("_INBOX.pnode.b.x1y2"), request("b"))  # a PNode named like the server
    with pytest.raises(Refused, match="server b asked to join as c"):
        joining_server(inbox_owner("_INBOX.server.b.x1y2"), request("c"))


def test_the_server_role_may_only_ask_to_join():
    p = permissions("server", "b", S)
    assert p.publish == (membership_subject(S, SERVER_JOIN),)
    assert p.subscribe == ("_INBOX.server.b.>",)


def test_routes_between_machines_speak_mutual_tls_with_the_deployments_ca(tls, tmp_path):
    files = tls.ensure(["10.0.0.1"])
    cluster = ClusterSettings(name="computeall", server_name="a", host="0.0.0.0", port=6222, routes=tuple(ROUTES),
                              secret="s3cret", health_port=8222, advertise="10.0.0.1:6222", ca_file=str(tls.ca_file),
                              monitor_host="127.0.0.1")
    text = server_config(ServerSettings(host="0.0.0.0", port=4222, store_dir=str(tmp_path / "js"), tls=files,
                                        sections=cluster.sections()), [])
    assert '"verify": true' in text and f'"ca_file": "{tls.ca_file}"' in text and '"advertise": "10.0.0.1:6222"' in text
    assert 'http: "127.0.0.1:8222"' in text, "the monitoring endpoint stays on loopback"
    (tmp_path / "nats.conf").write_text(text)
    checked = subprocess.run([nats_binary(), "-t", "-c", str(tmp_path / "nats.conf")], capture_output=True, text=True,
                             timeout=30)
    assert checked.returncode == 0, checked.stderr
    with pytest.raises(ValueError, match="needs its certificate"):
        server_config(ServerSettings(host="0.0.0.0", port=4222, store_dir=None, sections=cluster.sections()), [])


def test_the_server_certificate_serves_both_ends_of_a_route(tls):
    tls.ensure(["10.0.0.1"])
    cert = x509.load_pem_x509_certificate(tls.cert_file.read_bytes())
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH} <= set(usage)


def test_an_invited_server_takes_the_deployments_ca(tls, tmp_path):
    tls.ensure(["10.0.0.1"])
    joined = DeploymentTls(tmp_path / "joined" / "tls")
    joined.ensure(["10.0.0.2"])  # one it made itself before it had the kit: replaced
    joined.install_ca(tls.ca_file.read_text(), tls.ca_key_file.read_text())
    joined.ensure(["10.0.0.2"])
    assert joined.trust().ca_sha256 == tls.trust().ca_sha256
    issuer = x509.load_pem_x509_certificate(joined.cert_file.read_bytes()).issuer
    assert issuer == x509.load_pem_x509_certificate(tls.ca_file.read_bytes()).subject
    assert (joined.ca_key_file.stat().st_mode & 0o777) == 0o600
