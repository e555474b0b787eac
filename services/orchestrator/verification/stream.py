"""The check stream: which (step, micro-batch, VNode) items are recomputed, by whom. A pure function.

Every draw is `uniform(key)` of the session's recorded seed (`VerificationSeeded`) and the item,
so the stream needs no state: anyone holding the log (seed, allocations, PNodes' devices) derives
the same checks, and a step re-run after a rollback is checked the same way. The items are drawn
after every PNode has committed to its results (the `RunStep` replies), so no PNode knows in
advance which of its results will be recomputed.
"""

from __future__ import annotations

import secrets

from computeall.network import Graph
from computeall.network.ops import OPS
from computeall.protocol.config import VerifyConfig
from computeall.protocol.verification import CheckItem, uniform


def draw_seed() -> int:
    return secrets.randbits(63)


def device_kind(device: str) -> str:
    """cpu, cuda, mps: checks compare bits, which only the same kind of device reproduces."""
    return device.split(":")[0]


def has_backward(graph: Graph, vid: str) -> bool:
    """A backward runs for the VNode: something reads its output, or it is a loss."""
    return bool(graph.consumers(vid)) or OPS[graph.vnodes[vid].op].is_loss


def checks_of_step(
    seed: int,
    step: int,
    verify: VerifyConfig,
    graph: Graph,
    micro_batches: int,
    assignment: dict[str, str],
    devices: dict[str, str],
) -> list[CheckItem]:
    """The items of `step` to check. `devices` (PNode -> device) names who may check: the session's
    PNodes that are not quarantined; a checker is never the host and computes on the same kind of device."""
    checkers = sorted(devices)
    out = []
    for micro in range(micro_batches):
        for vnode in graph.order:
            key = f"{seed}/{step}/{micro}/{vnode}"
            if uniform(f"check/{key}") >= verify.rate:
                continue
            host = assignment[vnode]
            others = [p for p in checkers if p != host and device_kind(devices[p]) == device_kind(devices.get(host, ""))]
            if not others:
                continue  # nobody else can reproduce it (a one-PNode session)
            checker = others[int(uniform(f"checker/{key}") * len(others))]
            backward = has_backward(graph, vnode) and uniform(f"backward/{key}") < verify.backward_share
            out.append(CheckItem(step=step, micro=micro, vnode=vnode, pnode=host, checker=checker, backward=backward))
    return out


def tiebreaker(seed: int, item: CheckItem, devices: dict[str, str]) -> str | None:
    """A third PNode to recompute an item whose check failed (None when there is none)."""
    others = [p for p in sorted(devices) if p not in (item.pnode, item.checker)
              and device_kind(devices[p]) == device_kind(devices.get(item.pnode, ""))]
    return others[int(uniform(f"tiebreak/{seed}/{item.check_id}") * len(others))] if others else None


def checks_in_log(payloads: list, graph: Graph, devices: dict[str, str]) -> list[tuple[int, list[CheckItem], list[CheckItem]]]:
    """An audit of the stream: for each `ChecksCompleted` of a session's events (in log order), the
    step, the items it records and the items the stream derives from the log for that step.
    `devices`: every PNode's device, as its `PNodeJoined` said."""
    from computeall.protocol.events import (
        Allocated, ChecksCompleted, PNodeQuarantined, SessionCreated, VerificationSeeded,
    )

    config, seed, assignment, pnodes, quarantined = None, None, {}, [], set()
    out = []
    for p in payloads:
        if isinstance(p, SessionCreated):
            config = p.config
        elif isinstance(p, VerificationSeeded):
            seed = p.seed
        elif isinstance(p, Allocated):  # and Reallocated
            assignment, pnodes = {pl.vnode: pl.pnode for pl in p.placements}, p.pnodes
        elif isinstance(p, PNodeQuarantined):
            quarantined.add(p.pnode)
        elif isinstance(p, ChecksCompleted):
            recorded = [CheckItem(step=p.step, micro=c.micro, vnode=c.vnode, pnode=c.pnode, checker=c.checker,
                                  backward=c.backward) for c in p.checks]
            eligible = {q: devices[q] for q in pnodes if q not in quarantined}
            derived = checks_of_step(seed, p.step, config.verify, graph, config.micro_batches, assignment, eligible)
            out.append((p.step, recorded, derived))
    return out
