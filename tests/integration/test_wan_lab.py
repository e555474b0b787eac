"""The WAN lab measures what it promises and leaves nothing behind (needs root and `ip netns`)."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from .wan import REPO, require_lab

require_lab()

from bench.wanlab import WanLab, cleanup_stale  # noqa: E402
from bench.wanlab.netns import lab_links, lab_namespaces, sh  # noqa: E402

PY = sys.executable
PING = """
import socket, statistics, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rtts = []
for _ in range(15):
    t = time.perf_counter(); s.sendall(b"x"); s.recv(1); rtts.append(time.perf_counter() - t)
print(statistics.median(rtts))
"""
SEND = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
s.sendall(bytes(int(sys.argv[3]))); s.shutdown(socket.SHUT_WR); s.recv(1)
"""
RECEIVE = """
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
n, t0 = 0, None
while chunk := s.recv(1 << 16):
    t0 = t0 or time.perf_counter(); n += len(chunk)
print(n * 8 / (time.perf_counter() - t0) / 1e6)
"""
HOLD_A_LAB = f"""
import signal, sys, threading; sys.path.insert(0, {str(REPO)!r})
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal: a background job ignores it
from bench.wanlab import WanLab
with WanLab("city", nodes=2, peers=True) as lab:
    print("ready", flush=True)
    threading.Event().wait()
"""

pytestmark = pytest.mark.machines  # conftest: one at a time


def serve(handler) -> tuple[str, int]:
    """A TCP server on loopback in the root namespace, one thread per connection."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def accept() -> None:
        while True:
            conn, _ = server.accept()
            threading.Thread(target=handler, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return server.getsockname()


def echo(conn: socket.socket) -> None:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while data := conn.recv(1 << 16):
        conn.sendall(data)


def run_in(lab: WanLab, node, script: str, *args) -> str:
    done = subprocess.run(node.command([PY, "-c", script, *map(str, args)]), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def median_rtt(lab: WanLab, target: tuple[str, int], node=None) -> float:
    node = node or lab.nodes[0]
    return float(run_in(lab, node, PING, *target))


def names_of(pid: int) -> list[str]:
    mine = [n for n in lab_namespaces() + lab_links() if f"-{pid}-" in n]
    qdiscs = [line for line in sh("tc", "qdisc", "show").stdout.splitlines() if f"dev cal-{pid}-" in line]
    return mine + qdiscs


def test_city_link_adds_its_one_way_delay_in_each_direction() -> None:
    target = serve(echo)
    with WanLab("loopback") as lab:
        base = median_rtt(lab, lab.expose(lab.nodes[0], target))
    with WanLab("city", nodes=2, peers=True) as lab:
        to_root = median_rtt(lab, lab.expose(lab.nodes[0], target))
        a, b = lab.nodes
        peer = lab.popen(b, [PY, "-c", "import socket, sys; s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen();"
                             "print(s.getsockname()[1], flush=True); c, _ = s.accept()\n"
                             "while d := c.recv(65536): c.sendall(d)", b.ip], stdout=subprocess.PIPE, text=True)
        peer_port = int(readline(peer, deadline_s=30))
        assert peer_port in b.ports  # the ephemeral port came from b's own range, which the relays cover
        to_peer = median_rtt(lab, (b.ip, peer_port), node=a)
    one_way = (to_root - base) / 2
    assert 0.017 < one_way < 0.030, f"city adds {one_way * 1e3:.1f} ms one way to the bus, expected ~20"
    peer_one_way = (to_peer - base) / 2
    assert 0.034 < peer_one_way < 0.060, f"peer to peer {peer_one_way * 1e3:.1f} ms one way, expected ~40 (two links)"


def test_city_link_caps_bandwidth_both_ways() -> None:
    size = 6_000_000  # 0.5 s at 100 Mbit/s
    arrived: list[float] = []

    def sink(conn: socket.socket) -> None:
        n, t0 = 0, None
        while chunk := conn.recv(1 << 16):
            t0 = t0 or time.perf_counter()
            n += len(chunk)
        arrived.append(n * 8 / (time.perf_counter() - t0) / 1e6)
        conn.sendall(b"k")

    def source(conn: socket.socket) -> None:
        conn.sendall(bytes(size))
        conn.close()

    with WanLab("city") as lab:
        node = lab.nodes[0]
        run_in(lab, node, SEND, *lab.expose(node, serve(sink)), size)
        down = float(run_in(lab, node, RECEIVE, *lab.expose(node, serve(source))))
    up = arrived[0]
    for direction, mbit in (("up", up), ("down", down)):
        assert 60 < mbit < 108, f"{direction}: {mbit:.0f} Mbit/s across a 100 Mbit/s link"


def test_nothing_remains_after_exit_or_an_exception() -> None:
    with WanLab("home", nodes=2, peers=True) as lab:
        assert len(names_of(os.getpid())) >= 4  # two namespaces, two veths, their qdiscs
        lab.popen(lab.nodes[0], [PY, "-c", "import threading; threading.Event().wait()"])
    assert names_of(os.getpid()) == []
    with pytest.raises(ZeroDivisionError):
        with WanLab("city", nodes=2):
            1 / 0
    assert names_of(os.getpid()) == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_removes_the_lab(signum: int, tmp_path) -> None:
    said = tmp_path / "stderr"
    proc = subprocess.Popen([PY, "-c", HOLD_A_LAB], stdout=subprocess.PIPE, stderr=said.open("w"), text=True)
    try:
        assert readline(proc, deadline_s=60) == "ready"
        assert names_of(proc.pid)
        proc.send_signal(signum)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the lab's process outlived the signal by 60 s; it said:\n{said.read_text()}") from None
    finally:
        proc.kill()
    assert proc.returncode != 0  # the signal still ended it
    assert names_of(proc.pid) == []


def test_cleanup_removes_the_labs_of_dead_processes_only() -> None:
    proc = subprocess.Popen([PY, "-c", HOLD_A_LAB], stdout=subprocess.PIPE, text=True)
    assert readline(proc, deadline_s=60) == "ready"
    proc.kill()  # nothing of its own clean-up can run
    proc.wait()
    assert names_of(proc.pid)
    with WanLab("lan") as live:
        removed = cleanup_stale()
        assert names_of(proc.pid) == []
        assert live.nodes[0].netns not in removed and names_of(os.getpid())
    assert names_of(os.getpid()) == []


def readline(proc: subprocess.Popen, deadline_s: float) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], deadline_s)
    assert ready, f"no output within {deadline_s} s"
    return proc.stdout.readline().strip()
