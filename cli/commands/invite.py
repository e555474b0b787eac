"""`computeall invite pnode|list|revoke`: let another machine join as a PNode, and take it back.

Run on the machine that runs `computeall up --public` (it needs that data dir): `invite pnode`
prints a token for `computeall pnode --join TOKEN` on the other machine; `invite revoke ID` cuts
that PNode off (its connections are closed within seconds), as does the invite's expiry.
"""

from __future__ import annotations

import argparse
import datetime
import json

from ..cluster_file import data_dir, read
from ..errors import UserError
from ..identity import deployment_security
from ..security.invitations import InvitationError, invitations, invite_pnode, parse_duration, revoke, state, wait_applied
from ..security.tls import DeploymentTls


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("invite", help="invite another machine to join as a PNode; list and revoke invitations")
    verbs = p.add_subparsers(dest="verb", required=True)
    pnode = verbs.add_parser("pnode", help="a token for `computeall pnode --join TOKEN` on another machine")
    pnode.add_argument("--name", default=None, help="the PNode's name (default: pnode-<id>)")
    pnode.add_argument("--expires", default=None, help="how long the invite works, e.g. 30m, 24h, 7d (default: until revoked)")
    pnode.add_argument("--memory", default=None, help="memory the PNode offers, e.g. 4GiB (default: its own choice)")
    pnode.set_defaults(func=_pnode)
    listing = verbs.add_parser("list", help="every invitation: id, PNode, expiry, state")
    listing.set_defaults(func=_list)
    revoking = verbs.add_parser("revoke", help="revoke an invitation: the PNode is refused and disconnected")
    revoking.add_argument("id")
    revoking.set_defaults(func=_revoke)
    for v in (pnode, listing, revoking):
        v.add_argument("--data-dir", default=None, help="the data dir of `computeall up` (default: $COMPUTEALL_DATA_DIR or .computeall)")
        v.add_argument("--json", action="store_true")


def _pnode(args: argparse.Namespace) -> int:
    directory = data_dir(args.data_dir)
    info = read(directory)
    if info is None or not info.public_nats:
        raise UserError(f"no computeall that other machines can reach runs from {directory}: "
                        "start it with `computeall up --public` (or --listen HOST:PORT), then invite")
    security = deployment_security(args.data_dir)
    try:
        expires_in = parse_duration(args.expires) if args.expires else None
        invite = invite_pnode(security, info.public_nats, DeploymentTls(security.directory / "tls").trust(),
                              args.name, expires_in, args.memory)
    except InvitationError as exc:
        raise UserError(str(exc)) from None
    if not wait_applied(directory / "nats" / "nats.conf", security.members.read().find(invite.id).public_key, True):
        raise UserError("the running server did not take the invitation within 15s; is `computeall up` still running?")
    if args.json:
        print(json.dumps({"token": invite.token(), "id": invite.id, "name": invite.name, "expires": invite.expires}))
    else:
        print(f"invitation {invite.id} for PNode {invite.name}{_until(invite.expires)}; on the other machine run:\n")
        print(f"  computeall pnode --join {invite.token()}\n")
        print("keep the token secret: it is the PNode's credential")
    return 0


def _list(args: argparse.Namespace) -> int:
    rows = [{"id": m.id, "pnode": m.name, "created": m.created, "expires": m.expires, "memory": m.memory, "state": state(m)}
            for m in invitations(deployment_security(args.data_dir))]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            print(f"{r['id']}  {r['pnode']:<16} {r['state']:<8}{_until(r['expires'])}")
    return 0


def _revoke(args: argparse.Namespace) -> int:
    try:
        member = revoke(deployment_security(args.data_dir), args.id)
    except InvitationError as exc:
        raise UserError(str(exc)) from None
    if read(data_dir(args.data_dir)) is not None:  # a running server: wait until it refuses the PNode
        wait_applied(data_dir(args.data_dir) / "nats" / "nats.conf", member.public_key, False)
    print(json.dumps({"id": member.id, "pnode": member.name, "state": "revoked"}) if args.json
          else f"invitation {member.id} revoked: PNode {member.name} is refused and disconnected")
    return 0


def _until(expires: float | None) -> str:
    if expires is None:
        return ""
    return f" (until {datetime.datetime.fromtimestamp(expires).isoformat(sep=' ', timespec='seconds')})"
