"""The one way any process connects to the bus: `connect(credential, name=...)`.

Services, PNodes, the CLI, the tests and the benchmarks all connect here, so what a connection
carries (nkey signature, inbox prefix, TLS trust) is decided in one place: `Credential.nats_options`.
Processes find their credential with `add_bus_arguments` / `credential_from_args`: `--credential
FILE`, else `$COMPUTEALL_CREDENTIAL`, and `--nats URL` (else `$NATS_URL`) overrides its servers.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from typing import Any

import nats
import nats.errors
from nats.aio.client import Client as NATS

from .credentials import Credential, CredentialError, Role

CREDENTIAL_ENV = "COMPUTEALL_CREDENTIAL"
INITIAL_ATTEMPTS = 5  # tries of a first connection (a server still starting, a network blip)
RETRY_S = 1.0
# A server that refuses a credential writes its -ERR and closes; nats-py, still flushing its CONNECT,
# may see the close first and report "Connection lost" instead. Asked again, the refusal is read.
HANDSHAKE_RETRIES = 2
# nats-server refuses a connection whose CONNECT it reads while it reloads its configuration (a member
# joined, a session's grants changed: several a minute on a busy bus), its users half applied ("authentication
# error" between "Reloaded: accounts" and "Reloaded server configuration" in its log). A reload takes a few ms.
REFUSAL_RETRIES = 2
REFUSAL_PAUSE_S = 0.25
log = logging.getLogger("computeall.bus")


class _TlsEofNotice(logging.Filter):
    """asyncio warns on every TLS connection nats-py closes ("returning true from eof_received() has
    no effect when using ssl"): harmless, and it drowned the CLI's output."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "eof_received() has no effect when using ssl" not in record.getMessage()


logging.getLogger("asyncio").addFilter(_TlsEofNotice())


class BusConnectError(ConnectionError):
    """The bus refused or could not be reached; the message says which server, as whom and why."""

    def __init__(self, message: str, refused: bool) -> None:
        super().__init__(message)
        self.refused = refused  # the server answered and refused the credential (it is running)


async def connect(credential: Credential, *, name: str, **options: Any) -> NATS:
    """A connection as `credential`'s identity; `options` are nats-py's (reconnects, callbacks).

    The first connection is tried here, a few times when reconnects are allowed, each try without
    nats-py's own retries: those retry a refused credential forever, and after a failed TLS
    handshake nats-py 2.16 stalls instead. A refused credential or an unreachable server is a
    `BusConnectError`; reconnects as asked apply once connected."""
    report = options.pop("error_cb", _log_error)
    connected = False

    async def error_cb(exc: Exception) -> None:
        if connected:  # before, a failed try is reported once, by this function's own error
            await report(exc)

    reconnect = options.pop("allow_reconnect", True)
    failure: BaseException | None = None
    refused = False
    refusals = 0
    for attempt in range(INITIAL_ATTEMPTS):
        if attempt:
            await asyncio.sleep(REFUSAL_PAUSE_S if refused else RETRY_S if reconnect else 0)
        try:
            nc = await nats.connect(name=name, allow_reconnect=False, error_cb=error_cb, **credential.nats_options(), **options)
        except (OSError, TimeoutError, nats.errors.Error) as exc:
            failure = exc
            refused = isinstance(exc, nats.errors.AuthorizationError) or "authorization" in str(exc).lower()
            if refused:
                refusals += 1
                if refusals > REFUSAL_RETRIES:
                    break  # refused again after any reload: the credential itself is refused
                continue
            if not reconnect and not (isinstance(exc, ConnectionResetError) and attempt < HANDSHAKE_RETRIES):
                break
            continue
        nc.options["allow_reconnect"] = reconnect
        connected = True
        return nc
    raise BusConnectError(_why(credential, failure), refused)


def replicas(nc: NATS) -> int:
    """How many copies the streams and buckets a service sets up keep: one per server the bus has,
    up to 3 (JetStream's RAFT needs a majority: 3 survive one server's loss). The servers are the
    connection's: its credential's URLs and those the server announced (its cluster's)."""
    return max(1, min(3, len(nc.servers)))


async def _log_error(exc: Exception) -> None:
    """nats-py's default logs every error with a traceback; a refused permission or a dropped
    connection is one line (the caller hears about a failed connect from `connect` itself)."""
    log.warning("nats: %s", exc)


def _why(credential: Credential, exc: BaseException) -> str:
    reason = str(exc) or type(exc).__name__
    if "authorization" in reason.lower() and not credential.nkey_seed:
        reason += " (this server admits only known identities: pass --credential FILE, or an invite with --join)"
    elif "authorization" in reason.lower() and credential.role == "user":
        reason += (" (the server knows no such API key: check it; `computeall user create NAME` makes one, the local "
                   "user's is in the data dir's security/local-api-key; or it was revoked)")
    elif "authorization" in reason.lower():
        reason += " (the server does not accept this credential: revoked, expired, or for another deployment)"
    return f"cannot connect to {', '.join(credential.servers)} as {credential.identity}: {reason}"


def add_bus_arguments(parser: argparse.ArgumentParser, *, nats_required: bool = False) -> None:
    """`--nats URL` and `--credential FILE`, the same on every process."""
    parser.add_argument("--nats", required=nats_required, default=None if nats_required else os.environ.get("NATS_URL"),
                        help="NATS URL, e.g. nats://127.0.0.1:4222 (default: $NATS_URL, else the credential's servers)")
    parser.add_argument("--credential", default=os.environ.get(CREDENTIAL_ENV),
                        help=f"this process's credential file (default: ${CREDENTIAL_ENV})")


def credential_from_args(args: argparse.Namespace, role: Role, name: str) -> Credential:
    return process_credential(args.credential, args.nats, role, name)


def process_credential(path: str | None, url: str | None, role: Role, name: str) -> Credential:
    """The credential in the file `path` (its servers overridden by `url`), else an anonymous one
    for `role`/`name` at `url`: enough for a server without authorization, refused by any other."""
    if path:
        credential = Credential.load(path)
        if credential.role != role:
            raise CredentialError(f"{path} is a {credential.role} credential; this process needs a {role} one")
        return credential.at(url)
    if not url:
        raise CredentialError(f"no bus to connect to: pass --nats URL or --credential FILE (or set ${CREDENTIAL_ENV})")
    return Credential(role=role, name=name, servers=[url])
