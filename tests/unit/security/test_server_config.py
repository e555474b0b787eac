"""The generated nats-server config: what nats-server itself accepts, extended by sections."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from computeall.cli.nats_server import EmbeddedNats, nats_binary
from computeall.cli.security.roles import permissions
from computeall.cli.security.server_config import ServerSettings, server_config
from computeall.protocol.subjects import Subjects

S = Subjects()
USERS = [("UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4", permissions("pnode", "p", S))]


@dataclass(frozen=True)
class Routes:
    """What a 3-server cluster adds: its own listener and routes to the peers."""

    key = "cluster"
    port: int
    peers: tuple[str, ...]

    def block(self, settings: ServerSettings) -> dict[str, Any]:
        return {"name": "computeall", "host": settings.host, "port": self.port, "routes": list(self.peers)}


def accepted(text: str, tmp_path) -> subprocess.CompletedProcess:
    path = tmp_path / "nats.conf"
    path.write_text(text)
    return subprocess.run([nats_binary(), "-t", "-c", str(path)], capture_output=True, text=True, timeout=30)


def test_nats_server_accepts_the_config_with_a_cluster_section(tmp_path):
    settings = ServerSettings(host="127.0.0.1", port=4222, store_dir=str(tmp_path / "js"),
                              sections=(Routes(6222, ("nats-route://10.0.0.2:6222", "nats-route://10.0.0.3:6222")),))
    text = server_config(settings, USERS)
    assert 'cluster: {' in text and '"nats-route://10.0.0.2:6222"' in text
    result = accepted(text, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_section_cannot_replace_a_basic_block(tmp_path):
    @dataclass(frozen=True)
    class Clobber:
        key = "authorization"

        def block(self, settings: ServerSettings) -> dict[str, Any]:
            return {}

    with pytest.raises(ValueError, match="`authorization` block already"):
        server_config(ServerSettings(host="127.0.0.1", port=1, store_dir="/d", sections=(Clobber(),)), USERS)


def test_members_applied_while_a_server_is_down_wait_for_its_next_start(tmp_path, security):
    # a cluster's server that died must not fail the grants the authority applies to the others (a session
    # placed then failed with "did not reload"): its next start writes the members' configuration anyway
    server = EmbeddedNats(tmp_path / "nats", security=security)
    server.store_dir.mkdir(parents=True)
    server.process = SimpleNamespace(poll=lambda: -9, send_signal=lambda sig: pytest.fail("signalled a dead server"))
    server.apply_members()
    assert not server.config_file.exists(), "nothing written for a server that is not running"
    assert str(server.config_file) in server.command(), "its start writes the configuration"
    assert server.config_file.exists()
