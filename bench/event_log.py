"""The event log's speed: session appends against raw JetStream publishes, replay folding against raw reads,
a tiny-gpt checkpoint against a raw object-store put of the same bytes (and its bytes against the
fp32 weights'); then appends and replay on a bus of three clustered nats-servers (streams at 3
replicas) against one server: three machines (network namespaces, routes over mutual TLS,
`bench/wanlab/machine_bus.py`) where this machine can make them, else three servers on this one.
Target: appends on three machines at least half one server's rate; raw JetStream publishes on the same
bus against one server measure the bound that any append through JetStream meets, and the appends'
share is reported against it.

    python -m bench.event_log [--quick] [--json PATH]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import torch

from computeall.cli.nats_cluster import NatsCluster
from computeall.protocol import bus
from computeall.network import Graph, load_network_file
from computeall.protocol.config import OptimizerConfig
from computeall.protocol.eventlog import EventLog, ensure_streams
from computeall.protocol.events import EventEnvelope, StepCompleted
from computeall.protocol.membership_api import SessionHosts
from computeall.protocol.object_store import checkpoint_bucket, open_bucket, put_file
from computeall.protocol.session_log import SessionLog
from computeall.protocol.subjects import Subjects
from computeall.tensorcore.checkpoint import write_vnode
from computeall.tensorcore.optimizer import VNodeOptimizer
from computeall.tensorcore.vnode_runtime import VNodeRuntime

from .common import REPO, Bench, at_least, at_most

SESSION = "bench-session"


def step_event(sid: str, step: int) -> EventEnvelope:
    return EventEnvelope(actor="bench", session_id=sid, payload=StepCompleted(
        step=step, loss=4.2, tokens=2048, step_time_s=0.5, lr=1e-3, compute_s=0.4, wait_s=0.1))


async def appends(js, eventlog: EventLog, n: int) -> dict:
    session = SessionLog(eventlog, SESSION)
    t0 = time.perf_counter()
    for step in range(n):
        await session.append(step_event(SESSION, step))
    session_s = time.perf_counter() - t0
    payload = step_event("raw", 0).model_dump_json().encode()
    t0 = time.perf_counter()
    for _ in range(n):
        await js.publish("ca.evt.session.raw.StepCompleted", payload)
    raw_s = time.perf_counter() - t0
    return {"name": "append", "events": n, "session_path_per_s": n / session_s, "raw_jetstream_per_s": n / raw_s,
            "ratio": raw_s / session_s}


async def replay(eventlog: EventLog, n: int) -> dict:
    t0 = time.perf_counter()
    records = await eventlog.read(f"ca.evt.session.{SESSION}.>")
    raw_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    session = SessionLog(eventlog, SESSION)
    state = await session.refresh()
    fold_s = time.perf_counter() - t0
    assert state.next_step == n == len(records)
    return {"name": "replay", "events": n, "folded_per_s": n / fold_s, "raw_read_per_s": n / raw_s,
            "ratio": raw_s / fold_s}


async def checkpoint(js) -> dict:
    graph = Graph(load_network_file(REPO / "examples" / "networks" / "tiny-gpt.yaml"))
    runtime = VNodeRuntime(graph, list(graph.vnodes), 1, torch.device("cpu"))
    optimizer = VNodeOptimizer(runtime.parameters(), OptimizerConfig(), runtime.decay_groups())
    for p in runtime.parameters().values():
        p.grad = torch.zeros_like(p)
    optimizer.step(1e-3)  # so the Adam state exists, as in any real checkpoint
    params = sum(p.numel() for p in runtime.parameters().values())
    store = await open_bucket(js, checkpoint_bucket(Subjects("ca"), SESSION))  # granted to the orchestrators below
    t0 = time.perf_counter()
    objects = {}
    for vid in runtime.order:  # as a PNode saves: streamed through a file
        with tempfile.TemporaryFile() as spool:
            write_vnode(spool, runtime, optimizer, vid)
            await put_file(store, f"bench/{vid}.safetensors", spool)
            spool.seek(0)
            objects[vid] = spool.read()
    seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    for vid, data in objects.items():
        await store.put(f"raw/{vid}", data)
    raw_s = time.perf_counter() - t0
    return {"name": "checkpoint tiny-gpt", "parameters": params, "bytes": sum(map(len, objects.values())),
            "seconds": seconds, "raw_put_s": raw_s}


async def on_machines(n: int) -> list[dict]:
    """Appends and replay with a server on each of three machines; `LabUnavailable` where none can be made."""
    from .wanlab.machine_bus import admit_everywhere, bare_bus
    from .wanlab.machines import Machines

    with tempfile.TemporaryDirectory() as tmp, Machines(3) as lab:
        servers = bare_bus(lab, Path(tmp))
        try:
            credential = servers[0].credential("orchestrator", "bench-event-log")  # it appends session events
            admit_everywhere(servers)
            nc = await bus.connect(credential, name="bench-event-log")
            js = nc.jetstream()
            subjects = Subjects("ca")
            await ensure_streams(js, subjects, replicas=3)  # rides out the first leader election
            eventlog = EventLog(js, subjects)
            rows = [await appends(js, eventlog, n), await replay(eventlog, n)]
            await nc.close()
        finally:
            for server in servers:
                server.stop()
    return rows


async def on_bus(servers: int, n: int, with_checkpoint: bool) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp, NatsCluster(Path(tmp), servers) as cluster:
        with cluster.security.grants.edit() as grants:  # as the authority records a session's first placement
            grants.host(SessionHosts(session_id=SESSION, pnodes=[], as_of=0))
        nc = await bus.connect(cluster.credential("orchestrator"), name="bench-event-log")  # it appends session events
        js = nc.jetstream()
        subjects = Subjects("ca")
        await ensure_streams(js, subjects, replicas=bus.replicas(nc))
        eventlog = EventLog(js, subjects)
        rows = [await appends(js, eventlog, n), await replay(eventlog, n)]
        if with_checkpoint:
            rows.append(await checkpoint(js))
        await nc.close()
    return rows


def report(bench: Bench, one: list[dict], three: list[dict], where: str) -> None:
    (a, r, c), (a3, r3) = one, three
    bench.row(f"append {a['events']} StepCompleted through the session log", "events/s", a["session_path_per_s"],
              "raw JetStream publishes", a["raw_jetstream_per_s"])
    bench.row(f"replay {r['events']} events, folded", "events/s", r["folded_per_s"], "raw reads", r["raw_read_per_s"])
    bench.row(f"checkpoint tiny-gpt ({c['parameters']} parameters): save and put", "s", c["seconds"],
              "raw object-store puts of the same bytes", c["raw_put_s"])
    # fp32 weights are their own master: a checkpoint is weights and Adam's two moments
    bench.row("checkpoint tiny-gpt", "bytes", c["bytes"], "its fp32 weights", 4 * c["parameters"], at_most(3.05))
    bench.row(f"append on 3 clustered servers, {where} (streams at 3 replicas)", "events/s", a3["session_path_per_s"],
              "one server", a["session_path_per_s"], at_least(0.5) if where == "3 machines" else None)
    # The bound: what raw JetStream publishes keep of one server's rate on the same bus. No system that appends
    # through JetStream at 3 replicas beats it, so the target above is also read as a share of it.
    bound = a3["raw_jetstream_per_s"] / a["raw_jetstream_per_s"]
    bench.row(f"raw JetStream publishes on 3 clustered servers, {where} (the bound)", "events/s",
              a3["raw_jetstream_per_s"], "raw publishes on one server", a["raw_jetstream_per_s"])
    bench.row(f"append on 3 clustered servers, {where}: its share of one server's rate, against the bound's",
              "share", a3["session_path_per_s"] / a["session_path_per_s"], "the bound's share", bound)
    bench.row(f"replay on 3 clustered servers, {where}", "events/s", r3["folded_per_s"], "one server", r["folded_per_s"])


async def measure(bench: Bench, quick: bool) -> None:
    from .wanlab import LabUnavailable

    n = 2000 if quick else 20000
    one = await on_bus(1, n, with_checkpoint=True)
    try:
        three, where = await on_machines(n), "3 machines"
    except LabUnavailable as exc:
        print(f"no machines to spread the servers over ({exc}): three servers on this one instead")
        three, where = await on_bus(3, n, with_checkpoint=False), "1 machine"
    report(bench, one, three, where)


def main() -> int:
    return Bench("event_log", __doc__).run(measure)


if __name__ == "__main__":
    sys.exit(main())
