"""A checkpoint that does not load: the orchestrator reads it itself; damaged, it no longer counts and
the session goes on from the newest intact one, also when that happens while VNodes move (a
rebalance), which once failed the session. A PNode's failure alone discards nothing."""

from __future__ import annotations

import asyncio
import itertools
from types import SimpleNamespace

from computeall.orchestrator.checkpoints import Checkpoints
from computeall.orchestrator.errors import SessionError
from computeall.orchestrator.placement import Move
from computeall.orchestrator.training import Trainer
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.events import CheckpointCommitted, CheckpointDiscarded, EventEnvelope, RolledBack
from computeall.protocol.object_store import CheckpointObject
from computeall.protocol.pnode_api import LoadCheckpoint
from computeall.protocol.session_state import SessionState

BUCKET = "ca-checkpoints-s"


class Recorder:
    """The session's state, and what the driver records into it."""

    def __init__(self, *events) -> None:
        self.state = SessionState(id="s", config=SessionConfig(network_yaml="name: t\n", data=DataConfig(files=["a"]), steps=30))
        self.seq = itertools.count(1)
        self.recorded: list = []
        for event in events:
            self.state.apply(EventEnvelope(session_id="s", payload=event), next(self.seq))

    async def record(self, payload) -> None:
        self.recorded.append(payload)
        self.state.apply(EventEnvelope(session_id="s", payload=payload), next(self.seq))


def committed(step: int) -> CheckpointCommitted:
    objects = [CheckpointObject(vnode=v, object=f"s/{step:08d}/{v}.safetensors", digest="0" * 32, bytes=1) for v in ("a", "b")]
    return CheckpointCommitted(step=step, bucket=BUCKET, objects=objects, seconds=0.1)


class PNodes:
    """Every PNode loads a checkpoint but those of the steps in `fails`."""

    def __init__(self, fails: set[int]) -> None:
        self.fails = fails
        self.loaded: list[int] = []

    async def all(self, make, timeout=None, **_):
        request = make("p1")
        assert isinstance(request, LoadCheckpoint) and request.bucket == BUCKET
        if request.step in self.fails:
            raise SessionError(f"p1: checkpoint at step {request.step} is corrupted")
        self.loaded.append(request.step)
        return []


class Storage:
    """The session's bucket, as the orchestrator reads it: `damaged` says what is wrong with which step."""

    bucket = BUCKET

    def __init__(self, damaged: dict[int, str]) -> None:
        self.damaged = damaged
        self.deleted: list[str] = []

    async def damage(self, objects):
        step = int(objects[0].object.split("/")[1])
        return self.damaged.get(step)

    async def delete(self, objects):
        self.deleted += [o.object for o in objects]


async def _noop(*args, **kwargs):
    return None


def checkpoints(recorder, pnodes, storage) -> Checkpoints:
    return Checkpoints(recorder, pnodes, SimpleNamespace(load_plan=_noop), storage)


async def test_a_damaged_checkpoint_is_discarded_and_the_newest_intact_one_loaded():
    recorder = Recorder(committed(5), committed(10))
    storage = Storage({10: "object s/00000010/b.safetensors in ca-checkpoints-s is corrupted (digest mismatch with the log)"})
    pnodes = PNodes(fails={10})
    assert await checkpoints(recorder, pnodes, storage).restore() == 5
    assert pnodes.loaded == [5]
    (discarded,) = recorder.recorded
    assert isinstance(discarded, CheckpointDiscarded) and discarded.step == 10 and "b.safetensors" in discarded.reason
    assert [c.step for c in recorder.state.checkpoints] == [5], "no longer counted: step 10 is saved again"
    assert storage.deleted == [o.object for o in committed(10).objects]


async def test_a_pnode_failing_on_an_intact_checkpoint_discards_nothing():
    recorder = Recorder(committed(5), committed(10))
    storage = Storage({})  # the orchestrator finds every object intact
    assert await checkpoints(recorder, PNodes(fails={10}), storage).restore() == 5
    assert recorder.recorded == [] and storage.deleted == []
    assert [c.step for c in recorder.state.checkpoints] == [5, 10]


class Moving:
    """Placement deciding to move VNodes at this step (a PNode joined), and the calls the move makes."""

    def __init__(self) -> None:
        self.unloaded: list[str] = []

    async def rebalance(self, at_checkpoint: bool) -> Move:
        return Move(allocation=None, reason="pnode-x joined", released=["pnode-y"])

    async def unload(self, pnodes: list[str]) -> None:
        self.unloaded += pnodes


async def test_a_rebalance_onto_a_damaged_checkpoint_goes_on_from_the_newest_intact_one():
    """The state moves through the checkpoint of this very step; found damaged there, the session is
    rolled back to the newest intact one and runs the steps since again (it once failed instead)."""
    recorder = Recorder(committed(5), committed(10))
    recorder.state.next_step = 10
    moving = Moving()

    async def restore() -> int:  # the checkpoint of step 10 turned out damaged: 5 is the newest intact one
        return 5

    placement = SimpleNamespace(rebalance=moving.rebalance, adopt=_noop)
    trainer = Trainer(recorder, SimpleNamespace(unload=moving.unload), placement,
                      SimpleNamespace(save=_noop, restore=restore), recovery=None, training_step=SimpleNamespace(drop_ahead=lambda: None), sampler=None,
                      checks=SimpleNamespace(settle=_noop), quarantine=None, shutdown=asyncio.Event())
    assert await trainer._rebalance(10, at_checkpoint=True) == 5
    (rolled_back,) = recorder.recorded
    assert isinstance(rolled_back, RolledBack) and (rolled_back.to_step, rolled_back.from_step) == (5, 10)
    assert moving.unloaded == ["pnode-y"]
