"""Simulated PNodes in bulk (`computeall pnode --simulate`): credentials, processes, a network to match.

`swarm_services` issues one credential per simulated PNode (the server reloads its configuration
once) and returns the supervisor's specs: `processes` OS processes, each running its share of the
PNodes, each PNode with its own identity and connection. Killing one process loses its PNodes at
once, as a machine going down would. Used by the swarm test and `bench/swarm.py`.
"""

from __future__ import annotations

from pathlib import Path

from .nats_cluster import NatsCluster
from .supervisor import ServiceSpec

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "networks" / "micro-gpt.yaml"


def micro_gpt(blocks: int) -> str:
    """examples/networks/micro-gpt.yaml with `blocks` blocks: 3 + 6 x blocks VNodes."""
    text = EXAMPLE.read_text()
    return text.replace("count: 2", f"count: {blocks}").replace("inputs: [b1.res2]", f"inputs: [b{blocks - 1}.res2]")


def swarm_names(pnodes: int) -> list[str]:
    return [f"sim-{i:03d}" for i in range(pnodes)]


def swarm_services(server: NatsCluster, pnodes: int, processes: int, memory: str = "1GiB",
                   flops: float = 1e12) -> list[ServiceSpec]:
    """`pnodes` simulated PNodes over `processes` processes (named swarm-0, swarm-1, ...)."""
    files = server.credential_files("pnode", swarm_names(pnodes))
    specs = []
    for i in range(processes):
        mine = [str(f) for f in files[i::processes]]
        if mine:
            args = ["--simulate", "--memory", memory, "--flops", str(flops), "--credentials", *mine]
            specs.append(ServiceSpec(f"swarm-{i}", "pnode", args, own_credential=False))
    return specs
