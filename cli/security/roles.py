"""The roles table: what each kind of identity may publish and subscribe to on the bus.

One function per role builds its `Permissions` from the deployment's subjects and the identity's
name; `ROLES` is the registry the server config and docs/security.md are generated from. Every
list is an allow-list: nothing else is permitted. JetStream is reached through its API subjects
(`$JS.API.<operation>.<stream>...`), so "which API calls a role makes" is also a subject list.

What an allow-list cannot say is written next to it (see `Permissions.notes`); docs/security.md
collects it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from computeall.protocol.batch_grants import grants_bucket
from computeall.protocol.credentials import Role
from computeall.protocol.dataset_api import pnode_batch_subject, pnode_requests, progress_all, user_requests
from computeall.protocol.membership_api import (
    PNODE_MEMORY, REVOKE_PNODE, SERVER_JOIN, SESSION_HOSTS, SYNC, membership_subject, security_bucket,
)
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
    publish_deny: tuple[str, ...] = ()  # carved out of `publish` (a wildcard grant that must miss some streams)


# Which sessions' checkpoint buckets an identity reaches: the ones named (the authority's session
# grants, `session_grants.py`), or `EVERY` where the server cannot follow placement: a site's leaf
# server (the hub's side of the link decides) and docker compose (no authority).
EVERY: Literal["every"] = "every"
Sessions = tuple[str, ...] | Literal["every"]


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


ANY_BUCKET = "*"  # a token wildcard in place of a bucket's name (and of its stream's)


def _stream(bucket: str) -> str:
    return ANY_BUCKET if bucket == ANY_BUCKET else f"OBJ_{bucket}"


def put_objects(bucket: str) -> list[str]:
    """Put and get objects of an Object Store bucket that exists, never delete one (no purge). Reading
    an object looks its stream up by subject (`STREAM.NAMES`), which lists stream names, never their content."""
    return [*read_stream(_stream(bucket)), f"$O.{bucket}.>", "$JS.API.STREAM.NAMES"]


def use_bucket(bucket: str) -> list[str]:
    """Put, get and delete objects of an Object Store bucket that exists."""
    return [*put_objects(bucket), f"$JS.API.STREAM.PURGE.{_stream(bucket)}"]


def manage_bucket(bucket: str) -> list[str]:
    return [*use_bucket(bucket), *manage_stream(_stream(bucket))]


def checkpoint_buckets(s: Subjects, sessions: Sessions) -> list[str]:
    return [ANY_BUCKET] if sessions == EVERY else [checkpoint_bucket(s, sid) for sid in sessions]


def other_streams(s: Subjects, users: Iterable[str]) -> list[str]:
    """What a grant on every bucket must not reach: the deployment's streams that are no session's bucket."""
    data = [dataset_bucket(s), *(uploads_bucket(s, user) for user in sorted(users))]
    streams = [LOG_STREAM, TEL_STREAM, *(f"OBJ_{bucket}" for bucket in data)]
    return [*(subject for stream in streams for subject in (*read_stream(stream), f"$JS.API.STREAM.PURGE.{stream}")),
            *(f"$O.{bucket}.>" for bucket in data)]


def read_kv(bucket: str) -> list[str]:
    """Look keys of a key-value bucket up (`KeyValue.get`: direct gets)."""
    stream = f"KV_{bucket}"
    return [f"$JS.API.STREAM.INFO.{stream}", f"$JS.API.DIRECT.GET.{stream}", f"$JS.API.DIRECT.GET.{stream}.>",
            f"$JS.API.STREAM.MSG.GET.{stream}"]


def manage_kv(bucket: str) -> list[str]:
    """Create a key-value bucket, put and delete its keys."""
    return [*read_kv(bucket), *manage_stream(f"KV_{bucket}"), f"$KV.{bucket}.>"]


def event_log_setup() -> list[str]:
    """`ensure_streams`: only services call it."""
    return [*manage_stream(LOG_STREAM), *manage_stream(TEL_STREAM)]


# -- the roles -----------------------------------------------------------------------------
def orchestrator(name: str, s: Subjects, sessions: Sessions = (), users: Iterable[str] = ()) -> Permissions:
    """Drives the sessions: creates, prunes and reads the checkpoint bucket of every session that was ever
    placed (`sessions`, from the authority's session grants); no one else deletes from them. Reads every
    user's uploads bucket (`users`), for the weights a session starts from, which it copies into its bucket."""
    p = s.prefix
    return Permissions(
        publish=(
            f"{p}.evt.session.>", f"{p}.evt.pnode.>",  # session and PNode events
            f"{p}.pn.*.ctl",  # requests to PNodes
            f"{p}.orch.hb.*", ANY_INBOX,
            membership_subject(s, REVOKE_PNODE),  # quarantine
            membership_subject(s, PNODE_MEMORY),  # a joining PNode's memory cap
            membership_subject(s, SESSION_HOSTS),  # who may reach a session's checkpoints, at every placement
            user_requests(s),  # the dataset service, on a session owner's subject: as that owner
            *event_log_setup(), *read_stream(LOG_STREAM),
            *use_bucket(dataset_bucket(s)),  # a session's tokenizer, for its owner's reads
            *manage_kv(grants_bucket(s)),  # which PNodes read a session's dataset
            # weights a user uploaded to start a session from, copied into the session's bucket
            *(subject for user in sorted(users) for subject in read_stream(f"OBJ_{uploads_bucket(s, user)}")),
            *(subject for bucket in checkpoint_buckets(s, sessions) for subject in manage_bucket(bucket)),
        ),
        subscribe=(f"{p}.hb.*", f"{p}.orch.hb.*", f"{p}.evt.session.>",
                   s.pnode_evt_of_type("PNodeQuarantined"),  # by any orchestrator: none gives it work again
                   reads_all(s), _inbox("orchestrator", name)),
        notes=("serves users' reads of their own sessions (`<prefix>.api.<user>.*`), checking ownership itself",
               f"asks the dataset service on any user's subject (`{user_requests(s)}`), for the owner of the session it "
               "prepares, after checking the session is theirs: the service takes it for that user",
               "reaches the bucket of every session that has been placed: each is one more grant in the server's "
               "configuration, since a subject cannot name \"the checkpoint buckets\" and no others (a wildcard "
               "stands for a whole token, and a bucket's name is one)"),
    )


def dataset(name: str, s: Subjects, users: Iterable[str] = ()) -> Permissions:
    """The dataset service. It creates and reads each user's uploads bucket (below for a user `<user>`):
    its lists name every user of the deployment, recomputed from the members at every change as a leaf's are."""
    p = s.prefix
    return Permissions(
        publish=(f"{p}.evt.dataset.>", progress_all(s), ANY_INBOX, *event_log_setup(), *manage_bucket(dataset_bucket(s)),
                 *(subject for user in sorted(users) for subject in manage_bucket(uploads_bucket(s, user))),
                 *read_kv(grants_bucket(s))),
        subscribe=(user_requests(s), pnode_requests(s), _inbox("dataset", name)),
        notes=("decides itself who reads a dataset: NATS cannot see an object's owner. The requester is the user "
               "or PNode its subject names; a user reads their own datasets and public ones (read only), a PNode "
               "those the orchestrator granted to a session whose plan it holds",),
    )


def monitor(name: str, s: Subjects) -> Permissions:
    p = s.prefix
    return Permissions(
        publish=(f"{p}.cmd.*.session.*", f"{p}.sec.users", ANY_INBOX,
                 *event_log_setup(), *read_stream(LOG_STREAM), *read_stream(TEL_STREAM)),
        subscribe=(f"{p}.mon.>", f"{p}.hb.*", _inbox("monitor", name)),
        notes=("publishes the commands of dashboard users, whom it authenticates by API key itself",),
    )


def pnode(name: str, s: Subjects, sessions: Sessions = (), users: Iterable[str] = ()) -> Permissions:
    """Hosts VNodes: reaches the checkpoint buckets of the sessions it hosts now (`sessions`, from the
    authority's session grants, which change at every placement), to put and read, never to delete. With
    every bucket (`EVERY`), the deployment's other streams, the users' uploads among them, are carved out."""
    p = s.prefix
    return Permissions(
        publish=(
            s.heartbeat(name), f"{p}.tel.{name}.>",  # its own liveness and telemetry
            f"{p}.pn.*.tensor.{name}",  # tensors to other PNodes, as itself: the receiver reads the sender here
            s.pnode_probe(name),  # bytes to itself through the bus, to time its link
            pnode_batch_subject(s, name),  # batches of the sessions it hosts (the orchestrator's grants)
            "_INBOX.orchestrator.>",  # replies to the orchestrators' requests, the only ones it gets
            *(subject for bucket in checkpoint_buckets(s, sessions) for subject in put_objects(bucket)),
        ),
        publish_deny=tuple(other_streams(s, users)) if sessions == EVERY else (),
        subscribe=(f"{p}.pn.{name}.>", f"{p}.orch.hb.*", _inbox("pnode", name)),
        notes=(
            f"may send tensors to any PNode, but only as itself (`{p}.pn.*.tensor.<name>`): a plan changes at every "
            "reallocation, and NATS permissions are fixed per connection. The receiver reads the sender from the "
            "subject and keeps a byte of a frame only when its plan names that sender as the producer of that "
            "tensor, for a step and micro-batch it expects, within the tensor's size and the sender's budget",
            "may replace an object of a session it hosts (a message on the object's own subject replaces it, and "
            "writing needs that subject), so such a PNode can spoil its session's checkpoints, never unnoticed: "
            "the orchestrator checks a checkpoint that does not load against the digests in the log, discards it "
            "and goes on from the newest intact one (or the start), and the re-run gives the same bits",
            "lists the names of the deployment's streams (`STREAM.NAMES`, which reading an object needs): it "
            "learns which sessions have a bucket, never what is in one",
        ),
    )


def _hub_domain(subject: str) -> str:
    """How a site PNode's JetStream API call crosses its leaf link: under the hub's domain (leafnodes.py)."""
    return HUB_JS_API + subject[len(JS_API):] if subject.startswith(JS_API) else subject


def on_site(p: Permissions) -> Permissions:
    """A PNode's permissions on its site's leaf server, which maps its JetStream API calls to the hub's
    domain and checks the subject it maps them to."""
    return replace(p, publish=tuple(dict.fromkeys(_hub_domain(subject) for subject in p.publish)),
                   publish_deny=tuple(dict.fromkeys(_hub_domain(subject) for subject in p.publish_deny)))


def leaf(name: str, s: Subjects, site: Iterable[str] = (), sessions: Mapping[str, Sessions] = {}) -> Permissions:
    """A remote site's leaf nats-server (`computeall up --leaf-file TOKEN_FILE`), connecting only as a leaf node.
    What crosses its link is what the PNodes of its site may do, and nothing else: its allow-lists are
    the union of theirs, their JetStream API calls under the hub's domain (below: a site without PNodes)."""
    pnodes = [pnode(member, s, sessions.get(member, ())) for member in sorted(site)]
    return Permissions(
        publish=tuple(dict.fromkeys(_hub_domain(subject) for p in pnodes for subject in p.publish)),
        subscribe=tuple(dict.fromkeys(subject for p in pnodes for subject in p.subscribe)),
        connection="LEAFNODE",
        notes=("carries what the PNodes its invite named may publish and receive, recomputed at every "
               "membership change: a revoked PNode of the site no longer gets through, nor does anything once "
               "the leaf is revoked. The site's leaf server admits those PNodes itself (their keys came with the "
               "invite); the hub never sees their connections",
               "carries the checkpoint grants of all its site's PNodes, so on the site each of them may reach the "
               "buckets of the sessions any of them hosts: the hub sees one link, not the PNodes behind it",),
    )


def user(name: str, s: Subjects) -> Permissions:
    p = s.prefix
    return Permissions(
        publish=(
            f"{p}.cmd.{name}.session.*",  # its own commands, recorded (the JetStream ack comes to its inbox)
            f"{p}.api.{name}.*",  # reads of its own sessions, answered by the orchestrator
            user_requests(s, name),  # its own dataset requests
            f"{p}.mon.auth",
            # its own uploads; never a stream's setup (one could capture another's subjects): the dataset service creates it
            *use_bucket(uploads_bucket(s, name)),
        ),
        subscribe=(progress_all(s, name), _inbox("user", name)),
        notes=(
            "reads no stream itself: NATS cannot filter the event log or the Object Store by owner, so a "
            "user's reads go through the orchestrator, which checks ownership",
            "lists the names of every stream (`$JS.API.STREAM.NAMES`, which opening its own bucket needs), so it "
            f"sees which users have an uploads bucket (its own is stream `OBJ_{uploads_bucket(s, name)}`), never what is in one",
        ),
    )


def admin(name: str, s: Subjects) -> Permissions:
    p = s.prefix
    return Permissions(publish=(f"{p}.mon.>", f"{p}.sec.>"), subscribe=(_inbox("admin", name),))


def server(name: str, s: Subjects) -> Permissions:
    """A machine invited to run one of the bus's nats-servers (`computeall up --join-bus-file TOKEN_FILE`),
    before it runs one: it may only ask an authority for the deployment's server kit."""
    return Permissions(
        publish=(membership_subject(s, SERVER_JOIN),), subscribe=(_inbox("server", name),),
        notes=("gets, while its invite is active, what makes a server of the bus: the CA's key, the route secret "
               "and the members. A server holds every stream's data, so it is trusted with all of it; revoking the "
               "invite stops a join, not a server that joined (docs/operations.md: removing a server)",),
    )


def authority(name: str, s: Subjects) -> Permissions:
    """The process that owns the server's configuration (`computeall up`): applies membership changes. On a
    bus spanning machines every machine runs one, and they merge their members and grants in a key-value
    bucket at 3 replicas (`bus_sync.py`), asking each other to apply a change at once (`sync`)."""
    return Permissions(publish=(ANY_INBOX, membership_subject(s, SYNC), *manage_kv(security_bucket(s))),
                       subscribe=(f"{s.prefix}.sec.>", _inbox("authority", name)))


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
    "server": server,
    "user": user,
    "admin": admin,
    "authority": authority,
    "superuser": superuser,
}


# the roles whose reach into checkpoint buckets follows the session grants
GRANTED: frozenset[Role] = frozenset({"orchestrator", "pnode"})
# the roles whose allow-lists name each user of the deployment (the users' uploads buckets)
PER_USER: frozenset[Role] = frozenset({"orchestrator", "dataset", "pnode"})


def permissions(role: Role, name: str, subjects: Subjects, sessions: Sessions = (), users: Iterable[str] = ()) -> Permissions:
    """`sessions`: the checkpoint buckets a role of `GRANTED` reaches (no other role reaches any); `users`:
    the deployment's users, whom the lists of a `PER_USER` role name one by one."""
    reach = {**({"sessions": sessions} if role in GRANTED else {}), **({"users": tuple(users)} if role in PER_USER else {})}
    return ROLES[role](name, subjects, **reach)
