"""diloco's sparse, overlapped outer sync on real processes and a real NATS, each replica deciding its
own inner steps (`inner_decisions: own`: skip and clip from its own gradient norm, on its PNodes, which
tell each other theirs): over 100x fewer bytes between replicas than summing fp32 gradients every step;
deterministic for a fixed replica count (two runs, a replica per PNode or two PNodes per replica, and a
kill -9 with a checkpoint taken while a sync travelled all end with the same losses and each replica's
final state); `replay verify` reproduces it from such a checkpoint. The clip is low enough to act on
most steps, so a replica of two PNodes that left out the other's norms would clip otherwise.

Every checkpoint falls inside an overlap (a sync starts after steps 3, 7, ... and lands a step
later; checkpoints come every 4 steps), so resuming needs the outer step still to land and the
error buffers, both in each replica's objects. Every PNode has the threads of one of four
processes: equal thread counts, equal bits."""

import asyncio
import os
import subprocess
import sys

import pytest

from computeall.cli.follow import start_session
from computeall.cli.session_view import session_events
from computeall.cli.supervisor import ServiceSpec
from computeall.protocol.events import Allocated, CheckpointCommitted, StepCompleted
from computeall.protocol.replica_sync import ReplicaSync, SparseCompression

from .cluster import running_cluster, wait_for_pnodes
from .sessions import config, run_to_end, wait_for

pytestmark = pytest.mark.timeout(900)  # six sessions, one killed and resumed

STEPS = 24
SPARSE = ReplicaSync(mode="diloco", inner_steps=4, overlap_steps=1, compression=SparseCompression(),
                     inner_decisions="own")
CLIP = 0.5  # below most steps' gradient norm
THREADS_OF = "4"  # processes on the machine, for every PNode


def cfg(sync: ReplicaSync):
    return config(steps=STEPS, micro_batches=2, replicas=2, sync=sync, checkpoint_every=4, keep_checkpoints=10,
                  grad_clip=CLIP)


async def run(client, sync: ReplicaSync = SPARSE) -> tuple[str, list]:
    sid = await run_to_end(client, cfg(sync))
    return sid, [e.payload for _, e in await session_events(client, sid)]


def losses(events) -> list[tuple[int, float]]:
    return [(p.step, p.loss) for p in events if isinstance(p, StepCompleted)]


def final(events) -> dict[tuple[int, str], str]:
    """Each replica's final state of each VNode (weights, inner and outer optimizer state)."""
    last = [p for p in events if isinstance(p, CheckpointCommitted)][-1]
    return {(o.replica, o.vnode): o.digest for o in last.objects}


def pnodes_per_replica(events) -> list[int]:
    allocated = next(p for p in events if isinstance(p, Allocated))
    return [len({pl.pnode for pl in allocated.placements if pl.replica == r}) for r in range(allocated.replicas)]


async def test_sparse_overlapped_sync_is_100x_smaller_and_the_same_bits_on_any_placement_and_resume(tmp_path):
    computeall = os.path.join(os.path.dirname(sys.executable), "computeall")
    env = {**os.environ, "COMPUTEALL_DATA_DIR": str(tmp_path)}
    async with running_cluster(tmp_path, pnodes=2, processes_on_machine=int(THREADS_OF)) as (client, supervisor):
        _, summed = await run(client, ReplicaSync())
        sid, clean = await run(client)
        _, again = await run(client)

        # kill -9 of one replica's PNode while a sync travels (step 9's, started after step 7)
        killed_sid, _ = await start_session(client, cfg(SPARSE))
        await wait_for(client, killed_sid, lambda s: s.next_step >= 9)
        supervisor.services["pnode-1"].process.kill()
        await wait_for(client, killed_sid, lambda s: s.status == "completed", timeout=180)
        killed = [e.payload for _, e in await session_events(client, killed_sid)]

        # re-execute steps 12..15 from the checkpoint of step 12, taken while step 11's sync travelled
        verify = await asyncio.to_thread(subprocess.run, [computeall, "replay", "verify", sid, "--from-step", "12",
                                                          "--steps", "4", "--tolerance", "0"],
                                         capture_output=True, text=True, env=env, timeout=240)

        await wait_for_pnodes(supervisor, ["pnode-1"])
        supervisor.start([ServiceSpec(n, "pnode", ["--name", n, "--processes-on-machine", THREADS_OF])
                          for n in ("pnode-2", "pnode-3")])
        await wait_for_pnodes(supervisor, ["pnode-2", "pnode-3"])
        _, wide = await run(client)  # the same two replicas, each over two PNodes

    sent = [sum(p.reduce_bytes for p in events if isinstance(p, StepCompleted)) for events in (summed, clean)]
    assert 0 < 100 * sent[1] < sent[0], f"sparse syncs every 4 steps vs fp32 gradients every step: {sent}"
    assert losses(clean) != losses(summed)
    assert len(losses(clean)) == STEPS and all(c[0] == s[0] for c, s in zip(losses(clean), losses(summed)))

    clipped = [p.clipped for p in clean if isinstance(p, StepCompleted)]
    assert sum(clipped) > len(clipped) // 2, f"replica 0 clipped {sum(clipped)} of {len(clipped)} steps"
    assert pnodes_per_replica(clean) == [1, 1] and pnodes_per_replica(wide) == [2, 2]
    for other in (again, killed, wide):
        assert losses(other) == losses(clean)
        assert final(other) == final(clean)
    assert {replica for replica, _ in final(clean)} == {0, 1}, "each replica writes its own state"
    assert any(p.type == "RolledBack" or p.type == "SessionResumed" for p in killed), [p.type for p in killed]
    assert verify.returncode == 0 and "all steps reproduce" in verify.stdout, verify.stdout + verify.stderr
