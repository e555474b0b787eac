"""Replicas over shaped links, for bench/replicas.py: sessions in the WAN lab (docs/wan-lab.md).

- `lan` (1 Gbit/s, 1 ms): R = 1 on one lab node against R = 2 on two, each PNode on its own core
  behind its own link, so the replicas' sums cross two shaped links: the scaling ratio as on a LAN.
- `home` (20 Mbit/s, 50 ms): R = 2 summing gradients every step against R = 2 diloco, on two nodes:
  tokens/s and the bytes the replicas send each other per step.
- the sparse, overlapped diloco sync (`bench/compression_rows/pseudo_grads.SPARSE`) at `home`
  against the same at `loopback` (unshaped): how much of its speed a slow link takes, target >= 0.95.

Every session runs whole: NATS and the services in the root namespace, one PNode per lab node
(`computeall_run.run_session`). A step's time is the interval between two recorded steps, every
overhead included; the figures are means over the measured steps (a diloco outer step comes once
per round, a median would hide it). The `lan` pair runs `rounds` times, R = 1 and R = 2 in turn:
this machine is shared, and its speed drifts by more than 10% within the hour, which one R = 1
run followed by one R = 2 run would read as scaling. The sparse sync's loopback and home runs take
turns `rounds` times for the same reason (one pair of them read 0.92 to 0.99 from run to run).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
from pathlib import Path

from computeall.cli.data_upload import with_sent_data
from computeall.cli.embedded import running_cluster
from computeall.protocol.config import SessionConfig
from computeall.protocol.replica_sync import ReplicaSync

from ..compression_rows.pseudo_grads import SPARSE
from .computeall_run import Cloud, run_session
from .lab import WanLab
from .netns import LabUnavailable, check_available


def lab_rows(config: SessionConfig, steps: int, warmup: int, inner_steps: int, rounds: int) -> tuple[dict, ...] | str:
    """The lab's measurements (lan R=1 and R=2; home summed, diloco; sparse diloco at loopback and home),
    or why the lab cannot run here."""
    try:
        check_available()
    except LabUnavailable as exc:
        return str(exc)
    with tempfile.TemporaryDirectory(prefix="bench-replicas-lab-") as directory:
        return asyncio.run(_rows(Path(directory), config, steps, warmup, inner_steps, rounds))


async def _rows(directory: Path, config: SessionConfig, steps: int, warmup: int, inner_steps: int,
                rounds: int) -> tuple[dict, ...]:
    diloco = ReplicaSync(mode="diloco", inner_steps=inner_steps)
    async with running_cluster(directory, pnodes=0) as cloud:  # NATS and the services, no PNodes
        client, _ = cloud
        config = await with_sent_data(client, config.model_copy(update={"steps": steps + warmup + 1}),
                                      progress=False)
        ones, twos = [], []
        for _ in range(rounds):
            ones.append(await _measure(cloud, "lan", 1, config, warmup))
            twos.append(await _measure(cloud, "lan", 2, config.model_copy(update={"replicas": 2}), warmup))
        one, two = pooled(ones, statistics.mean), pooled(twos, statistics.mean)
        summed = await _measure(cloud, "home", 2, config.model_copy(update={"replicas": 2}), warmup)
        averaged = await _measure(cloud, "home", 2, config.model_copy(update={"replicas": 2, "sync": diloco}), warmup)
        sparse = config.model_copy(update={"replicas": 2, "sync": SPARSE})
        nears, fars = [], []
        for _ in range(rounds):  # in turn, as the lan pair: one link's run against the other's, the drift shared
            nears.append(await _measure(cloud, "loopback", 2, sparse, warmup))
            fars.append(await _measure(cloud, "home", 2, sparse, warmup))
        near, far = pooled(nears, statistics.mean), pooled(fars, statistics.mean)
    return one, two, summed, averaged, near, far


def pooled(runs: list[dict], average=statistics.median) -> dict:
    """Several runs of one setting as one row: `average` (median or mean) over all their steps."""
    key = f"{average.__name__}_step_s"
    times = [t for r in runs for t in r["step_times_s"]]
    step_s = average(times)
    return {**runs[0], "runs": len(runs), "step_times_s": times, key: step_s,
            "tokens_per_s": runs[0]["tokens_per_s"] * runs[0][key] / step_s,
            "reduce_bytes_per_step": statistics.mean(r["reduce_bytes_per_step"] for r in runs),
            "final_loss": [r["final_loss"] for r in runs]}


async def _measure(cloud: Cloud, profile: str, nodes: int, config: SessionConfig, warmup: int) -> dict:
    with WanLab(profile, nodes=nodes) as lab:
        run = await run_session(cloud, lab, config)
    intervals = run.step_intervals_s[warmup:]  # interval i: from step i's record to step i+1's
    measured = run.steps[warmup + 1:]
    step_s = statistics.mean(intervals)
    return {"profile": profile, "replicas": config.replicas, "sync": config.sync.mode, "step_times_s": intervals,
            "mean_step_s": step_s, "tokens_per_s": measured[0].tokens / step_s,
            "reduce_bytes_per_step": statistics.mean(s.reduce_bytes for s in measured),
            "estimated_step_s": run.estimated_step_s, "final_loss": run.steps[-1].loss}
