"""The pipeline schedule: which work item a stage runs next.

A pass's work items are the forwards and backwards of (micro-batch, VNode) pairs over this PNode's
VNodes. The schedule only decides the order; `stage.py` runs the items and `outbox.py` moves the
tensors, so a schedule is a small pure object, tested on its own (tests/unit/pnode/test_schedule.py
runs every schedule over simulated pipelines).

What every schedule keeps, because the math depends on it and not on the schedule:
- A VNode's backwards run in micro-batch order, so every parameter's gradient accumulates over
  the micro-batches in the same order on any placement and schedule. (Gradients of one output
  from several consumers are summed in the graph's consumer order by the stage, whenever they
  arrive.) Across VNodes, any backward whose gradients are here may go: a PNode that holds both
  ends of a pipeline (the embedding and the tied LM head) does not wait for the middle's
  backward of one micro-batch before starting the head's backward of the next.
- A VNode's forwards run in micro-batch order, each once its inputs are here.
- Of the ready items, a backward goes before a forward and the oldest micro-batch first. The
  oldest unfinished micro-batch is always allowed to run, so no schedule can deadlock.

Schedules differ in when a forward may start:
- "1f1b": at most `in_flight` micro-batches are in flight on a PNode (forward started, backward not
  finished). After the warm-up every finished backward lets one more forward start, and activation
  memory is bounded by `in_flight`, not by the number of micro-batches. The default is twice the
  pipeline's segments (`computeall.network.in_flight`), or what the orchestrator decided from the
  measured round trips: enough to keep every PNode busy while tensors travel.
- "gpipe": every forward first, then the backwards (activations of all micro-batches held at once).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal


@dataclass(frozen=True)
class WorkItem:
    kind: Literal["forward", "backward"]
    micro: int
    vnode: str


Ready = Callable[[WorkItem], bool]  # are this item's inputs here?


class PassSchedule:
    """The order of one pass's work items on one PNode. Ask `next` for what to run; report `done`."""

    def __init__(self, vnodes: list[str], micro_batches: int, backward: bool, in_flight: int, first: int = 0) -> None:
        if in_flight < 1:
            raise ValueError(f"in_flight must be at least 1, got {in_flight}")
        self.vnodes = list(vnodes)  # this PNode's VNodes, in topological order
        self.micro_batches = micro_batches
        self.end = first + micro_batches  # the pass runs micro-batches [first, end): a replica's block
        self.backward = backward
        self.in_flight = in_flight if backward else micro_batches  # a forward-only pass holds nothing
        self._next_forward = {v: first for v in self.vnodes}  # the next micro-batch each VNode forwards
        self._next_backward = {v: first if backward else self.end for v in self.vnodes}
        self._forwards_left = len(self.vnodes) * micro_batches
        self._backwards_left = len(self.vnodes) * micro_batches if backward else 0

    # -- what a schedule decides --------------------------------------------------------
    def may_forward(self, micro: int) -> bool:
        return True

    def may_backward(self) -> bool:
        return True

    # -- the common part ----------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self._forwards_left == 0 and self._backwards_left == 0

    @property
    def oldest_unfinished(self) -> int:
        """The lowest micro-batch whose backwards are not all done (= end when none is left)."""
        return min(self._next_backward.values(), default=self.end)

    def next(self, ready: Ready) -> WorkItem | None:
        """The item to run now, or None: wait until more inputs arrive."""
        best: WorkItem | None = None
        if self._backwards_left and self.may_backward():
            for vid in reversed(self.vnodes):
                m = self._next_backward[vid]
                if m >= self._next_forward[vid] or (best is not None and m >= best.micro):
                    continue  # its forward has not run yet, or an older backward is ready
                item = WorkItem("backward", m, vid)
                if ready(item):
                    best = item
            if best is not None:
                return best
        for vid in self.vnodes:
            m = self._next_forward[vid]
            if m >= self.end or (best is not None and m >= best.micro) or not self.may_forward(m):
                continue
            item = WorkItem("forward", m, vid)
            if ready(item):
                best = item
        return best

    def done(self, item: WorkItem) -> None:
        if item.kind == "forward":
            self._next_forward[item.vnode] += 1
            self._forwards_left -= 1
        else:
            self._next_backward[item.vnode] += 1
            self._backwards_left -= 1

    def waiting_for(self) -> WorkItem | None:
        """What the pass waits on (for an error message): the oldest backward, else the oldest forward."""
        backwards = [WorkItem("backward", m, v) for v, m in self._next_backward.items() if m < self.end]
        forwards = [WorkItem("forward", m, v) for v, m in self._next_forward.items() if m < self.end]
        return min(backwards or forwards, key=lambda i: i.micro, default=None)


class OneFOneB(PassSchedule):
    def may_forward(self, micro: int) -> bool:
        return micro < self.oldest_unfinished + self.in_flight


class GPipe(PassSchedule):
    def may_backward(self) -> bool:
        return self._forwards_left == 0


SCHEDULES: dict[str, type[PassSchedule]] = {"1f1b": OneFOneB, "gpipe": GPipe}


def pass_schedule(name: str, vnodes: list[str], micro_batches: int, backward: bool, in_flight: int,
                  first: int = 0) -> PassSchedule:
    """The schedule of a pass over micro-batches [first, first + micro_batches): a step's, or its
    replica's block of them."""
    try:
        kind = SCHEDULES[name]
    except KeyError:
        raise ValueError(f"unknown schedule {name!r}; use one of {', '.join(SCHEDULES)}") from None
    return kind(vnodes, micro_batches, backward, in_flight, first)
