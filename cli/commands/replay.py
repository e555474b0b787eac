"""`computeall replay show|export|verify|rebuild`: read the event log, re-execute from it, rebuild from it."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import sys

from computeall.protocol.config import ReplayOf
from computeall.protocol.events import StepCompleted
from computeall.protocol.session_state import fold

from ..cluster_file import add_data_dir_argument
from ..client import connect
from ..identity import add_user_arguments, user_credential
from ..errors import UserError
from ..follow import follow_session, start_session
from ..session_view import session_events

REBUILD_HELP = "rebuild the monitor's database from the event log"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="read, re-execute and rebuild from the event log")
    verbs = p.add_subparsers(dest="verb", required=True, parser_class=_VerbParser)
    show = verbs.add_parser("show", help="a session's history as a table")
    export = verbs.add_parser("export", help="a session's events as JSON lines")
    verify = verbs.add_parser("verify", help="re-execute steps from a checkpoint and compare with the recorded losses")
    verify.add_argument("--from-step", type=int, required=True)
    verify.add_argument("--steps", type=int, default=5)
    verify.add_argument("--tolerance", type=float, default=1e-5, help="relative difference allowed per step")
    for v, func in ((show, _show), (export, _export), (verify, _verify)):
        v.add_argument("session_id")
        v.add_argument("--nats", default=None)
        add_data_dir_argument(v)
        v.add_argument("--prefix", default=None)
        add_user_arguments(v)
        v.set_defaults(func=lambda a, f=func: asyncio.run(f(a)))
    verbs.add_parser("rebuild", help=REBUILD_HELP, load=_load_rebuild)


def _load_rebuild(verbs: argparse._SubParsersAction) -> None:
    from .replay_rebuild import register_rebuild  # duckdb comes with it

    register_rebuild(verbs)


class _VerbParser(argparse.ArgumentParser):
    """A verb's parser that can put off building itself, and the imports behind it, until it is used.

    Every `computeall` invocation builds the whole parser, so a verb whose module imports something
    heavy (`replay rebuild`: duckdb) registers `load` instead, which adds the real parser of the verb
    to a subparsers action; it runs only when that verb is on the command line.
    """

    def __init__(self, *args, load=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._load = load

    def parse_known_args(self, args=None, namespace=None):
        if self._load is None:
            return super().parse_known_args(args, namespace)
        parent_prog, verb = self.prog.rsplit(" ", 1)
        verbs = argparse.ArgumentParser(prog=parent_prog).add_subparsers()
        self._load(verbs)
        return verbs.choices[verb].parse_known_args(args, namespace)


async def _events(args: argparse.Namespace):
    async with connect(user_credential(args), args.prefix) as client:
        events = await session_events(client, args.session_id)
    if not events:
        raise UserError(f"no session {args.session_id} in the log")
    return events


async def _show(args: argparse.Namespace) -> int:
    print(f"{'seq':>7}  {'time':<12} {'event':<22} details")
    for seq, event in await _events(args):
        when = datetime.datetime.fromtimestamp(event.ts).strftime("%H:%M:%S.%f")[:12]
        details = event.payload.model_dump(exclude={"type", "config", "objects", "placements", "edges"})
        text = " ".join(f"{k}={_short(v)}" for k, v in details.items())
        print(f"{seq:>7}  {when:<12} {event.type:<22} {text}")
    return 0


def _short(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


async def _export(args: argparse.Namespace) -> int:
    for seq, event in await _events(args):
        sys.stdout.write(json.dumps({"seq": seq, **event.model_dump(mode="json")}) + "\n")
    return 0


async def _verify(args: argparse.Namespace) -> int:
    async with connect(user_credential(args), args.prefix) as client:
        original_events = await session_events(client, args.session_id)
        original = fold(args.session_id, original_events)
        if original.config is None:
            raise UserError(f"no session {args.session_id} in the log")
        recorded = {e.payload.step: e.payload.loss for _, e in original_events if isinstance(e.payload, StepCompleted)}
        to_step = args.from_step + args.steps
        if any(s not in recorded for s in range(args.from_step, to_step)):
            raise UserError(f"session {args.session_id} has recorded steps up to {original.next_step - 1} only")
        config = original.config.model_copy(
            update={"replay_of": ReplayOf(session_id=args.session_id, from_step=args.from_step, to_step=to_step)}
        )
        sid, command_id = await start_session(client, config)
        outcome = await follow_session(client, sid, to_step, progress=False, command_id=command_id)
        if not outcome.ok:
            raise UserError(f"the verification run did not finish: {outcome.message}")
        rerun = {e.payload.step: e.payload.loss for _, e in await session_events(client, sid)
                 if isinstance(e.payload, StepCompleted)}
    failures = 0
    print(f"{'step':>6} {'recorded':>12} {'re-executed':>12} {'rel diff':>10}")
    for step in range(args.from_step, to_step):
        a, b = recorded[step], rerun.get(step, float("nan"))
        diff = abs(a - b) / max(abs(a), 1e-12)
        ok = diff <= args.tolerance
        failures += not ok
        print(f"{step:>6} {a:>12.6f} {b:>12.6f} {diff:>10.2e} {'ok' if ok else 'MISMATCH'}")
    print(f"verification session {sid}: {'all steps reproduce' if not failures else f'{failures} step(s) differ'}")
    return 0 if not failures else 1
