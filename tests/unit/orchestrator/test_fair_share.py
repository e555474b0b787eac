"""Fair share between users from what the orchestrator holds in memory: each user's running slots,
which queued sessions start, and each user's part of the PNode pool."""

import itertools

from computeall.orchestrator.fair_share import FairShare
from computeall.orchestrator.pnode_share import partition
from computeall.orchestrator.pnodes import PNodeRegistry
from computeall.protocol.events import Allocated, EventEnvelope, SessionCreated, SessionQueued, SessionStarted
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.fair_share import FairShareLimits
from computeall.protocol.session_log import SessionLog
from computeall.protocol.telemetry import Heartbeat

CONFIG = SessionConfig(network_yaml="name: t\n", data=DataConfig(files=["a"]), steps=9)
P = [f"p{i}" for i in range(6)]


# -- the partition ---------------------------------------------------------------------------
def test_one_user_without_a_cap_or_too_few_pnodes_share_everything():
    assert partition(P, {"alice": set(P)}) is None
    assert partition(P, {}) is None
    assert partition(["p0"], {"alice": {"p0"}, "bob": set()}) is None, "one PNode cannot be split between two"


def test_a_newcomer_gets_free_pnodes_and_the_others_keep_theirs_up_to_the_share():
    parts = partition(P[:4], {"alice": set(P[:4]), "bob": set()})
    assert parts == {"alice": {"p0", "p1"}, "bob": {"p2", "p3"}}
    # bob already holds p3 (placed while alice held everything): he keeps it
    parts = partition(P[:4], {"alice": set(P[:4]), "bob": {"p3"}})
    assert parts["bob"] >= {"p3"} and len(parts["bob"]) == 2 and not parts["alice"] & parts["bob"]


def test_parts_are_disjoint_equal_within_one_and_stable_once_taken():
    users = ["alice", "bob", "carol"]
    for live_count in range(3, 7):
        live = P[:live_count]
        for holders in itertools.product(range(4), repeat=3):  # which PNodes each user's sessions hold
            held = {u: set(live[:h]) if i % 2 else set(live[-h:] if h else []) for i, (u, h) in enumerate(zip(users, holders))}
            parts = partition(live, held)
            sizes = sorted(len(p) for p in parts.values())
            assert sum(sizes) == live_count and sizes[-1] - sizes[0] <= 1, (live, held, parts)
            assert set().union(*parts.values()) == set(live)
            assert partition(live, parts) == parts, "once every user holds their part, nothing moves"


def test_a_cap_limits_even_a_lone_user_and_dead_pnodes_are_no_ones():
    assert partition(P, {"alice": {"p5"}}, cap=2) == {"alice": {"p5", "p0"}}
    assert partition(P[:2], {"alice": {"p0", "p9"}, "bob": set()}) == {"alice": {"p0"}, "bob": {"p1"}}


# -- slots, queue and the view -----------------------------------------------------------------
class Log:
    subjects = None


def session(sid: str, owner: str, *payloads) -> SessionLog:
    log = SessionLog(Log(), sid)
    for seq, payload in enumerate([SessionCreated(config=CONFIG, owner=owner), *payloads], 1):
        log.state.apply(EventEnvelope(session_id=sid, payload=payload), seq)
    return log


def allocated(*pnodes: str) -> Allocated:
    return Allocated(placements=[], edges=[], pnodes=list(pnodes), bytes_across_per_step=0)


def registry(*pnodes: str) -> PNodeRegistry:
    r = PNodeRegistry(timeout_s=60)
    for p in pnodes:
        r.beat(Heartbeat(pnode=p, host="h", os_pid=1, device="cpu", memory_bytes=1 << 30, ts=0.0, incarnation="i"))
    return r


QUEUED = SessionQueued(reason="full")


def fair(sessions: list[SessionLog], pnodes=P[:4], **limits) -> FairShare:
    return FairShare(FairShareLimits(**limits), registry(*pnodes), {s.state.id: s for s in sessions})


def test_slots_count_the_owners_running_sessions():
    share = fair([session("a1", "alice", SessionStarted()), session("a2", "alice", SessionStarted()),
                  session("a3", "alice", QUEUED), session("b1", "bob")])
    assert (share.slots("alice").running, share.slots("alice").free) == (2, False)
    assert (share.slots("bob").running, share.slots("bob").free) == (0, True)


def test_queued_sessions_start_oldest_first_in_the_slots_their_owners_have_free():
    sessions = [session("a1", "alice", SessionStarted()), session("a2", "alice", QUEUED), session("a3", "alice", QUEUED),
                session("a4", "alice", QUEUED), session("b1", "bob", QUEUED), session("b2", "bob", QUEUED),
                session("c1", "carol", QUEUED)]
    starting = [s.state.id for s in fair(sessions, max_running_sessions_per_user=3).next_to_start()]
    assert starting == ["b1", "b2", "c1", "a2", "a3"], "those running fewest first; alice has 2 slots left"
    assert [s.state.id for s in fair(sessions, max_running_sessions_per_user=1).next_to_start()] == ["b1", "c1"]


def test_each_users_sessions_see_only_their_part_and_move_off_the_rest():
    alice = session("a1", "alice", SessionStarted(), allocated(*P[:4]))
    bob = session("b1", "bob", SessionStarted())
    share = fair([alice, bob])
    alices, bobs = share.pnodes_of("alice"), share.pnodes_of("bob")
    assert [p for p in P[:4] if alices.is_leaving(p)] == ["p2", "p3"], "over alice's share now that bob runs"
    assert [hb.pnode for hb in alices.live()] == ["p0", "p1"]
    assert bobs.live() == [] and bobs.capacities() == [], "bob waits until alice's session has moved off"
    alice.state.apply(EventEnvelope(session_id="a1", payload=allocated("p0", "p1")), 9)
    assert [c.pnode for c in bobs.capacities()] == ["p2", "p3"]
    assert not any(bobs.is_leaving(p) for p in ("p2", "p3"))
    bob.state.apply(EventEnvelope(session_id="b1", payload=QUEUED), 9)  # bob no longer runs: alice may take all
    assert [hb.pnode for hb in alices.live()] == P[:4] and not alices.is_leaving("p3")
