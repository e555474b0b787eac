"""A whole computeall session across two lab namespaces behind `city` links (needs root and `ip netns`).

Each PNode runs in its own namespace on its own core and reaches NATS only through its shaped,
delayed link. The session trains the same losses as the same session on unshaped links (same
seed, one thread per PNode), whatever the allocator made of the slow links, and each PNode
measured its link for what it is.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from .wan import REPO, require_lab

require_lab()

from bench.wanlab import PROFILES, WanLab  # noqa: E402
from bench.wanlab.computeall_run import run_session  # noqa: E402
from computeall.protocol.config import DataConfig, LrSchedule, SessionConfig  # noqa: E402

from .cluster import running_cluster, stdlib_corpus  # noqa: E402

pytestmark = [pytest.mark.timeout(400), pytest.mark.machines]

STEPS = 5


def config() -> SessionConfig:
    return SessionConfig(
        network_yaml=(REPO / "examples" / "networks" / "micro-gpt.yaml").read_text(),
        data=DataConfig(files=stdlib_corpus()), steps=STEPS, batch_size=8, micro_batches=4, seed=3,
        lr=LrSchedule(peak=3e-3, warmup_steps=2, min_lr=3e-4),
    )


async def train(tmp_path: Path, profiles: list[str]) -> list:
    """The same session over each profile's links, one after the other, with the same services."""
    runs = []
    async with running_cluster(tmp_path, pnodes=0) as cloud:
        for profile in profiles:
            with WanLab(profile, nodes=2) as lab:
                runs.append(await run_session(cloud, lab, config(), timeout_s=300))
    return runs


def test_five_steps_over_city_links_train_the_loopback_losses(tmp_path) -> None:
    city, loopback = asyncio.run(train(tmp_path, ["city", "loopback"]))

    assert [s.step for s in city.steps] == list(range(STEPS))
    assert city.losses == loopback.losses  # bit for bit: placement and links never change the math
    assert len(set(city.assignment.values())) == 2  # both PNodes took part

    link = PROFILES["city"]
    for pnode, measured in city.throughput.items():
        assert measured is not None, f"{pnode} joined without measuring its link"
        # a round trip to NATS crosses the PNode's link both ways; the rate is capped by tbf
        assert measured.rtt_s >= 2 * link.delay_s
        # (tbf lets a burst through above the rate, which a short probe sees: up to half as much again)
        assert 0.3 * link.rate_mbit * 1e6 / 8 <= measured.bandwidth_bytes_per_s <= 1.5 * link.rate_mbit * 1e6 / 8
    # unshaped: faster than the city cap, and nearer than the city's PNodes (compared with what they
    # measured, since a loaded machine adds its own tens of milliseconds to every round trip)
    nearest_city = min(m.rtt_s for m in city.throughput.values())
    for pnode, measured in loopback.throughput.items():
        assert measured.rtt_s < nearest_city and measured.bandwidth_bytes_per_s > 1.5 * link.rate_mbit * 1e6 / 8, pnode

    # each PNode timed its part of each step: tensors went both ways, and over city links the
    # PNodes waited for each other longer than on loopback
    for run in (city, loopback):
        assert {(t.step, t.pnode) for t in run.timings} >= {(s, p) for s in range(1, STEPS) for p in run.throughput}
        for t in run.timings:
            assert t.compute_s > 0 and t.compute_s + t.wait_s <= t.step_s * 1.01
            assert set(t.sent_bytes) == set(run.throughput) - {t.pnode} and min(t.sent_bytes.values()) > 0
    waited = {name: sum(t.wait_s for t in run.timings) for name, run in (("city", city), ("loopback", loopback))}
    assert waited["city"] > waited["loopback"]
