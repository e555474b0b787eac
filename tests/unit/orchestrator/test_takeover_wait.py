"""Taking a session up again, an orchestrator waits a few seconds for the PNodes the session used that it has
not heard of yet (it has just started: they register again), never for one it heard go silent (a standby
taking over from an orchestrator whose machine died with that PNode): that wait had delayed every takeover
after a machine's loss by twice the heartbeat timeout (tests/integration/test_bus_machines.py)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from computeall.orchestrator.pnodes import PNodeRegistry
from computeall.orchestrator.preparation import wait_for_pnodes
from computeall.protocol.telemetry import Heartbeat

TIMEOUT_S = 0.5


def heartbeat(pnode: str) -> Heartbeat:
    return Heartbeat(pnode=pnode, host="h", os_pid=1, device="cpu", memory_bytes=1 << 30, ts=time.time(),
                     incarnation=f"{pnode}-1")


def taken_over(pnodes: list[str]) -> SimpleNamespace:
    return SimpleNamespace(pnodes=pnodes, config=SimpleNamespace(min_pnodes=2))


def waited(registry: PNodeRegistry, state, beating: str) -> float:
    """How long the wait took, `beating` heartbeating all along."""
    async def run() -> float:
        async def beat() -> None:
            while True:
                registry.beat(heartbeat(beating))
                await asyncio.sleep(0.05)

        beats = asyncio.create_task(beat())
        start = time.monotonic()
        try:
            await wait_for_pnodes(state, registry, wait_s=5.0)
        finally:
            beats.cancel()
        return time.monotonic() - start

    return asyncio.run(run())


def test_a_pnode_heard_going_silent_is_not_waited_for():
    registry = PNodeRegistry(TIMEOUT_S)
    registry.beat(heartbeat("gone"))
    time.sleep(TIMEOUT_S * 1.2)  # its machine died
    assert waited(registry, taken_over(["gone", "here"]), beating="here") < TIMEOUT_S


def test_a_pnode_not_heard_of_yet_is_given_twice_the_heartbeat_timeout():
    assert waited(PNodeRegistry(TIMEOUT_S), taken_over(["later", "here"]), beating="here") >= 2 * TIMEOUT_S * 0.9
