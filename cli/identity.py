"""Who a client command acts as on the bus, and where the bus is.

A client command connects as a user; administrative ones (`user create`, `replay rebuild`) as the
operator. The credential is, in order: `--credential FILE` (or `$COMPUTEALL_CREDENTIAL`), else the
local identity `computeall up` keeps in the data dir (`security/credentials/`), else none (a
server without authorization). `--nats URL` (or `$NATS_URL`) overrides where it connects, else
the credential's servers, else the running cluster's `cluster.json`.
"""

from __future__ import annotations

import argparse
import os

from computeall.protocol.bus import CREDENTIAL_ENV
from computeall.protocol.credentials import Credential, CredentialError, Role

from .cluster_file import data_dir, resolve_nats_url
from .errors import UserError
from .security.deployment import LOCAL_USER, OPERATOR, Security


def add_credential_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--credential", default=None,
                        help=f"the credential file to connect with (default: ${CREDENTIAL_ENV}, else the data dir's)")


def user_credential(args: argparse.Namespace) -> Credential:
    return _credential(args, "user", LOCAL_USER)


def admin_credential(args: argparse.Namespace) -> Credential:
    return _credential(args, "admin", OPERATOR)


def deployment_security(directory: str | None) -> Security:
    """The security material of the deployment whose data dir is `directory` (default `.computeall`)."""
    return Security(data_dir(directory) / "security")


def _credential(args: argparse.Namespace, role: Role, local_name: str) -> Credential:
    explicit = getattr(args, "credential", None) or os.environ.get(CREDENTIAL_ENV)
    url = getattr(args, "nats", None) or os.environ.get("NATS_URL")
    try:
        if explicit:
            return Credential.load(explicit).at(url)
        local = deployment_security(getattr(args, "data_dir", None)).local(role, local_name)
    except CredentialError as exc:
        raise UserError(str(exc)) from None
    if local is not None:
        return local.at(url)
    return Credential(role=role, name=local_name, servers=[resolve_nats_url(url, getattr(args, "data_dir", None))])
