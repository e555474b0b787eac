"""Users and API keys.

A key is 32 random bytes (256 bits), so a plain SHA-256 of it cannot be brute-forced and a
slow password hash (scrypt) would only slow every request down. Only the hash is stored. The
active hashes are cached in memory, so resolving a key costs one dict lookup; create and
revoke update the cache right after their transaction commits, so a revoked key stops
working at once.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import time
import uuid
from pathlib import Path

import duckdb

from .db import Database

KEY_PREFIX = "ca_"
DEFAULT_USER = "local"
DEFAULT_KEY_FILE = "local-api-key"


def hash_key(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


class Auth:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._active: dict[str, str] = {}  # key hash -> user

    async def load(self) -> None:
        rows = await self.db.read(
            lambda cur: cur.execute("SELECT key_hash, user_name FROM api_keys WHERE revoked_ts IS NULL").fetchall()
        )
        self._active = dict(rows)

    def user_for(self, api_key: str | None) -> str | None:
        if not api_key:
            return None
        return self._active.get(hash_key(api_key))

    async def create_key(self, user: str, label: str = "") -> tuple[str, str]:
        """A new key for `user` (created if missing): (key id, the key itself, shown once)."""
        key, key_id = new_key(), uuid.uuid4().hex

        def insert(con: duckdb.DuckDBPyConnection) -> None:
            now = time.time()
            con.execute("INSERT INTO users VALUES (?, ?) ON CONFLICT DO NOTHING", [user, now])
            con.execute(
                "INSERT INTO api_keys VALUES (?, ?, ?, ?, ?, NULL)", [key_id, user, hash_key(key), label, now]
            )

        await self.db.write(insert)
        self._active[hash_key(key)] = user
        return key_id, key

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
        return True

    async def default_key(self, data_dir: Path) -> str:
        """The local user's key, kept in `DATA_DIR/local-api-key` (mode 0600) so that every
        `computeall up` prints the same one; a fresh key replaces it if it was revoked."""
        path = data_dir / DEFAULT_KEY_FILE
        if path.exists():
            key = path.read_text().strip()
            if self.user_for(key) == DEFAULT_USER:
                return key
        _, key = await self.create_key(DEFAULT_USER, label="default")
        fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(key + "\n")
        path.with_suffix(".tmp").replace(path)
        return key
