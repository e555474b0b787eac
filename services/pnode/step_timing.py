"""Where a PNode's time goes in each training step, published as `StepTiming` telemetry.

A step on a PNode is its RunStep (forward and backward: computing, waiting for inputs, sending)
then its ApplyStep (the optimizer: computing). The clock holds a session's RunStep figures until
the same step's ApplyStep is done and then makes one `StepTiming` of both; the monitor turns them
into the dashboard's time shares and link traffic.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from computeall.protocol.pnode_api import PNodeReply
from computeall.protocol.telemetry import StepTiming


@dataclass
class _Running:
    step: int
    started: float  # monotonic
    reply: PNodeReply | None = None
    ran: float = 0.0  # monotonic: when the RunStep replied


class StepClock:
    def __init__(self, pnode: str) -> None:
        self.pnode = pnode
        self._steps: dict[str, _Running] = {}  # by session

    def run_started(self, session_id: str, step: int) -> None:
        self._steps[session_id] = _Running(step, time.monotonic())

    def run_done(self, session_id: str, reply: PNodeReply) -> None:
        running = self._steps.get(session_id)
        if running is not None and reply.ok and reply.step == running.step:
            running.reply, running.ran = reply, time.monotonic()
        else:
            self._steps.pop(session_id, None)

    def applied(self, session_id: str, step: int, apply_started: float, apply_s: float) -> StepTiming | None:
        """The step's timing, once its ApplyStep (arrived at monotonic `apply_started`) took `apply_s`;
        None for a step not run whole here. Between its RunStep's reply and the ApplyStep this PNode
        waits for the others to finish their backward: that counts as waiting too."""
        running = self._steps.pop(session_id, None)
        if running is None or running.reply is None or running.step != step:
            return None  # the plan was (re)loaded mid-step, or the RunStep failed
        r = running.reply
        return StepTiming(
            pnode=self.pnode, session_id=session_id, step=step, ts=time.time(),
            step_s=time.monotonic() - running.started, compute_s=r.compute_s + apply_s, send_s=r.send_s,
            wait_s=r.wait_s + max(0.0, apply_started - running.ran), sent_bytes=r.sent_bytes,
        )
