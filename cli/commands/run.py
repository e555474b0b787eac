"""`computeall run NETWORK --data FILES --steps N --pnodes K`: one training run on an embedded cluster."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from pathlib import Path
from typing import get_args

from pydantic import ValidationError

from computeall.network import NetworkError, load_network_file
from computeall.protocol.config import DataConfig, LrSchedule, OptimizerConfig, OptimizerState, SessionConfig, VerifyConfig
from computeall.protocol.faults import FaultSpec, parse_assignment
from computeall.protocol.replica_sync import ReplicaSync, SparseCompression
from computeall.protocol.sampling import SamplingConfig
from computeall.protocol.sizes import parse_size
from computeall.protocol.wire import Wire

from ..data_upload import with_sent_data
from ..default_corpus import stdlib_files
from ..embedded import running_cluster
from ..errors import UserError
from ..follow import follow_session, start_session
from ..supervisor import add_processes_on_machine
from ..tensorboard_log import add_tensorboard_argument


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="train a network on an embedded cluster and exit")
    p.add_argument("network", help="network YAML, e.g. examples/networks/tiny-gpt.yaml")
    add_training_args(p)
    p.add_argument("--pnodes", type=int, default=1, help="PNode processes to start (default 1)")
    p.add_argument("--memory", type=_size, default=None, metavar="SIZE",
                   help="memory each PNode offers, e.g. 5GiB (default: its share of the RAM); a network larger "
                        "than one offer is spread over several PNodes")
    add_processes_on_machine(p)
    p.add_argument("--metrics-out", type=Path, default=None, help="write one JSON object per step here")
    add_tensorboard_argument(p)
    p.add_argument("--data-dir", default=None, help="where the embedded cluster keeps its files (default: a temp dir)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--listen", metavar="HOST:PORT", default=None,
                   help="serve NATS here with TLS, as `up --listen` does (default: 127.0.0.1, plain)")
    p.add_argument("--fault", action="append", default=[], metavar="PNODE=corrupt:P|PNODE=mute:REQUEST[@STEP]",
                   help="TESTING ONLY: make PNode PNODE (pnode-0, pnode-1, ...) perturb a share P of its results, "
                        "to watch spot checks catch it (with --verify-rate), or never answer a kind of request")
    p.set_defaults(func=lambda args: asyncio.run(run(args)))


def add_training_args(p: argparse.ArgumentParser) -> None:
    """Hyperparameters shared by `run` and `session create`."""
    p.add_argument("--data", nargs="+", default=None, help="text files or folders (default: Python's stdlib source)")
    p.add_argument("--dataset", default=None, help="a dataset created with `computeall dataset create`")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=8, help="sequences per step")
    p.add_argument("--micro-batches", type=int, default=1)
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument("--warmup", type=int, default=10, help="warmup steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default=None)
    defaults = SessionConfig.model_fields
    p.add_argument("--grad-clip", type=float, default=defaults["grad_clip"].default,
                   help="clip the global gradient norm to this (default %(default)s); 0 turns clipping off")
    p.add_argument("--update-ratio-every", type=int, default=defaults["update_ratio_every"].default,
                   help="record each block's update-to-weight ratio every N steps (default %(default)s); 0 never")
    p.add_argument("--optimizer-state", choices=list(get_args(OptimizerState)), default=OptimizerConfig().state,
                   help="Adam's state on the PNodes: fp32 (default), or int8: 8-bit moments and a bf16 weight's "
                        "master as its low half, at most 10 bytes per bf16 parameter with its weight and gradient")
    p.add_argument("--wire", choices=list(get_args(Wire)), default=None,
                   help="how activations and gradients travel between VNodes, for VNodes that name none "
                        "(default: the network's `defaults.wire`, else fp32: uncompressed)")
    p.add_argument("--stages", type=_stages, default="auto", metavar="N|auto",
                   help="pipeline stages per replica: auto (default) takes those that make steps faster by the "
                        "allocator's estimate, the other PNodes become replicas (--replicas auto) or standbys; "
                        "N spreads the network over N PNodes. Either way the same seed gives the same bits")
    p.add_argument("--schedule", choices=["1f1b", "gpipe"], default="1f1b", help="each PNode's order of work (default 1f1b)")
    p.add_argument("--in-flight", type=int, default=None,
                   help="1f1b: micro-batches a PNode holds at once (default: decided at allocation, enough to cover "
                        "the links' measured round trips and at least twice the pipeline's segments)")
    p.add_argument("--no-fuse-heads", dest="fuse_heads", action="store_false",
                   help="keep per-head attention VNodes apart (default: fuse each block's heads into one VNode)")
    p.add_argument("--replicas", type=_replicas, default=1, metavar="N|auto",
                   help="data-parallel replicas of the pipeline: a power of two dividing --micro-batches, or auto "
                        "(as many as the live PNodes hold); the same seed gives the same bits for any N")
    p.add_argument("--sync", choices=["gradients", "diloco"], default="gradients",
                   help="how replicas stay together: sum gradients every step (default), or diloco "
                        "(local steps, then an outer step on averaged pseudo-gradients: fewer bytes, other bits)")
    p.add_argument("--inner-steps", type=int, default=20, help="diloco: local steps between outer steps (default 20)")
    p.add_argument("--sparse-sync", action="store_true",
                   help="diloco: send each outer sync sparse, as SparseLoCo does (the top 1/64 of every chunk of "
                        "4096 values, a sign and one of two magnitudes each, the rest kept for later: ~150x fewer bytes)")
    p.add_argument("--overlap-steps", type=int, default=0, metavar="N",
                   help="diloco: inner steps that run while an outer sync travels (default 0: wait for it)")
    p.add_argument("--inner-decisions", choices=["shared", "own"], default="shared",
                   help="diloco: who decides an inner step's skip and clip: the orchestrator from replica 0's norm "
                        "(shared, default), or each replica from its own on its PNodes (own: no step waits for the "
                        "orchestrator over a slow link)")
    p.add_argument("--data-start-step", type=int, default=0, metavar="N",
                   help="step k trains on the batch of step N+k: go on with another session's data (same data, seed, batch size)")
    p.add_argument("--checkpoint-every", type=int, default=0, help="steps between checkpoints (default: only at the end)")
    p.add_argument("--validate-every", type=int, default=0, help="steps between validations (default: never)")
    p.add_argument("--sample-every", type=int, default=0, help="steps between text samples of the model (default: never)")
    p.add_argument("--sample-prompt", action="append", default=None, dest="sample_prompts",
                   help="a prompt the samples continue (repeat for several; default: a new document)")
    p.add_argument("--sample-tokens", type=int, default=48, help="tokens per sample")
    p.add_argument("--verify-rate", type=share, default=0.0, metavar="R",
                   help="spot checks: another PNode recomputes this share of (step, micro-batch, VNode) items "
                        "and a PNode caught computing wrong results is quarantined (default 0: off)")


def share(text: str) -> float:
    """A number between 0 and 1, or the user's error saying so."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share: give a number between 0 and 1, e.g. 0.05")
    return value


def _size(text: str) -> str:
    """A size `parse_size` reads (4GiB, 512MiB, 2000000000), or the user's error saying so."""
    try:
        parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _replicas(text: str) -> int | str:
    return _count_or_auto("--replicas", text)


def _stages(text: str) -> int | str:
    return _count_or_auto("--stages", text)


def _count_or_auto(flag: str, text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{flag} takes a number or auto, not {text!r}") from None


def session_config(args: argparse.Namespace, min_pnodes: int = 1) -> SessionConfig:
    network_path = Path(args.network)
    try:
        load_network_file(network_path)
    except NetworkError as exc:
        raise UserError(str(exc)) from None
    try:
        if args.dataset:
            data = DataConfig(dataset=args.dataset, start_step=args.data_start_step)
        else:
            files = args.data or stdlib_files()
            missing = [f for f in files if not Path(f).exists()]
            if missing:
                raise UserError(f"data not found: {', '.join(missing)}")
            data = DataConfig(files=[str(Path(f).resolve()) for f in files], start_step=args.data_start_step)
        return SessionConfig(
            network_yaml=network_path.read_text(),
            data=data,
            steps=args.steps,
            batch_size=args.batch_size,
            micro_batches=args.micro_batches,
            seed=args.seed,
            lr=LrSchedule(peak=args.lr, warmup_steps=args.warmup, min_lr=args.lr / 10),
            precision=args.precision,
            optimizer=OptimizerConfig(state=args.optimizer_state),
            wire=args.wire,
            pipeline={"stages": args.stages, "schedule": args.schedule, "in_flight": args.in_flight},  # errors say `pipeline.`
            fuse_heads=args.fuse_heads,
            grad_clip=args.grad_clip,
            update_ratio_every=args.update_ratio_every,
            min_pnodes=min_pnodes,
            replicas=args.replicas,
            sync=ReplicaSync(mode=args.sync, inner_steps=args.inner_steps, overlap_steps=args.overlap_steps,
                             compression=SparseCompression() if args.sparse_sync else None,
                             inner_decisions=args.inner_decisions),
            checkpoint_every=args.checkpoint_every,
            validate_every=args.validate_every,
            sample_every=args.sample_every,
            sample_prompts=args.sample_prompts or [""],
            sampling=SamplingConfig(max_new_tokens=args.sample_tokens, temperature=0.8, top_k=50, seed=args.seed),
            verify=VerifyConfig(rate=args.verify_rate),
        )
    except ValidationError as exc:
        raise UserError(_flag_errors(exc)) from None


def _flag_errors(exc: ValidationError) -> str:
    """What is wrong with the session config, one field per clause (`steps: ...; sampling.max_new_tokens: ...`)."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg'].removeprefix('Value error, ')}"
                     for e in exc.errors())


async def run(args: argparse.Namespace) -> int:
    if args.pnodes < 1:
        raise UserError("--pnodes must be at least 1")
    config = session_config(args, min_pnodes=args.pnodes)
    if isinstance(config.replicas, int) and config.replicas > args.pnodes:
        raise UserError(f"--replicas {config.replicas} needs at least {config.replicas} PNodes (one pipeline each); "
                        f"use --pnodes {config.replicas} or more, or --replicas auto")
    faults = run_faults(args.fault, args.pnodes)
    owned_dir = args.data_dir is None
    data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="computeall-run-"))
    ok = False
    try:
        async with running_cluster(data_dir, args.pnodes, listen=args.listen, faults=faults,
                                   processes_on_machine=args.processes_on_machine, pnode_memory=args.memory) as (client, _):
            config = await with_sent_data(client, config, progress=not args.no_progress)
            sid, command_id = await start_session(client, config)
            outcome = await follow_session(
                client, sid, config.steps, args.metrics_out, not args.no_progress, command_id, args.tensorboard
            )
        ok = outcome.ok
        print(outcome.message, file=sys.stdout if ok else sys.stderr)
        if not ok:
            print(f"logs: {data_dir / 'logs'}", file=sys.stderr)
        return 0 if ok else 1
    finally:
        if owned_dir and ok:  # a failed run keeps its logs for the user to read
            shutil.rmtree(data_dir, ignore_errors=True)


def run_faults(assignments: list[str], pnodes: int) -> dict[str, FaultSpec]:
    """`--fault PNODE=corrupt:P` options, by PNode name; a name the run does not start is a user error."""
    names = [f"pnode-{i}" for i in range(pnodes)]
    faults = {}
    for text in assignments:
        try:
            pnode, spec = parse_assignment(text)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        if pnode not in names:
            raise UserError(f"--fault names {pnode}, but this run starts {', '.join(names)}")
        faults[pnode] = spec
    return faults
