"""`computeall session create|start|pause|resume|stop|validate|delete|list|show`: thin clients over NATS.

Each command is published to `ca.cmd.<user>.session.<sid>`; the client then waits for the event that
shows its effect, or for the `CommandRejected` that says why not. The verbs, their options and the
events they wait for are the session aggregate's declarations (`protocol.session_commands`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from contextlib import aclosing

from computeall.protocol.commands import CommandEnvelope, CreateSession
from computeall.protocol.events import CommandRejected
from computeall.protocol.session_commands import COMMANDS, CommandSpec, session_verbs
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

    for verb, spec in session_verbs().items():
        v = verbs.add_parser(verb, help=_help(spec))
        v.add_argument("session_id")
        _command_options(v, spec)
        _common(v)
        v.set_defaults(func=lambda a: asyncio.run(_command(a)))

    listing = verbs.add_parser("list", help="your sessions (the credential's or API key's user)")
    _common(listing)
    listing.set_defaults(func=lambda a: asyncio.run(_list(a)))

    show = verbs.add_parser("show", help="a session's status, config, metrics, validations and checkpoints")
    show.add_argument("session_id")
    _common(show)
    show.set_defaults(func=lambda a: asyncio.run(_show(a)))


def _help(spec: CommandSpec) -> str:
    """A command's summary as a verb's help, written as the other verbs' helps are."""
    return spec.summary[:1].lower() + spec.summary[1:].rstrip(".")


def _command_options(p: argparse.ArgumentParser, spec: CommandSpec) -> None:
    """An option per field of the command: `--NAME` / `--no-NAME` for a yes-or-no one (unset: the
    command leaves it out)."""
    for name in spec.fields:
        field = spec.model.model_fields[name]
        if field.annotation not in (bool, bool | None):
            raise TypeError(f"{spec.model.__name__}.{name} ({field.annotation}) has no command-line form; give it one here")
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, action=argparse.BooleanOptionalAction, default=None,
                       help=field.description)


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
        await _await_effect(client, sid, command_id, COMMANDS[CreateSession].effects, after_seq=0)
    print(json.dumps({"session_id": sid}) if args.json else f"session {sid} created")
    return 0


async def _command(args: argparse.Namespace) -> int:
    async with connect(user_credential(args), args.prefix) as client:
        events = await session_events(client, args.session_id)
        find_session(args.session_id, events)
        spec = session_verbs()[args.verb]
        given = {name: getattr(args, name) for name in spec.fields if getattr(args, name) is not None}
        command = CommandEnvelope(actor=client.user, session_id=args.session_id, payload=spec.model(**given))
        await client.publish_command(command)
        effect = await _await_effect(client, args.session_id, command.id, spec.effects, after_seq=events[-1][0])
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
