"""Fair share between users: the deployment's per-user limits (`protocol.fair_share.FairShareLimits`)
applied to what the orchestrator holds in memory, its sessions' folded states. Nothing here reads
the log.

- Running sessions: `slots(owner)` counts the owner's running sessions for the aggregate, which
  queues a session asked to run beyond the limit; `next_to_start()` names the queued sessions that
  may start now. Decisions that change a user's running count are taken one at a time per user
  (`deciding`), so two of their commands handled side by side cannot both take the last slot.
- PNodes: `pnodes_of(owner)` is the registry as that user's sessions see it (`pnode_share.py`).
- Commands: `rate`, a token bucket per user (`command_rate.py`).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping

from computeall.protocol.fair_share import FairShareLimits
from computeall.protocol.session_log import SessionLog
from computeall.protocol.session_state import RunningSlots, SessionState
from computeall.protocol.session_status import SessionStatus

from .command_rate import CommandRate
from .pnode_share import PNodeShare, partition
from .pnodes import PNodeRegistry


class FairShare:
    def __init__(self, limits: FairShareLimits, registry: PNodeRegistry, sessions: Mapping[str, SessionLog]) -> None:
        self.limits = limits
        self.registry = registry
        self.sessions = sessions  # the orchestrator's: every session it has seen created, in that order
        self.rate = CommandRate(limits.commands_per_second_per_user, limits.command_burst_per_user)
        self._deciding: dict[str, asyncio.Lock] = {}

    def deciding(self, user: str) -> asyncio.Lock:
        """Held while a decision may change `user`'s running count, from counting to recording."""
        return self._deciding.setdefault(user, asyncio.Lock())

    def slots(self, owner: str) -> RunningSlots:
        running = sum(s.owner == owner for s in self._running())
        return RunningSlots(running=running, limit=self.limits.max_running_sessions_per_user)

    def next_to_start(self) -> list[SessionLog]:
        """The queued sessions that may start now: each user's oldest, as many as they have slots
        free, the users running fewest first."""
        running = Counter(s.owner for s in self._running())
        queued: dict[str, list[SessionLog]] = {}
        for session in self.sessions.values():
            if session.state.status == SessionStatus.QUEUED:
                queued.setdefault(session.state.owner, []).append(session)
        free = {owner: max(0, self.limits.max_running_sessions_per_user - running[owner]) for owner in queued}
        return [s for owner in sorted(queued, key=lambda u: (running[u], u)) for s in queued[owner][: free[owner]]]

    def pnodes_of(self, owner: str) -> PNodeShare:
        return PNodeShare(self.registry, lambda: self._part(owner))

    def _part(self, owner: str) -> tuple[set[str] | None, set[str]]:
        """`owner`'s part of the pool (None: it is not split) and the PNodes other users' sessions hold."""
        held: dict[str, set[str]] = {owner: set()}
        for state in self._running():
            held.setdefault(state.owner, set()).update(state.pnodes)
        cap = self.limits.max_pnodes_per_user
        if len(held) == 1 and cap is None:
            return None, set()
        parts = partition([hb.pnode for hb in self.registry.live()], held, cap)
        if parts is None:
            return None, set()
        return parts[owner], {p for user, pnodes in held.items() if user != owner for p in pnodes}

    def _running(self) -> list[SessionState]:
        return [s.state for s in self.sessions.values() if s.state.status == SessionStatus.RUNNING]
