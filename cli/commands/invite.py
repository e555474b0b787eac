"""`computeall invite pnode|leaf|server|list|revoke`: let another machine join, and take it back.

Run on the machine that runs `computeall up --public` (it needs that data dir): `invite pnode`
prints a token for `computeall pnode --join-file TOKEN_FILE` on the other machine, `invite leaf` one
for `computeall up --leaf-file TOKEN_FILE` on a remote site (its leaf server and PNodes); a token is
never passed on a command line (`protocol/secret_args.py`). `invite revoke ID` cuts that PNode or site
off (its connections are closed within seconds), as does the invite's expiry. On a bus spanning
machines, `invite server` prints one for `computeall up --join-bus-file TOKEN_FILE` on a machine that
runs one of its servers (`cli/bus_machine.py`), and every token names every server of the bus: a PNode
or a site fails over between them.
"""

from __future__ import annotations

import argparse
import datetime
import json

from computeall.protocol.invites import Invite
from computeall.protocol.membership_api import DEFAULT_PNODE_MEMORY
from computeall.protocol.secret_args import BUS, JOIN, LEAF, SecretArg

from ..cluster_file import add_data_dir_argument, deployment_dir, read
from ..errors import UserError
from ..identity import deployment_security
from ..security.bus_state import LocalState
from ..security.invitations import InvitationError, invitations, invite, parse_duration, revoke, state, wait_applied
from ..security.tls import DeploymentTls


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("invite", help="invite another machine (a PNode) or a remote site (a leaf); list and revoke invitations")
    verbs = p.add_subparsers(dest="verb", required=True)
    pnode = verbs.add_parser("pnode", help="a token for `computeall pnode --join-file TOKEN_FILE` on another machine")
    pnode.add_argument("--name", default=None, help="the PNode's name (default: pnode-<id>)")
    pnode.add_argument("--expires", default=None, help="how long the invite works, e.g. 30m, 24h, 7d (default: until revoked)")
    pnode.add_argument("--memory", default=None,
                       help="the most memory the PNode may offer, e.g. 4GiB: the allocator never counts on more, "
                            f"whatever it claims (default: {DEFAULT_PNODE_MEMORY // 2**30}GiB)")
    pnode.set_defaults(func=_pnode)
    leaf = verbs.add_parser("leaf", help="a token for `computeall up --leaf-file TOKEN_FILE` on a remote site")
    leaf.add_argument("--name", default=None, help="the site's leaf name (default: leaf-<id>); its PNodes are NAME-0, ...")
    leaf.add_argument("--pnodes", type=int, default=2, help="PNodes the site may run (default 2)")
    leaf.add_argument("--expires", default=None, help="how long the invite works, e.g. 30m, 24h, 7d (default: until revoked)")
    leaf.set_defaults(func=_leaf)
    server = verbs.add_parser("server", help="a token for `computeall up --join-bus-file TOKEN_FILE` on a machine "
                                             "that runs one of the bus's nats-servers")
    server.add_argument("--name", default=None, help="its server's name (default: server-<id>); its PNodes are NAME-0, ...")
    server.add_argument("--expires", default="24h", help="how long the invite works, e.g. 30m, 24h, 7d (default: 24h)")
    server.set_defaults(func=_server)
    listing = verbs.add_parser("list", help="every invitation: id, PNode, expiry, state")
    listing.set_defaults(func=_list)
    revoking = verbs.add_parser("revoke", help="revoke an invitation: the PNode is refused and disconnected")
    revoking.add_argument("id")
    revoking.set_defaults(func=_revoke)
    for v in (pnode, leaf, server, listing, revoking):
        add_data_dir_argument(v)
        v.add_argument("--json", action="store_true")


def _pnode(args: argparse.Namespace) -> int:
    invitation = _invite(args, "pnode", memory=args.memory)
    if args.json:
        print(json.dumps({"token": invitation.token(), "id": invitation.id, "name": invitation.name, "expires": invitation.expires}))
    else:
        print(f"invitation {invitation.id} for PNode {invitation.name}{_until(invitation.expires)}")
        _how_to_use(invitation, "the PNode's credential", "the other machine", "computeall pnode", JOIN)
    return 0


def _leaf(args: argparse.Namespace) -> int:
    invitation = _invite(args, "leaf", site_pnodes=args.pnodes)
    pnodes = [p.name for p in invitation.pnodes]
    if args.json:
        print(json.dumps({"token": invitation.token(), "id": invitation.id, "name": invitation.name, "pnodes": pnodes,
                          "expires": invitation.expires}))
    else:
        print(f"invitation {invitation.id} for the site {invitation.name} (PNodes {', '.join(pnodes)})"
              f"{_until(invitation.expires)}")
        _how_to_use(invitation, "the site's credentials", "the site", "computeall up", LEAF)
    return 0


def _server(args: argparse.Namespace) -> int:
    invitation = _invite(args, "server")
    if args.json:
        print(json.dumps({"token": invitation.token(), "id": invitation.id, "name": invitation.name,
                          "expires": invitation.expires}))
    else:
        print(f"invitation {invitation.id} for server {invitation.name}{_until(invitation.expires)}")
        _how_to_use(invitation, "what joins the bus: it gets the deployment's CA", "the new machine", "computeall up",
                    BUS)
    return 0


def _how_to_use(invitation: Invite, holds: str, where: str, command: str, token: SecretArg) -> None:
    print(f"\nits token (keep it secret: it holds {holds}):\n\n{invitation.token()}\n")
    print(f"on {where}, put it in a file only you can read, and run:\n\n  {command} {token.flag}-file TOKEN_FILE\n")
    print(f"(or {token.ways()}: never the token itself on a command line, where `ps` shows it to everyone)")


def _invite(args: argparse.Namespace, role: str, **options) -> Invite:
    """A new invitation, once the running server accepts it."""
    directory = deployment_dir(args.data_dir)
    info = read(directory)
    security = deployment_security(args.data_dir)
    roster = LocalState(security).servers.read()  # a bus spanning machines: every server's addresses
    here = (info.public_leaf if role == "leaf" else info.public_nats) if info else []
    # this machine's server first: it takes the invite before the others do
    servers = list(dict.fromkeys([*here, *(roster.leaves() if role == "leaf" else roster.clients())]))
    if not servers:
        raise UserError(f"no computeall that other machines can reach runs from {directory}: start it with "
                        "`computeall up --public` (or --listen HOST:PORT), then invite")
    if role == "server" and not roster.servers:
        raise UserError(f"the bus of {directory} runs on this machine only: start it with `computeall up --public "
                        "--nats-cluster 3`, which waits for the two servers it invites")
    if role == "server":
        options["routes"] = roster.routes()
    try:
        expires_in = parse_duration(args.expires) if args.expires else None
        invitation = invite(security, role, servers, DeploymentTls(security.directory / "tls").trust(), args.name,
                            expires_in, **options)
    except InvitationError as exc:
        raise UserError(str(exc)) from None
    if not wait_applied(directory / "nats" / "nats.conf", security.members.read().find(invitation.id).public_key, True):
        raise UserError("the running server did not take the invitation within 15s; is `computeall up` still running?")
    return invitation


def _list(args: argparse.Namespace) -> int:
    rows = [{"id": m.id, "role": m.role, m.role: m.name, "site": m.site,
             "created": m.created, "expires": m.expires, "memory": m.memory, "state": state(m)}
            for m in invitations(deployment_security(args.data_dir))]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            site = f" (site {r['site']})" if r["site"] else ""
            print(f"{r['id']}  {r['role']:<5} {r[r['role']]:<16} {r['state']:<8}{_until(r['expires'])}{site}")
    return 0


def _revoke(args: argparse.Namespace) -> int:
    try:
        member = revoke(deployment_security(args.data_dir), args.id)
    except InvitationError as exc:
        raise UserError(str(exc)) from None
    if read(deployment_dir(args.data_dir)) is not None:  # a running server: wait until it refuses the PNode
        wait_applied(deployment_dir(args.data_dir) / "nats" / "nats.conf", member.public_key, False)
    who = {"pnode": f"PNode {member.name} is refused and disconnected",
           "leaf": f"the site {member.name} (its leaf and PNodes) is refused and disconnected",
           "server": f"server {member.name} cannot join the bus (a server that joined stays: docs/operations.md)",
           }[member.role]
    print(json.dumps({"id": member.id, member.role: member.name, "state": "revoked"}) if args.json
          else f"invitation {member.id} revoked: {who}")
    return 0


def _until(expires: float | None) -> str:
    if expires is None:
        return ""
    return f" (until {datetime.datetime.fromtimestamp(expires).isoformat(sep=' ', timespec='seconds')})"
