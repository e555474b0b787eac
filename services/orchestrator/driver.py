"""Drives one session: data, allocation, plans, then step after step, every outcome an event."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from pathlib import Path

import nats.errors
from nats.aio.client import Client as NATS
from pydantic import BaseModel

from computeall.network import Graph, NetworkError, load_network
from computeall.protocol.dataset_api import CreateDataset
from computeall.protocol.dataset_client import DatasetError, create_dataset, get_dataset
from computeall.protocol.eventlog import ConcurrencyError, EventLog
from computeall.protocol.events import (
    Allocated,
    EdgeTraffic,
    EventEnvelope,
    SessionCompleted,
    SessionFailed,
    StepCompleted,
    VNodePlacement,
)
from computeall.protocol.pnode_api import ApplyStep, BatchSource, LoadPlan, PNodeReply, RunStep, Unload
from computeall.protocol.subjects import Subjects

from .allocator import AllocationError, PNodeCapacity, allocate
from .pnodes import PNodeRegistry
from .session import SessionState

log = logging.getLogger("computeall.orchestrator.driver")


class SessionError(RuntimeError):
    """The session cannot go on; the message says why and is recorded as `SessionFailed`."""


class SessionDriver:
    def __init__(
        self,
        nc: NATS,
        subjects: Subjects,
        eventlog: EventLog,
        registry: PNodeRegistry,
        state: SessionState,
        pnode_wait_s: float = 120.0,
        request_timeout_s: float = 600.0,
    ) -> None:
        self.nc = nc
        self.subjects = subjects
        self.eventlog = eventlog
        self.registry = registry
        self.state = state
        self.pnode_wait_s = pnode_wait_s
        self.request_timeout_s = request_timeout_s

    async def record(self, payload: BaseModel) -> None:
        event = EventEnvelope(actor="orchestrator", session_id=self.state.id, payload=payload)
        seq = await self.eventlog.append_session_event(event, self.state.last_seq)
        self.state.apply(event, seq)

    async def run(self) -> None:
        pnodes: list[str] = []
        try:
            graph, dataset = await self._prepare()
            pnodes = await self._allocate_and_load(graph, dataset)
            await self._train(pnodes)
            await self.record(SessionCompleted(steps=self.state.next_step, final_loss=self.state.last_loss))
            log.info("session %s completed at loss %.4f", self.state.id, self.state.last_loss or float("nan"))
        except SessionError as exc:
            log.error("session %s failed: %s", self.state.id, exc)
            await self.record(SessionFailed(reason=str(exc)))
        except (asyncio.CancelledError, ConcurrencyError):
            raise
        except Exception as exc:  # a bug must still end the session visibly, never leave it hanging
            log.exception("session %s: internal error", self.state.id)
            await self.record(SessionFailed(reason=f"internal error: {type(exc).__name__}: {exc}"))
        finally:
            for pnode in pnodes:
                try:
                    await self._request(pnode, Unload(session_id=self.state.id), timeout=10.0)
                except SessionError:
                    pass

    async def _prepare(self) -> tuple[Graph, str]:
        config = self.state.config
        try:
            spec = load_network(config.network_yaml)
        except NetworkError as exc:
            raise SessionError(str(exc)) from None
        if config.precision:
            for v in spec.vnodes:
                v.precision = config.precision
        if config.data.dataset:
            manifest = await self._dataset_call(
                lambda: get_dataset(self.nc, self.subjects, config.data.dataset, timeout=30.0)
            )
        else:
            request = CreateDataset(
                name=_files_dataset_name(config.data.files, spec.vocab_size),
                files=config.data.files,
                vocab_size=spec.vocab_size,
                if_exists="reuse",
            )
            manifest = await self._dataset_call(
                lambda: create_dataset(self.nc, self.subjects, request, timeout=3600.0)
            )
        if manifest["vocab_size"] > spec.vocab_size:
            raise SessionError(
                f"dataset {manifest['name']} has {manifest['vocab_size']} tokens but network {spec.name} "
                f"embeds only {spec.vocab_size}; raise the network's vocab_size"
            )
        return Graph(spec), manifest["name"]

    async def _dataset_call(self, call, wait_s: float = 60.0) -> dict:
        """Call the dataset service, waiting for it to come up (it may start after us)."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                return await call()
            except DatasetError as exc:
                raise SessionError(f"dataset: {exc}") from None
            except nats.errors.NoRespondersError:
                if time.monotonic() > deadline:
                    raise SessionError(
                        f"no dataset service answered for {wait_s:.0f}s; is it running? (`computeall status`)"
                    ) from None
                await asyncio.sleep(0.5)
            except (nats.errors.TimeoutError, asyncio.TimeoutError):
                raise SessionError("the dataset service did not answer in time; see its log") from None

    async def _allocate_and_load(self, graph: Graph, dataset: str) -> list[str]:
        config = self.state.config
        deadline = time.monotonic() + self.pnode_wait_s
        while len(self.registry.live()) < config.min_pnodes:
            if time.monotonic() > deadline:
                raise SessionError(
                    f"waited {self.pnode_wait_s:.0f}s for {config.min_pnodes} PNodes, {len(self.registry.live())} "
                    "are live; start more with `computeall pnode --nats URL`"
                )
            await asyncio.sleep(0.2)
        live = self.registry.live()
        try:
            allocation = allocate(
                graph,
                [PNodeCapacity(hb.pnode, hb.memory_bytes) for hb in live],
                config.batch_size,
                config.micro_batch_size,
            )
        except AllocationError as exc:
            raise SessionError(str(exc)) from None
        sent_once = {}
        for e in graph.edges:
            if e.src in allocation.assignment and allocation.assignment[e.src] != allocation.assignment[e.dst]:
                sent_once[(e.src, e.dst)] = graph.edge_bytes_per_step(e, config.batch_size)
        await self.record(
            Allocated(
                placements=[
                    VNodePlacement(
                        vnode=v, op=graph.vnodes[v].op, pnode=allocation.assignment[v],
                        params=graph.param_count(v), precision=graph.vnodes[v].precision,
                    )
                    for v in graph.order
                ],
                edges=[EdgeTraffic(src=s, dst=d, bytes_per_step=b) for (s, d), b in sent_once.items()],
                pnodes=[s.pnode for s in allocation.stages],
                bytes_across_per_step=allocation.bytes_across_per_step,
            )
        )
        plan_pnodes = [s.pnode for s in allocation.stages]
        plan = dict(
            session_id=self.state.id,
            network=graph.spec.model_dump(),
            assignment=allocation.assignment,
            seed=config.seed,
            batches=BatchSource(
                dataset=dataset, split=config.data.split, seed=config.seed,
                micro_batch_size=config.micro_batch_size, context=graph.spec.context,
            ),
            micro_batches=config.micro_batches,
            optimizer=config.optimizer,
        )
        await self._all(plan_pnodes, lambda p: LoadPlan(**plan), timeout=120.0)
        return plan_pnodes

    async def _train(self, pnodes: list[str]) -> None:
        config = self.state.config
        while self.state.next_step < config.steps:
            step = self.state.next_step
            lr = config.lr.at(step, config.steps)
            t0 = time.monotonic()
            replies = await self._all(pnodes, lambda p: RunStep(session_id=self.state.id, step=step))
            finite = all(r.grads_finite for r in replies)
            await self._all(pnodes, lambda p: ApplyStep(session_id=self.state.id, step=step, lr=lr, skip=not finite))
            elapsed = time.monotonic() - t0
            tokens = sum(r.tokens for r in replies)
            loss = sum(r.loss_sum or 0.0 for r in replies) / max(1, tokens)
            compute = sum(r.compute_s for r in replies)
            await self.record(
                StepCompleted(
                    step=step, loss=loss, tokens=tokens, step_time_s=elapsed, lr=lr,
                    compute_s=compute, wait_s=max(0.0, elapsed - compute),
                )
            )

    async def _all(self, pnodes: list[str], make, timeout: float | None = None) -> list[PNodeReply]:
        return list(await asyncio.gather(*(self._request(p, make(p), timeout) for p in pnodes)))

    async def _request(self, pnode: str, request: BaseModel, timeout: float | None = None) -> PNodeReply:
        try:
            msg = await self.nc.request(
                self.subjects.pnode_ctl(pnode),
                request.model_dump_json().encode(),
                timeout=timeout or self.request_timeout_s,
            )
        except Exception as exc:  # nats timeout / no responders
            raise SessionError(f"pnode {pnode} did not answer {request.type}: {type(exc).__name__}") from None
        reply = PNodeReply.model_validate_json(msg.data)
        if not reply.ok:
            raise SessionError(f"pnode {pnode} failed {request.type}: {reply.error}")
        return reply


def _files_dataset_name(files: list[str], vocab_size: int) -> str:
    """A stable name for 'these files with this vocabulary', so a rerun reuses the dataset."""
    key = "\n".join(sorted(str(Path(f).resolve()) for f in files)) + f"\n{vocab_size}"
    return "files-" + hashlib.blake2b(key.encode(), digest_size=6).hexdigest()
