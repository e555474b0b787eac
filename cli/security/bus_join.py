"""An invited machine joins the bus: it asks an authority for the deployment's server kit.

`computeall invite server` makes a `server` member whose only right is to ask
`<prefix>.sec.server.join`, and puts its credential in the token, with the bus's client and route URLs
(`protocol.invites`). `computeall up --join-bus-file TOKEN_FILE` on the new machine connects with it
(trusting only the pinned CA) and sends the record of the server it is about to start; any authority
answers, while the invite is active, with the kit: the CA's certificate and key (the new server makes its
own certificate naming its own addresses: routes dial addresses and check them), the route secret,
and the security state (`bus_state.SharedState`) with the new server in its roster. With the kit the
new server routes to the others over mutual TLS; without an invite it has neither the secret nor a
certificate the others accept, and cannot join (tests/integration/test_bus_machines.py).

Who asks is read from the reply subject (`_INBOX.server.<name>.`, which only that identity may
subscribe to), never from the request; the record must name that server.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, ConfigDict, Field

from computeall.protocol import bus
from computeall.protocol.invites import Invite
from computeall.protocol.membership_api import SERVER_JOIN, membership_subject
from computeall.protocol.responder import Api, Endpoint, Refused, by_inbox
from computeall.protocol.subjects import Subjects

from .bus_state import BusServer, LocalState, SharedState
from .deployment import Security
from .tls import DeploymentTls

JOIN_TIMEOUT_S = 15.0
CONNECT_S = 10.0


class ServerJoin(BaseModel):
    model_config = ConfigDict(extra="forbid")

    server: BusServer = Field(..., description="the server the invited machine starts: its name is the invite's")


class ServerKit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ok: bool = True
    error: str | None = None
    ca_pem: str = ""
    ca_key_pem: str = ""
    route_secret: str = ""
    state: SharedState = Field(default_factory=SharedState)


def kit_of(security: Security) -> ServerKit:
    """What this machine's deployment hands an invited server."""
    tls = DeploymentTls(security.directory / "tls")
    tls.ensure()
    return ServerKit(ca_pem=tls.ca_file.read_text(), ca_key_pem=tls.ca_key_file.read_text(),
                     route_secret=security.route_secret(), state=LocalState(security).read())


def install(kit: ServerKit, security: Security) -> None:
    """The kit in a new server's data dir: the CA (its own certificate is made from it), the route secret,
    the members, grants and servers."""
    DeploymentTls(security.directory / "tls").install_ca(kit.ca_pem, kit.ca_key_pem)
    security.install_route_secret(kit.route_secret)
    LocalState(security).absorb(kit.state)


class JoinRefused(RuntimeError):
    """No kit: the message says why."""


# what the authority answers an invited server (beside the membership API: its answer is the kit)
JOIN_API: Api[str] = Api("the authority", ServerKit, (
    Endpoint(SERVER_JOIN, ServerJoin, "an invited server asks for the bus's server kit"),
), listen=lambda subjects, verb: (membership_subject(subjects, verb),), asker=by_inbox)


def joining_server(asker: str, request: ServerJoin) -> str:
    """The name of the invited server asking (`asker`: the identity its inbox belongs to); `Refused` when
    the request is not its own."""
    role, _, name = asker.partition(":")
    if role != "server":
        raise Refused("only an invited server asks to join (its reply subject is no server's inbox)")
    if request.server.name != name:
        raise Refused(f"server {name} asked to join as {request.server.name}")
    return name


async def ask_to_join(invite: Invite, server: BusServer, subjects: Subjects) -> ServerKit:
    """The kit, from any authority of the bus; `JoinRefused` when none gives it (expired, revoked). The
    invite's servers are tried in its order, the machine that made it first: another may not have taken the
    invite yet (it spreads within a second), or be down."""
    failures = []
    for url in invite.servers:
        try:  # bounded: nats-py waits on an address whose machine is gone (measured: past 60 s)
            nc = await asyncio.wait_for(bus.connect(invite.credential().at(url), name=f"computeall-join-{invite.name}",
                                                    allow_reconnect=False), CONNECT_S)
        except bus.BusConnectError as exc:
            failures.append(str(exc))
            continue
        except asyncio.TimeoutError:
            failures.append(f"{url}: no answer within {CONNECT_S:.0f}s")
            continue
        try:
            msg = await nc.request(membership_subject(subjects, SERVER_JOIN),
                                   ServerJoin(server=server).model_dump_json().encode(), timeout=JOIN_TIMEOUT_S)
        except Exception as exc:  # no authority answered: nats-py's timeouts and no-responders
            failures.append(f"{url}: no authority of the bus answered ({type(exc).__name__})")
            continue
        finally:
            await nc.close()
        kit = ServerKit.model_validate_json(msg.data)
        if not kit.ok:
            raise JoinRefused(kit.error or "refused")
        return kit
    raise JoinRefused("; ".join(failures))
