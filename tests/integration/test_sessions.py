"""Event-sourced sessions against a real system: commands, rejections, crashes, checkpoints, replay."""

import asyncio
import json
import os
import signal
import subprocess
import sys

from computeall.cli.follow import start_session
from computeall.cli.session_view import session_events
from computeall.protocol.commands import PauseSession, ResumeSession, StartSession, StopSession
from computeall.protocol.events import CheckpointCommitted, CommandRejected, SessionClaimed, StepCompleted
from computeall.protocol.eventlog import EventLog
from computeall.protocol.object_store import existing_bucket

from .cluster import running_cluster
from .identities import connect_as
from .sessions import command, config, losses, run_to_end, wait_for
from .waiting import exit_code, wait_until_async


async def test_orchestrator_kill_resumes_from_checkpoint_with_identical_losses(tmp_path):
    async with running_cluster(tmp_path, pnodes=2) as (client, supervisor):
        # long enough that the kill lands mid-session whatever the machine's speed
        clean = await losses(client, await run_to_end(client, config(steps=60)))
        sid, _ = await start_session(client, config(steps=60))
        await wait_for(client, sid, lambda s: s.next_step >= 12)
        supervisor.services["orchestrator"].process.kill()  # kill -9: the supervisor restarts it
        final = await wait_for(client, sid, lambda s: s.status == "completed", timeout=180)
        resumed = await losses(client, sid)
        claims = [e.payload for _, e in await session_events(client, sid) if isinstance(e.payload, SessionClaimed)]
    assert final.next_step == 60
    assert [s for s, _ in resumed] == list(range(60)), "each step recorded exactly once"
    assert resumed == clean, "losses after the resume equal those of a run that never stopped"
    assert len(claims) == 2 and claims[1].resume_from_step % 5 == 0 and claims[1].resume_from_step >= 10 and claims[0].orchestrator != claims[1].orchestrator
    assert supervisor.services["orchestrator"].restarts == 1


async def test_pause_resume_stop_and_rejections(tmp_path):
    async with running_cluster(tmp_path, pnodes=2) as (client, _):
        sid, _ = await start_session(client, config(steps=200))
        await wait_for(client, sid, lambda s: s.next_step >= 3)
        await command(client, sid, PauseSession())
        paused = await wait_for(client, sid, lambda s: s.status == "paused")
        assert paused.last_checkpoint and paused.last_checkpoint.step == paused.next_step
        await command(client, sid, ResumeSession())
        await wait_for(client, sid, lambda s: s.status == "running" and s.next_step > paused.next_step)
        await command(client, sid, StopSession())
        await wait_for(client, sid, lambda s: s.status == "stopped")

        rejected = await command(client, sid, ResumeSession())  # resume a stopped session
        duplicate = await command(client, sid, StartSession())
        ack = await client.js.publish(client.subjects.session_cmd(sid, client.user), duplicate.model_dump_json().encode(),
                                      headers={"Nats-Msg-Id": duplicate.id})
        assert ack.duplicate, "JetStream drops a repeated command id"
        cyclic = config().network_yaml.replace("inputs: [b1.res2]", "inputs: [norm_f]")
        bad_sid, bad_id = await start_session(client, config().model_copy(update={"network_yaml": cyclic}))
        await client.nc.publish(client.subjects.session_cmd("garbage", client.user), b"{not json")
        await client.js.publish(client.subjects.session_cmd("garbage", client.user), b'{"id": "x1", "payload": {"type": "Nope"}}')
        reasons = await rejections(client, sid, {rejected.id, duplicate.id})
        assert "cannot resume a session that is stopped" in reasons[rejected.id]
        bad = await rejections(client, bad_sid, {bad_id})
        assert "cycle" in bad[bad_id]
        junk = await rejections(client, "garbage", {"x1"})
        assert "malformed command" in junk["x1"]
        # the duplicate was rejected once: JetStream dropped its second publish
        events = [e.payload for _, e in await session_events(client, sid)]
        assert sum(isinstance(p, CommandRejected) and p.command_id == duplicate.id for p in events) == 1
        # the orchestrator kept running through all of it
        await run_to_end(client, config(steps=3))


async def rejections(client, sid: str, command_ids: set[str]) -> dict[str, str]:
    """The reasons the orchestrator recorded for refusing these commands, once all of them are in."""

    async def recorded() -> dict[str, str] | None:
        events = [e.payload for _, e in await session_events(client, sid)]
        reasons = {p.command_id: p.reason for p in events if isinstance(p, CommandRejected)}
        return reasons if command_ids <= reasons.keys() else None

    return await wait_until_async(recorded, 30, f"rejections of {sorted(command_ids)}")


async def test_two_orchestrators_each_session_driven_by_exactly_one(tmp_path):
    async with running_cluster(tmp_path, pnodes=2) as (client, supervisor):
        orchestrators: set[str] = set()
        both = asyncio.Event()

        async def on_beat(msg) -> None:
            orchestrators.add(msg.subject.rsplit(".", 1)[-1])
            if len(orchestrators) == 2:
                both.set()

        observer = await connect_as(supervisor.credentials, "orchestrator")  # they watch each other
        await observer.subscribe(client.subjects.orchestrator_heartbeat_all(), cb=on_beat)
        second = subprocess.Popen([sys.executable, "-m", "computeall.orchestrator", *supervisor.credential_args("orchestrator", "orchestrator")],
                                  stdout=open(tmp_path / "orch2.log", "wb"), stderr=subprocess.STDOUT)
        try:
            await asyncio.wait_for(both.wait(), 30)  # both take commands before the sessions are created
            sids = await asyncio.gather(*(run_to_end(client, config(steps=6, checkpoint_every=0)) for _ in range(4)))
            assert second.poll() is None, "the second orchestrator ran through all of it"
        finally:
            await observer.close()
            second.send_signal(signal.SIGTERM)
            await exit_code(second, 15)
        drivers = set()
        for sid in sids:
            events = await session_events(client, sid)
            claims = {e.payload.orchestrator for _, e in events if isinstance(e.payload, SessionClaimed)}
            writers = {e.actor for _, e in events if isinstance(e.payload, StepCompleted)}
            assert len(claims) == 1 and writers == {f"orchestrator:{claims.pop()}"}
            assert [s for s, _ in await losses(client, sid)] == list(range(6))
            drivers |= writers
        assert drivers <= {f"orchestrator:{o}" for o in orchestrators}, "only the two orchestrators drive"


async def test_corrupted_checkpoint_is_detected_and_the_previous_one_used(tmp_path):
    async with running_cluster(tmp_path, pnodes=2) as (client, supervisor):
        clean = await losses(client, await run_to_end(client, config(steps=60)))
        sid, _ = await start_session(client, config(steps=60))
        await wait_for(client, sid, lambda s: s.next_step >= 11)
        await command(client, sid, PauseSession())
        paused = await wait_for(client, sid, lambda s: s.status == "paused")
        newest = paused.last_checkpoint
        assert newest.step > 10
        tamperer = await connect_as(supervisor.credentials, "superuser", "tamperer")  # someone with the server's files
        store = await existing_bucket(tamperer.jetstream(), newest.bucket)
        await store.put(newest.objects[0].object, b"not a checkpoint")  # corrupt one object of the newest checkpoint
        await tamperer.close()
        await command(client, sid, ResumeSession())
        await wait_for(client, sid, lambda s: s.status == "completed", timeout=180)
        events = [e.payload for _, e in await session_events(client, sid)]
        assert await losses(client, sid) == clean
    assert sum(isinstance(p, CheckpointCommitted) for p in events) >= 3


async def test_replay_verify_passes_on_an_honest_log_and_fails_on_an_altered_loss(tmp_path):
    computeall = os.path.join(os.path.dirname(sys.executable), "computeall")
    async with running_cluster(tmp_path, pnodes=2) as (client, supervisor):
        sid = await run_to_end(client, config(steps=16))
        env = {**os.environ, "COMPUTEALL_DATA_DIR": str(tmp_path)}  # the CLI of this machine: the local user

        def verify() -> subprocess.CompletedProcess:
            return subprocess.run([computeall, "replay", "verify", sid, "--from-step", "10", "--steps", "4"],
                                  capture_output=True, text=True, env=env, timeout=180)

        honest = await asyncio.to_thread(verify)
        assert honest.returncode == 0, honest.stdout + honest.stderr
        assert "all steps reproduce" in honest.stdout
        # alter the recorded loss of step 12: remove its event and record a tampered one
        events = await session_events(client, sid)
        seq, event = next((s, e) for s, e in events if isinstance(e.payload, StepCompleted) and e.payload.step == 12)
        forger = await connect_as(supervisor.credentials, "superuser", "forger")  # someone with the server's files
        await forger.jetstream().delete_msg("CA_LOG", seq)
        tampered = event.model_copy(update={"id": "tampered", "payload": event.payload.model_copy(update={"loss": event.payload.loss * 1.01})})
        await EventLog(forger.jetstream(), client.subjects).append_session_event(tampered, None)
        await forger.close()
        altered = await asyncio.to_thread(verify)
        assert altered.returncode == 1 and "MISMATCH" in altered.stdout

        shown = subprocess.run([computeall, "replay", "show", sid], capture_output=True, text=True, env=env, timeout=60)
        assert "SessionCreated" in shown.stdout and "CheckpointCommitted" in shown.stdout
        exported = subprocess.run([computeall, "replay", "export", sid], capture_output=True, text=True, env=env, timeout=60)
        lines = [json.loads(line) for line in exported.stdout.splitlines()]
        assert lines[0]["type"] == "SessionCreated" and all("seq" in line for line in lines)
