"""The roles table: what each kind of identity may publish and subscribe to on the bus.

One function per role builds its `Permissions` from the deployment's subjects and the identity's
name; `ROLES` is the registry the server config and docs/security.md are generated from. Every
list is an allow-list: nothing else is permitted. JetStream is reached through its API subjects
(`$JS.API.<operation>.<stream>...`), so "which API calls a role makes" is also a subject list.

What an allow-list cannot say is written next to it (see `Permissions.notes`); docs/security.md
collects it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Literal

from computeall.protocol.credentials import Role
from computeall.protocol.object_store import checkpoint_bucket, dataset_bucket, uploads_bucket
from computeall.protocol.session_reads import reads_all
from computeall.protocol.subjects import LOG_STREAM, TEL_STREAM, Subjects

from .leafnodes import HUB_JS_API, JS_API


# How an identity may connect: as a client, or (only a `leaf`) as a remote site's leaf server.
# nats-server checks it per user (`allowed_connection_types`), so neither credential works as the other.
Connection = Literal["STANDARD", "LEAFNODE"]


@dataclass(frozen=True)
class Permissions:
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    notes: tuple[str, ...] = field(default=(), compare=False)
    connection: Connection = "STANDARD"


def _inbox(role: Role, name: str) -> str:
    return f"_INBOX.{role}.{name}.>"


# Replies go to the requester's inbox by an explicit grant, not `allow_responses`: a server
# reloading its configuration (a new member, a revocation) forgets the reply grants of requests
# in flight, and a step's reply can be minutes late. A service replies only to `_INBOX.` subjects
# (`subjects.is_inbox`), never to a reply subject that names a stream's subjects.
ANY_INBOX = "_INBOX.>"


# -- JetStream API calls, per stream -------------------------------------------------------
def manage_stream(stream: str) -> list[str]:
    """Create the stream or update its config (services set up the streams they use)."""
    return [f"$JS.API.STREAM.{op}.{stream}" for op in ("CREATE", "UPDATE", "INFO")]


def read_stream(stream: str) -> list[str]:
    """Read with consumers of its own (ephemeral or durable), ack and answer flow control."""
    return [
        f"$JS.API.STREAM.INFO.{stream}",
        f"$JS.API.CONSUMER.CREATE.{stream}", f"$JS.API.CONSUMER.CREATE.{stream}.>",
        f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.*",
        *(f"$JS.API.CONSUMER.{op}.{stream}.*" for op in ("INFO", "DELETE", "MSG.NEXT")),
        f"$JS.API.STREAM.MSG.GET.{stream}", f"$JS.API.DIRECT.GET.{stream}", f"$JS.API.DIRECT.GET.{stream}.>",
        f"$JS.ACK.{stream}.>", f"$JS.FC.{stream}.>",
    ]


def use_bucket(bucket: str) -> list[str]:
    """Put, get and delete objects of an Object Store bucket that exists. Reading an object looks
    its stream up by subject (`STREAM.NAMES`), which lists stream names, never their content."""
    return [*read_stream(f"OBJ_{bucket}"), f"$O.{bucket}.>", f"$JS.API.STREAM.PURGE.OBJ_{bucket}", "$JS.API.STREAM.NAMES"]


def manage_bucket(bucket: str) -> list[str]:
    return [*use_bucket(bucket), *manage_stream(f"OBJ_{bucket}")]


def event_log_setup() -> list[str]:
    """`ensure_streams`: only services call it."""
    return [*manage_stream(LOG_STREAM), *manage_stream(TEL_STREAM)]


# -- the roles -----------------------------------------------------------------------------
def orchestrator(name: str, s: Subjects) -> Permissions:
    p = s.prefix
    return Permissions(
        publish=(
            f"{p}.evt.session.>", f"{p}.evt.pnode.>",  # session and PNode events
            f"{p}.pn.*.ctl",  # requests to PNodes
            f"{p}.orch.hb.*", f"{p}.ds.*", ANY_INBOX, f"{p}.sec.pnode.revoke",
            *event_log_setup(), *read_stream(LOG_STREAM), *manage_bucket(checkpoint_bucket(s)),
            *use_bucket(dataset_bucket(s)),  # a session's tokenizer, for its owner's reads
        ),
        subscribe=(f"{p}.hb.*", f"{p}.orch.hb.*", f"{p}.evt.session.>", reads_all(s), _inbox("orchestrator", name)),
        notes=("serves users' reads of their own sessions (`<prefix>.api.<user>.*`), checking ownership itself",),
    )


def dataset(name: str, s: Subjects) -> Permissions:
    p = s.prefix
    return Permissions(
        publish=(f"{p}.evt.dataset.>", f"{p}.ds.progress.*", ANY_INBOX, *event_log_setup(), *manage_bucket(dataset_bucket(s)),
                 *manage_bucket(uploads_bucket(s))),
        subscribe=(f"{p}.ds.*", _inbox("dataset", name)),
    )


def monitor(name: str, s: Subjects) -> Permissions:
    p = s.prefix
    return Permissions(
        publish=(f"{p}.cmd.*.session.*", f"{p}.sec.users", ANY_INBOX,
                 *event_log_setup(), *read_stream(LOG_STREAM), *read_stream(TEL_STREAM)),
        subscribe=(f"{p}.mon.>", f"{p}.hb.*", _inbox("monitor", name)),
        notes=("publishes the commands of dashboard users, whom it authenticates by API key itself",),
    )


def pnode(name: str, s: Subjects) -> Permissions:
    p = s.prefix
    return Permissions(
        publish=(
            s.heartbeat(name), f"{p}.tel.{name}.>",  # its own liveness and telemetry
            f"{p}.pn.*.tensor",  # activations and gradients to the PNodes its plan names
            s.pnode_probe(name),  # bytes to itself through the bus, to time its link
            s.dataset_api("batch"),
            "_INBOX.orchestrator.>",  # replies to the orchestrators' requests, the only ones it gets
            *use_bucket(checkpoint_bucket(s)),
            *use_bucket(uploads_bucket(s)),  # the weights of `session create --init-from DIR`
        ),
        subscribe=(f"{p}.pn.{name}.>", f"{p}.orch.hb.*", _inbox("pnode", name)),
        notes=(
            f"may send tensors to any PNode (`{p}.pn.*.tensor`): a plan changes at every reallocation, and "
            "NATS permissions are fixed per connection; the receiver accepts only frames its plan expects",
            "reads and writes any object of the checkpoint bucket: the Object Store names chunks by random ids, "
            "so a subject cannot say whose they are; objects are checked against the digests in the log",
            f"reads `{uploads_bucket(s)}` too, for weights a user uploaded to start a session from: the same "
            "chunks cannot be told apart by subject, so the uploaded data files are readable to it as well",
        ),
    )


def _hub_domain(subject: str) -> str:
    """How a site PNode's JetStream API call crosses its leaf link: under the hub's domain (leafnodes.py)."""
    return HUB_JS_API + subject[len(JS_API):] if subject.startswith(JS_API) else subject


def on_site(p: Permissions) -> Permissions:
    """A PNode's permissions on its site's leaf server, which maps its JetStream API calls to the hub's
    domain and checks the subject it maps them to."""
    return replace(p, publish=tuple(dict.fromkeys(_hub_domain(subject) for subject in p.publish)))


def leaf(name: str, s: Subjects, site: Iterable[str] = ()) -> Permissions:
    """A remote site's leaf nats-server (`computeall up --leaf-file TOKEN_FILE`), connecting only as a leaf node.
    What crosses its link is what the PNodes of its site may do, and nothing else: its allow-lists are
    the union of theirs, their JetStream API calls under the hub's domain (below: a site without PNodes)."""
    pnodes = [pnode(member, s) for member in sorted(site)]
    return Permissions(
        publish=tuple(dict.fromkeys(_hub_domain(subject) for p in pnodes for subject in p.publish)),
        subscribe=tuple(dict.fromkeys(subject for p in pnodes for subject in p.subscribe)),
        connection="LEAFNODE",
        notes=("carries what the PNodes its invite named may publish and receive, recomputed at every "
               "membership change: a revoked PNode of the site no longer gets through, nor does anything once "
               "the leaf is revoked. The site's leaf server admits those PNodes itself (their keys came with the "
               "invite); the hub never sees their connections",),
    )


def user(name: str, s: Subjects) -> Permissions:
    p = s.prefix
    return Permissions(
        publish=(
            f"{p}.cmd.{name}.session.*",  # its own commands, recorded (the JetStream ack comes to its inbox)
            f"{p}.api.{name}.*",  # reads of its own sessions, answered by the orchestrator
            s.dataset_api("*"), f"{p}.mon.auth",
            *use_bucket(uploads_bucket(s)),  # the files of `dataset create --files` / `session create --data`
        ),
        subscribe=(f"{p}.ds.progress.*", _inbox("user", name)),
        notes=(
            "reads no stream itself: NATS cannot filter the event log or the Object Store by owner, so a "
            "user's reads go through the orchestrator, which checks ownership",
            "datasets are shared: any user may create, list and sample them",
            f"may read and replace any object of `{uploads_bucket(s)}`, others' uploads too: the Object Store names "
            "chunks by random ids, so a subject cannot say whose they are. Parts are named by their digest and the "
            "dataset service checks every one, so a replaced part is refused (and removed), never used",
        ),
    )


def admin(name: str, s: Subjects) -> Permissions:
    p = s.prefix
    return Permissions(publish=(f"{p}.mon.>", f"{p}.sec.>"), subscribe=(_inbox("admin", name),))


def authority(name: str, s: Subjects) -> Permissions:
    """The process that owns the server's configuration (`computeall up`): applies membership changes."""
    return Permissions(publish=(ANY_INBOX,), subscribe=(f"{s.prefix}.sec.>", _inbox("authority", name)))


def superuser(name: str, s: Subjects) -> Permissions:
    return Permissions(
        publish=(">",), subscribe=(">",),
        notes=("never issued by computeall itself: for repairs by hand, and for tests that play someone "
               "who tampered with the server's storage",),
    )


ROLES: dict[Role, Callable[[str, Subjects], Permissions]] = {
    "orchestrator": orchestrator,
    "dataset": dataset,
    "monitor": monitor,
    "pnode": pnode,
    "leaf": leaf,
    "user": user,
    "admin": admin,
    "authority": authority,
    "superuser": superuser,
}


def permissions(role: Role, name: str, subjects: Subjects) -> Permissions:
    return ROLES[role](name, subjects)
