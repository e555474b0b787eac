"""A tensor's trip between PNodes, both halves: what leaves this PNode and what comes in.

Sending: a queue drained by its own task, so compute never waits on a send. The stage `put`s a
tensor in its wire form with its route and goes on with the next work item; the outbox turns it
into frames on the PNode's wire thread (digest, copies: `tensorcore.tensor_frames`) and publishes
them on `<prefix>.pn.<dst>.tensor.<src>` (`Link`), in the order they were put. It counts the bytes
sent to each PNode and the time spent sending, which the stage reports with the step. A frame the
connection cannot even buffer while it reconnects (its nats-server died) is lost as the frames in
flight were: the orchestrator, told of the reconnect, runs the step again.

Receiving: who sent each frame (its subject), whether the plan of the session it is for expects it
from that sender (`admission.py`), then its chunks reassembled per sender. The order is the point: a
frame's header is parsed and checked before its tensor takes any memory, and a sender's chunks only
ever join its own tensors, each within the size its route carries, at most
`TENSORS_PENDING_PER_SENDER` unfinished at once. So a PNode the plan does not name costs a receiver
one header parse per frame, and one it names (a producer gone wrong) at most its own budget: that
many times its largest tensor. The real PNode decodes the whole tensor (`node.py`, on its wire
thread) and hands it to its stage; the simulated one only notes its arrival.

No torch at import: the simulated PNode receives through this module too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable

import nats.errors

from computeall.protocol.limits import TENSORS_PENDING_PER_SENDER
from computeall.protocol.subjects import Subjects, tensor_sender
from computeall.protocol.wire import Reassembler, Tensor, WireError, decode_frame

from .admission import LateFrame, Route
from .routing import TensorRoute

if TYPE_CHECKING:
    from computeall.tensorcore.wire_formats import Encoded

log = logging.getLogger("computeall.pnode.transport")


# -- sending -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Link:
    """How this PNode reaches the others: publish frames to a PNode, the largest frame, the wire thread."""

    publish: Callable[[str, list[bytes]], Awaitable[None]]
    max_payload: Callable[[], int]
    executor: Executor


@dataclass
class Traffic:
    """What a pass sent: bytes by destination PNode (frames, headers included) and seconds spent sending."""

    sent_bytes: dict[str, int]
    send_s: float


class Outbox:
    def __init__(self, link: Link) -> None:
        self.link = link
        self._queue: asyncio.Queue[tuple[str, Encoded, TensorRoute]] = asyncio.Queue()
        self._task: asyncio.Task | None = None
        self._failure: BaseException | None = None
        self._sent: dict[str, int] = defaultdict(int)
        self._send_s = 0.0

    def put(self, pnode: str, encoded: Encoded, route: TensorRoute) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._drain())
        self._queue.put_nowait((pnode, encoded, route))

    async def flush(self) -> Traffic:
        """Wait until everything put so far is published; what was sent since the last flush."""
        await self._queue.join()
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure
        traffic = Traffic(dict(self._sent), self._send_s)
        self._sent.clear()
        self._send_s = 0.0
        return traffic

    def clear(self) -> None:
        """Drop what is queued and what was counted (a new pass: nobody waits for an aborted one's tensors)."""
        while not self._queue.empty():
            self._queue.get_nowait()
            self._queue.task_done()
        self._failure = None
        self._sent.clear()
        self._send_s = 0.0

    def close(self) -> None:
        self.clear()
        if self._task is not None:
            self._task.cancel()

    async def _drain(self) -> None:
        from computeall.tensorcore.tensor_frames import encoded_frames  # torch: only a real PNode's stages send here

        loop = asyncio.get_running_loop()
        while True:
            pnode, encoded, route = await self._queue.get()
            try:
                t0 = time.monotonic()
                frames = await loop.run_in_executor(
                    self.link.executor, encoded_frames, route.wire_key, encoded, self.link.max_payload(), route.wire_meta()
                )
                await self.link.publish(pnode, frames)
                self._sent[pnode] += sum(len(f) for f in frames)
                self._send_s += time.monotonic() - t0
            except nats.errors.OutboundBufferLimitError:
                log.warning("sending %s to %s: the bus is reconnecting and its buffer is full; lost", route.wire_key, pnode)
            except Exception as exc:  # kept for the pass to raise: a send that failed must not pass silently
                log.warning("sending %s to %s failed: %s", route.wire_key, pnode, exc)
                self._failure = exc
            finally:
                self._queue.task_done()


# -- receiving -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Delivery:
    """A whole tensor that its stage's plan expects from its sender, digest verified."""

    stage: Any  # the stage of the session it is for (`stage.SessionStage`, `sim_stage.SimulatedStage`)
    route: Route
    sender: str
    tensor: Tensor


class Inbound:
    def __init__(self, subjects: Subjects, stage_of: Callable[[str], Any]) -> None:
        self.subjects = subjects
        self.stage_of = stage_of  # session id -> the hosted stage (with its `admission`), or None
        # a sender publishes a tensor's chunks one after the other on each of its streams (a pass's outbox,
        # the replica sums', check material): a few unfinished tensors at once, per session it shares
        self.reassembler = Reassembler(max_pending=TENSORS_PENDING_PER_SENDER)
        self.rejected = 0

    def take(self, subject: str, frame: bytes) -> Delivery | None:
        """One frame in: the tensor once this frame completes it. `WireError` says why a frame is refused."""
        try:
            sender = tensor_sender(self.subjects, subject)
        except ValueError as exc:
            raise WireError(str(exc)) from None
        header, body = decode_frame(frame, self.reassembler.max_tensor_bytes)
        session = header.meta.get("session")
        stage = self.stage_of(session) if isinstance(session, str) else None
        if stage is None:
            raise WireError(f"tensor {header.key!r} from {sender} is for session {session!r}, which this PNode does not host")
        route = stage.admission.admit(sender, header)
        whole = self.reassembler.add(header, body, sender)
        return None if whole is None else Delivery(stage, route, sender, whole)

    def refused(self, exc: WireError) -> None:
        """Count and log a refused frame; a late one (an aborted try's) only at debug level."""
        if isinstance(exc, LateFrame):
            log.debug("dropped a late tensor frame: %s", exc)
            return
        self.rejected += 1
        log.warning("rejected a tensor frame (%d so far): %s", self.rejected, exc)
