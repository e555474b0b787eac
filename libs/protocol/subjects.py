"""Subject names: the one place that spells them.

Every subject starts with a configurable prefix (default ``ca``) so that two
deployments can share one NATS server without seeing each other.
"""

from __future__ import annotations

import os
import re

DEFAULT_PREFIX = "ca"
LOG_STREAM = "CA_LOG"
TEL_STREAM = "CA_TEL"

_TOKEN = re.compile(r"^[A-Za-z0-9_-]+$")
INBOX_ROOT = "_INBOX."


def is_inbox(subject: str | None) -> bool:
    """A reply subject a service may answer on. A requester names its reply subject itself: one
    naming a stream's subjects (`ca.evt...`) would have the service write its answer into the log."""
    return bool(subject) and subject.startswith(INBOX_ROOT)


def check_token(value: str, what: str) -> str:
    """A subject token may not contain dots, spaces or wildcards."""
    if not _TOKEN.match(value):
        raise ValueError(f"{what} {value!r} may only contain letters, digits, '_' and '-'")
    return value


class Subjects:
    """Builds every subject of one deployment."""

    def __init__(self, prefix: str | None = None) -> None:
        self.prefix = prefix or os.environ.get("COMPUTEALL_PREFIX", DEFAULT_PREFIX)

    # -- recorded in CA_LOG -------------------------------------------------
    def session_cmd(self, sid: str, user: str) -> str:
        """A user's command for a session: only that user's credential may publish here."""
        return f"{self.prefix}.cmd.{check_token(user, 'user name')}.session.{check_token(sid, 'session id')}"

    def session_evt(self, sid: str, type_: str) -> str:
        return f"{self.prefix}.evt.session.{check_token(sid, 'session id')}.{type_}"

    def session_evt_all(self, sid: str) -> str:
        return f"{self.prefix}.evt.session.{check_token(sid, 'session id')}.>"

    def pnode_evt(self, pid: str, type_: str) -> str:
        return f"{self.prefix}.evt.pnode.{check_token(pid, 'pnode id')}.{type_}"

    def pnode_evt_of_type(self, type_: str) -> str:
        """One event type of every PNode (e.g. each PNodeQuarantined)."""
        return f"{self.prefix}.evt.pnode.*.{type_}"

    def dataset_evt(self, name: str, type_: str) -> str:
        return f"{self.prefix}.evt.dataset.{check_token(name, 'dataset name')}.{type_}"

    def log_subjects(self) -> list[str]:
        return [f"{self.prefix}.cmd.>", f"{self.prefix}.evt.>"]

    # -- telemetry (CA_TEL) -------------------------------------------------
    def tel(self, pid: str, kind: str) -> str:
        return f"{self.prefix}.tel.{check_token(pid, 'pnode id')}.{kind}"

    def tel_all(self, kind: str) -> str:
        return f"{self.prefix}.tel.*.{check_token(kind, 'telemetry kind')}"

    def tel_subjects(self) -> list[str]:
        return [f"{self.prefix}.tel.>"]

    # -- not recorded ------------------------------------------------------
    def heartbeat(self, pid: str) -> str:
        return f"{self.prefix}.hb.{check_token(pid, 'pnode id')}"

    def heartbeat_all(self) -> str:
        return f"{self.prefix}.hb.*"

    def pnode_ctl(self, pid: str) -> str:
        """Orchestrator -> PNode requests (plan, step, apply, ...)."""
        return f"{self.prefix}.pn.{check_token(pid, 'pnode id')}.ctl"

    def pnode_tensor(self, dst: str, src: str) -> str:
        """Tensors to PNode `dst` from PNode `src` (activations, gradients, replica sums, check material):
        only `src` may publish here, so the subject says who sent a frame."""
        return f"{self.prefix}.pn.{check_token(dst, 'pnode id')}.tensor.{check_token(src, 'pnode id')}"

    def pnode_tensor_all(self, dst: str) -> str:
        """Every sender's tensors to PNode `dst`."""
        return f"{self.prefix}.pn.{check_token(dst, 'pnode id')}.tensor.*"

    def pnode_probe(self, pid: str) -> str:
        """A PNode's own loop through the bus: it publishes here and reads it back to time its link."""
        return f"{self.prefix}.pn.{check_token(pid, 'pnode id')}.probe"

    def orchestrator_heartbeat(self, orchestrator: str) -> str:
        """Orchestrators' liveness, so that one takes over the sessions of another that died."""
        return f"{self.prefix}.orch.hb.{check_token(orchestrator, 'orchestrator id')}"

    def orchestrator_heartbeat_all(self) -> str:
        return f"{self.prefix}.orch.hb.*"

    def session_created_all(self) -> str:
        return f"{self.prefix}.evt.session.*.SessionCreated"


def pnode_of(subjects: Subjects, subject: str) -> str:
    """The PNode a heartbeat (`<prefix>.hb.<pid>`) or telemetry (`<prefix>.tel.<pid>.<kind>`) subject
    belongs to: only that PNode may publish there, so a payload naming another is not believed."""
    prefix = subjects.prefix + "."
    tokens = subject[len(prefix):].split(".") if subject.startswith(prefix) else []
    if len(tokens) == 2 and tokens[0] == "hb" or len(tokens) == 3 and tokens[0] == "tel":
        return tokens[1]
    raise ValueError(f"{subject} is not a heartbeat or telemetry subject of prefix {subjects.prefix}")


def tensor_sender(subjects: Subjects, subject: str) -> str:
    """The PNode that sent a tensor frame, from its subject `<prefix>.pn.<dst>.tensor.<src>`: only
    `src` may publish there, so a frame is believed to be from nobody else."""
    prefix = subjects.prefix + "."
    tokens = subject[len(prefix):].split(".") if subject.startswith(prefix) else []
    if len(tokens) != 4 or tokens[0] != "pn" or tokens[2] != "tensor":
        raise ValueError(f"{subject} is not a tensor subject of prefix {subjects.prefix}")
    return tokens[3]


def command_sender(subjects: Subjects, subject: str) -> tuple[str, str]:
    """(user, session id) of a command subject `<prefix>.cmd.<user>.session.<sid>`: the user is who
    sent it, whatever the command's `actor` field says."""
    prefix = subjects.prefix + "."
    tokens = subject[len(prefix):].split(".") if subject.startswith(prefix) else []
    if len(tokens) != 4 or tokens[0] != "cmd" or tokens[2] != "session":
        raise ValueError(f"{subject} is not a session command subject of prefix {subjects.prefix}")
    return tokens[1], tokens[3]
