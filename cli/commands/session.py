"""`computeall session create|start|pause|resume|stop|validate|list|show`: thin clients over NATS.

Each command is published to `ca.cmd.session.<sid>`; the client then waits for the event that
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
    PauseSession,
    ResumeSession,
    StartSession,
    StopSession,
    ValidateSession,
)
from computeall.protocol.events import (
    CommandRejected,
    EventEnvelope,
    PauseRequested,
    SessionCreated,
    SessionPaused,
    SessionResumed,
    SessionStarted,
    SessionStopped,
    StopRequested,
    ValidationRequested,
)
from computeall.protocol.credentials import Credential
from computeall.protocol.monitor_api import AUTH, Auth
from computeall.protocol.session_state import fold
from computeall.protocol.subjects import LOG_STREAM

from ..client import Client, connect
from ..data_upload import with_sent_data
from ..identity import add_credential_argument, user_credential
from ..errors import UserError
from ..follow import new_session_id, start_session
from ..init_from import init_from
from ..session_view import find_session, report, session_events, session_ids, summary, visible
from .run import add_training_args, session_config
from .user import ask_monitor, resolve_api_key

# command -> the event types that show it took effect
EFFECTS = {
    "start": (StartSession, (SessionStarted,)),
    "pause": (PauseSession, (PauseRequested, SessionPaused)),
    "resume": (ResumeSession, (SessionResumed,)),
    "stop": (StopSession, (StopRequested, SessionStopped)),
    "validate": (ValidateSession, (ValidationRequested,)),
}


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
        v = verbs.add_parser(verb, help=f"{verb} a session")
        v.add_argument("session_id")
        if verb == "resume":
            fusion = v.add_mutually_exclusive_group()
            fusion.add_argument("--fuse-heads", dest="fuse_heads", action="store_true", default=None,
                                help="from this resume on, fuse per-head attention VNodes (the checkpoint is mapped)")
            fusion.add_argument("--no-fuse-heads", dest="fuse_heads", action="store_false",
                                help="from this resume on, keep per-head attention VNodes apart")
        _common(v)
        v.set_defaults(func=lambda a: asyncio.run(_command(a)))

    listing = verbs.add_parser("list", help="every session (of the API key's user, with a key)")
    _common(listing)
    listing.set_defaults(func=lambda a: asyncio.run(_list(a)))

    show = verbs.add_parser("show", help="a session's status, config, metrics, validations and checkpoints")
    show.add_argument("session_id")
    _common(show)
    show.set_defaults(func=lambda a: asyncio.run(_show(a)))


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true")
    p.add_argument("--nats", default=None)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--prefix", default=None)
    p.add_argument("--api-key", default=None, help="act as this key's user (default: $COMPUTEALL_API_KEY, else local)")
    add_credential_argument(p)


async def _user(args: argparse.Namespace, credential: Credential) -> str | None:
    """The API key's user, or None for the local default user."""
    key = resolve_api_key(args.api_key)
    if not key:
        return None
    return (await ask_monitor(credential, args.prefix, AUTH, Auth(api_key=key))).user


async def _create(args: argparse.Namespace) -> int:
    config = session_config(args, min_pnodes=args.min_pnodes)
    credential = user_credential(args)
    actor = await _user(args, credential) or "local"
    async with connect(credential, args.prefix) as client:
        config = await with_sent_data(client.nc, client.subjects, config)
        sid = new_session_id()
        if args.init_from:
            config = config.model_copy(update={"init_from": await init_from(client, args.init_from, config.network_yaml, sid)})
        sid, command_id = await start_session(client, config, actor=actor, start=not args.no_start, sid=sid)
        await _await_effect(client, sid, command_id, (SessionCreated,), after_seq=0)
    print(json.dumps({"session_id": sid}) if args.json else f"session {sid} created")
    return 0


async def _command(args: argparse.Namespace) -> int:
    credential = user_credential(args)
    user = await _user(args, credential)
    async with connect(credential, args.prefix) as client:
        find_session(args.session_id, await session_events(client.eventlog, args.session_id), user)
        model, effects = EFFECTS[args.verb]
        extra = {"fuse_heads": args.fuse_heads} if getattr(args, "fuse_heads", None) is not None else {}
        command = CommandEnvelope(actor=user or "local", session_id=args.session_id, payload=model(**extra))
        after_seq = (await client.js.stream_info(LOG_STREAM)).state.last_seq
        await client.eventlog.publish_command(command)
        effect = await _await_effect(client, args.session_id, command.id, effects, after_seq)
    print(json.dumps({"session_id": args.session_id, "event": effect}) if args.json else f"{args.verb}: {effect}")
    return 0


async def _await_effect(
    client: Client, sid: str, command_id: str, effects: tuple[type, ...], after_seq: int, timeout: float = 30.0
) -> str:
    """Wait for an event of `effects` recorded after `after_seq`, or the command's rejection."""
    async def watch() -> str:
        stream = client.eventlog.follow(client.subjects.session_evt_all(sid))
        async with aclosing(stream):
            async for record in stream:
                try:
                    event = EventEnvelope.model_validate_json(record.data)
                except ValueError:
                    continue
                p = event.payload
                if isinstance(p, CommandRejected) and p.command_id == command_id:
                    raise UserError(f"rejected: {p.reason}")
                if isinstance(p, effects) and record.seq > after_seq:
                    return p.type
        raise UserError("the event stream ended")

    try:
        return await asyncio.wait_for(watch(), timeout)
    except asyncio.TimeoutError:
        raise UserError(f"no answer within {timeout:.0f}s; is the orchestrator running? (`computeall status`)") from None


async def _list(args: argparse.Namespace) -> int:
    credential = user_credential(args)
    user = await _user(args, credential)
    async with connect(credential, args.prefix) as client:
        rows = []
        for sid in await session_ids(client.eventlog):
            state = fold(sid, await session_events(client.eventlog, sid))
            if visible(state, user):
                rows.append(summary(state))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            loss = f"{r['last_loss']:.4f}" if r["last_loss"] is not None else "-"
            print(f"{r['session_id']}  {r['status']:<10} step {r['step']}/{r['steps']}  loss {loss}  owner {r['owner']}")
    return 0


async def _show(args: argparse.Namespace) -> int:
    credential = user_credential(args)
    user = await _user(args, credential)
    async with connect(credential, args.prefix) as client:
        events = await session_events(client.eventlog, args.session_id)
    data = report(find_session(args.session_id, events, user), events)
    if args.json:
        json.dump(data, sys.stdout, indent=2)
        print()
    else:
        print(f"session {data['session_id']}: {data['status']}, step {data['step']}/{data['steps']}, "
              f"last loss {data['last_loss']}, owner {data['owner']}")
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
