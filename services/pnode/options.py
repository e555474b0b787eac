"""The PNode's command-line options, without importing torch (the CLI lists them cheaply)."""

from __future__ import annotations

import argparse

import psutil

from computeall.protocol.bus import add_bus_arguments

from computeall.protocol.faults import FaultSpec
from computeall.protocol.secret_args import JOIN


def fault_spec(text: str) -> FaultSpec:
    try:
        return FaultSpec.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def share_of_ram(processes_on_machine: int) -> int:
    """What a PNode offers unless told: its share of the machine's RAM."""
    return psutil.virtual_memory().total // max(1, processes_on_machine)


def add_options(p: argparse.ArgumentParser) -> None:
    add_bus_arguments(p)
    JOIN.add_to(p.add_mutually_exclusive_group(),
                "join with an invite from `computeall invite pnode` (it holds the servers, the CA and the credential)")
    p.add_argument("--name", default=None, help="PNode id (default: the credential's name, else host-pid)")
    p.add_argument("--memory", default=None, help="memory this PNode offers, e.g. 4GiB (default: a share of RAM)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, mps")
    p.add_argument("--processes-on-machine", type=int, default=1, help="PNodes sharing this machine's cores")
    p.add_argument("--step-deadline", type=float, default=600.0, help="seconds a step may wait for its inputs")
    p.add_argument("--prefix", default=None, help="subject prefix (default ca)")
    p.add_argument("--fault", type=fault_spec, default=None, metavar="corrupt:P|mute:REQUEST[@STEP]",
                   help="TESTING ONLY: corrupt:P perturbs one value in a share P of this PNode's outputs and gradients "
                        "(to see spot checks catch it; docs/verification.md); mute:RunStep@3 accepts every RunStep "
                        "from step 3 on and never answers, heartbeating all along (to see it replaced)")
    p.add_argument("--data-dir", default=None, help="where to find cluster.json when --nats is not given")
    sim = p.add_argument_group("simulation (no torch: modelled compute, placeholder tensors; see docs/operations.md)")
    sim.add_argument("--simulate", action="store_true", help="run simulated PNodes that speak the real protocol")
    sim.add_argument("--credentials", nargs="+", default=None, metavar="FILE",
                     help="with --simulate: one simulated PNode per credential file, each its own identity and connection")
    sim.add_argument("--flops", type=float, default=1e12, help="with --simulate: the FLOP/s each simulated PNode models")
    sim.add_argument("--full-tensors", action="store_true",
                     help="with --simulate: send tensors' real byte counts (zeros) instead of small placeholders")
