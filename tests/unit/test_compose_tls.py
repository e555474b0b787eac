"""Every listener docker-compose.yml publishes speaks TLS with the deployment's certificate: the
nats-servers' client ports (in both profiles) and the monitor's HTTPS. The services and the host's
CLI trust only the deployment's CA, pinned in their credentials. Read as compose reads the file,
interpolated with the `.env` that `computeall compose-env` prints; and a real nats-server on the
generated config, which only a client that trusts the deployment's CA gets into."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import time
from pathlib import Path

import nats
import pytest
import yaml
from cryptography import x509

from computeall.cli.nats_server import free_port, nats_binary, port_open
from computeall.cli.security.compose import NATS_CONFIG, TLS_IN_CONTAINER, compose_env, compose_file, identities, variable
from computeall.cli.security.deployment import Security
from computeall.cli.security.tls import SERVER_NAME
from computeall.protocol import bus
from computeall.protocol.credentials import Credential, ca_fingerprint
from computeall.protocol.eventlog import ensure_streams
from computeall.protocol.subjects import Subjects

from .test_compose_matches_cli import blocks, env_of, interpolate


@pytest.fixture(params=[1, 3], ids=["single", "cluster"])
def deployment(request, tmp_path):
    security = Security(tmp_path / "security")
    env = env_of(compose_env(security, request.param))
    return security, env, interpolate(yaml.safe_load(compose_file()), env)


def mounted(compose: dict, service: str) -> dict[str, str]:
    """Where a service finds each file of the host it mounts (bound or as a secret): target -> the file on the host."""
    spec = compose["services"][service]
    bound = {target: source for source, target, *_ in (v.split(":") for v in spec.get("volumes", []) if v.startswith("/"))}
    return {**bound, **{s["target"]: compose["secrets"][s["source"]]["file"] for s in spec.get("secrets", [])}}


def test_every_published_listener_speaks_tls(deployment):
    security, env, compose = deployment
    tls_dir = security.directory / "tls"
    assert env["CA_TLS_DIR"] == str(tls_dir.resolve())
    published = {name: spec for name, spec in compose["services"].items()
                 if spec.get("ports") and env["COMPOSE_PROFILES"] in spec.get("profiles", [env["COMPOSE_PROFILES"]])}
    assert set(published) == ({"nats"} if env["COMPOSE_PROFILES"] == "single" else {"nats-0", "nats-1", "nats-2"}) | {"monitor"}
    for name, spec in published.items():
        files = mounted(compose, name)
        if name == "monitor":
            command = spec["command"]
            cert, key = command[command.index("--tls-cert") + 1], command[command.index("--tls-key") + 1]
        else:
            tls = blocks(spec["environment"][NATS_CONFIG])["tls"]
            cert, key = tls["cert_file"], tls["key_file"]
        assert files[cert] == str(tls_dir.resolve() / "server.pem") and files[key] == str(tls_dir.resolve() / "server-key.pem")
        assert next(s for s in spec["secrets"] if s["target"] == key), "the key is mounted as a secret, not bound"
    assert (tls_dir / "server-key.pem").stat().st_mode & 0o777 == 0o600


def test_the_certificate_is_the_deployments_and_names_the_containers(deployment):
    security, _, _ = deployment
    tls_dir = security.directory / "tls"
    cert = x509.load_pem_x509_certificate((tls_dir / "server.pem").read_bytes())
    ca = x509.load_pem_x509_certificate((tls_dir / "ca.pem").read_bytes())
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert {SERVER_NAME, "localhost", "nats", "nats-0", "nats-1", "nats-2", "monitor"} <= set(names)


def test_every_client_pins_the_deployments_ca_and_dials_tls(deployment):
    security, env, compose = deployment
    ca_pem = (security.directory / "tls" / "ca.pem").read_text()
    inside = [json.loads(env[variable("CREDENTIAL", name)]) for role, name in identities() if role not in ("user", "admin")]
    host = [Credential.load(security.credential_path(role, name)).model_dump() for role, name in identities()
            if role in ("user", "admin")]
    for credential in map(Credential.model_validate, inside + host):
        assert credential.tls is not None, credential.identity
        assert credential.tls.ca_pem == ca_pem and credential.tls.ca_sha256 == ca_fingerprint(ca_pem)
        assert credential.tls.server_name == SERVER_NAME
        assert credential.servers and all(url.startswith("tls://") for url in credential.servers), credential.servers
    nats = compose["services"]["orchestrator"]["command"]
    assert all(url.startswith("tls://") for url in nats[nats.index("--nats") + 1].split(","))


async def test_the_compose_bus_speaks_tls_only_and_its_clients_trust_the_deployments_ca(tmp_path):
    env = env_of(compose_env(Security(tmp_path / "security")))
    compose = interpolate(yaml.safe_load(compose_file()), env)
    tls_dir, port = Path(env["CA_TLS_DIR"]), free_port()
    config = compose["services"]["nats"]["environment"][NATS_CONFIG]  # what the `nats` container runs, its paths here
    for inside, here in ((TLS_IN_CONTAINER.cert_file, tls_dir / "server.pem"), (TLS_IN_CONTAINER.key_file, tls_dir / "server-key.pem"),
                         ('"store_dir": "/data"', f'"store_dir": "{tmp_path / "store"}"'), ("port: 4222\n", f"port: {port}\n")):
        assert inside in config
        config = config.replace(inside, str(here))
    (tmp_path / "nats.conf").write_text(config)
    server = subprocess.Popen([nats_binary(), "-c", str(tmp_path / "nats.conf")], stdout=open(tmp_path / "nats.log", "ab"),
                              stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: port_open("127.0.0.1", port), 20)
        orchestrator = Credential.model_validate_json(env["CA_CREDENTIAL_ORCHESTRATOR"]).at(f"tls://127.0.0.1:{port}")
        nc = await bus.connect(orchestrator, name="compose-orchestrator", allow_reconnect=False)
        await ensure_streams(nc.jetstream(), Subjects())  # in, as itself, over TLS: the orchestrator's first call
        await nc.close()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as plain:  # what any client hears first
            info = json.loads(plain.makefile("rb").readline().removeprefix(b"INFO "))
        assert info["tls_required"] is True, "no plaintext: TLS before anything else"
        with pytest.raises(ssl.SSLCertVerificationError):  # a client that trusts the usual CAs, not the deployment's
            await nats.connect(f"tls://127.0.0.1:{port}", nkeys_seed_str=orchestrator.nkey_seed, allow_reconnect=False,
                               connect_timeout=3, max_reconnect_attempts=0)
    finally:
        server.terminate()
        server.wait(10)


def wait_until(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the nats-server did not listen"
        time.sleep(0.1)
