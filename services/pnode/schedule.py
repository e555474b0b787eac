"""The pipeline schedule: which work item a stage runs next.

A pass's work items are the forwards and backwards of (micro-batch, VNode) pairs over this PNode's
VNodes. The schedule only decides the order; `stage.py` runs the items and `outbox.py` moves the
tensors, so a schedule is a small pure object, tested on its own (tests/unit/pnode/test_schedule.py
runs every schedule over simulated pipelines).

What every schedule keeps, because the math depends on it and not on the schedule:
- Backwards run in one fixed order: micro-batches in order, VNodes in reverse topological order.
  Every parameter's gradient then accumulates over the micro-batches in the same order on any
  placement, and waiting on the next backward can never deadlock.
- A VNode's forwards run in micro-batch order, each once its inputs are here; of the ready ones
  the oldest micro-batch goes first.

Schedules differ in when a forward may start:
- "1f1b": at most `in_flight` micro-batches are in flight on a PNode (forward started, backward not
  finished). After the warm-up every finished backward lets one more forward start, and activation
  memory is bounded by `in_flight` (by default the number of PNodes the pipeline crosses), not by
  the number of micro-batches. A backward that is ready always goes before a forward.
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

    def __init__(self, vnodes: list[str], micro_batches: int, backward: bool) -> None:
        self.vnodes = list(vnodes)  # this PNode's VNodes, in topological order
        self.micro_batches = micro_batches
        self._next_forward = {v: 0 for v in self.vnodes}  # the next micro-batch each VNode forwards
        self._forwards_left = len(self.vnodes) * micro_batches
        self._backwards = (
            [WorkItem("backward", m, v) for m in range(micro_batches) for v in reversed(self.vnodes)] if backward else []
        )
        self._backwards_done = 0

    # -- what a schedule decides --------------------------------------------------------
    def may_forward(self, micro: int) -> bool:
        return True

    def may_backward(self) -> bool:
        return True

    # -- the common part ----------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self._forwards_left == 0 and self._backwards_done == len(self._backwards)

    @property
    def oldest_unfinished(self) -> int:
        """The lowest micro-batch whose backwards are not all done (= micro_batches when none is left)."""
        if self._backwards_done == len(self._backwards):
            return self.micro_batches
        return self._backwards[self._backwards_done].micro

    def next(self, ready: Ready) -> WorkItem | None:
        """The item to run now, or None: wait until more inputs arrive."""
        if self._backwards_done < len(self._backwards) and self.may_backward():
            item = self._backwards[self._backwards_done]
            if self._next_forward[item.vnode] > item.micro and ready(item):  # its forward ran, its gradients are here
                return item
        best: WorkItem | None = None
        for vid in self.vnodes:
            m = self._next_forward[vid]
            if m >= self.micro_batches or (best is not None and m >= best.micro) or not self.may_forward(m):
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
            self._backwards_done += 1

    def waiting_for(self) -> WorkItem | None:
        """What the pass waits on (for an error message): the next backward, else the oldest forward."""
        if self._backwards_done < len(self._backwards) and self._forwards_left == 0:
            return self._backwards[self._backwards_done]
        pending = [WorkItem("forward", m, v) for v, m in self._next_forward.items() if m < self.micro_batches]
        return min(pending, key=lambda i: i.micro, default=None)


class OneFOneB(PassSchedule):
    def __init__(self, vnodes: list[str], micro_batches: int, backward: bool, in_flight: int) -> None:
        super().__init__(vnodes, micro_batches, backward)
        if in_flight < 1:
            raise ValueError(f"in_flight must be at least 1, got {in_flight}")
        self.in_flight = in_flight if backward else micro_batches  # a forward-only pass holds nothing

    def may_forward(self, micro: int) -> bool:
        return micro < self.oldest_unfinished + self.in_flight


class GPipe(PassSchedule):
    def __init__(self, vnodes: list[str], micro_batches: int, backward: bool, in_flight: int) -> None:
        super().__init__(vnodes, micro_batches, backward)

    def may_backward(self) -> bool:
        return self._forwards_left == 0


SCHEDULES: dict[str, type[PassSchedule]] = {"1f1b": OneFOneB, "gpipe": GPipe}


def pass_schedule(name: str, vnodes: list[str], micro_batches: int, backward: bool, in_flight: int) -> PassSchedule:
    try:
        kind = SCHEDULES[name]
    except KeyError:
        raise ValueError(f"unknown schedule {name!r}; use one of {', '.join(SCHEDULES)}") from None
    return kind(vnodes, micro_batches, backward, in_flight)
