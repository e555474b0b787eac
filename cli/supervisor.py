"""Runs the services of one machine as separate OS processes; restarts the ones that die.

Used by `computeall up` (keeps running) and `computeall run` (an embedded cluster for
one training run). Logs go to `<data dir>/logs/<service>.log`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from typing import TYPE_CHECKING, Protocol

from computeall.pnode.options import share_of_ram
from computeall.protocol.credentials import Credential, Role
from computeall.protocol.secret_args import without_secrets

from .cluster_file import ClusterInfo, ServiceStatus, write

if TYPE_CHECKING:
    from .nats_cluster import NatsCluster

log = logging.getLogger("computeall.supervisor")

# signals that mean a crash rather than a stop (SIGTERM) or a kill (SIGKILL, as the failover tests send)
CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGFPE, signal.SIGILL}


def log_tail(path: Path, lines: int = 60) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(unreadable: {exc})"

# Stop order: the orchestrator first, so a PNode going away during shutdown is never taken for a
# failure of the session; the monitor last, so it records everything that happened.
STOP_ORDER = ("orchestrator", "pnode", "dataset", "monitor")
# how long a service may take to stop before it is killed: the orchestrator first checkpoints the sessions
# it drives (computeall.orchestrator.service.SHUTDOWN_S, a step and a save), the others only close
STOP_GRACE_S = {"orchestrator": 75.0}


@dataclass
class ServiceSpec:
    name: str
    kind: str  # orchestrator, dataset, pnode, monitor
    args: list[str] = field(default_factory=list)
    own_credential: bool = True  # False: `args` name the credentials (simulated PNodes, one per identity)

    def argv(self, nats_url: str, data_dir: Path) -> list[str]:
        return [sys.executable, "-m", f"computeall.{self.kind}", "--nats", nats_url,
                "--data-dir", str(data_dir / self.kind), *self.args]

    def option(self, flag: str) -> str | None:
        """The value given for `flag`, if any."""
        return self.args[self.args.index(flag) + 1] if flag in self.args else None

    def with_arg(self, flag: str, value: str) -> "ServiceSpec":
        args = list(self.args)
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
        return ServiceSpec(self.name, self.kind, args, self.own_credential)


def default_services(
    pnodes: int, with_monitor: bool = True, monitor_port: int = 0, data_roots: list[str] = (),
    processes_on_machine: int | None = None, pnode_memory: str | None = None, orchestrator_args: list[str] = (),
) -> list[ServiceSpec]:
    """What `computeall up` runs; docker-compose.yml mirrors this list. The dataset service reads files
    under `data_roots` besides the stdlib (and the uploads a request names). The PNodes share the cores
    as `processes_on_machine` processes would (default: as many as there are PNodes) and offer
    `pnode_memory` each (default: their share of the RAM). `orchestrator_args`: its per-user limits
    (`protocol.fair_share.limit_argv`) where they are not its defaults."""
    roots = [arg for root in data_roots for arg in ("--data-root", str(Path(root).resolve()))]
    services = [ServiceSpec("orchestrator", "orchestrator", list(orchestrator_args)),
                ServiceSpec("dataset", "dataset", roots)]
    services += pnode_services([f"pnode-{i}" for i in range(pnodes)], processes_on_machine, pnode_memory)
    if with_monitor:
        services.append(ServiceSpec("monitor", "monitor", ["--port", str(monitor_port)]))
    return services


def add_processes_on_machine(p: argparse.ArgumentParser) -> None:
    """The option of the commands that start PNodes here (`up`, `run`): how many processes' share of the
    cores each PNode takes, hence its thread count, on which the bits of a reduction depend."""
    p.add_argument("--processes-on-machine", type=int, default=None, metavar="N",
                   help="give each PNode the threads of one of N processes sharing this machine's cores (default: "
                        "as many as the PNodes started here); the same N gives the same thread count, hence the "
                        "same bits, for any --pnodes")


def pnode_services(names: list[str], processes_on_machine: int | None = None, memory: str | None = None) -> list[ServiceSpec]:
    """PNodes of this machine, sharing its cores as `processes_on_machine` processes (default: as many as
    there are of them) and offering `memory` each (default: their share of the RAM). What they are
    given is also the most they may offer: their credentials' cap (`Supervisor._spawn`)."""
    share = ["--processes-on-machine", str(processes_on_machine or len(names))]
    offer = ["--memory", memory] if memory else []
    return [ServiceSpec(name, "pnode", ["--name", name, *share, *offer]) for name in names]


class Credentials(Protocol):
    """Who hands out this machine's identities: the embedded server (`EmbeddedNats`), whose
    configuration learns of each new one before it is returned."""

    def credential(self, role: Role, name: str | None = None) -> Credential: ...

    def credential_file(self, role: Role, name: str | None = None, memory: str | None = None) -> Path: ...

    def local_api_key_file(self) -> Path: ...


@dataclass
class _Running:
    spec: ServiceSpec
    process: subprocess.Popen | None = None
    restarts: int = 0
    next_start: float = 0.0
    state: str = "starting"


class Supervisor:
    def __init__(self, data_dir: Path, nats_url: str, bus: "NatsCluster | None" = None) -> None:
        self.data_dir = data_dir
        self.nats_url = nats_url  # every server's URL, comma-separated
        self.bus = bus  # the nats-servers this machine runs; None: someone else's
        self.credentials: Credentials | None = bus  # issues each service its own credential; None: connect anonymously
        self.logs = data_dir / "logs"
        self.services: dict[str, _Running] = {}
        self.monitor_url: str | None = None
        self.default_user: str | None = None
        self._stopping = False
        self._announced = False  # cluster.json is written once clients can use the system
        self.public_urls: list[str] = []
        self.public_leaf_urls: list[str] = []

    def start(self, specs: list[ServiceSpec]) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        for spec in specs:
            self.services[spec.name] = _Running(spec)
            self._spawn(self.services[spec.name])

    def _spawn(self, running: _Running) -> None:
        if running.spec.kind == "pnode" and running.spec.own_credential and running.spec.option("--memory") is None:
            # what it would offer itself, said here: its credential's cap is what it was given
            share = int(running.spec.option("--processes-on-machine") or 1)
            running.spec = running.spec.with_arg("--memory", str(share_of_ram(share)))
        spec = running.spec
        (self.data_dir / spec.kind).mkdir(parents=True, exist_ok=True)
        logfile = open(self.logs / f"{spec.name}.log", "ab")
        env = {**without_secrets(os.environ), "PYTHONUNBUFFERED": "1"}  # each has its credential, by file
        running.process = subprocess.Popen(
            spec.argv(self.nats_url, self.data_dir)
            + (self.credential_args(spec.kind, spec.name, spec.option("--memory")) if spec.own_credential else []),
            stdout=logfile, stderr=subprocess.STDOUT,
            env=env, start_new_session=True,
        )
        running.state = "running"

    def peak_rss_bytes(self, name: str) -> int | None:
        """The most resident memory the service's current process has used (Linux's VmHWM), or None
        where the kernel does not say."""
        running = self.services.get(name)
        if running is None or running.process is None:
            return None
        try:
            status = Path(f"/proc/{running.process.pid}/status").read_text()
        except OSError:
            return None
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
        return None

    def credential_args(self, role: Role, name: str, memory: str | None = None) -> list[str]:
        """`--credential FILE` for a process of this machine: its own identity, issued on first use (a
        PNode's capped at `memory`, what it is given to offer)."""
        if self.credentials is None:
            return []
        args = ["--credential", str(self.credentials.credential_file(role, name, memory))]
        if role == "monitor":  # the local user's key, so that it logs into the dashboard
            args += ["--local-key-file", str(self.credentials.local_api_key_file())]
        return args

    async def watch(self, interval_s: float = 0.5) -> None:
        """Restart services that die (with a growing back-off) until `stop` is called."""
        while not self._stopping:
            changed = False
            for url in self.bus.revive() if self.bus else []:
                log.warning("nats-server %s died; started it again (it rejoins the cluster)", url)
                changed = True
            for running in self.services.values():
                process = running.process
                if process is not None and process.poll() is not None and not self._stopping:
                    logfile = self.logs / f"{running.spec.name}.log"
                    log.warning("%s exited with %s; restarting (see %s)", running.spec.name, process.returncode, logfile)
                    if -process.returncode in CRASH_SIGNALS:  # its faulthandler stack is at the end of its log
                        log.warning("the end of %s:\n%s", logfile, log_tail(logfile))
                    running.process = None
                    running.state = "restarting"
                    running.restarts += 1
                    running.next_start = time.monotonic() + min(30.0, 0.5 * 2 ** min(running.restarts, 6))
                    changed = True
                if running.process is None and running.state == "restarting" and time.monotonic() >= running.next_start:
                    if running.spec.kind == "monitor" and self.monitor_url:
                        # the same port again, so open dashboards reconnect to it
                        running.spec = running.spec.with_arg("--port", self.monitor_url.rsplit(":", 1)[1])
                    self._spawn(running)
                    changed = True
            changed |= self._read_monitor_address()
            if changed:
                self.write_cluster_file()
            await asyncio.sleep(interval_s)

    def _read_monitor_address(self) -> bool:
        path = self.data_dir / "monitor" / "monitor.json"
        if self.monitor_url or not path.exists():
            return False
        try:
            self.monitor_url = json.loads(path.read_text())["url"]
        except (ValueError, KeyError, OSError):
            return False
        return True

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM each kind of service in `STOP_ORDER`, waiting for it (`timeout_s`, or its `STOP_GRACE_S`);
        SIGKILL stragglers."""
        self._stopping = True
        for kind in STOP_ORDER:
            group = [r for r in self.services.values() if r.spec.kind == kind and r.process is not None]
            for running in group:
                if running.process.poll() is None:
                    running.process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_GRACE_S.get(kind, timeout_s)
            for running in group:
                try:
                    running.process.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    log.warning("%s did not stop in time; killing it", running.spec.name)
                    running.process.kill()
                    running.process.wait()
                running.state = "stopped"
        self.write_cluster_file()

    def statuses(self) -> list[ServiceStatus]:
        out = self.bus.statuses() if self.bus else [ServiceStatus(name="nats", kind="nats", pid=None, state="external", url=self.nats_url)]
        for running in self.services.values():
            pid = running.process.pid if running.process else None
            out.append(ServiceStatus(name=running.spec.name, kind=running.spec.kind, pid=pid, state=running.state))
        return out

    def announce(self) -> None:
        """The services have set up the bus: tell clients where it is (`cluster.json`)."""
        self._announced = True
        self.write_cluster_file()

    def write_cluster_file(self) -> None:
        if not self._announced:
            return
        write(
            self.data_dir,
            ClusterInfo(nats=self.nats_url, public_nats=self.public_urls, public_leaf=self.public_leaf_urls,
                        monitor=self.monitor_url, services=self.statuses(), default_user=self.default_user),
        )
