"""The request/reply dispatcher (`protocol.responder`) against the real server, with the real APIs and the
real roles' permissions: who asks is the subject or the reply inbox, never a field; an answer goes only to
an inbox; every failure is answered with the API's reply model, and the service goes on serving."""

from __future__ import annotations

import asyncio
import contextlib
import json

import nats.errors
import pytest

from computeall.protocol import dataset_api, monitor_api
from computeall.protocol.credentials import Role
from computeall.protocol.dataset_api import DatasetReply, Requester
from computeall.protocol.responder import Refused, Responder
from computeall.protocol.subjects import Subjects

from .identities import connect_as

S = Subjects()
NOBODY_LISTENING_S = 5.0
pytestmark = pytest.mark.timeout(60)


class DatasetHandlers:
    """Every verb of the dataset API, answering with who asked (in `bucket`) and counting what ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, Requester]] = []
        self.release = asyncio.Event()

    def table(self) -> dict:
        return {verb: self._handler(verb) for verb in dataset_api.API.verbs}

    def _handler(self, verb: str):
        async def handle(request, asker: Requester) -> DatasetReply | bytes:
            self.ran.append((verb, asker))
            if verb == "create":  # a slow one: minutes of tokenizer training, here until released
                await self.release.wait()
            if verb == "share":
                raise Refused(f"dataset {request.name!r} is not yours")
            if verb == "decode":
                raise RuntimeError("a detail of the service's insides")
            if verb == "batch":
                return b"\x00frame"
            return DatasetReply(ok=True, bucket=f"{asker.kind}:{asker.name}:{asker.verb}")

        return handle


async def _ask(nc, subject: str, body: dict | bytes, timeout: float = 10) -> bytes:
    """The answer to one request. One that reached no responder is asked again for a few seconds: under the
    loaded suite a request right after the responder subscribed and flushed met nobody (three times, cause
    not found); no handler ran for it, so what the stories assert of the handlers is unchanged."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    deadline = asyncio.get_running_loop().time() + NOBODY_LISTENING_S
    while True:
        try:
            return (await nc.request(subject, data, timeout=timeout)).data
        except nats.errors.NoRespondersError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.1)


def known(server, *identities: tuple[Role, str]) -> None:
    """Every identity of a story made before any connects: each new one reloads the server's configuration,
    and a reload under live connections (the service's lists name every user) is not what these stories test."""
    for role, name in identities:
        server.credential(role, name)


@contextlib.asynccontextmanager
async def dataset_service(server, *clients: tuple[Role, str]):
    """The dataset API served with `DatasetHandlers` as the dataset service's identity; the clients connected."""
    handlers = DatasetHandlers()
    known(server, *clients, ("dataset", "dataset"))
    connected = [await connect_as(server, role, name) for role, name in clients]
    service = await connect_as(server, "dataset")
    responder = Responder(service, S, dataset_api.API, handlers.table(), concurrent=True, queue="dataset")
    await responder.start()
    try:
        yield handlers, connected
    finally:
        await responder.stop()
        for nc in (service, *connected):
            await nc.close()


def test_the_asker_is_the_subject_and_a_field_changes_nothing(nats_server):
    async def main():
        async with dataset_service(nats_server, ("user", "alice"), ("pnode", "p0")) as (handlers, (alice, pnode)):
            reply = json.loads(await _ask(alice, dataset_api.user_subject(S, "alice", "get"), {"name": "d"}))
            assert reply == {"ok": True, "bucket": "user:alice:get"}
            # a field naming someone else is no identity: the model refuses what it does not know
            reply = json.loads(await _ask(alice, dataset_api.user_subject(S, "alice", "get"), {"name": "d", "user": "bob"}))
            assert reply["ok"] is False and reply["error"].startswith("invalid get request: user:")
            batch = {"dataset": "d", "session_id": "s1", "step": 0, "batch": 1, "context": 4}
            assert await _ask(pnode, dataset_api.pnode_batch_subject(S, "p0"), batch) == b"\x00frame"
            assert handlers.ran == [("get", Requester("user", "alice", "get")), ("batch", Requester("pnode", "p0", "batch"))]

    asyncio.run(main())


def test_an_answer_goes_to_an_inbox_only(nats_server):
    """NATS checks the subject a client publishes to, not the reply subject it names: alice names a dataset
    event's subject, which the dataset service may publish to. The request is dropped unread."""

    async def main():
        forged = S.dataset_evt("d", "DatasetCreated")
        async with dataset_service(nats_server, ("user", "alice"), ("superuser", "watcher")) as (handlers, (alice, watcher)):
            seen = await watcher.subscribe(forged)
            await watcher.flush()
            await alice.publish(dataset_api.user_subject(S, "alice", "list"), b"{}", reply=forged)
            await alice.publish(dataset_api.user_subject(S, "alice", "list"), b"{}")  # no reply subject at all
            # answered after those two, on the same subscription: they were dropped by then
            reply = json.loads(await _ask(alice, dataset_api.user_subject(S, "alice", "list"), {}))
            assert reply["ok"] is True
            assert [verb for verb, _ in handlers.ran] == ["list"]
            with pytest.raises(TimeoutError):
                await seen.next_msg(timeout=0.5)

    asyncio.run(main())


def test_every_failure_is_answered_and_a_slow_request_holds_up_no_other(nats_server):
    def subject(verb: str) -> str:
        return dataset_api.user_subject(S, "alice", verb)

    async def main():
        async with dataset_service(nats_server, ("user", "alice")) as (handlers, (alice,)):
            create = asyncio.ensure_future(_ask(alice, subject("create"), {"name": "d", "files": ["a.txt"]}, timeout=20))
            reply = json.loads(await _ask(alice, subject("get"), b"not json"))
            assert reply["ok"] is False and reply["error"].startswith("invalid get request:")
            reply = json.loads(await _ask(alice, subject("share"), {"name": "d", "public": True}))
            assert reply == {"ok": False, "error": "dataset 'd' is not yours"}
            reply = json.loads(await _ask(alice, subject("decode"), {"dataset": "d", "tokens": [[1]]}))
            assert reply == {"ok": False, "error": "the dataset service failed on this decode request (RuntimeError); "
                                                   "see its log"}
            assert not create.done()  # all of those while the create still runs
            handlers.release.set()
            assert json.loads(await create) == {"ok": True, "bucket": "user:alice:create"}

    asyncio.run(main())


def test_the_asker_by_its_inbox(nats_server):
    """The monitor knows who asks by the reply inbox, which only that identity may subscribe to."""

    async def main():
        asked: list[str] = []

        async def auth(request: monitor_api.Auth, asker: str) -> monitor_api.MonitorReply:
            asked.append(asker)
            return monitor_api.MonitorReply(user=asker)

        async def unused(request, asker: str) -> monitor_api.MonitorReply:
            raise AssertionError("not asked")

        known(nats_server, ("user", "alice"), ("monitor", "monitor"))
        alice = await connect_as(nats_server, "user", "alice")
        monitor = await connect_as(nats_server, "monitor")
        responder = Responder(monitor, S, monitor_api.API, {monitor_api.AUTH: auth, monitor_api.USER_CREATE: unused,
                                                            monitor_api.REBUILD: unused}, concurrent=False)
        await responder.start()
        try:
            subject = monitor_api.monitor_subject(S, monitor_api.AUTH)
            reply = json.loads(await _ask(alice, subject, {"api_key": "k", "user": "bob"}))
            assert reply["ok"] is False and reply["error"].startswith("invalid auth request: user:")
            assert json.loads(await _ask(alice, subject, {"api_key": "k"})) == {"ok": True, "user": "user:alice"}
            # an inbox that names no identity: nobody the monitor answers, nothing runs
            await alice.publish(subject, b'{"api_key": "k"}', reply="_INBOX.nobody")
            assert json.loads(await _ask(alice, subject, {"api_key": "k"})) == {"ok": True, "user": "user:alice"}
            assert asked == ["user:alice", "user:alice"]
        finally:
            await responder.stop()
            await monitor.close()
            await alice.close()

    asyncio.run(main())
