"""Before the first step: the network as this session runs it, its dataset, and enough live PNodes.

At create, `check_data` looks (cheaply) whether the data could be prepared, so that a session whose
dataset is missing or not the owner's, or whose uploads are not there, is refused with the reason
instead of being created and failing later."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

import nats.errors
from nats.aio.client import Client as NATS

from computeall.network import Graph
from computeall.protocol.bus_failover import PATIENCE_S, Patience
from computeall.protocol.config import DataConfig
from computeall.protocol.dataset_api import CheckData, CreateDataset, files_dataset_name
from computeall.protocol.dataset_client import (
    DatasetBusError,
    DatasetError,
    check_data as ask_check_data,
    create_dataset,
    get_dataset,
)
from computeall.protocol.session_state import Rejected, SessionState
from computeall.protocol.subjects import Subjects

from .errors import SessionError
from .network_jobs import NetworkJobs
from .pnodes import PNodeRegistry

log = logging.getLogger("computeall.orchestrator.preparation")

CHECK_TIMEOUT_S = 10.0  # the dataset service looks at names and sizes only
CHECK_WAIT_S = 10.0  # for a dataset service that is starting; without one the session is created unchecked


@dataclass(frozen=True)
class Prepared:
    graph: Graph  # after the session's precision override and head fusion: what the allocator places
    dataset: str  # the name the PNodes fetch batches from
    tokenizer_digest: str  # of the dataset's tokenizer file: which token id means which text


async def prepare(state: SessionState, nc: NATS, subjects: Subjects, jobs: NetworkJobs) -> Prepared:
    graph, lines = await jobs.session_graph(state)  # off the event loop
    for line in lines:
        log.info("session %s: %s", state.id, line)
    spec = graph.spec
    config = state.config
    owner = state.owner  # the dataset service is asked as the session's owner: theirs, or a public one
    if config.data.dataset:
        manifest = await dataset_call(lambda: get_dataset(nc, subjects, owner, config.data.dataset, timeout=30.0))
    else:
        request = CreateDataset(
            name=files_dataset_name(config.data, spec.vocab_size, owner),
            files=config.data.files,
            uploads=config.data.uploads,
            vocab_size=spec.vocab_size,
            if_exists="reuse",
        )
        manifest = await dataset_call(lambda: create_dataset(nc, subjects, owner, request, timeout=3600.0))
    if manifest["vocab_size"] > spec.vocab_size:
        raise SessionError(
            f"dataset {manifest['name']} has {manifest['vocab_size']} tokens but network {spec.name} "
            f"embeds only {spec.vocab_size}; raise the network's vocab_size"
        )
    return Prepared(graph, manifest["name"], manifest["tokenizer"]["digest"])


async def check_data(nc: NATS, subjects: Subjects, owner: str, data: DataConfig) -> None:
    """At create: `Rejected` with the dataset service's reason when `owner`'s session could not be prepared
    from `data` (asked as the owner, so another's private dataset reads as a missing one). When no dataset
    service answers in time the session is created, and preparing it waits for one and finds out."""
    deadline = time.monotonic() + CHECK_WAIT_S
    while True:
        try:
            return await ask_check_data(nc, subjects, owner, CheckData(data=data), timeout=CHECK_TIMEOUT_S)
        except DatasetBusError as exc:  # the bus failed under the service: no verdict on the data
            log.warning("the dataset service could not check %s's data (%s); the session is created unchecked", owner, exc)
            return
        except DatasetError as exc:
            raise Rejected(f"data: {exc}") from None
        except nats.errors.NoRespondersError:
            if time.monotonic() > deadline:
                log.warning("no dataset service to check %s's data; the session is created unchecked", owner)
                return
            await asyncio.sleep(0.5)
        except (nats.errors.TimeoutError, asyncio.TimeoutError):
            log.warning("the dataset service did not check %s's data in time; the session is created unchecked", owner)
            return


async def dataset_call(call: Callable[[], Awaitable[dict]], wait_s: float = 60.0, patience_s: float = PATIENCE_S) -> dict:
    """Call the dataset service, waiting for it to come up (it may start after us). A failure of the bus under
    it (a failover) is tried again for the bus's patience, then `BusUnavailable`: never the session's fault."""
    deadline = time.monotonic() + wait_s
    patience = Patience("asking the dataset service", patience_s)
    while True:
        try:
            return await call()
        except DatasetBusError as exc:
            await patience.wait(exc)
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


async def wait_for_pnodes(state: SessionState, registry: PNodeRegistry, wait_s: float) -> None:
    """At the first start, for `min_pnodes`; when taking a session up again, a few seconds for the
    PNodes it used before that this orchestrator has not heard of yet (after a restart they register
    again), then whatever is live. One it heard and that went silent is lost (a standby taking over from
    an orchestrator whose machine died with some of them): it is not waited for."""
    if state.pnodes:
        unheard = {p for p in state.pnodes if registry.heartbeat(p) is None}
        deadline = time.monotonic() + 2 * registry.timeout_s
        while time.monotonic() < deadline and not unheard <= {hb.pnode for hb in registry.live()}:
            await asyncio.sleep(0.2)
        want = 1
    else:
        want = state.config.min_pnodes
    deadline = time.monotonic() + wait_s
    while len(registry.live()) < want:
        if time.monotonic() > deadline:
            raise SessionError(
                f"waited {wait_s:.0f}s for {want} PNodes, {len(registry.live())} are live; "
                "start more with `computeall pnode --nats URL`"
            )
        await asyncio.sleep(0.2)
