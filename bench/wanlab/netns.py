"""The kernel side of the lab: `ip`/`tc` calls, entering a namespace, and finding labs by name.

Everything a lab makes is named after the process that made it, so a later run can tell a live
lab (leave it) from one whose owner crashed (remove it):
    network namespace  ca-lab-<pid>-<n>
    root-side veth     cal-<pid>-<n>        (interface names have 15 characters at most)
The namespace side of each veth is `wan0`; deleting the root side removes the pair and the
qdiscs on both ends.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import re
import socket
import subprocess
from contextlib import contextmanager
from typing import Iterator

NETNS_PREFIX = "ca-lab-"
LINK_PREFIX = "cal-"
NS_IFNAME = "wan0"
_NETNS_NAME = re.compile(rf"^{NETNS_PREFIX}(\d+)-(\d+)$")
_LINK_NAME = re.compile(rf"^{LINK_PREFIX}(\d+)-(\d+)$")
_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


class LabUnavailable(RuntimeError):
    """This machine (or user) cannot build a lab: not root, or network namespaces are refused."""


class LabError(RuntimeError):
    """An `ip` or `tc` command the lab needed failed."""


def netns_name(pid: int, n: int) -> str:
    return f"{NETNS_PREFIX}{pid}-{n}"


def link_name(pid: int, n: int) -> str:
    return f"{LINK_PREFIX}{pid}-{n}"


_numbers = itertools.count()


def fresh_names() -> tuple[str, str]:
    """A namespace's and a root-side link's names this process has not used yet (found again by `cleanup_stale`)."""
    n = next(_numbers)
    return netns_name(os.getpid(), n), link_name(os.getpid(), n)


def sh(*argv: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run an `ip`/`tc`/... command, in `netns` if given; a failure names the command and its stderr."""
    full = ["ip", "netns", "exec", netns, *argv] if netns else list(argv)
    done = subprocess.run(full, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise LabError(f"`{' '.join(full)}` failed ({done.returncode}): {done.stderr.strip()}")
    return done


def check_available() -> None:
    """Raise LabUnavailable with the reason when this process cannot make namespaces."""
    if os.geteuid() != 0:
        raise LabUnavailable("the WAN lab needs root (network namespaces, veth pairs, tc)")
    probe = netns_name(os.getpid(), 999)
    made = sh("ip", "netns", "add", probe, check=False)
    if made.returncode != 0:
        raise LabUnavailable(f"`ip netns add` is refused here: {made.stderr.strip() or made.returncode}")
    sh("ip", "netns", "del", probe, check=False)


@contextmanager
def entered(netns: str) -> Iterator[None]:
    """This thread inside `netns` for the block (a socket made here stays in that namespace)."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        if _libc.setns(target, _CLONE_NEWNET) != 0:
            raise LabError(f"setns({netns}): {os.strerror(ctypes.get_errno())}")
        try:
            yield
        finally:
            if _libc.setns(home, _CLONE_NEWNET) != 0:  # a thread stuck in a lab namespace must not go on
                os.write(2, f"WAN lab: cannot return to the root namespace: {os.strerror(ctypes.get_errno())}\n".encode())
                os._exit(70)
    finally:
        os.close(home)
        os.close(target)


def socket_in(netns: str | None) -> socket.socket:
    if netns is None:
        return socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with entered(netns):
        return socket.socket(socket.AF_INET, socket.SOCK_STREAM)


def listener_in(netns: str | None, host: str, port: int = 0) -> socket.socket:
    sock = socket_in(netns)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


def lab_namespaces() -> list[str]:
    out = sh("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line and _NETNS_NAME.match(line.split()[0])]


def lab_links() -> list[str]:
    out = sh("ip", "-o", "link", "show", check=False).stdout
    names = (line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line)
    return [name for name in names if _LINK_NAME.match(name)]


def remove_namespace(netns: str) -> None:
    """Kill what still runs inside (a namespace lives as long as its processes), then delete it."""
    for pid in sh("ip", "netns", "pids", netns, check=False).stdout.split():
        try:
            os.kill(int(pid), 9)
        except ProcessLookupError:
            pass
    sh("ip", "netns", "del", netns, check=False)


def remove_link(name: str) -> None:
    sh("ip", "link", "del", name, check=False)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_stale(include_live: bool = False) -> list[str]:
    """Remove every lab namespace and veth whose owning process is gone (or all of them); return their names."""
    removed = []
    for name in lab_links():
        if include_live or not _alive(int(_LINK_NAME.match(name).group(1))):
            remove_link(name)
            removed.append(name)
    for name in lab_namespaces():
        if include_live or not _alive(int(_NETNS_NAME.match(name).group(1))):
            remove_namespace(name)
            removed.append(name)
    return removed
