"""Who a client command acts as on the bus, and where the bus is.

A client command connects as a user; administrative ones (`user create`, `replay rebuild`) as the
operator. The credential is, in order: `--credential FILE` (or `$COMPUTEALL_CREDENTIAL`), else for a
user `--api-key KEY` (or `$COMPUTEALL_API_KEY`: the key's user, by the nkey derived from it), else the
local identity `computeall up` keeps in the data dir (`security/credentials/`), else none (a server
without authorization). `--nats URL` (or `$NATS_URL`) overrides where it connects, else
the credential's servers, else the running cluster's `cluster.json`.
"""

from __future__ import annotations

import argparse
import os
import sys

from computeall.protocol.bus import CREDENTIAL_ENV

API_KEY_ENV = "COMPUTEALL_API_KEY"
from computeall.protocol.credentials import Credential, CredentialError, Role

from .cluster_file import deployment_dir, resolve_nats_url
from .errors import UserError
from .security.deployment import LOCAL_USER, OPERATOR, Security


def add_credential_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--credential", default=None,
                        help=f"the credential file to connect with (default: ${CREDENTIAL_ENV}, else the data dir's)")


def add_user_arguments(parser: argparse.ArgumentParser) -> None:
    """How a user command says who it acts as: `--api-key`, else `--credential`, else the local user."""
    add_api_key_argument(parser, f"act as this key's user (default: ${API_KEY_ENV}, else the local user)")
    add_credential_argument(parser)


def add_api_key_argument(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--api-key", default=None, type=_api_key_in_argv, metavar="KEY", help=f"{help}; prefer ${API_KEY_ENV}")


def _api_key_in_argv(key: str) -> str:
    """Still accepted (a user's own key, on their own machine), loudly: `ps` shows it to every user."""
    print(f"computeall: warning: an API key on the command line is visible to every user of this machine (`ps`); "
          f"set ${API_KEY_ENV} instead", file=sys.stderr)
    return key


def user_credential(args: argparse.Namespace) -> Credential:
    return _credential(args, "user", LOCAL_USER)


def admin_credential(args: argparse.Namespace) -> Credential:
    return _credential(args, "admin", OPERATOR)


def deployment_security(directory: str | None) -> Security:
    """The security material of the deployment whose data dir is `directory` (default: the running one,
    `deployment_dir`)."""
    return Security(deployment_dir(directory) / "security")


def _credential(args: argparse.Namespace, role: Role, local_name: str) -> Credential:
    explicit = getattr(args, "credential", None) or os.environ.get(CREDENTIAL_ENV)
    api_key = (getattr(args, "api_key", None) or os.environ.get(API_KEY_ENV)) if role == "user" else None
    url = getattr(args, "nats", None) or os.environ.get("NATS_URL")
    directory = getattr(args, "data_dir", None)
    try:
        if explicit:
            return Credential.load(explicit).at(url)
        local = deployment_security(directory).local(role, local_name)
        if api_key:  # where and how to connect: as the local identity would, else --nats / cluster.json
            servers = local.servers if local and not url else [resolve_nats_url(url, directory)]
            return Credential.for_api_key(api_key, servers, local.tls if local else None)
    except CredentialError as exc:
        raise UserError(str(exc)) from None
    if local is not None:
        return local.at(url)
    return Credential(role=role, name=local_name, servers=[resolve_nats_url(url, directory)])
