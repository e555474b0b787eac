"""bench/compression.py's `pseudo_grads` rows: what replicas send each other, and what it costs in loss.

Whole sessions on a real cluster (NATS, the services, two PNodes with one replica each, one thread
each), R = 2, the same seed, data and tokens for every method: the anchor sums fp32 gradients every
step; each method syncs diloco's pseudo-gradients its way. A row's bytes are what the replicas sent
each other over the whole session (`StepCompleted.reduce_bytes`, frame headers included) per step,
divided by the anchor's; its loss is the validation loss after the last step, divided by the
anchor's. Targets (issue 28), on tiny-gpt: at most 1/100 of the bytes, a loss within 3%. `--quick`
runs micro-gpt instead and only reports: the loss a sparse sync keeps depends on the model (on
micro-gpt the same setting is 4-5% above, docs/decisions.md).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from computeall.cli.data_upload import with_sent_data
from computeall.cli.embedded import running_cluster
from computeall.cli.follow import follow_session, start_session
from computeall.cli.session_view import session_events
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.events import StepCompleted, ValidationCompleted
from computeall.protocol.replica_sync import ReplicaSync, SparseCompression

from ..common import Bench, at_most

REPO = Path(__file__).resolve().parents[2]
NETWORKS = REPO / "examples" / "networks"
SHAKESPEARE = next((p / "shared" / "data" / "tinyshakespeare.txt" for p in REPO.parents
                    if (p / "shared" / "data" / "tinyshakespeare.txt").exists()), None)
BYTES_TARGET = 0.01  # of fp32 summed gradients' bytes per step
LOSS_TARGET = 1.03  # of summed gradients' validation loss


@dataclass(frozen=True)
class Method:
    name: str
    sync: ReplicaSync
    bounded: bool = True  # whether the targets apply (a reference row only reports)


# the sparse sync measured here and, for its speed over slow links, in bench/replicas.py's WAN lab rows:
# each replica decides its inner steps' clip itself, so no step waits for the orchestrator over a slow link
SPARSE = ReplicaSync(mode="diloco", inner_steps=4, overlap_steps=1, compression=SparseCompression(top_k=1 / 16),
                     inner_decisions="own")
METHODS = [
    Method("diloco H=4, dense int8 (reference)", ReplicaSync(mode="diloco", inner_steps=4, wire="int8"), bounded=False),
    Method("sparseloco H=4: top 1/16 per 4096, 2-bit, error feedback 0.95, overlap 1, own inner decisions", SPARSE),
]
ANCHOR = "R=2 fp32 gradients summed every step"


def corpus() -> list[str]:
    if SHAKESPEARE is not None:
        return [str(SHAKESPEARE)]
    from computeall.cli.default_corpus import stdlib_files

    return stdlib_files(1 << 20)


def session(network: str, steps: int, sync: ReplicaSync) -> SessionConfig:
    return SessionConfig(network_yaml=(NETWORKS / network).read_text(), data=DataConfig(files=corpus()), steps=steps,
                         micro_batches=2, replicas=2, seed=1, sync=sync, validate_every=steps, validation_batches=8,
                         min_pnodes=2)


async def _run(client, config: SessionConfig) -> tuple[float, float]:
    """(bytes between replicas per step, validation loss after the last step)."""
    sid, command_id = await start_session(client, config)
    outcome = await follow_session(client, sid, config.steps, None, False, command_id)
    if not outcome.ok:
        raise SystemExit(f"{config.sync}: {outcome.message}")
    events = [e.payload for _, e in await session_events(client, sid)]
    sent = sum(p.reduce_bytes for p in events if isinstance(p, StepCompleted))
    loss = next(p.loss for p in events if isinstance(p, ValidationCompleted) and p.step == config.steps)
    return sent / config.steps, loss


async def pseudo_grad_rows(bench: Bench, quick: bool) -> None:
    network, steps = ("micro-gpt.yaml", 300) if quick else ("tiny-gpt.yaml", 300)
    with tempfile.TemporaryDirectory(prefix="bench-compression-") as tmp:
        async with running_cluster(Path(tmp), pnodes=2) as (client, _):
            anchor = await with_sent_data(client, session(network, steps, ReplicaSync()),
                                          progress=False)  # uploaded once, then found
            anchor_bytes, anchor_loss = await _run(client, anchor)
            for method in METHODS:
                sent, loss = await _run(client, anchor.model_copy(update={"sync": method.sync}))
                bounded = method.bounded and not quick
                fields = dict(method=method.name, steps=steps, val_loss=loss, val_loss_ratio_vs_uncompressed=loss / anchor_loss,
                              anchor_val_loss=anchor_loss, network=network)
                bench.row(f"{network}, R=2, {steps} steps: {method.name}", "bytes/step between replicas", sent, ANCHOR,
                          anchor_bytes, at_most(BYTES_TARGET) if bounded else None,
                          direction="pseudo_grads", bytes_ratio_vs_fp32=sent / anchor_bytes, **fields)
                bench.row(f"{network}, R=2, {steps} steps: {method.name}, validation loss", "validation loss", loss,
                          f"{ANCHOR}: its validation loss", anchor_loss, at_most(LOSS_TARGET) if bounded else None,
                          direction="loss", **fields)
