"""Bad commands against a real system, published as any NATS client could: each gets a recorded
`CommandRejected` with a reason within a second, the orchestrator never restarts, its PNode is
never declared lost, and a command of another session is answered right after each one."""

from __future__ import annotations

import json
import time

from computeall.cli.session_view import session_events
from computeall.protocol.commands import CommandEnvelope, CreateSession, PauseSession
from computeall.protocol.eventlog import EventLog
from computeall.protocol.events import CommandRejected

from .cluster import running_cluster, wait_for_pnodes
from .identities import connect_as
from .sessions import config
from .waiting import wait_until_async

ANSWER_S = 1.0  # the bound: measured between the publish and the rejection's own timestamp


def deep_yaml() -> str:
    """5,000 levels of nesting: PyYAML's composer used to hit RecursionError, and the orchestrator crash-looped."""
    return "name: deep\nvocab_size: 512\ncontext: 64\nvnodes: " + "[" * 5000 + "]" * 5000 + "\n"


def wide_yaml(blocks: int = 4000, per_block: int = 13) -> str:
    """52,002 VNodes in 1 KB through `repeat`: checking it used to block the event loop for minutes."""
    body = "\n".join(f'        - {{id: "b{{i}}.n{j}", op: rmsnorm, inputs: ["{{in}}"]}}' for j in range(per_block))
    return (f"name: wide\nvocab_size: 512\ncontext: 64\ndefaults: {{dim: 64}}\nvnodes:\n"
            f"  - {{id: embed, op: embedding, inputs: [data.tokens]}}\n"
            f"  - repeat:\n      count: {blocks}\n      input: embed\n      output: \"b{{i}}.n0\"\n      vnodes:\n{body}\n"
            f"  - {{id: head, op: tied_lm_head_ce, inputs: [b{blocks - 1}.n0, data.targets], tie: embed}}\n")


def create(network_yaml: str, sid: str) -> tuple[bytes, str]:
    """A `CreateSession` for this network: its bytes and its id."""
    command = CommandEnvelope(actor="local", session_id=sid,
                              payload=CreateSession(config=config().model_copy(update={"network_yaml": network_yaml})))
    return command.model_dump_json().encode(), command.id


async def rejected_within(client, sid: str, command_id: str, data: bytes) -> str:
    """Publish raw bytes as command `command_id`; its rejection's reason, once it is recorded within `ANSWER_S`."""
    sent = time.time()
    await client.js.publish(client.subjects.session_cmd(sid, client.user), data, headers={"Nats-Msg-Id": command_id})

    async def rejection() -> CommandRejected | None:
        found = [e for _, e in await session_events(client, sid)
                 if isinstance(e.payload, CommandRejected) and e.payload.command_id == command_id]
        return found[0] if found else None

    event = await wait_until_async(rejection, 30, f"the rejection of {command_id}")
    assert event.ts - sent < ANSWER_S, f"rejected {event.ts - sent:.2f}s after it was sent: {event.payload.reason}"
    return event.payload.reason


async def test_bad_commands_are_rejected_within_a_second_and_nothing_restarts(tmp_path):
    async with running_cluster(tmp_path, pnodes=1) as (client, supervisor):
        await wait_for_pnodes(supervisor, ["pnode-0"])
        orchestrator = supervisor.services["orchestrator"]
        pid = orchestrator.process.pid
        pause_v2 = CommandEnvelope(actor="local", session_id="v2", payload=PauseSession()).model_dump(mode="json")
        pause_v2["schema_version"] = 2
        deep_json = json.dumps({"id": "deep-json-1", "session_id": "deep-json", "payload": {"type": "PauseSession"}})
        deep_json = deep_json.replace('"PauseSession"', '"PauseSession", "x": ' + "[" * 5000 + "]" * 5000)
        padded = config().network_yaml + "#" * (600 << 10) + "\n"  # 600 KiB: over the command limit, under CA_LOG's
        cases = {  # session -> (the command's bytes, its id, what its rejection says)
            "deep": (*create(deep_yaml(), "deep"), "nesting depth"),
            "wide": (*create(wide_yaml(), "wide"), "52,002 VNodes once `repeat` is expanded; the limit is 4,096"),
            "v2": (json.dumps(pause_v2).encode(), pause_v2["id"], "schema_version 2 is not supported"),
            "deep-json": (deep_json.encode(), "deep-json-1", "recursion limit exceeded"),
            "huge": (*create(padded, "huge"), "a command may have at most 524,288"),
        }
        for sid, (data, command_id, reason) in cases.items():
            assert reason in await rejected_within(client, sid, command_id, data), sid
            probe = CommandEnvelope(actor="local", session_id=f"probe-{sid}", payload=PauseSession())
            answer = await rejected_within(client, probe.session_id, probe.id, probe.model_dump_json().encode())
            assert f"user local has no session {probe.session_id}" in answer, "still answering, at once"

        assert orchestrator.restarts == 0 and orchestrator.process.pid == pid, "the orchestrator never restarted"
        reader = await connect_as(supervisor.credentials, "orchestrator", "reader")  # users read no stream
        try:
            lost = await EventLog(reader.jetstream(), client.subjects).read(client.subjects.pnode_evt("pnode-0", "PNodeLost"))
        finally:
            await reader.close()
        assert lost == [], "the PNode's heartbeats were handled throughout"

