"""`computeall session create|start|pause|resume|stop|validate|delete|list|show`: thin clients over NATS.

Each command is published to `ca.cmd.<user>.session.<sid>`; the client then waits for the event that
shows its effect, or for the `CommandRejected` that says why not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from contextlib import aclosing

from computeall.protocol.commands import (
    CommandEnvelope,
    DeleteSession,
    PauseSession,
    ResumeSession,
    StartSession,
    StopSession,
    ValidateSession,
)
from computeall.protocol.events import (
    CommandRejected,
    DeleteRequested,
    PauseRequested,
    SessionCreated,
    SessionDeleted,
    SessionPaused,
    SessionQueued,
    SessionResumed,
    SessionStarted,
    SessionStopped,
    StopRequested,
    ValidationRequested,
)
from computeall.protocol.session_state import fold
from computeall.protocol.session_status import SessionStatus

from ..cluster_file import add_data_dir_argument
from ..client import Client, connect
from ..data_upload import with_sent_data
from ..errors import UserError
from ..follow import new_session_id, start_session
from ..identity import add_user_arguments, user_credential
from ..init_from import init_from
from ..session_view import find_session, kind_text, loss_text, report, session_events, session_table, summary
from .run import add_training_args, session_config

# command -> the event types that show it took effect (one asked to run may be queued instead)
EFFECTS = {
    "start": (StartSession, (SessionStarted, SessionQueued)),
    "pause": (PauseSession, (PauseRequested, SessionPaused)),
    "resume": (ResumeSession, (SessionResumed, SessionQueued)),
    "stop": (StopSession, (StopRequested, SessionStopped)),
    "validate": (ValidateSession, (ValidationRequested,)),
    "delete": (DeleteSession, (DeleteRequested, SessionDeleted)),
}
HELP = {"delete": "delete a session: lists and views leave it out, its events stay in the log; a running one "
                  "stops at its next step boundary first"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("session", help="create and command training sessions")
    verbs = p.add_subparsers(dest="verb", required=True)

    create = verbs.add_parser("create", help="create a session (it starts unless --no-start)")
    create.add_argument("--network", required=True, help="network YAML")
    add_training_args(create)
    create.add_argument("--init-from", metavar="SID[@STEP]|DIR", default=None,
                        help="start from the weights of a session's checkpoint (the newest unless @STEP) or of a "
                             "local Hugging Face Llama directory; the optimizer starts fresh")
    create.add_argument("--min-pnodes", type=int, default=1, help="wait for this many PNodes before allocating")
    create.add_argument("--no-start", action="store_true")
    _common(create)
    create.set_defaults(func=lambda a: asyncio.run(_create(a)))

    for verb in EFFECTS:
        v = verbs.add_parser(verb, help=HELP.get(verb, f"{verb} a session"))
        v.add_argument("session_id")
        if verb == "resume":
            fusion = v.add_mutually_exclusive_group()
            fusion.add_argument("--fuse-heads", dest="fuse_heads", action="store_true", default=None,
                                help="from this resume on, fuse per-head attention VNodes (the checkpoint is mapped)")
            fusion.add_argument("--no-fuse-heads", dest="fuse_heads", action="store_false",
                                help="from this resume on, keep per-head attention VNodes apart")
        _common(v)
        v.set_defaults(func=lambda a: asyncio.run(_command(a)))

    listing = verbs.add_parser("list", help="your sessions (the credential's or API key's user)")
    _common(listing)
    listing.set_defaults(func=lambda a: asyncio.run(_list(a)))

    show = verbs.add_parser("show", help="a session's status, config, metrics, validations and checkpoints")
    show.add_argument("session_id")
    _common(show)
    show.set_defaults(func=lambda a: asyncio.run(_show(a)))


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true")
    p.add_argument("--nats", default=None)
    add_data_dir_argument(p)
    p.add_argument("--prefix", default=None)
    add_user_arguments(p)


async def _create(args: argparse.Namespace) -> int:
    config = session_config(args, min_pnodes=args.min_pnodes)
    async with connect(user_credential(args), args.prefix) as client:
        config = await with_sent_data(client, config)
        sid = new_session_id()
        if args.init_from:
            config = config.model_copy(update={"init_from": await init_from(client, args.init_from, config.network_yaml, sid)})
        sid, command_id = await start_session(client, config, start=not args.no_start, sid=sid)
        await _await_effect(client, sid, command_id, (SessionCreated,), after_seq=0)
    print(json.dumps({"session_id": sid}) if args.json else f"session {sid} created")
    return 0


async def _command(args: argparse.Namespace) -> int:
    async with connect(user_credential(args), args.prefix) as client:
        events = await session_events(client, args.session_id)
        find_session(args.session_id, events)
        model, effects = EFFECTS[args.verb]
        extra = {"fuse_heads": args.fuse_heads} if getattr(args, "fuse_heads", None) is not None else {}
        command = CommandEnvelope(actor=client.user, session_id=args.session_id, payload=model(**extra))
        await client.publish_command(command)
        effect = await _await_effect(client, args.session_id, command.id, effects, after_seq=events[-1][0])
    print(json.dumps({"session_id": args.session_id, "event": effect}) if args.json else f"{args.verb}: {effect}")
    return 0


async def _await_effect(
    client: Client, sid: str, command_id: str, effects: tuple[type, ...], after_seq: int, timeout: float = 30.0
) -> str:
    """Wait for an event of `effects` recorded after `after_seq`, or the command's rejection."""
    async def watch() -> str:
        stream = client.follow(sid)
        async with aclosing(stream):
            async for seq, event in stream:
                p = event.payload
                if isinstance(p, CommandRejected) and p.command_id == command_id:
                    raise UserError(f"rejected: {p.reason}")
                if isinstance(p, effects) and seq > after_seq:
                    return p.type
        raise UserError("the event stream ended")

    try:
        return await asyncio.wait_for(watch(), timeout)
    except asyncio.TimeoutError:
        raise UserError(f"no answer within {timeout:.0f}s; is the orchestrator running? (`computeall status`)") from None


async def _list(args: argparse.Namespace) -> int:
    async with connect(user_credential(args), args.prefix) as client:
        rows = []
        for sid in await client.session_ids():
            state = fold(sid, await session_events(client, sid))
            if state.status not in (SessionStatus.NEW, SessionStatus.DELETED):
                rows.append(summary(state))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(session_table(rows))
    return 0


async def _show(args: argparse.Namespace) -> int:
    async with connect(user_credential(args), args.prefix) as client:
        events = await session_events(client, args.session_id)
    data = report(find_session(args.session_id, events), events)
    if args.json:
        json.dump(data, sys.stdout, indent=2)
        print()
    else:
        print(f"session {data['session_id']} ({kind_text(data)}): {data['status']}, step {data['step']}/{data['steps']}, "
              f"last loss {loss_text(data['last_loss'])}, owner {data['owner']}")
        if data["reason"]:
            print(f"  {data['status']}: {data['reason']}")
        if data["initialized_from"]:
            print(f"  started from {data['initialized_from']}")
        for v in data["validations"]:
            print(f"  validation at step {v['step']}: loss {v['loss']:.4f}, perplexity {v['perplexity']:.1f}")
        for c in data["checkpoints"]:
            print(f"  checkpoint at step {c['step']}: {c['bytes']} bytes in {c['seconds']:.2f}s{' (pruned)' if c['pruned'] else ''}")
        for sampled in data["samples"]:
            for sample in sampled["samples"]:
                print(f"  sample at step {sampled['step']}: {sample['prompt'] + sample['text']!r}")
        for f in data["failovers"]:
            print(f"  failover at step {f['at_step']}: lost {', '.join(f['lost'])}, {len(f['moves'])} VNodes moved, "
                  f"back to step {f.get('rolled_back_to')}, {f.get('steps_rerun', 0)} steps re-run")
        if data["failure"]:
            print(f"  failed: {data['failure']}")
    return 0
