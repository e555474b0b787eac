"""`computeall pnode --nats nats://HOST:PORT --memory 4GiB`: lend this machine to a running computeall;
`computeall pnode --join-file TOKEN_FILE` (or `--join -`, `$COMPUTEALL_JOIN_TOKEN`) joins one elsewhere."""

from __future__ import annotations

import argparse

from computeall.pnode.options import add_options
from computeall.protocol.secret_args import JOIN

from ..cluster_file import resolve_nats_url


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pnode", help="start a PNode on this machine and join a running computeall")
    add_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from computeall.pnode.__main__ import run as run_pnode  # torch is imported only here (not with --simulate)

    if not (JOIN.given(args.join) or args.credential):  # a PNode of this machine's cluster, found by its cluster.json
        args.nats = resolve_nats_url(args.nats, args.data_dir)
    run_pnode(args)
    return 0
