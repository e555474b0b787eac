"""Spot checks with real PNodes on a real NATS: a PNode that corrupts a tenth of its results is caught,
quarantined and its credential revoked, and the session ends with the bits of a clean run; an honest run records no failure
and has the bits of a run without checks; the checks recorded are the ones the stream derives from the log."""

from __future__ import annotations

import pytest

from computeall.cli.session_view import report, session_events
from computeall.orchestrator.session_graph import session_graph
from computeall.orchestrator.verification.stream import checks_in_log
from computeall.protocol import bus
from computeall.protocol.config import VerifyConfig
from computeall.protocol.credentials import Credential
from computeall.protocol.eventlog import EventLog
from computeall.protocol.events import (
    ChecksCompleted, EventEnvelope, PNodeJoined, PNodeQuarantined, ResultsDiscarded, RolledBack, StepCompleted, VerificationFailed,
)
from computeall.protocol.faults import FaultSpec
from computeall.protocol.session_state import fold

from .cluster import running_cluster
from .identities import connect_as
from .sessions import config, run_to_end
from .test_failover import final_digests

STEPS = 24
FAULTY = "pnode-2"


async def story(client, sid):
    events = await session_events(client, sid)
    payloads = [e.payload for _, e in events]
    last_loss = {p.step: p.loss for p in payloads if isinstance(p, StepCompleted)}  # a re-run step supersedes
    state = fold(sid, events)
    return payloads, last_loss, final_digests(events), state, report(state, events)


async def pnode_devices(log: EventLog, subjects) -> dict[str, str]:
    """Every PNode's device, as its PNodeJoined recorded it."""
    records = await log.read(subjects.pnode_evt_of_type("PNodeJoined"))
    joined = [EventEnvelope.model_validate_json(r.data).payload for r in records]
    return {p.pnode: p.device for p in joined if isinstance(p, PNodeJoined)}


async def test_a_corrupting_pnode_is_caught_and_the_session_ends_as_a_clean_run(tmp_path):
    # 4 micro-batches: with rate 0.1 and 10% corruption, detection within 20 steps is all but certain
    # (bench/verify.py measures the distribution; the stream's seed is drawn by the orchestrator)
    faulty_cfg = config(steps=STEPS, micro_batches=4, min_pnodes=3, verify=VerifyConfig(rate=0.1))
    honest_cfg = config(steps=STEPS, micro_batches=4, min_pnodes=2, verify=VerifyConfig(rate=0.2))
    async with running_cluster(tmp_path, pnodes=3, faults={FAULTY: FaultSpec.parse("corrupt:0.1")}) as (client, supervisor):
        faulty_sid = await run_to_end(client, faulty_cfg)
        honest_sid = await run_to_end(client, honest_cfg)  # FAULTY is quarantined: it runs on the other two
        unchecked_sid = await run_to_end(client, honest_cfg.model_copy(update={"verify": VerifyConfig()}))
        faulty, honest = await story(client, faulty_sid), await story(client, honest_sid)
        unchecked = await story(client, unchecked_sid)
        reader = await connect_as(supervisor.credentials, "orchestrator", "reader")  # users read no stream
        try:
            log = EventLog(reader.jetstream(), client.subjects)
            devices = await pnode_devices(log, client.subjects)
            on_its_subject = await log.read(client.subjects.pnode_evt_of_type("PNodeQuarantined"))
        finally:
            await reader.close()
        with pytest.raises(bus.BusConnectError, match="Authorization Violation"):  # its credential is revoked
            await bus.connect(Credential.load(supervisor.credentials.credential_file("pnode", FAULTY)), name="again",
                              allow_reconnect=False, max_reconnect_attempts=0)
    assert [r.subject.split(".")[-2] for r in on_its_subject] == [FAULTY], "every orchestrator learns of it"

    payloads, losses, digests, state, shown = faulty
    failures = [p for p in payloads if isinstance(p, VerificationFailed)]
    assert failures and all(FAULTY in f.quarantined for f in failures)
    first = failures[0]
    assert first.claimed != first.recomputed, "both digests are recorded, and they differ"
    (quarantined,) = [p for p in payloads if isinstance(p, PNodeQuarantined)]
    assert quarantined.pnode == FAULTY and quarantined.step <= 20 and quarantined.credential_revoked
    discarded = next(p for p in payloads if isinstance(p, ResultsDiscarded))
    assert discarded.from_step == 0, f"{FAULTY} worked from the start: nothing it touched is kept"
    assert any(isinstance(p, RolledBack) and p.to_step == 0 for p in payloads)
    assert state.quarantined == [FAULTY] and FAULTY not in state.allocation.values()
    assert [(q["pnode"], q["back_to_step"]) for q in shown["quarantined"]] == [(FAULTY, 0)]  # `session show` prints it
    assert not shown["failovers"] and not shown["rebalances"], "a quarantine is neither"
    assert sum(c["failed"] for c in shown["checks"].values()) == len(failures)

    honest_payloads, honest_losses, honest_digests, honest_state, _ = honest
    assert not any(isinstance(p, (VerificationFailed, PNodeQuarantined)) for p in honest_payloads)
    outcomes = [c.outcome for p in honest_payloads if isinstance(p, ChecksCompleted) for c in p.checks]
    assert outcomes and set(outcomes) == {"passed"}
    assert FAULTY not in honest_state.allocation.values()

    assert sorted(losses) == list(range(STEPS))
    assert losses == honest_losses and digests == honest_digests, "bit-identical to a run without the fault"
    assert (unchecked[1], unchecked[2]) == (honest_losses, honest_digests), "checking changes no bit"
    assert not any(isinstance(p, ChecksCompleted) for p in unchecked[0])

    for sid, (events, _, _, folded, _) in ((faulty_sid, faulty), (honest_sid, honest)):
        graph, _ = session_graph(folded)
        audit = checks_in_log(events, graph, devices)
        assert audit and all(recorded == derived for _, recorded, derived in audit), f"{sid}: the stream is the log's"
