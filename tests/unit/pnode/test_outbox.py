"""The outbox: `put` only queues (the compute thread never waits for the network), frames go out in order, bytes are counted per
PNode, and a send that failed is raised by the pass's flush instead of passing silently."""

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from computeall.pnode.transport import Link, Outbox
from computeall.pnode.routing import TensorRoute
from computeall.protocol.wire import Reassembler
from computeall.tensorcore.wire_formats import wire_format


class SlowLink:
    """Publishes after a delay, keeping what it sent; can be told to fail."""

    def __init__(self, delay_s: float = 0.0, fail: bool = False) -> None:
        self.delay_s, self.fail = delay_s, fail
        self.sent: list[tuple[str, list[bytes]]] = []

    async def publish(self, pnode: str, frames: list[bytes]) -> None:
        await asyncio.sleep(self.delay_s)
        if self.fail:
            raise ConnectionError("the bus went away")
        self.sent.append((pnode, frames))


def route(micro: int) -> TensorRoute:
    return TensorRoute.activation("s", "train", 0, micro, src="b0.attn")


@pytest.fixture
def wire_thread():
    with ThreadPoolExecutor(1) as pool:
        yield pool


async def test_put_returns_at_once_and_the_frames_follow_in_order(wire_thread):
    link = SlowLink(delay_s=0.05)
    outbox = Outbox(Link(link.publish, lambda: 1 << 20, wire_thread))
    for m in range(4):
        outbox.put("p1" if m % 2 else "p2", wire_format("int8").encode(torch.full((64, 64), float(m))), route(m))
    assert link.sent == [], "put only queues: the sending is the outbox task's, later"
    traffic = await outbox.flush()
    assert [p for p, _ in link.sent] == ["p2", "p1", "p2", "p1"]
    for m, (_, frames) in enumerate(link.sent):
        received = Reassembler().feed(frames[0])
        assert received.meta["micro"] == m and received.encoding == "int8-block"
    assert traffic.sent_bytes == {p: sum(len(f) for q, fs in link.sent if q == p for f in fs) for p in ("p1", "p2")}
    assert traffic.send_s > 0
    assert (await outbox.flush()).sent_bytes == {}, "a flush reports what was sent since the last one"


async def test_a_failed_send_is_raised_by_the_flush_and_forgotten_by_the_next_pass(wire_thread):
    link = SlowLink(fail=True)
    outbox = Outbox(Link(link.publish, lambda: 1 << 20, wire_thread))
    outbox.put("p1", wire_format("fp32").encode(torch.ones(8)), route(0))
    with pytest.raises(ConnectionError, match="the bus went away"):
        await outbox.flush()
    link.fail = False
    outbox.put("p1", wire_format("fp32").encode(torch.ones(8)), route(1))
    outbox.clear()  # a new pass drops what an aborted one queued
    assert (await outbox.flush()).sent_bytes == {}
    outbox.close()
