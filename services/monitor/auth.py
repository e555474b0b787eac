"""Users and API keys.

A key is `ca.<user>.<256 random bits>` (`computeall.protocol.credentials.new_api_key`), so a plain
SHA-256 of it cannot be brute-forced and a slow password hash (scrypt) would only slow every
request down. Only the hash is stored, with the public nkey derived from the key: the server's
configuration lists that nkey, so the key also authenticates its user's NATS connections. The
active hashes are cached in memory, so resolving a key costs one dict lookup; create and revoke
update the cache right after their transaction commits and then call `on_change` (which tells
the authority: a revoked key's connections are closed within seconds). Every login goes through
`login`, which counts wrong keys per client and per key prefix (`login_limits`).
"""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import duckdb

from computeall.protocol.credentials import NAME_PATTERN, api_key_seed, api_key_user, new_api_key, nkey_public
from computeall.protocol.membership_api import UserKey

from .db import Database
from .login_limits import LoginLimiter



def hash_key(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


class Auth:
    def __init__(self, db: Database, on_change: Callable[[], Awaitable[None]] | None = None) -> None:
        self.db = db
        self.on_change = on_change
        self._active: dict[str, str] = {}  # key hash -> user
        self.limiter = LoginLimiter()

    async def load(self) -> None:
        rows = await self.db.read(
            lambda cur: cur.execute("SELECT key_hash, user_name FROM api_keys WHERE revoked_ts IS NULL").fetchall()
        )
        self._active = dict(rows)

    def user_for(self, api_key: str | None) -> str | None:
        if not api_key:
            return None
        return self._active.get(hash_key(api_key))

    def login(self, api_key: str | None, client: str) -> str | None:
        """The user of `api_key` asked by `client` (an address or a NATS identity); None for no key or a
        wrong one (counted); `TooManyAttempts`, before the key is looked at, when the client or the
        key's prefix failed too often lately."""
        if not api_key:
            return None
        self.limiter.check(client, api_key)
        user = self.user_for(api_key)
        if user is None:
            self.limiter.failed(client, api_key)
        return user

    async def create_key(self, user: str, label: str = "") -> tuple[str, str]:
        """A new key for `user` (created if missing): (key id, the key itself, shown once)."""
        key = new_api_key(user)
        key_id = await self._insert(user, key, label)
        return key_id, key

    async def register_local_key(self, path: Path) -> None:
        """The local user's key, made by `computeall up` and kept only in `path` (mode 0600):
        registered once, so it logs into the dashboard. Nobody asks the monitor for it."""
        key = path.read_text().strip()
        if hash_key(key) in self._active:
            return
        if await self.db.read(lambda cur: cur.execute("SELECT 1 FROM api_keys WHERE key_hash = ?", [hash_key(key)]).fetchone()):
            return  # known and revoked: it stays revoked
        await self._insert(api_key_user(key), key, "local")

    async def _insert(self, user: str, key: str, label: str) -> str:
        key_id = uuid.uuid4().hex

        def insert(con: duckdb.DuckDBPyConnection) -> None:
            now = time.time()
            con.execute("INSERT INTO users VALUES (?, ?) ON CONFLICT DO NOTHING", [user, now])
            con.execute(
                "INSERT INTO api_keys (id, user_name, key_hash, label, created_ts, revoked_ts, nkey) "
                "VALUES (?, ?, ?, ?, ?, NULL, ?)",
                [key_id, user, hash_key(key), label, now, nkey_public(api_key_seed(key))],
            )

        await self.db.write(insert)
        self._active[hash_key(key)] = user
        await self._changed()
        return key_id

    async def revoke_key(self, user: str, key_id: str) -> bool:
        def revoke(con: duckdb.DuckDBPyConnection) -> str | None:
            row = con.execute(
                "UPDATE api_keys SET revoked_ts = ? WHERE id = ? AND user_name = ? AND revoked_ts IS NULL "
                "RETURNING key_hash",
                [time.time(), key_id, user],
            ).fetchone()
            return row[0] if row else None

        key_hash = await self.db.write(revoke)
        if key_hash is None:
            return False
        self._active.pop(key_hash, None)
        await self._changed()
        return True

    async def nats_identities(self) -> list[UserKey]:
        """The NATS identity of every active key (keys older than nkeys have none)."""
        rows = await self.db.read(lambda cur: cur.execute(
            "SELECT user_name, nkey, id FROM api_keys WHERE revoked_ts IS NULL AND nkey IS NOT NULL ORDER BY created_ts"
        ).fetchall())
        # a user named before names became subject tokens (`a.b`, `a@b`) logs into the dashboard only
        return [UserKey(user=user, nkey=nkey, key_id=key_id) for user, nkey, key_id in rows if re.match(NAME_PATTERN, user)]

    async def _changed(self) -> None:
        if self.on_change is not None:
            await self.on_change()
