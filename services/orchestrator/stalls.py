"""How long a request to a session's PNodes may go unanswered before it is somebody's fault.

Each kind of request (RunStep, ApplyStep, LoadCheckpoint, ...) is allowed `STALL_FACTOR` times the
median of what it took lately (`Allowance`), with two deadlines, both checked by `PNodeCalls.all`:

- `answer_s`, always: a PNode that has not answered by then while it keeps heartbeating is treated
  as lost (`Unanswered`): its VNodes move and the step runs again from the last checkpoint, the
  same bits. At least `ANSWER_FLOOR_S`. A kind not measured yet gets `FIRST_ANSWER_S`, or
  `STALL_FACTOR` times its estimate when that is longer (a pass's: the allocation's estimated step
  time; a checkpoint's: the largest share of it over its PNode's measured link), never the request
  timeout.
- `reconnect_s`, once a reconnect to the bus is seen: a step's requests, replies and tensor frames
  are core NATS messages, at most once, and a nats-server that dies takes some with it. Every such
  loss comes with a connection made again (the orchestrator's own, or a PNode's, which its
  heartbeat reports), so the request is stalled, nobody's fault (`StepStalled`), sooner: at least
  `STALL_FLOOR_S`, the time to reconnect and hear of it. Only for kinds with a measured duration.

A pass (RunStep, RunValidation) waits for inputs from other PNodes, so one PNode that never
answers makes the others wait too. Each pass is told to give up waiting at half of `answer_s`
(`give_up_s`): an honest PNode whose inputs never came says so (`PNodeReply.starved`) before the
deadline, and only those that did not answer at all are at fault. When everyone answered and some
starved, the pass is stalled and runs again in place. Each stall or fault of a kind in a row
doubles its allowance, so a step merely slower than usual is let through the next time.
"""

from __future__ import annotations

import statistics
from collections import defaultdict, deque
from dataclasses import dataclass

STALL_FACTOR = 4.0
STALL_FLOOR_S = 2.0  # once a reconnect is seen: the time to reconnect and hear of it
ANSWER_FLOOR_S = 10.0  # before a PNode that heartbeats but does not answer is treated as lost
FIRST_ANSWER_S = 30.0  # the same for a kind of request nothing measured yet: within a minute of the attack
RECENT = 8  # durations kept per kind of request


@dataclass(frozen=True)
class Allowance:
    answer_s: float  # a PNode still unanswered then, while heartbeating, is at fault
    reconnect_s: float | None  # once a reconnect is seen: stalled on lost messages (None: not measured yet)

    @property
    def give_up_s(self) -> float:
        """When a pass stops waiting for its inputs and says so: well before `answer_s`."""
        return self.answer_s / 2

    def after(self, first: "Allowance") -> "Allowance":
        """This kind's, for a request that each PNode takes up only once it answered one of `first`'s
        (a RunStep sent right behind an ApplyStep)."""
        reconnect = None if self.reconnect_s is None or first.reconnect_s is None else self.reconnect_s + first.reconnect_s
        return Allowance(answer_s=self.answer_s + first.answer_s, reconnect_s=reconnect)


class StallDeadlines:
    def __init__(self) -> None:
        self._took: dict[str, deque[float]] = defaultdict(lambda: deque(maxlen=RECENT))
        self._stalls: dict[str, int] = defaultdict(int)  # in a row, per kind of request
        self._estimates: dict[str, float] = {}  # seconds, per kind, before any is measured

    def allowance(self, kind: str) -> Allowance:
        grown = 2 ** self._stalls[kind]
        took = self._took[kind]
        if not took:
            first = max(FIRST_ANSWER_S, STALL_FACTOR * self._estimates.get(kind, 0.0))
            return Allowance(answer_s=first * grown, reconnect_s=None)
        typical = STALL_FACTOR * statistics.median(took)
        return Allowance(answer_s=max(ANSWER_FLOOR_S, typical) * grown, reconnect_s=max(STALL_FLOOR_S, typical) * grown)

    def estimate(self, kind: str, seconds: float) -> None:
        """What a request of `kind` should take, until one is measured (e.g. the allocation's step time)."""
        self._estimates[kind] = seconds

    def took(self, kind: str, seconds: float) -> None:
        self._took[kind].append(seconds)
        self._stalls[kind] = 0

    def stalled(self, kind: str) -> None:
        self._stalls[kind] += 1
