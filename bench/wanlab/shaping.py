"""Shaping one veth end with tc: tbf for bandwidth, netem for delay where the kernel has it.

tc shapes egress only, so a link is shaped by the same qdiscs on both of its ends (root side:
traffic towards the PNode; namespace side: traffic from it).
"""

from __future__ import annotations

import os
from functools import cache

from .netns import netns_name, sh
from .profiles import LinkProfile


def _tbf(rate_mbit: float) -> list[str]:
    # burst: 2 ms at line rate, at least 64 KiB (veth hands tbf GSO packets up to 64 KiB);
    # latency bounds the queue, so a sender sees drops like at a real bottleneck.
    burst = max(64 * 1024, int(rate_mbit * 1e6 / 8 * 0.002))
    return ["tbf", "rate", f"{rate_mbit}mbit", "burst", str(burst), "latency", "50ms"]


@cache
def kernel_has_netem() -> bool:
    """netem exists when adding one works; tried on loopback of a throwaway namespace, never on a real link."""
    probe = netns_name(os.getpid(), 998)
    if sh("ip", "netns", "add", probe, check=False).returncode != 0:
        return False
    try:
        return sh("tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms", netns=probe,
                  check=False).returncode == 0
    finally:
        sh("ip", "netns", "del", probe, check=False)


def shape(dev: str, link: LinkProfile, netns: str | None = None) -> None:
    """Cap `dev`'s egress at the profile's rate; with netem, also delay it by the one-way delay."""
    delayed = kernel_has_netem() and link.delay_ms > 0
    if delayed:
        netem = ["netem", "delay", f"{link.delay_ms}ms"] + ([f"{link.jitter_ms}ms"] if link.jitter_ms else [])
        sh("tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", *netem, netns=netns)
    if link.rate_mbit is not None:
        where = ["parent", "1:", "handle", "2:"] if delayed else ["root", "handle", "2:"]
        sh("tc", "qdisc", "add", "dev", dev, *where, *_tbf(link.rate_mbit), netns=netns)


def userspace_delay(link: LinkProfile) -> tuple[float, float]:
    """The (delay, jitter) in seconds the lab's proxies add: all of it without netem, none with it."""
    return (0.0, 0.0) if kernel_has_netem() else (link.delay_s, link.jitter_s)
