"""The spot checks of one session, overlapping training.

After a step's `RunStep` replies (every PNode's ledger is in) the stream picks the items to check
and their hosts are told, with `ApplyStep`, to keep the material. Each check then runs as its own
task while later steps train: the host sends the material to the checker (PNode to PNode), the
checker recomputes and reports, and a failed check asks a third PNode. At step boundaries the
settled checks are recorded in step order (`ChecksCompleted`, and `VerificationFailed` for each
failure); checks more than `LAG` steps behind are waited for. A verdict raises `Quarantine`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from dataclasses import dataclass

from computeall.network import Graph
from computeall.network.ops import DATA_INPUTS, OPS
from computeall.protocol.events import CheckOutcome, ChecksCompleted, VerificationFailed, VerificationSeeded
from computeall.protocol.pnode_api import PNodeReply, Recompute, SendCheckMaterial
from computeall.protocol.verification import CheckItem, CheckReport, ItemDigests, KeepMaterial

from ..errors import PNodeFailure, Quarantine, SessionError
from ..placement import Placement
from ..pnodes import PNodeRegistry
from ..recorder import SessionRecorder
from ..session_pnodes import SessionPNodes
from .judge import Claim, judge
from .stream import checks_of_step, draw_seed, tiebreaker

log = logging.getLogger("computeall.orchestrator.verification")

LAG = 2  # a step's checks may run while this many later steps train
CHECK_TIMEOUT_S = 120.0


@dataclass
class _Check:
    item: CheckItem
    claim: Claim
    loss_scale: float
    task: asyncio.Task | None = None


@dataclass(frozen=True)
class _Settled:
    item: CheckItem
    claim: Claim
    outcome: str  # passed, failed, abandoned
    report: CheckReport | None = None
    third: str | None = None
    third_report: CheckReport | None = None
    quarantined: frozenset[str] = frozenset()


class SessionChecks:
    def __init__(self, recorder: SessionRecorder, pnodes: SessionPNodes, placement: Placement,
                 registry: PNodeRegistry, graph: Graph) -> None:
        self.recorder = recorder
        self.pnodes = pnodes
        self.placement = placement
        self.registry = registry
        self.graph = graph
        self._steps: dict[int, list[_Check]] = {}
        self._keep: dict[str, list[KeepMaterial]] = {}
        self._release: dict[str, list[str]] = defaultdict(list)

    @property
    def on(self) -> bool:
        config = self.recorder.state.config
        return config.verify.on and config.replay_of is None

    async def start(self) -> None:
        """Draw and record the stream's seed, once per session."""
        if self.on and self.recorder.state.verify_seed is None:
            await self.recorder.record(VerificationSeeded(seed=draw_seed()))

    # -- within a step ---------------------------------------------------------------------
    def pick(self, step: int, replies: list[PNodeReply], loss_scale: float) -> None:
        """After `RunStep`: the items of `step` to check, and what their hosts must keep."""
        self._keep = {}
        if not self.on:
            return
        state = self.recorder.state
        ledgers = {(e.micro, e.vnode): e for r in replies for e in (r.ledger or [])}
        items = checks_of_step(state.verify_seed, step, state.config.verify, self.graph, state.config.micro_batches,
                               self.placement.allocation.assignment, self.devices())
        self._steps[step] = [_Check(item, self._claim(item, ledgers), loss_scale) for item in items]
        for item in items:
            self._keep.setdefault(item.pnode, []).append(
                KeepMaterial(check_id=item.check_id, micro=item.micro, vnode=item.vnode, backward=item.backward))

    def apply_fields(self, pnode: str) -> dict:
        """`ApplyStep`'s verification fields for one PNode: what to keep, what to let go."""
        return {"keep": self._keep.get(pnode, []), "release": self._release.pop(pnode, [])}

    def launch(self, step: int) -> None:
        for check in self._steps.get(step, []):
            check.task = asyncio.ensure_future(self._run(check))

    # -- between steps -----------------------------------------------------------------------
    async def settle(self, step: int, wait_all: bool = False) -> None:
        """Record the checks of every step whose checks are done, in step order; wait for those of
        steps more than `LAG` before `step` (of all, with `wait_all`). `Quarantine` on a verdict."""
        for checked in sorted(self._steps):
            checks = self._steps[checked]
            if not wait_all and checked >= step - LAG and not all(c.task and c.task.done() for c in checks):
                return
            settled = [await c.task for c in checks if c.task]
            del self._steps[checked]
            for s in settled:
                self._release[s.item.pnode].append(s.item.check_id)
            await self._record(checked, settled)

    def cancel(self) -> None:
        """The PNodes are about to reload or roll back: their material goes, so do the checks."""
        for check in (c for checks in self._steps.values() for c in checks):
            if check.task:
                check.task.cancel()
        self._steps.clear()
        self._keep.clear()
        self._release.clear()

    def devices(self) -> dict[str, str]:
        """Who may check: the session's PNodes that are alive and not quarantined, with their devices."""
        quarantined = set(self.recorder.state.quarantined)
        return {hb.pnode: hb.device for hb in self.registry.live(include_leaving=True)
                if hb.pnode in self.placement.pnodes and hb.pnode not in quarantined}

    # -- one check ---------------------------------------------------------------------------
    def _claim(self, item: CheckItem, ledgers: dict[tuple[int, str], ItemDigests]) -> Claim:
        """What the host and its neighbours committed to for the item ("" where a ledger is silent)."""
        spec = self.graph.vnodes[item.vnode]
        missing = ItemDigests(micro=item.micro, vnode="")
        mine = ledgers.get((item.micro, item.vnode), missing)
        inputs = {n: ledgers.get((item.micro, n), missing).output or "" for n in spec.inputs if n not in DATA_INPUTS}
        grads = {}
        if item.backward and not OPS[spec.op].is_loss:
            grads = {c: ledgers.get((item.micro, c), missing).input_grads.get(item.vnode, "")
                     for c in self.graph.consumers(item.vnode)}
        result = ItemDigests(micro=item.micro, vnode=item.vnode, output=mine.output,
                             **({"input_grads": mine.input_grads, "param_grads": mine.param_grads} if item.backward else {}))
        return Claim(inputs=inputs, grads=grads, result=result)

    async def _run(self, check: _Check) -> _Settled:
        item = check.item
        try:
            report = await self._recompute(item, item.checker, check.loss_scale)
            if check.claim.agrees(report):
                return _Settled(item, check.claim, "passed", report)
        except (PNodeFailure, SessionError) as exc:
            log.warning("check %s abandoned: %s", item.check_id, exc)
            return _Settled(item, check.claim, "abandoned")
        third = tiebreaker(self.recorder.state.verify_seed, item, self.devices())
        try:
            third_report = await self._recompute(item, third, check.loss_scale) if third else None
        except (PNodeFailure, SessionError) as exc:
            log.warning("check %s: the tie-breaker %s could not recompute it: %s", item.check_id, third, exc)
            third, third_report = None, None
        verdict = judge(check.claim, item.pnode, item.checker, report, third, third_report)
        return _Settled(item, check.claim, "failed", report, third, third_report, frozenset(verdict))

    async def _recompute(self, item: CheckItem, checker: str, loss_scale: float) -> CheckReport:
        sid = self.recorder.state.id
        calls = self.pnodes.calls
        send = calls.one(item.pnode, SendCheckMaterial(session_id=sid, check_id=item.check_id, to=checker),
                         timeout=CHECK_TIMEOUT_S)
        host = self.registry.heartbeat(item.pnode)
        run = calls.one(checker, Recompute(session_id=sid, item=item.model_copy(update={"checker": checker}),
                                           loss_scale=loss_scale, threads=host.threads if host else None),
                        timeout=CHECK_TIMEOUT_S)
        tasks = [asyncio.ensure_future(send), asyncio.ensure_future(run)]
        try:
            _, reply = await asyncio.gather(*tasks)
        finally:
            for task in tasks:  # one failed: the other waits for nothing
                task.cancel()
        if reply.check is None:
            raise SessionError(f"pnode {checker} answered a Recompute without a report")
        return reply.check

    async def _record(self, step: int, settled: list[_Settled]) -> None:
        outcomes = [CheckOutcome(micro=s.item.micro, vnode=s.item.vnode, pnode=s.item.pnode, checker=s.item.checker,
                                 backward=s.item.backward, outcome=s.outcome) for s in settled]
        if outcomes:
            await self.recorder.record(ChecksCompleted(step=step, checks=outcomes))
        failed = [s for s in settled if s.outcome == "failed"]
        for s in failed:
            log.error("session %s: check %s failed; quarantining %s", self.recorder.state.id, s.item.check_id,
                      ", ".join(sorted(s.quarantined)))
            await self.recorder.record(VerificationFailed(
                step=step, micro=s.item.micro, vnode=s.item.vnode, pnode=s.item.pnode, checker=s.item.checker,
                backward=s.item.backward, claimed=s.claim.result, recomputed=s.report.result,
                material_ok=s.claim.material_ok(s.report), tiebreaker=s.third,
                tiebreak=s.third_report.result if s.third_report else None,
                tiebreak_material_ok=s.claim.material_ok(s.third_report) if s.third_report else None,
                quarantined=sorted(s.quarantined),
            ))
        quarantined = sorted({p for s in failed for p in s.quarantined})
        if quarantined:
            first = failed[0].item
            raise Quarantine(quarantined, step, f"step {step}: recomputing {first.vnode} (micro-batch {first.micro}) of "
                                                f"{first.pnode} on {first.checker} gave other results")
