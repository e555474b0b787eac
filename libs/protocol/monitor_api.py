"""Monitor requests on `<prefix>.mon.<verb>` (NATS request/reply, not recorded).

Only the monitor opens its DuckDB file, so clients (the CLI) reach users, keys and rebuilds
through these requests. Every reply is a `MonitorReply`: `ok` true with the verb's fields, or
`ok` false with an `error` a person can act on, never silence.

Who may ask is the server's business (the credentials' permissions): `user.create` and `rebuild`
only the operator, `auth` any user. No request hands out an existing key: the local user's is in
a file only `computeall up`'s data dir holds. The monitor answers only on an identity's own inbox
(`_INBOX.<role>.<name>.`), and counts that identity's wrong keys for `auth` as it counts a
dashboard login's: too many, and it answers "too many failed logins ...; retry in N s".
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from .credentials import NAME_PATTERN
from .responder import Api, Endpoint, by_inbox
from .subjects import Subjects

USER_CREATE = "user.create"
AUTH = "auth"
REBUILD = "rebuild"

USER_NAME_PATTERN = NAME_PATTERN  # a user's name is a subject token: `ca.cmd.<user>.session.<sid>`


def monitor_subject(subjects: Subjects, verb: str) -> str:
    return f"{subjects.prefix}.mon.{verb}"


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UserCreate(_Request):
    """Create a user (or add a key to an existing one) and return a fresh key, shown once."""

    name: str = Field(..., pattern=USER_NAME_PATTERN)


class Auth(_Request):
    """Resolve an API key to its user."""

    api_key: str


class Rebuild(_Request):
    """Drop every projected row and project the whole log again (users and keys are kept)."""


class MonitorReply(BaseModel):
    ok: bool = True
    error: str | None = None
    user: str | None = None
    api_key: str | None = None
    # rebuild: rows in the events table afterwards, and the last stream sequences projected
    events: int | None = None
    positions: dict[str, int] | None = None


API: Api[str] = Api("the monitor", MonitorReply, (
    Endpoint(USER_CREATE, UserCreate, "create a user or add a key; the key is shown once"),
    Endpoint(AUTH, Auth, "resolve an API key to its user"),
    Endpoint(REBUILD, Rebuild, "re-project the whole log"),
), listen=lambda subjects, verb: (monitor_subject(subjects, verb),), asker=by_inbox)
