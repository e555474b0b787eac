"""A deployment on three machines (`Machines`), its bus spanning them, as a user would set it up
(`MachineBus`), or the bus alone (`bare_bus`):

    machine 0$ computeall up --listen IP0:4222 --nats-cluster 3 --server-name m0 --pnodes P0
    machine 0$ computeall invite server --name m1 --json      (and m2)
    machine i$ computeall up --join-bus-file TOKEN_FILE --listen IPi:4222 --pnodes Pi

For tests/integration/test_bus_machines.py and bench/failover.py --machines 3. Each machine has its own
data dir (its own disk); the client here, in the root namespace, connects as the first machine's
local user to every server, so it outlives any one machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from computeall.cli.bus_machine import MachineServer
from computeall.cli.security.bus_join import install, kit_of
from computeall.cli.security.deployment import Security
from computeall.cli.security.tls import DeploymentTls
from computeall.protocol import bus
from computeall.protocol.credentials import Credential

from .machines import Machines

COMPUTEALL = str(Path(sys.executable).parent / "computeall")
PORT = 4222


class MachineBus:
    def __init__(self, lab: Machines, directory: Path, pnodes: tuple[int, ...] = (1, 1, 0)) -> None:
        self.lab = lab
        self.directory = directory
        self.pnodes = pnodes
        self.names = [f"m{i}" for i in range(len(lab.machines))]
        self.processes: list[subprocess.Popen] = []
        # every PNode takes one core's share, hence one torch thread, on every machine (they share this machine's
        # cores): a reduction split over threads adds in another order when another thread holds the pool
        self.threads_share = os.cpu_count() or 1

    def data_dir(self, i: int) -> Path:
        return self.directory / self.names[i]

    def log(self, i: int) -> Path:
        return self.directory / f"{self.names[i]}.log"

    def url(self, i: int) -> str:
        return f"tls://{self.lab.machines[i].ip}:{PORT}"

    def pnode_names(self, i: int) -> list[str]:
        """The PNodes machine i runs: the first machine's as `up` names them, a joined one's after its server."""
        prefix = "pnode" if i == 0 else self.names[i]
        return [f"{prefix}-{k}" for k in range(self.pnodes[i])]

    def _up(self, i: int, *args: str) -> None:
        machine = self.lab.machines[i]
        env = {**os.environ, "XDG_STATE_HOME": str(self.data_dir(i) / "state")}  # each machine records its own run
        self.processes.append(self.lab.popen(machine, [
            COMPUTEALL, "up", "--listen", f"{machine.ip}:{PORT}", "--pnodes", str(self.pnodes[i]),
            "--processes-on-machine", str(self.threads_share), "--data-dir", str(self.data_dir(i)), *args],
            log=self.log(i), env=env))

    def start(self, timeout_s: float = 120.0) -> None:
        """The first machine's `up`, then an invite and an `up --join-bus-file` for each other one."""
        self._up(0, "--nats-cluster", "3", "--server-name", self.names[0])
        self._wait(lambda: (self.data_dir(0) / "cluster.json").exists(), timeout_s, "the first machine's cluster.json")
        for i in range(1, len(self.names)):
            token = self.directory / f"{self.names[i]}.token"
            token.touch(mode=0o600)
            token.write_text(self.invite("server", self.names[i])["token"])  # never on a command line
            self._up(i, "--join-bus-file", str(token))

    def invite(self, role: str, name: str, *args: str, on: int = 0) -> dict:
        """`computeall invite ROLE --name NAME --json` against machine `on`'s data dir (run here: it edits files)."""
        done = subprocess.run([COMPUTEALL, "invite", role, "--name", name, "--json", *args, "--data-dir",
                               str(self.data_dir(on))], capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"invite {role} {name} failed: {done.stderr[-2000:]}")
        return json.loads(done.stdout)

    def user(self, up: list[int] | None = None) -> Credential:
        """The first machine's local user, dialling every server (or those of `up`)."""
        return self.local("user", "local", up)

    def local(self, role: str, name: str, up: list[int] | None = None) -> Credential:
        """A local identity of the first machine (its `up` issued it), dialling every server (or those of `up`)."""
        from computeall.cli.identity import deployment_security

        local = deployment_security(str(self.data_dir(0))).local(role, name)
        return local.at([self.url(i) for i in (up if up is not None else range(len(self.names)))])

    async def lead_stream_from(self, stream: str, i: int, timeout_s: float = 60.0) -> None:
        """An operator of the first machine repairing by hand: `stream`'s leader moves to machine i's server
        (a superuser asks for step-downs naming it preferred), so that losing machine i loses the leader."""
        security = Security(self.data_dir(0) / "security")
        repairs = security.issue("superuser", "repairs", [self.url(k) for k in range(len(self.names))],
                                 DeploymentTls(security.directory / "tls").trust())
        deadline = time.monotonic() + timeout_s
        while True:  # the new identity reaches every server with the next spread of the security state
            try:
                admin = await bus.connect(repairs, name="repairs")
                break
            except bus.BusConnectError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
        try:
            while await stream_leader(admin, stream) != self.names[i]:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{stream}'s leader did not move to {self.names[i]} within {timeout_s:.0f}s")
                await admin.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}",
                                    json.dumps({"placement": {"preferred": self.names[i]}}).encode(), timeout=10)
                await asyncio.sleep(1.0)
        finally:
            await admin.close()

    def kill(self, i: int) -> float:
        """Machine i is lost: kill -9 of everything on it, at once. When (the events' clock)."""
        self.lab.kill(self.lab.machines[i])
        return time.time()

    def tail(self, lines: int = 40) -> str:
        """The end of every machine's `up` output, for a failure's message."""
        return "\n".join(f"--- {self.log(i)}\n" + "\n".join(self.log(i).read_text(errors="replace").splitlines()[-lines:])
                         for i in range(len(self.names)) if self.log(i).exists())

    def _wait(self, condition, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.processes):
                raise RuntimeError(f"{what}: not within {timeout_s:.0f}s\n{self.tail()}")
            time.sleep(0.2)





class _ServerOn(MachineServer):
    """A `MachineServer` whose nats-server runs on a lab machine (in its namespace)."""

    def __init__(self, machine, *args, **kwargs) -> None:
        self.machine = machine
        super().__init__(*args, **kwargs)

    def command(self) -> list[str]:
        return self.machine.command(super().command())  # `ip netns exec` execs it: the pid is nats-server's


async def stream_leader(nc, stream: str) -> str | None:
    """The server leading `stream` now; None while an election is under way. Asked with a short timeout:
    a request that reached no leader is never answered, and nats-py's 5 s would report a leader elected
    meanwhile up to 5 s late."""
    try:
        return (await nc.jetstream(timeout=0.25).stream_info(stream)).cluster.leader
    except Exception:  # noqa: BLE001 (no leader: the request times out or says so)
        return None


def bare_bus(lab: Machines, directory: Path) -> list[MachineServer]:
    """A nats-server on each lab machine, configured as `computeall up` configures a bus spanning machines
    (routes over mutual TLS, the route secret) and nothing else on them: for measuring the bus itself. The
    first machine's data dir is the deployment's; the others got its kit, as an invited server does. Started;
    JetStream may still be electing its leader when this returns (`bus_failover` rides that out)."""
    servers: list[MachineServer] = []
    for i, machine in enumerate(lab.machines):
        security = Security(directory / f"m{i}" / "security")
        if servers:  # what an invited server gets
            install(kit_of(servers[0].security), security)
        servers.append(_ServerOn(machine, directory / f"m{i}", f"m{i}", f"{machine.ip}:{PORT}", security=security))
        servers[-1].roster.record_server(servers[-1].record())
    everything = servers[0].roster.read()
    for server in servers:  # every server knows every route and member before it starts
        everything = everything.merge(server.roster.read())
    for server in servers:
        server.roster.absorb(everything)
        server.start()
    return servers


def admit_everywhere(servers: list[MachineServer]) -> None:
    """The credentials the first server issued, admitted by all (as the authorities' merge would)."""
    state = servers[0].roster.read()
    for server in servers[1:]:
        server.roster.absorb(state)
        server.apply_members()
