"""`EventLog.read` is never short: a fetch cut off mid-read (a leader change, a consumer gone with its
server, a replica still catching up) is retried on a fresh consumer from the message after the last
one it got, and the read either returns every message up to the end the stream's leader named when
it began, or fails with `BusUnavailable` once the bus has made no progress for its patience.

A read spanning fewer than `GETS` sequence numbers asks the leader for its messages one by one (no
consumer: the meta leader that creates consumers may still be in its election after a lost server);
longer ones come through consumers, and their last few sequence numbers one by one.

The JetStream context is a fake: a log of recorded messages, and consumers whose `fetch` is scripted
to time out (the real server's behaviour is tests/integration/test_security_ops.py's)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import nats.errors
import pytest
from nats.js.errors import NotFoundError

from computeall.protocol.bus_failover import BusUnavailable
from computeall.protocol.eventlog import GETS_BEFORE_A_CONSUMER as GETS, NO_MESSAGE, EventLog
from computeall.protocol.subjects import Subjects

SUBJECT = "ca.evt.session.s1.>"


def message(seq: int) -> SimpleNamespace:
    return SimpleNamespace(subject="ca.evt.session.s1.StepCompleted", data=b"%d" % seq,
                           metadata=SimpleNamespace(sequence=SimpleNamespace(stream=seq)))


class Consumer:
    """Delivers the log from its start sequence; `cut_after` messages into it (None: never) every
    fetch times out, as one whose server died or whose replica stopped short does."""

    def __init__(self, log: list[int], start: int, cut_after: int | None) -> None:
        self.pending = [seq for seq in log if seq >= start]
        self.cut_after = cut_after
        self.delivered = 0

    async def fetch(self, batch: int, timeout: float) -> list[SimpleNamespace]:
        if self.cut_after is not None and self.delivered >= self.cut_after or not self.pending:
            raise nats.errors.TimeoutError
        room = batch if self.cut_after is None else min(batch, self.cut_after - self.delivered)
        out, self.pending = self.pending[:room], self.pending[room:]
        self.delivered += len(out)
        return [message(seq) for seq in out]

    async def unsubscribe(self) -> None:
        pass


class FakeJetStream:
    """A stream holding `log` (sequence numbers on SUBJECT); each new consumer is cut off after the next
    number of `cuts` (then never), and `appended_later` arrives just after the read asked for the end."""

    def __init__(self, log: list[int], cuts: list[int | None] = (), appended_later: list[int] = (),
                 unanswered_gets: int = 0) -> None:
        self.log = list(log)
        self.cuts = list(cuts)
        self.appended_later = list(appended_later)
        self.unanswered_gets = unanswered_gets  # the first gets time out, as with no leader
        self.gets: list[int] = []  # each get's sequence, in order
        self.starts: list[int] = []  # each consumer's start sequence, in order
        self.deleted: list[str] = []

    async def get_msg(self, stream: str, seq: int, subject: str, next: bool = False, direct: bool = False):
        assert next and not direct and subject == SUBJECT, "the next message on the subject, from the leader"
        self.gets.append(seq)
        if self.unanswered_gets:
            self.unanswered_gets -= 1
            raise nats.errors.TimeoutError
        found = next_seq = min((n for n in self.log if n >= seq), default=None)
        if found is None:
            raise NotFoundError(code=404, err_code=NO_MESSAGE, description="no message found")
        return SimpleNamespace(seq=next_seq, subject=message(next_seq).subject, data=b"%d" % next_seq)

    async def get_last_msg(self, stream: str, subject: str, direct: bool = False):
        assert not direct, "the end is asked of the leader, never of any replica"
        if not self.log:
            raise NotFoundError(code=404, err_code=NO_MESSAGE, description="no message found")
        last = self.log[-1]
        self.log += self.appended_later  # recorded while the read goes on: not its business
        return SimpleNamespace(seq=last)

    async def pull_subscribe(self, subject: str, stream: str, config) -> Consumer:
        assert subject == config.filter_subject == SUBJECT
        config.name = f"c{len(self.starts)}"
        self.starts.append(config.opt_start_seq)
        return Consumer(self.log, config.opt_start_seq, self.cuts.pop(0) if self.cuts else None)

    async def delete_consumer(self, stream: str, name: str) -> None:
        self.deleted.append(name)


def read_all(js: FakeJetStream, patience_s: float = 30.0, **kwargs):
    return EventLog(js, Subjects(), patience_s=patience_s).read(SUBJECT, **kwargs)


async def test_a_read_cut_off_mid_way_goes_on_from_the_last_message_it_got():
    log = list(range(1, 2001, 2))  # 1000 messages, not contiguous (other subjects between)
    js = FakeJetStream(log, cuts=[300, 5])
    got = await read_all(js, batch=64)
    assert [r.seq for r in got] == log, "everything, in order, nothing twice"
    assert js.starts == [1, log[299] + 1, log[304] + 1], "each fresh consumer starts after the last message received"
    assert js.deleted == ["c2"], "only the consumer that finished is deleted; the cut ones expire on their own"
    assert js.gets == []


async def test_a_short_read_creates_no_consumer_and_rides_out_a_leaderless_moment():
    js = FakeJetStream(list(range(1, 40)) + [44, 47, 50], unanswered_gets=2)
    got = await read_all(js, start_seq=41)
    assert [r.seq for r in got] == [44, 47, 50] and js.starts == []
    assert js.gets == [41, 41, 41, 45, 48], "a get with no answer is asked again; each asks after the last one"


async def test_a_read_ends_at_the_leaders_last_message_when_it_began():
    js = FakeJetStream([1, 2, 3], appended_later=[4, 5])
    assert [r.seq for r in await read_all(js)] == [1, 2, 3]
    assert [r.seq for r in await read_all(js, start_seq=4)] == [4, 5]
    assert await read_all(FakeJetStream([])) == [] and await read_all(FakeJetStream([1, 2]), start_seq=3) == []


async def test_a_consumer_that_stops_short_of_the_end_is_not_the_end():
    """A consumer on a replica that is behind delivers what it has and then nothing (no timeout of
    the bus, only silence): the read does not end there."""
    js = FakeJetStream(list(range(1, 101)), cuts=[60])
    assert [r.seq for r in await read_all(js, batch=1000)] == list(range(1, 101))
    assert js.starts == [1, 61]


async def test_limit_counts_across_consumers():
    js = FakeJetStream(list(range(1, 101)), cuts=[7])
    assert [r.seq for r in await read_all(js, batch=5, limit=12)] == list(range(1, 13))
    assert [r.seq for r in await read_all(FakeJetStream(list(range(1, 11))), limit=5)] == list(range(1, 6))


async def test_progress_renews_the_patience():
    """Twenty cut-offs a few tenths of a second apart take longer than the patience in all, but each
    consumer got something: the read completes."""
    js = FakeJetStream(list(range(1, GETS + 201)), cuts=[10] * 20)
    began = time.monotonic()
    got = await read_all(js, patience_s=0.5, batch=3)
    assert [r.seq for r in got] == list(range(1, GETS + 201))
    assert time.monotonic() - began > 0.5 and len(js.starts) == 20 and len(js.gets) == GETS


async def test_a_read_that_makes_no_progress_fails_clearly_after_its_patience():
    js = FakeJetStream(list(range(1, 101)), cuts=[40] + [0] * 1000)
    began = time.monotonic()
    with pytest.raises(BusUnavailable) as failed:
        await read_all(js, patience_s=1.0, batch=16)
    waited = time.monotonic() - began
    assert 0.5 < waited < 3.0, waited
    assert isinstance(failed.value, nats.errors.TimeoutError), "a timeout of the bus, as its handlers know one"
    assert str(failed.value).startswith(f"reading {SUBJECT} from CA_LOG: the bus made no progress for 1s")
    assert js.starts[:2] == [1, 41] and set(js.starts[1:]) == {41}, "every try goes on from where the read stopped"
