"""Fair share between users against a real cluster (security issue 27, items 9 and 10): one user's
50 sessions leave another user at least half the steps per second they had alone, and a flood of
forged commands does not delay another user's new session.

The PNodes are simulated (`pnode --simulate`: the real protocol, modelled compute that takes one
item at a time per PNode, as a machine's cores do), so what a user gets is the share of the pool
the orchestrator gives them, not what the test machine's two shared cores happen to allow.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

import pytest

from computeall.cli.client import Client, connect
from computeall.cli.follow import new_session_id, start_session
from computeall.cli.swarm import micro_gpt, swarm_names, swarm_services
from computeall.protocol.commands import CommandEnvelope, PauseSession, StartSession, StopSession
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.eventlog import EventLog
from computeall.protocol.events import CommandRejected, EventEnvelope, SessionCreated, StepCompleted
from computeall.protocol.fair_share import FairShareLimits
from computeall.protocol.subjects import LOG_STREAM, Subjects

from .cluster import running_cluster, stdlib_corpus, wait_for_pnodes
from .identities import connect_as
from .sessions import command, state, wait_for

S = Subjects()
LIMITS = FairShareLimits()  # the defaults a deployment gets
FLOPS = 2e9  # a micro-gpt step computes for about 0.2 s on these PNodes
WINDOW_S = 8.0
pytestmark = pytest.mark.timeout(600)


def config(steps: int = 100_000) -> SessionConfig:
    return SessionConfig(network_yaml=micro_gpt(2), data=DataConfig(files=stdlib_corpus()), steps=steps, seed=5)


@asynccontextmanager
async def as_user(supervisor, name: str):
    async with connect(supervisor.credentials.credential("user", name)) as client:
        yield client


async def simulated_pnodes(supervisor, count: int) -> None:
    supervisor.start(swarm_services(supervisor.credentials, count, 1, flops=FLOPS))
    await wait_for_pnodes(supervisor, swarm_names(count), timeout=120)


async def steps_per_second(client: Client, sid: str, window_s: float = WINDOW_S) -> float:
    """The session's steps per second over the next `window_s`, from its StepCompleted times."""
    start = (await state(client, sid)).next_step
    await asyncio.sleep(window_s)
    times = [e.ts for _, e in await client.session_events(sid) if isinstance(e.payload, StepCompleted) and e.payload.step >= start]
    assert len(times) >= 3, f"session {sid} made {len(times)} steps in {window_s}s"
    return (len(times) - 1) / (times[-1] - times[0])


async def test_fifty_sessions_of_one_user_leave_another_at_least_half_their_steps(tmp_path):
    async with running_cluster(tmp_path, pnodes=0, limits=LIMITS) as (_, supervisor):
        await simulated_pnodes(supervisor, 4)
        async with as_user(supervisor, "bob") as bob, as_user(supervisor, "alice") as alice:
            sid, _ = await start_session(bob, config())
            await wait_for(bob, sid, lambda s: s.next_step >= 3, timeout=240)  # the dataset is made on the way
            alone = await steps_per_second(bob, sid)

            sids = [new_session_id() for _ in range(50)]
            await asyncio.gather(*(start_session(alice, config(), sid=s) for s in sids))  # all at once
            states = [await wait_for(alice, s, lambda st: st.status in ("running", "queued"), timeout=120) for s in sids]
            running = [s.id for s in states if s.status == "running"]
            queued = [s for s in states if s.status == "queued"]
            assert len(running) == LIMITS.max_running_sessions_per_user and len(queued) == 50 - len(running)
            assert {s.queue_reason for s in queued} == {"alice has 2 sessions running (limit 2)"}

            # bob's session gives up what is over his share at a step boundary; alice's take it
            alices = [await wait_for(alice, s, lambda st: st.next_step >= 3, timeout=120) for s in running]
            held_by_alice = {p for s in alices for p in s.pnodes}
            bobs = await wait_for(bob, sid, lambda st: not set(st.pnodes) & held_by_alice, timeout=60)
            assert len(bobs.pnodes) <= 2, f"bob kept {bobs.pnodes}, more than his half of the 4"
            shared = await steps_per_second(bob, sid)
            alice_rates = [await steps_per_second(alice, s, 4.0) for s in running]
            print(f"\nbob alone {alone:.2f} steps/s; beside alice's 50 sessions {shared:.2f} ({shared / alone:.0%}); "
                  f"alice's running two {', '.join(f'{r:.2f}' for r in alice_rates)} steps/s")
            assert shared >= alone / 2, f"bob kept {shared:.2f} of {alone:.2f} steps/s"

            # a slot frees: alice's oldest queued session starts, and only that one
            await command(alice, running[0], StopSession())
            oldest = min(queued, key=lambda s: s.last_seq)  # queued as it was created, one of alice's at a time
            await wait_for(alice, oldest.id, lambda st: st.status == "running", timeout=30)
            now = [await state(alice, s.id) for s in queued]
            assert sum(s.status == "running" for s in now) == 1


async def test_a_flood_of_forged_commands_does_not_delay_another_users_new_session(tmp_path):
    async with running_cluster(tmp_path, pnodes=0, with_monitor=True, limits=LIMITS) as (_, supervisor):
        await simulated_pnodes(supervisor, 2)
        async with as_user(supervisor, "bob") as bob, as_user(supervisor, "alice") as alice:
            victim, _ = await start_session(bob, config())  # runs throughout: alice's flood names it too
            await wait_for(bob, victim, lambda s: s.next_step >= 1, timeout=240)
            before = await first_step_after_create(bob)

            sent = await flood(alice, victim, per_kind=2000)
            after = await first_step_after_create(bob)
            print(f"\nbob's new session's first step: {before:.2f}s before the flood, {after:.2f}s right after "
                  f"alice's {sent:,} forged commands")
            assert after < 5.0

            rejections = await recorded_rejections(supervisor)
            by_rate = [r for r in rejections if "sends commands faster than" in r.reason]
            assert by_rate and by_rate[0].reason.startswith("user alice sends commands faster than 5 per second (60 at once)")
            assert len(rejections) < 200, f"{len(rejections)} rejections recorded for {sent:,} commands"
            victims = [e.payload for _, e in await bob.session_events(victim)]
            assert not any(type(p).__name__ in ("PauseRequested", "SessionPaused") for p in victims)


async def first_step_after_create(client: Client) -> float:
    """Seconds from a new session's CreateSession to its first recorded step (both times from the log)."""
    sid, _ = await start_session(client, config(steps=2))
    await wait_for(client, sid, lambda s: s.next_step >= 1, timeout=60)
    events = [e for _, e in await client.session_events(sid)]
    created = next(e for e in events if isinstance(e.payload, SessionCreated))
    first = next(e for e in events if isinstance(e.payload, StepCompleted))
    return first.ts - created.ts


async def flood(alice: Client, victim: str, per_kind: int) -> int:
    """Commands on alice's own subjects, as fast as her connection takes them: a forged actor, a
    session id that is not the subject's, malformed JSON, sessions never created, bob's session."""
    def forged(i: int) -> tuple[str, bytes]:
        return S.session_cmd(f"f{i}", "alice"), _json(f"f{i}", StartSession(), actor="bob")

    def mismatched(i: int) -> tuple[str, bytes]:
        return S.session_cmd(f"m{i}", "alice"), _json(victim, StartSession())

    def malformed(i: int) -> tuple[str, bytes]:
        return S.session_cmd(f"j{i}", "alice"), b'{"id": "j%d", "payload": {"type": "StartSession"' % i

    def unknown(i: int) -> tuple[str, bytes]:
        return S.session_cmd(f"u{i}", "alice"), _json(f"u{i}", StartSession())

    def bobs(i: int) -> tuple[str, bytes]:
        return S.session_cmd(victim, "alice"), _json(victim, PauseSession())

    sent = 0
    for i in range(per_kind):
        for kind in (forged, mismatched, malformed, unknown, bobs):
            subject, data = kind(i)
            await alice.nc.publish(subject, data, headers={"Nats-Msg-Id": f"{kind.__name__}-{i}"})
            sent += 1
    await alice.nc.flush()
    return sent


def _json(sid: str, payload, actor: str = "alice") -> bytes:
    return CommandEnvelope(actor=actor, session_id=sid, payload=payload).model_dump_json().encode()


async def recorded_rejections(supervisor) -> list[CommandRejected]:
    """Every CommandRejected in the log, read as the orchestrator reads it (users read only their own sessions)."""
    nc = await connect_as(supervisor.credentials, "orchestrator")
    try:
        log = EventLog(nc.jetstream(), S)
        records = await log.read(f"{S.prefix}.evt.session.*.CommandRejected", stream=LOG_STREAM)
    finally:
        await nc.close()
    return [EventEnvelope.model_validate_json(r.data).payload for r in records]
