"""Tests connect the way every process does: as one identity of the deployment (`bus.connect`)."""

from __future__ import annotations

from nats.aio.client import Client as NATS

from computeall.cli.supervisor import Credentials
from computeall.protocol import bus
from computeall.protocol.credentials import Role
from computeall.protocol.subjects import Subjects


async def connect_as(issuer: Credentials, role: Role = "user", name: str | None = None) -> NATS:
    """Connected as that identity of the deployment `issuer` (an `EmbeddedNats`, or a running
    cluster's `supervisor.credentials`) hands out."""
    return await bus.connect(issuer.credential(role, name), name=f"test-{role}-{name or role}")


def publisher_of(subject: str, subjects: Subjects | None = None) -> tuple[Role, str | None]:
    """Who may publish `subject`: session and PNode events the orchestrator, dataset events the
    dataset service, telemetry the PNode it is about."""
    tokens = subject.split(".")[len((subjects or Subjects()).prefix.split(".")):]
    if tokens[:1] == ["tel"]:
        return "pnode", tokens[1]
    if tokens[:2] == ["evt", "dataset"]:
        return "dataset", None
    if tokens[:1] == ["evt"]:
        return "orchestrator", None
    raise ValueError(f"tests publish only events and telemetry, not {subject}")
