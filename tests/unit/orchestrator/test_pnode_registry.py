"""The PNode registry: live from heartbeats, and dead at once when a request finds nobody listening."""

from computeall.orchestrator import pnodes as registry_module
from computeall.orchestrator.pnodes import PNodeRegistry, capacity
from computeall.protocol.telemetry import Heartbeat


def beat(name: str, incarnation: str) -> Heartbeat:
    return Heartbeat(pnode=name, host="h", os_pid=1, device="cpu", memory_bytes=1 << 30, ts=0.0, sessions=[],
                     incarnation=incarnation)


def test_a_pnode_not_listening_is_not_live_until_it_restarts_or_keeps_beating(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(registry_module.time, "monotonic", lambda: now[0])
    registry = PNodeRegistry(timeout_s=5.0)
    registry.beat(beat("p", "a"))
    registry.beat(beat("q", "x"))
    registry.not_listening("p")  # killed: its last heartbeat is still fresh
    assert not registry.is_live("p") and [hb.pnode for hb in registry.live()] == ["q"]
    now[0] += 0.5
    registry.beat(beat("p", "a"))  # a heartbeat already in flight when it died
    assert not registry.is_live("p")
    registry.beat(beat("p", "b"))  # restarted: a new incarnation is live (and a new generation)
    assert registry.is_live("p") and registry.generation("p") == 1

    registry.not_listening("q")  # a hiccup: the same incarnation keeps beating afterwards
    now[0] += 3.0
    registry.beat(beat("q", "x"))
    assert registry.is_live("q")


def test_the_allocator_plans_within_the_offer_less_the_process():
    """A PNode's torch and runtime live in the memory it offers; the memory model counts only training."""
    offered = beat("p", "i").model_copy(update={"memory_bytes": 1536 << 20, "process_bytes": 300 << 20})
    assert capacity(offered, offered.memory_bytes).memory_bytes == 1236 << 20
    assert capacity(offered.model_copy(update={"process_bytes": 2 << 30}), offered.memory_bytes).memory_bytes == 0


def test_a_pnode_back_after_being_declared_lost_gets_no_work_until_reset_and_a_restarted_one_needs_none(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(registry_module.time, "monotonic", lambda: now[0])
    registry = PNodeRegistry(timeout_s=5.0)
    assert not registry.beat(beat("p", "a"))
    now[0] += 6.0
    assert registry.newly_lost() == ["p"]
    assert registry.beat(beat("p", "a")), "the same process back: what it holds is stale"
    assert registry.is_live("p") and registry.is_stale("p") and registry.live() == []
    registry.reset_done("p", "a")
    assert [hb.pnode for hb in registry.live()] == ["p"]

    # a restart (the supervisor starts it again at once): a new process holds nothing; resetting it would
    # drop the work given to it meanwhile
    assert not registry.beat(beat("p", "b"))
    assert registry.generation("p") == 1 and [hb.pnode for hb in registry.live()] == ["p"]
    now[0] += 6.0
    registry.newly_lost()
    assert not registry.beat(beat("p", "c")), "restarted after being declared lost: new, not stale"
    assert [hb.pnode for hb in registry.live()] == ["p"]


def test_a_pnode_that_left_a_request_unanswered_cools_down_twice_as_long_each_time(monkeypatch):
    # slow or hostile, the orchestrator cannot tell: a busy machine's PNode comes back (a session it alone
    # could hold resumes), one that mutes on purpose costs a recovery less often each time
    now = [100.0]
    monkeypatch.setattr(registry_module.time, "monotonic", lambda: now[0])
    registry = PNodeRegistry(timeout_s=5.0)
    live = lambda: [hb.pnode for hb in registry.live()]  # noqa: E731
    for cool_down in (registry_module.COOL_DOWN_S, 2 * registry_module.COOL_DOWN_S):
        registry.beat(beat("p", "a"))
        registry.unresponsive("p")
        assert live() == []
        now[0] += cool_down - 1.0
        registry.beat(beat("p", "a"))  # heartbeating all along
        assert live() == [], "still cooling down"
        now[0] += 2.0
        registry.beat(beat("p", "a"))
        assert live() == ["p"]
    registry.unresponsive("p")
    registry.beat(beat("p", "b"))  # restarted: a new process owes nothing
    assert live() == ["p"]


def test_a_pnode_that_answered_in_another_name_gets_no_more_work(monkeypatch):
    # no honest PNode does that, however busy: no cool-down ends it, only a new process
    now = [100.0]
    monkeypatch.setattr(registry_module.time, "monotonic", lambda: now[0])
    registry = PNodeRegistry(timeout_s=5.0)
    registry.beat(beat("p", "a"))
    registry.misbehaved("p")
    now[0] += 100 * registry_module.COOL_DOWN_S
    registry.beat(beat("p", "a"))
    assert registry.live() == []
    registry.beat(beat("p", "b"))
    assert [hb.pnode for hb in registry.live()] == ["p"]
