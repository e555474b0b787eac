"""Which PNodes are alive, leaving or lost, from their heartbeats; what memory each may be given;
and when the bus last lost messages.

A PNode's offered memory is only its word: the allocator counts at most its credential's cap
(`membership_api.pnode_memory`, asked when the PNode joins: `admit`), and `DEFAULT_PNODE_MEMORY`
until the answer is in."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from computeall.network.memory_model import hosting_bytes
from computeall.protocol.membership_api import DEFAULT_PNODE_MEMORY
from computeall.protocol.telemetry import HEARTBEAT_INTERVAL_S, Heartbeat

from .step_time import PNodeCapacity


# A PNode that heartbeats but leaves a request unanswered is slow or hostile, and the orchestrator cannot
# tell which: it gets no work for this long, twice as long each time again. A busy machine's PNode comes
# back (a session it alone could hold resumes), and one that mutes on purpose costs a recovery less often
# each time.
COOL_DOWN_S = 30.0


@dataclass(frozen=True)
class Benched:
    incarnation: str  # the process that gets no work
    until: float  # monotonic time it may work again (inf: never)
    times: int  # requests it left unanswered so far


class PNodeRegistry:
    def __init__(self, timeout_s: float = 5.0) -> None:
        self.timeout_s = timeout_s
        self._last: dict[str, tuple[float, Heartbeat]] = {}
        self._lost: set[str] = set()
        self._restarted: list[str] = []
        self._generation: dict[str, int] = {}
        self._dead: dict[str, tuple[str, float]] = {}  # pnode -> (incarnation that stopped listening, when)
        self._quarantined: set[str] = set()
        self._caps: dict[str, tuple[str, int]] = {}  # pnode -> (incarnation, the most it may offer)
        self._benched: dict[str, Benched] = {}  # pnode -> its incarnation that left a request unanswered or misbehaved
        self._stale: dict[str, str] = {}  # pnode -> its incarnation that came back after it was declared lost
        # when a connection to the bus was last made again (a PNode's, by its heartbeat, or the
        # orchestrator's own): core NATS messages in flight then may be lost (`PNodeCalls.all`)
        self.disturbed_at = float("-inf")

    def beat(self, heartbeat: Heartbeat) -> bool:
        """Record a heartbeat; True when this incarnation comes back after it was declared lost: what it
        holds is stale, and it gets no work until it was reset (`reset_done`). A new incarnation under
        the same name (a restart, faster than the timeout or not) holds nothing: a new generation."""
        pnode = heartbeat.pnode
        previous = self._last.get(pnode)
        restarted = previous is not None and previous[1].incarnation != heartbeat.incarnation
        if previous is not None and not restarted and heartbeat.reconnects > previous[1].reconnects:
            self.bus_disturbed()
        if restarted:
            self._generation[pnode] = self._generation.get(pnode, 0) + 1
            self._stale.pop(pnode, None)
            if pnode not in self._lost:
                self._restarted.append(pnode)
        came_back = pnode in self._lost and not restarted
        if came_back:
            self._stale[pnode] = heartbeat.incarnation
        self._lost.discard(pnode)
        now = time.monotonic()
        dead = self._dead.get(pnode)
        if dead and (dead[0] != heartbeat.incarnation or now - dead[1] > 2 * HEARTBEAT_INTERVAL_S):
            del self._dead[pnode]  # a new incarnation, or the old one still beating: it was a hiccup
        self._last[pnode] = (now, heartbeat)
        return came_back

    def is_stale(self, pnode: str) -> bool:
        """It came back after it was declared lost and was not reset since."""
        seen = self._last.get(pnode)
        return seen is not None and self._stale.get(pnode) == seen[1].incarnation

    def reset_done(self, pnode: str, incarnation: str) -> None:
        """`incarnation` of `pnode` dropped every session it held: it may be given work again."""
        if self._stale.get(pnode) == incarnation:
            del self._stale[pnode]

    def bus_disturbed(self) -> None:
        self.disturbed_at = time.monotonic()

    def not_listening(self, pnode: str) -> None:
        """A request found nobody listening: this incarnation is dead, whatever its last heartbeat
        says, so it counts as neither live nor capacity until a new incarnation beats."""
        seen = self._last.get(pnode)
        if seen is not None:
            self._dead[pnode] = (seen[1].incarnation, time.monotonic())

    def heartbeat(self, pnode: str) -> Heartbeat | None:
        """Its latest heartbeat, if any."""
        seen = self._last.get(pnode)
        return seen[1] if seen else None

    def generation(self, pnode: str) -> int:
        """Changes whenever the PNode restarts: work sent to an older generation is lost."""
        return self._generation.get(pnode, 0)

    def admit(self, pnode: str, incarnation: str, cap_bytes: int) -> None:
        """The most this incarnation of `pnode` may offer, from its credential's record."""
        self._caps[pnode] = (incarnation, cap_bytes)

    def memory_bytes(self, hb: Heartbeat) -> int:
        """What the PNode offered, at most its cap: all the memory it is counted on for."""
        incarnation, cap = self._caps.get(hb.pnode, ("", DEFAULT_PNODE_MEMORY))
        return min(hb.memory_bytes, cap if incarnation == hb.incarnation else DEFAULT_PNODE_MEMORY)

    def unresponsive(self, pnode: str) -> None:
        """It heartbeats but left a request unanswered long past its kind's time: this incarnation gets
        no work for `COOL_DOWN_S`, twice as long each time again (a restarted process joins as new)."""
        seen = self._last.get(pnode)
        if seen is None:
            return
        incarnation = seen[1].incarnation
        before = self._benched.get(pnode)
        times = before.times + 1 if before and before.incarnation == incarnation else 1
        self._benched[pnode] = Benched(incarnation, time.monotonic() + COOL_DOWN_S * 2 ** (times - 1), times)

    def misbehaved(self, pnode: str) -> None:
        """It answered in a way no honest PNode does (in another's name, or what does not parse): this
        incarnation gets no more work (a restarted process joins as new)."""
        seen = self._last.get(pnode)
        if seen is not None:
            self._benched[pnode] = Benched(seen[1].incarnation, math.inf, 0)

    def _benched_now(self, hb: Heartbeat) -> bool:
        verdict = self._benched.get(hb.pnode)
        return verdict is not None and verdict.incarnation == hb.incarnation and time.monotonic() < verdict.until

    def quarantine(self, pnode: str) -> None:
        """Caught computing wrong results: never offered for work again (it may still heartbeat)."""
        self._quarantined.add(pnode)

    def live(self, include_leaving: bool = False) -> list[Heartbeat]:
        """The PNodes that may be given work: heartbeating and answering, not quarantined, not stale (and not leaving)."""
        return sorted(
            (hb for _, hb in self._last.values()
             if self.is_live(hb.pnode) and (include_leaving or not hb.leaving) and hb.pnode not in self._quarantined
             and not self._benched_now(hb) and not self.is_stale(hb.pnode)),
            key=lambda hb: hb.pnode,
        )

    def capacities(self, exclude: set[str] = frozenset()) -> list[PNodeCapacity]:
        """What the allocator is given of the live PNodes (but `exclude`): memory and measured speeds."""
        return [capacity(hb, self.memory_bytes(hb)) for hb in self.live() if hb.pnode not in exclude]

    def is_live(self, pnode: str) -> bool:
        seen = self._last.get(pnode)
        return (seen is not None and time.monotonic() - seen[0] <= self.timeout_s
                and (pnode not in self._dead or self._dead[pnode][0] != seen[1].incarnation))

    def is_leaving(self, pnode: str) -> bool:
        seen = self._last.get(pnode)
        return seen is not None and seen[1].leaving

    def silent_s(self, pnode: str) -> float:
        seen = self._last.get(pnode)
        return time.monotonic() - seen[0] if seen else float("inf")

    def newly_lost(self) -> list[str]:
        """PNodes that went silent (or restarted) since the last call: each is reported once."""
        now = time.monotonic()
        lost = [p for p, (seen, _) in self._last.items() if now - seen > self.timeout_s and p not in self._lost]
        self._lost.update(lost)
        lost += self._restarted
        self._restarted = []
        return lost


def capacity(hb: Heartbeat, memory_bytes: int) -> PNodeCapacity:
    """A PNode as the allocator sees it: the memory it may be given (`PNodeRegistry.memory_bytes`) less
    what its process took before hosting anything; nominal speeds until it has measured its own."""
    memory = hosting_bytes(memory_bytes, hb.process_bytes)
    t = hb.throughput
    if t is None:
        return PNodeCapacity(hb.pnode, memory)
    return PNodeCapacity(hb.pnode, memory, t.flops_per_s, t.bandwidth_bytes_per_s, t.rtt_s)
