"""What a PNode answers: a pass that gave up waiting for its inputs says so (`starved`), so the
orchestrator can tell it from a PNode that never answers; the testing fault `mute` plays the latter."""

from __future__ import annotations

from types import SimpleNamespace

import asyncio
import time

import pytest

from computeall.cli.swarm import micro_gpt
from computeall.network import Graph, load_network
from computeall.pnode.member import BusMember, InputsNeverCame, PassSuperseded, wait_deadline
from computeall.protocol.credentials import Credential
from computeall.protocol.faults import FaultSpec
from computeall.protocol.config import OptimizerConfig
from computeall.protocol.pnode_api import (
    ApplyStep, BatchSource, LoadCheckpoint, LoadPlan, PNodeReply, Reset, RunStep, Unload,
)
from computeall.protocol.subjects import Subjects


class Bus:
    def __init__(self) -> None:
        self.published: list[tuple[str, bytes]] = []

    async def publish(self, subject: str, data: bytes) -> None:
        self.published.append((subject, data))


class Member(BusMember):
    async def dispatch(self, request) -> PNodeReply:
        if isinstance(request, RunStep):
            raise InputsNeverCame(f"train step {request.step}: inputs of [(0, 'b0.attn')] did not arrive within 5.0s")
        return PNodeReply(ok=True, pnode=self.name, step=request.step)


def member(fault: FaultSpec | None = None) -> Member:
    m = Member(Credential(role="pnode", name="p1", servers=["nats://h:1"]), 1 << 30, "cpu", Subjects("ca"), fault=fault)
    m.nc = Bus()
    return m


def message(request, inbox: str = "_INBOX.orchestrator.o.1") -> SimpleNamespace:
    return SimpleNamespace(data=request.model_dump_json().encode(), reply=inbox)


def replies_to(m: BusMember, inbox: str = "_INBOX.orchestrator.o.1") -> list[PNodeReply]:
    return [PNodeReply.model_validate_json(data) for subject, data in m.nc.published if subject == inbox]


async def ask(m: Member, request) -> PNodeReply | None:
    m._arrivals += 1  # as the subscription's callback counts it
    await m._handle_ctl(message(request), m._arrivals)
    replies = replies_to(m)
    return replies[0] if replies else None


async def test_a_pass_whose_inputs_never_came_answers_starved():
    reply = await ask(member(), RunStep(session_id="s", step=4, give_up_s=5.0))
    assert (reply.ok, reply.starved, reply.pnode, reply.step) == (False, True, "p1", 4)
    assert "did not arrive within 5.0s" in reply.error


async def test_a_muted_pnode_takes_the_request_and_never_answers():
    m = member(FaultSpec.parse("mute:ApplyStep@3"))
    assert (await ask(m, ApplyStep(session_id="s", step=2, lr=0.1))).ok, "before step 3 it answers"
    m.nc.published.clear()
    assert await ask(m, ApplyStep(session_id="s", step=3, lr=0.1)) is None
    assert m.pending == 0 and m.nc.published == []
    assert (await ask(m, RunStep(session_id="s", step=3))).starved, "other kinds are answered"


class Stage:
    """A pass that runs until something takes its place."""

    def __init__(self) -> None:
        self.aborted = asyncio.Event()

    def abort(self) -> None:
        self.aborted.set()

    async def run_step(self, request, deadline_s: float) -> PNodeReply:
        await self.aborted.wait()
        raise PassSuperseded(f"train step {request.step} was superseded")


class Hosting(BusMember):
    async def run_step(self, stage, request) -> PNodeReply:
        return await stage.run_step(request, 600.0)


def hosting() -> Hosting:
    m = Hosting(Credential(role="pnode", name="p1", servers=["nats://h:1"]), 1 << 30, "cpu", Subjects("ca"))
    m.nc = Bus()
    return m


async def test_a_pass_dropped_by_a_reset_answers_that_its_state_is_lost():
    # the orchestrator had declared the PNode lost and reset it as it came back, while its driver still
    # waited for this pass: a lost PNode to recover from, not a failure of the session
    m = hosting()
    m.host("s", Stage())
    running = asyncio.ensure_future(ask(m, RunStep(session_id="s", step=0)))
    await asyncio.sleep(0.05)
    await m.reset(Reset())
    reply = await running
    assert (reply.ok, reply.state_lost, reply.step) == (False, True, 0)
    assert "superseded" in reply.error


async def test_a_pass_superseded_by_another_of_its_stage_is_no_lost_state():
    m, stage = hosting(), Stage()
    m.host("s", stage)
    running = asyncio.ensure_future(ask(m, RunStep(session_id="s", step=0)))
    await asyncio.sleep(0.05)
    stage.abort()  # as a RunStep asked again does: the stage stays
    reply = await running
    assert (reply.ok, reply.state_lost) == (False, False)


class StatusHeldUp(Bus):
    """The first status publish waits for the bus (its buffer full), so the request after it starts first."""

    def __init__(self) -> None:
        super().__init__()
        self.held = asyncio.Event()

    async def publish(self, subject: str, data: bytes) -> None:
        if not self.held.is_set():
            self.held.set()
            await asyncio.sleep(0.05)
        await super().publish(subject, data)


class Completing(Stage):
    async def run_step(self, request, deadline_s: float) -> PNodeReply:
        done = asyncio.ensure_future(asyncio.sleep(0.1))
        await asyncio.wait([done, asyncio.ensure_future(self.aborted.wait())], return_when=asyncio.FIRST_COMPLETED)
        if self.aborted.is_set():
            raise PassSuperseded(f"train step {request.step} was superseded")
        return PNodeReply(ok=True, pnode="p1", step=request.step)


async def test_a_pass_request_overtaken_by_a_newer_one_gives_way_to_it():
    # the orchestrator asked for step 6, gave up on it and asked again; both arrive together and the
    # older one's status publish waits: the newer runs, and the older must not abort it when it starts
    m, stage = hosting(), Completing()
    m.nc = StatusHeldUp()
    m.host("s", stage)
    await m._on_ctl(message(RunStep(session_id="s", step=6), "_INBOX.old"))
    await m._on_ctl(message(RunStep(session_id="s", step=6), "_INBOX.new"))
    while not (replies_to(m, "_INBOX.old") and replies_to(m, "_INBOX.new")):
        await asyncio.sleep(0.01)
    [old], [new] = replies_to(m, "_INBOX.old"), replies_to(m, "_INBOX.new")
    assert (new.ok, new.step) == (True, 6) and not stage.aborted.is_set()
    assert (old.ok, old.state_lost) == (False, False) and "newer pass request" in old.error


def test_a_pass_gives_up_when_the_orchestrator_says_or_at_the_pnodes_own_limit():
    assert wait_deadline(RunStep(session_id="s", step=1, give_up_s=12.5), 600.0) == 12.5
    assert wait_deadline(RunStep(session_id="s", step=1), 600.0) == 600.0
    assert wait_deadline(RunStep(session_id="s", step=1, give_up_s=900.0), 600.0) == 600.0


def test_the_mute_fault_is_parsed_and_checked():
    spec = FaultSpec.parse("mute:RunStep@3")
    assert (spec.request, spec.from_step, str(spec)) == ("RunStep", 3, "mute:RunStep@3")
    assert not spec.mutes("RunStep", 2) and spec.mutes("RunStep", 3) and not spec.mutes("ApplyStep", 3)
    assert FaultSpec.parse("mute:Reset").mutes("Reset", None), "a request without a step: always"
    for bad in ("mute:Nothing", "mute:RunStep@soon", "mute:"):
        with pytest.raises(ValueError, match=r"or mute:REQUEST\[@STEP\]"):
            FaultSpec.parse(bad)


class Ordered(Stage):
    """Records when its update and its pass ran."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[str] = []

    async def apply(self, request, deadline_s: float) -> PNodeReply:
        self.log.append(f"apply {request.step} begins")
        await asyncio.sleep(0.05)
        self.log.append(f"apply {request.step} ends")
        return PNodeReply(ok=True, pnode="p1", step=request.step)

    async def run_step(self, request, deadline_s: float) -> PNodeReply:
        self.log.append(f"run {request.step}")
        return PNodeReply(ok=True, pnode="p1", step=request.step)


class Loading(Hosting):
    async def load_checkpoint(self, stage, request) -> PNodeReply:
        stage.log.append(f"load {request.step}")
        return PNodeReply(ok=True, pnode="p1", step=request.step)


async def test_a_run_step_sent_behind_an_apply_step_runs_on_the_updated_weights():
    m, stage = hosting(), Ordered()
    m.host("s", stage)
    # the RunStep may even arrive first (its ApplyStep asked again after nobody listened)
    await m._on_ctl(message(RunStep(session_id="s", step=5, after_apply=4), "_INBOX.run"))
    await asyncio.sleep(0.02)
    await m._on_ctl(message(ApplyStep(session_id="s", step=4, lr=0.1), "_INBOX.apply"))
    while not replies_to(m, "_INBOX.run"):
        await asyncio.sleep(0.01)
    assert stage.log == ["apply 4 begins", "apply 4 ends", "run 5"]
    assert replies_to(m, "_INBOX.apply")[0].ok and replies_to(m, "_INBOX.run")[0].ok

    # the session rolled back to step 2: the pass sent behind the update of step 2 waits for that one
    await m._on_ctl(message(RunStep(session_id="s", step=3, after_apply=2), "_INBOX.rerun"))
    await asyncio.sleep(0.02)
    assert stage.log[-1] == "run 5", "not on the update of step 4"
    await m._on_ctl(message(ApplyStep(session_id="s", step=2, lr=0.1), "_INBOX.apply2"))
    while not replies_to(m, "_INBOX.rerun"):
        await asyncio.sleep(0.01)
    assert stage.log[-3:] == ["apply 2 begins", "apply 2 ends", "run 3"]


async def test_an_update_of_before_a_checkpoint_load_is_not_the_one_a_pass_follows():
    # recovery loaded the checkpoint of step 4 and runs step 4 again: the pass of step 5 sent behind its
    # update waits for that update, not the one of step 4 answered before the failure
    m, stage = Loading(Credential(role="pnode", name="p1", servers=["nats://h:1"]), 1 << 30, "cpu", Subjects("ca")), Ordered()
    m.nc = Bus()
    m.host("s", stage)
    for request, inbox in ((ApplyStep(session_id="s", step=4, lr=0.1), "_INBOX.a"),
                           (LoadCheckpoint(session_id="s", step=4, bucket="b", objects=[]), "_INBOX.l")):
        await m._on_ctl(message(request, inbox))
        while not replies_to(m, inbox):
            await asyncio.sleep(0.01)
    await m._on_ctl(message(RunStep(session_id="s", step=5, after_apply=4), "_INBOX.run"))
    await asyncio.sleep(0.02)
    assert stage.log == ["apply 4 begins", "apply 4 ends", "load 4"], "the pass waits for the update to come"
    await m._on_ctl(message(ApplyStep(session_id="s", step=4, lr=0.1), "_INBOX.again"))
    while not replies_to(m, "_INBOX.run"):
        await asyncio.sleep(0.01)
    assert stage.log[-3:] == ["apply 4 begins", "apply 4 ends", "run 5"]


async def test_a_run_step_behind_an_update_that_never_comes_says_so():
    m, stage = hosting(), Ordered()
    m.step_deadline_s = 0.05  # the PNode's own limit: its give-up time is for its inputs, not its update
    m.host("s", stage)
    await m._on_ctl(message(RunStep(session_id="s", step=5, after_apply=4), "_INBOX.run"))
    while not replies_to(m, "_INBOX.run"):
        await asyncio.sleep(0.01)
    (reply,) = replies_to(m, "_INBOX.run")
    assert reply.starved and "update of step 4" in reply.error and stage.log == []


class SlowUpdate(Ordered):
    async def apply(self, request, deadline_s: float) -> PNodeReply:
        await asyncio.sleep(0.3)  # longer than the pass's give-up time: a busy machine's update
        return await super().apply(request, deadline_s)


async def test_a_run_step_waits_for_an_update_slower_than_its_give_up_time():
    m, stage = hosting(), SlowUpdate()
    m.host("s", stage)
    await m._on_ctl(message(ApplyStep(session_id="s", step=4, lr=0.1), "_INBOX.apply"))
    await m._on_ctl(message(RunStep(session_id="s", step=5, after_apply=4, give_up_s=0.05), "_INBOX.run"))
    while not replies_to(m, "_INBOX.run"):
        await asyncio.sleep(0.01)
    assert replies_to(m, "_INBOX.run")[0].ok and stage.log == ["apply 4 begins", "apply 4 ends", "run 5"]


async def test_a_newer_pass_request_ends_the_wait_for_an_update():
    # the orchestrator dropped the pass it sent ahead (a validation came first, a recovery): the old pass gives
    # way at once, and is no lost state
    m, stage = hosting(), Ordered()
    m.host("s", stage)
    await m._on_ctl(message(RunStep(session_id="s", step=5, after_apply=4), "_INBOX.ahead"))
    await asyncio.sleep(0.02)
    await m._on_ctl(message(RunStep(session_id="s", step=4), "_INBOX.again"))
    while not (replies_to(m, "_INBOX.ahead") and replies_to(m, "_INBOX.again")):
        await asyncio.sleep(0.01)
    (ahead,), (again,) = replies_to(m, "_INBOX.ahead"), replies_to(m, "_INBOX.again")
    assert not ahead.ok and not ahead.starved and not ahead.state_lost and "PassSuperseded" in ahead.error
    assert again.ok and stage.log == ["run 4"]

class SlowPass(Ordered):
    """A pass that takes a while, then ends or gives way to a newer one (`abort`ed by the test)."""

    async def run_step(self, request, deadline_s: float) -> PNodeReply:
        self.log.append(f"run {request.step} begins")
        try:
            await asyncio.wait_for(self.aborted.wait(), 0.1)
        except asyncio.TimeoutError:
            self.log.append(f"run {request.step} ends")
            return PNodeReply(ok=True, pnode="p1", step=request.step)
        self.aborted.clear()
        raise PassSuperseded(f"train step {request.step} was superseded")


async def send_step(m: Hosting, tag: str) -> None:
    """A step's pass, its update decided by the replica, and the next pass, back to back: `<kind><tag>` inboxes."""
    for request, inbox in ((RunStep(session_id="s", step=4), f"_INBOX.run{tag}"),
                           (ApplyStep(session_id="s", step=4, lr=0.1, replica_max_norm=1.0), f"_INBOX.apply{tag}"),
                           (RunStep(session_id="s", step=5, after_apply=4), f"_INBOX.ahead{tag}")):
        await m._on_ctl(message(request, inbox))


async def test_an_update_its_replica_decides_waits_for_the_pass_before_it():
    # sent right behind its RunStep (no round trip to the orchestrator): it begins once that pass ended,
    # and the pass sent behind it runs on what it updated
    m, stage = hosting(), SlowPass()
    m.host("s", stage)
    await send_step(m, "")
    while not replies_to(m, "_INBOX.ahead"):
        await asyncio.sleep(0.01)
    assert stage.log == ["run 4 begins", "run 4 ends", "apply 4 begins", "apply 4 ends", "run 5 begins", "run 5 ends"]
    assert all(replies_to(m, inbox)[0].ok for inbox in ("_INBOX.run", "_INBOX.apply", "_INBOX.ahead"))


async def test_an_update_whose_pass_gave_way_gives_way_too_and_is_not_the_one_a_pass_follows():
    # the step stalled and was sent again: the first try's update never begins, and the second try's
    # pass behind its own update does not mistake the first one's failure for it
    m, stage = hosting(), SlowPass()
    m.host("s", stage)
    await send_step(m, "")
    await asyncio.sleep(0.02)
    stage.abort()  # the orchestrator's second try supersedes the first pass
    while not replies_to(m, "_INBOX.apply"):
        await asyncio.sleep(0.01)
    await send_step(m, "2")
    while not (replies_to(m, "_INBOX.ahead") and replies_to(m, "_INBOX.ahead2")):
        await asyncio.sleep(0.01)
    (apply,), (ahead,) = replies_to(m, "_INBOX.apply"), replies_to(m, "_INBOX.ahead")
    assert not apply.ok and "the pass this update of step 4 follows failed here" in apply.error
    assert not ahead.ok and "PassSuperseded" in ahead.error
    assert replies_to(m, "_INBOX.ahead2")[0].ok
    assert stage.log[-6:] == ["run 4 begins", "run 4 ends", "apply 4 begins", "apply 4 ends", "run 5 begins", "run 5 ends"]


async def test_requests_of_a_session_it_does_not_host_leave_nothing_behind():
    # answered that no plan is loaded, right away (a pass sent behind an update does not wait for one),
    # and no record of such a session is kept: the ids a PNode remembers are those it hosts
    m = hosting()
    for request in (RunStep(session_id="never", step=3, after_apply=2), ApplyStep(session_id="never", step=2, lr=0.1)):
        reply = await asyncio.wait_for(ask(m, request), 1.0)
        assert (reply.ok, reply.state_lost) == (False, True) and "no plan loaded for session never" in reply.error
        m.nc.published.clear()
    assert m._order == {}
    m.host("s", Stage())
    await m._handle_ctl(message(Unload(session_id="s")), 1)
    assert m._order == {} and m.stages == {}


class Reloading(Hosting):
    """Records what it still held of the session when it began to build the session's new stage."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.held_while_building: list[object] = []

    async def load_plan(self, request) -> PNodeReply:
        self.held_while_building.append(self.stages.get(request.session_id))
        self.host(request.session_id, Stage())
        return PNodeReply(ok=True, pnode=self.name)


async def test_a_reload_frees_the_stage_it_replaces_before_it_builds_the_new_one():
    # a PNode's peak is its one copy of the session: a reload (after a rollback or a cool-down) that built
    # the new stage beside the old one held the session twice, and read as twice the bytes a parameter
    graph = Graph(load_network(micro_gpt(2)))
    old = Stage()
    m = Reloading(Credential(role="pnode", name="p1", servers=["nats://h:1"]), 1 << 30, "cpu", Subjects("ca"))
    m.nc = Bus()
    m.host("s", old)
    reply = await ask(m, plan_of(graph))
    assert reply.ok and old.aborted.is_set()
    assert m.held_while_building == [None], "the old stage was still held while the new one was built"
    assert isinstance(m.stages["s"], Stage) and m.stages["s"] is not old


def plan_of(graph) -> LoadPlan:
    batches = BatchSource(dataset="d", split="train", seed=1, micro_batch_size=2, context=graph.spec.context)
    return LoadPlan(session_id="s", network=graph.spec.model_dump(), assignment={v: "p1" for v in graph.vnodes},
                    seed=4, batches=batches, micro_batches=1, optimizer=OptimizerConfig())


class SlowLoad(Hosting):
    """Builds its stage once `built` is set."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.built = asyncio.Event()

    async def load_plan(self, request) -> PNodeReply:
        await self.built.wait()
        self.host(request.session_id, Stage())
        return PNodeReply(ok=True, pnode=self.name)


async def test_a_pnode_told_to_leave_while_it_loads_a_session_leaves_only_once_it_is_unloaded():
    # a reload lets the old stage go before it builds the new one: a PNode that counted only its built
    # stages held none for that moment, exited at once on SIGTERM and was lost to its session (CI)
    m = SlowLoad(Credential(role="pnode", name="p1", servers=["nats://h:1"]), 1 << 30, "cpu", Subjects("ca"))
    m.nc = Bus()
    m._orchestrator_seen = time.monotonic() + 3600  # an orchestrator is there to move the VNodes away
    loading = asyncio.ensure_future(ask(m, plan_of(Graph(load_network(micro_gpt(2))))))
    await asyncio.sleep(0.05)
    m.stop()
    await asyncio.sleep(0.5)
    assert not m._stop.is_set(), "left while loading"
    m.built.set()
    assert (await loading).ok and "s" in m.stages
    await asyncio.sleep(0.5)
    assert not m._stop.is_set(), "left while hosting"
    await m.unload(m.stages["s"], Unload(session_id="s"))
    await asyncio.wait_for(m._stop.wait(), 2.0)
