"""WanLab: PNodes in their own network namespaces, each behind one shaped link to the root namespace.

    with WanLab("city", nodes=2, peers=True) as lab:
        host, port = lab.expose(lab.nodes[0], ("127.0.0.1", nats_port))   # node 0 dials this for NATS
        proc = lab.popen(lab.nodes[0], [sys.executable, "-m", "my.worker", f"nats://{host}:{port}"])

Topology (per lab, one private /24 from 10.213.0.0/16, a /30 per node):

    root namespace: NATS, the store, ... on 127.0.0.1    lab namespace ca-lab-<pid>-<n>
        proxy on 10.213.X.(4n+1)  -- veth cal-<pid>-<n> ==== wan0 10.213.X.(4n+2) -- the node's command

Nothing routes between namespaces or out of them (no forwarding, no default route): a node
reaches the root only through the proxies `expose` opens on its gateway, and, with `peers=True`,
the other nodes through a relay per peer address (see `_connect_peers`). Bandwidth: tbf on both
veth ends. Delay: netem on both ends where the kernel has it, else the proxies (proxy.py).
Everything is removed on exit, on an exception, on SIGINT/SIGTERM/SIGHUP and at interpreter exit;
`python -m bench.wanlab cleanup` removes labs whose process died without that.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from . import lifetime
from .netns import NS_IFNAME, fresh_names, listener_in, remove_link, remove_namespace, sh, socket_in
from .profiles import LinkProfile, profile as named_profile
from .proxy import Delay, DelayProxy
from .shaping import shape, userspace_delay

SUBNETS = "10.213"          # labs take 10.213.X.0/24, the first X no address of this machine is in
PEER_PORTS = (41000, 32)    # node i's ephemeral ports: 41000 + 32 i ... + 31 (peers=True only)
_LOCK = "/run/ca-wan-lab.lock"


@dataclass
class Node:
    """One PNode's place in the lab."""

    index: int
    netns: str
    link: str               # root-side veth
    ip: str                 # its address, on wan0
    gateway: str            # the root side's address: where its proxies listen
    cores: list[int]
    profile: LinkProfile
    ifname: str = NS_IFNAME  # e.g. GLOO_SOCKET_IFNAME
    ports: range = field(default_factory=lambda: range(0))  # its ephemeral ports, when peers=True

    def command(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, "taskset", "-c", ",".join(map(str, self.cores)), *argv]


@contextmanager
def subnet_lock() -> Iterator[None]:
    """Held while a lab picks its subnet and takes its addresses, so two labs never pick the same."""
    with open(_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def free_subnet() -> str:
    """A /24 of `SUBNETS` no address of this machine is in (call it under `subnet_lock`)."""
    used = sh("ip", "-4", "-o", "addr", "show").stdout
    for x in range(256):
        if f" {SUBNETS}.{x}." not in used:
            return f"{SUBNETS}.{x}"
    raise RuntimeError(f"no free /24 in {SUBNETS}.0.0/16: run `python -m bench.wanlab cleanup`")


def stop_process_groups(procs: list[subprocess.Popen], grace_s: float) -> None:
    """SIGTERM each process's group at once, then wait for each; a group still there after `grace_s` is killed."""
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    for proc in procs:
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class WanLab(lifetime.Lab):
    def __init__(self, link: LinkProfile | str, nodes: int = 1, *, peers: bool = False,
                 cores: list[list[int]] | None = None) -> None:
        self.profile = named_profile(link) if isinstance(link, str) else link
        self.size = nodes
        self.peers = peers
        cpus = os.cpu_count() or 1
        self._cores = cores or [[i % cpus] for i in range(nodes)]
        self.nodes: list[Node] = []
        self._made_links: list[str] = []
        self._made_netns: list[str] = []
        self._procs: list[subprocess.Popen] = []
        self._proxies: list[DelayProxy] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="wan-lab-proxies", daemon=True)
        self._closed = False

    # -- life cycle ------------------------------------------------------------------------
    def _build(self) -> None:
        self._thread.start()
        with subnet_lock():  # two labs must not pick the same subnet
            prefix = free_subnet()
            for i in range(self.size):
                self.nodes.append(self._make_node(i, prefix))
        if self.peers:
            self._connect_peers()

    def close(self) -> None:
        """Stop the node processes, the proxies, then remove the veths (and their qdiscs) and namespaces."""
        stop_process_groups(self._procs, grace_s=3)
        if not self._closed:
            self._closed = True
            if self._thread.is_alive():
                self._call(self._close_proxies())
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(timeout=5)
        for name in self._made_links:
            remove_link(name)
        for name in self._made_netns:
            remove_namespace(name)
        lifetime.closed(self)

    # -- what users of the lab call --------------------------------------------------------
    def expose(self, node: Node, target: tuple[str, int]) -> tuple[str, int]:
        """An address `node` can dial that reaches `target` (in the root namespace) over its link."""
        proxy = self._proxy(listener_in(None, node.gateway), target, node.profile, dial_netns=None)
        return proxy.address

    def popen(self, node: Node, argv: list[str], **kwargs) -> subprocess.Popen:
        """Start argv inside `node`'s namespace, on its cores; stopped (with its children) when the lab closes."""
        proc = subprocess.Popen(node.command(argv), start_new_session=True, **kwargs)
        self._procs.append(proc)
        return proc

    # -- building ---------------------------------------------------------------------------
    def _make_node(self, i: int, prefix: str) -> Node:
        if i >= 64:
            raise ValueError("a lab has at most 64 nodes (one /30 each in a /24)")
        ns, link = fresh_names()
        node = Node(index=i, netns=ns, link=link, ip=f"{prefix}.{4 * i + 2}", gateway=f"{prefix}.{4 * i + 1}",
                    cores=self._cores[i], profile=self.profile)
        self._made_netns.append(ns)  # recorded before it exists, so a signal mid-way still removes it
        sh("ip", "netns", "add", ns)
        self._made_links.append(link)
        sh("ip", "link", "add", link, "type", "veth", "peer", "name", NS_IFNAME, "netns", ns)
        sh("ip", "addr", "add", f"{node.gateway}/30", "dev", link)
        sh("ip", "link", "set", link, "up")
        sh("ip", "-n", ns, "addr", "add", f"{node.ip}/30", "dev", NS_IFNAME)
        sh("ip", "-n", ns, "link", "set", NS_IFNAME, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        shape(link, node.profile)                      # towards the node
        shape(NS_IFNAME, node.profile, netns=ns)       # from the node
        return node

    def _connect_peers(self) -> None:
        """Let every node dial every other node's listening sockets, over both nodes' links.

        Programs like gloo listen on an ephemeral port of their own address and tell the peer
        through a store, so the lab cannot know the port in advance; it bounds it instead: each
        namespace gets its own small ephemeral port range. In the dialling namespace the peer's
        address is added to lo and a relay listens on each port of the peer's range; the relay
        leaves over the dialler's link to a root proxy, which enters the peer's link. Delay per
        hop is that link's one-way delay, so peer to peer costs both links, as on the internet.
        """
        base, width = PEER_PORTS
        for node in self.nodes:
            node.ports = range(base + width * node.index, base + width * (node.index + 1))
            sh("sh", "-c", f"echo '{node.ports[0]} {node.ports[-1]}' > /proc/sys/net/ipv4/ip_local_port_range",
               netns=node.netns)
        for src in self.nodes:
            for dst in self.nodes:
                if dst is src:
                    continue
                sh("ip", "-n", src.netns, "addr", "add", f"{dst.ip}/32", "dev", "lo")
                for port in dst.ports:
                    into_dst = self._proxy(listener_in(None, src.gateway), (dst.ip, port), dst.profile, dial_netns=None)
                    self._proxy(listener_in(src.netns, dst.ip, port), into_dst.address, src.profile,
                                dial_netns=src.netns)

    def _proxy(self, listener, target: tuple[str, int], link: LinkProfile, dial_netns: str | None) -> DelayProxy:
        seconds, jitter = userspace_delay(link)
        proxy = DelayProxy(listener, target, Delay(seconds, jitter), dial=lambda: socket_in(dial_netns),
                           seed=len(self._proxies))
        self._proxies.append(proxy)
        self._call(proxy.start())
        return proxy

    async def _close_proxies(self) -> None:
        await asyncio.gather(*(p.close() for p in self._proxies))

    def _call(self, coro, timeout: float = 30.0):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)
