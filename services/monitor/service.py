"""The monitor process: projector, NATS API, retention and the HTTP server in one event loop.

One process owns the DuckDB file, so the projector and the GraphQL server live together.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import socket
import time

import nats.errors
import uvicorn
from nats.aio.client import Client as NATS

from computeall.protocol import bus, membership_api
from computeall.protocol import monitor_api as api
from computeall.protocol.eventlog import EventLog, ensure_streams
from computeall.protocol.limits import GRAPHQL_REQUEST_BYTES
from computeall.protocol.responder import Refused, Responder
from computeall.protocol.subjects import Subjects

from . import retention
from .auth import Auth
from .context import Services
from .db import Database
from .ingest import Ingestor
from .login_limits import TooManyAttempts
from .pubsub import PubSub
from .rebuild import rebuild
from .server import MonitorApp
from .settings import MonitorSettings

log = logging.getLogger("computeall.monitor")


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the monitor stops it in its own order."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield


class Monitor:
    def __init__(self, settings: MonitorSettings) -> None:
        self.settings = settings
        self.subjects = Subjects(settings.prefix)
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        s = self.settings
        s.data_dir.mkdir(parents=True, exist_ok=True)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        nc: NATS = await bus.connect(s.bus_credential(), name="computeall-monitor", max_reconnect_attempts=-1)
        db = Database(s.db_path)
        try:
            js = nc.jetstream()
            await ensure_streams(js, self.subjects, replicas=bus.replicas(nc))
            auth = Auth(db)
            await auth.load()
            auth.on_change = lambda: self._sync_users(nc, auth)
            if s.local_key_file:
                await auth.register_local_key(s.local_key_file)
            await self._sync_users(nc, auth)
            pubsub = PubSub()
            ingestor = Ingestor(db, nc, js, self.subjects, pubsub)
            await ingestor.start()
            services = Services(db, auth, EventLog(js, self.subjects), pubsub, s.heartbeat_timeout_s)
            responder = Responder(nc, self.subjects, api.API, self._handlers(db, auth, ingestor), concurrent=False,
                                  refusals=(TooManyAttempts,))
            await responder.start()
            retention_task = asyncio.create_task(self._retention(db))
            try:
                await self._serve_http(MonitorApp(services, s.web_dir))
            finally:
                retention_task.cancel()
                await responder.stop()
                await ingestor.stop()
        finally:
            # close, not drain: every publish was already acked, and draining would wait on the
            # pull consumers' outstanding fetch requests
            await nc.close()
            db.close()
            s.address_file.unlink(missing_ok=True)
            log.info("monitor stopped")

    def _handlers(self, db: Database, auth: Auth, ingestor: Ingestor) -> dict:
        async def user_create(req: api.UserCreate, asker: str) -> api.MonitorReply:
            _, key = await auth.create_key(req.name, label="cli")
            return api.MonitorReply(user=req.name, api_key=key)

        async def authenticate(req: api.Auth, asker: str) -> api.MonitorReply:
            user = auth.login(req.api_key, asker)  # too many failures: `TooManyAttempts`, answered as it stands
            if user is None:
                raise Refused("unknown or revoked API key")
            return api.MonitorReply(user=user)

        async def do_rebuild(req: api.Rebuild, asker: str) -> api.MonitorReply:
            return await rebuild(db, ingestor)

        return {api.USER_CREATE: user_create, api.AUTH: authenticate, api.REBUILD: do_rebuild}

    async def _sync_users(self, nc: NATS, auth: Auth) -> None:
        """Tell the authority which API keys may connect; without one (someone else's NATS server,
        configured by hand) the keys log into the dashboard only."""
        try:
            await membership_api.sync_users(nc, self.subjects, await auth.nats_identities())
        except nats.errors.NoRespondersError:
            log.info("no authority answers %s: API keys will not authenticate NATS connections", membership_api.USERS)
        except (nats.errors.Error, membership_api.MembershipError) as exc:
            log.warning("could not tell the authority about the API keys: %s", exc)

    async def _retention(self, db: Database) -> None:
        s = self.settings
        while True:
            await asyncio.sleep(s.retention_every_s)
            try:
                await db.write(retention.compact, time.time(), s.raw_telemetry_s, s.telemetry_bucket_s, s.telemetry_keep_s)
            except Exception:
                log.exception("telemetry retention failed; retrying at the next interval")

    async def _serve_http(self, app: MonitorApp) -> None:
        s = self.settings
        sock = socket.socket(socket.AF_INET6 if ":" in s.host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # No Nagle: a response goes out in two writes (head, body), and a client that delays its
        # ACK would otherwise stall every request by ~40 ms. Accepted sockets inherit the option.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((s.host, s.port))
        # a websocket message over the request limit closes the connection before it is parsed
        tls = {"ssl_certfile": str(s.tls_cert), "ssl_keyfile": str(s.tls_key)} if s.tls_cert else {}
        config = uvicorn.Config(app, lifespan="off", log_level="warning", ws_max_size=GRAPHQL_REQUEST_BYTES, **tls)
        server = _Server(config)
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not serving.done():
            await asyncio.sleep(0.01)
        if serving.done():
            serving.result()  # raises why it could not start
        host = "127.0.0.1" if s.host in ("0.0.0.0", "::") else s.host
        url = f"{'https' if tls else 'http'}://{host}:{sock.getsockname()[1]}"
        tmp = s.address_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"url": url}))
        tmp.replace(s.address_file)
        log.info("monitor serving at %s", url)
        await self.stopping.wait()
        server.should_exit = True
        await serving
