"""`computeall user create NAME` and `computeall user whoami`: users and API keys, via the monitor.

Only the monitor opens its DuckDB file, so these commands ask it over NATS
(`<prefix>.mon.<verb>`, see `computeall.protocol.monitor_api`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os

import nats.errors
from pydantic import BaseModel

from computeall.protocol import monitor_api as api
from computeall.protocol.credentials import Credential

from ..cluster_file import add_data_dir_argument
from ..client import connect
from ..errors import UserError
from ..identity import API_KEY_ENV, add_api_key_argument, add_credential_argument, admin_credential, user_credential



def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("user", help="users and API keys")
    sub = parser.add_subparsers(dest="user_command", required=True)

    create = sub.add_parser("create", help="create a user (or give an existing one a new key); prints the key once")
    create.add_argument("name")
    _common(create)
    create.set_defaults(func=_create)

    whoami = sub.add_parser("whoami", help=f"the user of an API key (--api-key or ${API_KEY_ENV})")
    add_api_key_argument(whoami, "the key to look up")
    _common(whoami)
    whoami.set_defaults(func=_whoami)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--nats", default=None, help="NATS URL (default: $NATS_URL or the running cluster)")
    add_data_dir_argument(parser)
    parser.add_argument("--prefix", default=None, help="subject prefix (default: $COMPUTEALL_PREFIX or ca)")
    add_credential_argument(parser)


async def ask_monitor(credential: Credential, prefix: str | None, verb: str, request: BaseModel, timeout: float = 10.0) -> api.MonitorReply:
    """One request to the monitor as `credential`; a missing monitor or a refusal is a `UserError`."""
    async with connect(credential, prefix) as client:
        try:
            msg = await client.nc.request(api.monitor_subject(client.subjects, verb), request.model_dump_json().encode(), timeout=timeout)
        except nats.errors.NoRespondersError:
            raise UserError("no monitor is running on this NATS server: start one with `computeall up`") from None
        except nats.errors.TimeoutError:
            raise UserError(f"the monitor did not answer within {timeout:.0f}s") from None
    reply = api.MonitorReply.model_validate_json(msg.data)
    if not reply.ok:
        raise UserError(reply.error or "the monitor refused the request")
    return reply


def _create(args: argparse.Namespace) -> int:
    try:
        request = api.UserCreate(name=args.name)
    except ValueError:
        raise UserError(f"user name {args.name!r} may only contain letters, digits, _ and - (at most 64)") from None
    operator = admin_credential(args)
    reply = asyncio.run(ask_monitor(operator, args.prefix, api.USER_CREATE, request))
    # where and how the new user connects: as the operator does (the servers, the pinned CA)
    nats_client = Credential.for_api_key(reply.api_key, operator.servers, operator.tls).client_object()
    if args.json:
        print(json.dumps({"user": reply.user, "api_key": reply.api_key, "nats": nats_client}))
    else:
        print(f"user {reply.user}: API key (shown once, keep it safe):\n{reply.api_key}")
        print(f"use it with ${API_KEY_ENV} (or --api-key KEY, which `ps` shows to everyone), or `Authorization: Bearer KEY` "
              "on the monitor's /graphql;")
        print("`--json` also prints the `nats` options a plain nats-py client connects with (docs/protocol.md)")
    return 0


def _whoami(args: argparse.Namespace) -> int:
    key = args.api_key or os.environ.get(API_KEY_ENV)
    if not key:
        raise UserError(f"no API key: pass --api-key KEY or set ${API_KEY_ENV}")
    asker = user_credential(argparse.Namespace(**{**vars(args), "api_key": None}))  # any user may ask
    reply = asyncio.run(ask_monitor(asker, args.prefix, api.AUTH, api.Auth(api_key=key)))
    print(json.dumps({"user": reply.user}) if args.json else reply.user)
    return 0
