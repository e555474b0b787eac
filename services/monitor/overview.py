"""What a session was created with, for the overview at the top of its page.

Read from its recorded config with the protocol's defaults filled in (the config is stored as the
client sent it, so a field left out is the default, which only `SessionConfig` knows), and its
network as the session places it (`computeall.network.session_graph`: precision and wire as the
config overrides them, heads fused when the config fuses them). Parsing a network is CPU work: the
resolver runs `overview` off the event loop, and the network's summary is cached by its inputs.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ValidationError

from computeall.network import NetworkError
from computeall.network.session_graph import session_graph
from computeall.protocol.config import SessionConfig


class ValueCount(BaseModel):
    value: str
    vnodes: int


class NetworkSummary(BaseModel):
    name: str
    vnodes: int
    parameters: int
    vocab_size: int
    context: int
    precision: list[ValueCount]  # most VNodes first
    wire: list[ValueCount]


class SessionOverview(BaseModel):
    network: NetworkSummary | None
    network_problem: str | None = None
    data: list[str]  # a dataset's name, or the files it is made from
    split: str
    validation_split: str
    steps: int
    batch_size: int
    micro_batches: int
    micro_batch_size: int
    tokens_per_step: int | None
    seed: int
    lr_peak: float
    lr_warmup_steps: int
    lr_min: float
    betas: list[float]
    weight_decay: float
    no_decay: list[str]
    grad_clip: float
    replicas: str
    sync: str
    sync_inner_steps: int | None
    schedule: str
    loss_scaling: str
    verify_rate: float
    init_from: str | None


def overview(config: dict[str, Any] | None) -> SessionOverview | None:
    """None for a config this build cannot read (the page then shows the raw config)."""
    if config is None:
        return None
    try:
        c = SessionConfig.model_validate(config)
    except ValidationError:
        return None
    network, problem = _network(c.network_yaml, c.precision, c.wire, c.fuse_heads)
    data = [f"dataset {c.data.dataset}"] if c.data.dataset else [*c.data.files, *(f"uploaded {u.name}" for u in c.data.uploads)]
    return SessionOverview(
        network=network, network_problem=problem, data=data, split=c.data.split,
        validation_split=c.data.validation_split, steps=c.steps, batch_size=c.batch_size,
        micro_batches=c.micro_batches, micro_batch_size=c.micro_batch_size,
        tokens_per_step=c.batch_size * network.context if network else None, seed=c.seed,
        lr_peak=c.lr.peak, lr_warmup_steps=c.lr.warmup_steps, lr_min=c.lr.min_lr, betas=list(c.optimizer.betas),
        weight_decay=c.optimizer.weight_decay, no_decay=list(c.optimizer.no_decay), grad_clip=c.grad_clip,
        replicas=str(c.replicas), sync=c.sync.mode, sync_inner_steps=c.sync.inner_steps if c.sync.mode == "diloco" else None,
        schedule=c.pipeline.schedule, loss_scaling=c.loss_scale.mode, verify_rate=c.verify.rate,
        init_from=c.init_from.describe() if c.init_from else None,
    )


@lru_cache(maxsize=64)
def _network(network_yaml: str, precision: str | None, wire: str | None,
             fuse_heads: bool) -> tuple[NetworkSummary | None, str | None]:
    """The network as placed, or why it cannot be read; by the config's fields that shape it (hashable)."""
    shaping = SessionConfig.model_construct(network_yaml=network_yaml, precision=precision, wire=wire)
    try:
        graph, _ = session_graph(shaping, fuse_heads)
    except NetworkError as exc:
        return None, str(exc)
    vnodes = graph.spec.vnodes
    return NetworkSummary(
        name=graph.spec.name, vnodes=len(vnodes), parameters=sum(graph.param_count(v.id) for v in vnodes),
        vocab_size=graph.spec.vocab_size, context=graph.spec.context,
        precision=_counted(v.precision for v in vnodes), wire=_counted(graph.wire(v.id) for v in vnodes),
    ), None


def _counted(values) -> list[ValueCount]:
    return [ValueCount(value=v, vnodes=n) for v, n in Counter(values).most_common()]
