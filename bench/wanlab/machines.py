"""Machines: network namespaces that reach each other directly, each a machine that can be lost whole.

    with Machines(3) as lab:
        a = lab.machines[0]
        proc = lab.popen(a, ["computeall", "up", "--listen", f"{a.ip}:4222", ...], log=path)
        lab.kill(a)            # kill -9 of every process in its namespace: the machine is gone

Topology: a bridge in the root namespace holds one veth per machine; machine i has 10.213.X.(i+1)/24 on
`wan0`, the root namespace 10.213.X.254 on the bridge, so the machines dial each other's addresses and
the root namespace (a test, a benchmark's client) dials all of them. Unlike `WanLab` nothing is shaped
or proxied: the point is a machine's loss, not its link. Everything is named after this process
(`netns.fresh_names`) and removed on exit, on an exception and on SIGINT/SIGTERM/SIGHUP
(`lifetime`); `python -m bench.wanlab cleanup` removes what a crashed process left behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from . import lifetime
from .lab import free_subnet, stop_process_groups, subnet_lock
from .netns import NS_IFNAME, fresh_names, remove_link, remove_namespace, sh

ROOT_HOST = 254  # the root namespace's address on the bridge


@dataclass
class Machine:
    index: int
    netns: str
    link: str  # the root side of its veth, on the bridge
    ip: str

    def command(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv]


class Machines(lifetime.Lab):
    def __init__(self, count: int) -> None:
        self.count = count
        self.machines: list[Machine] = []
        self.root_ip: str | None = None
        self._bridge: str | None = None
        self._links: list[str] = []
        self._namespaces: list[str] = []
        self._procs: list[subprocess.Popen] = []

    def _build(self) -> None:
        with subnet_lock():
            prefix = free_subnet()
            _, self._bridge = fresh_names()
            self._links.append(self._bridge)  # recorded before it exists: a signal mid-way still removes it
            sh("ip", "link", "add", self._bridge, "type", "bridge")
            sh("ip", "link", "set", self._bridge, "type", "bridge", "nf_call_iptables", "0", check=False)
            self.root_ip = f"{prefix}.{ROOT_HOST}"
            sh("ip", "addr", "add", f"{self.root_ip}/24", "dev", self._bridge)
            sh("ip", "link", "set", self._bridge, "up")
            for i in range(self.count):
                self.machines.append(self._machine(i, prefix))

    def _machine(self, i: int, prefix: str) -> Machine:
        ns, link = fresh_names()
        machine = Machine(index=i, netns=ns, link=link, ip=f"{prefix}.{i + 1}")
        self._namespaces.append(ns)
        sh("ip", "netns", "add", ns)
        self._links.append(link)
        sh("ip", "link", "add", link, "type", "veth", "peer", "name", NS_IFNAME, "netns", ns)
        sh("ip", "link", "set", link, "master", self._bridge)
        sh("ip", "link", "set", link, "up")
        sh("ip", "-n", ns, "addr", "add", f"{machine.ip}/24", "dev", NS_IFNAME)
        sh("ip", "-n", ns, "link", "set", NS_IFNAME, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        return machine

    def popen(self, machine: Machine, argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start `argv` on `machine` (its output appended to `log`); ended when the machines are removed."""
        with open(log, "ab") as out:
            proc = subprocess.Popen(machine.command(argv), stdout=out, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
        self._procs.append(proc)
        return proc

    def pids(self, machine: Machine) -> list[int]:
        return [int(pid) for pid in sh("ip", "netns", "pids", machine.netns, check=False).stdout.split()]

    def kill(self, machine: Machine) -> list[int]:
        """`kill -9` of every process on `machine`, all at once, as when it loses power; their pids."""
        pids = self.pids(machine)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

    def close(self) -> None:
        """Stop what runs on the machines (SIGTERM, then SIGKILL), remove their namespaces, links and the bridge."""
        stop_process_groups(self._procs, grace_s=20)
        for ns in self._namespaces:
            remove_namespace(ns)  # kills whatever is left inside
        for link in reversed(self._links):
            remove_link(link)
        self._namespaces, self._links, self._procs = [], [], []
        lifetime.closed(self)
