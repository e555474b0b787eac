"""The monitor's settings: command-line flags, validated once at the boundary."""

from __future__ import annotations

import argparse
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError, model_validator

from computeall.protocol.bus import add_bus_arguments, process_credential
from computeall.protocol.credentials import Credential
from computeall.protocol.telemetry import HEARTBEAT_TIMEOUT_S

# the built dashboard, when this is a source checkout (services/monitor -> repo root)
DEFAULT_WEB_DIR = Path(__file__).resolve().parents[2] / "web" / "dist"


class MonitorSettings(BaseModel):
    nats: str | None = None
    credential: str | None = None
    local_key_file: Path | None = Field(None, description="the local user's API key, made by `computeall up`")
    data_dir: Path
    host: str = "127.0.0.1"
    port: int = Field(0, ge=0, le=65535)
    tls_cert: Path | None = Field(None, description="serve HTTPS with this certificate (PEM), and --tls-key")
    tls_key: Path | None = Field(None, description="the certificate's private key (PEM)")
    prefix: str | None = None
    web_dir: Path = DEFAULT_WEB_DIR
    heartbeat_timeout_s: float = Field(HEARTBEAT_TIMEOUT_S, gt=0, description="a PNode silent this long reads as lost")
    raw_telemetry_s: float = Field(900.0, gt=0, description="raw telemetry younger than this is kept as is")
    telemetry_bucket_s: float = Field(60.0, gt=0, description="older telemetry is folded into buckets this wide")
    telemetry_keep_s: float = Field(30 * 86400.0, gt=0, description="folded telemetry older than this is dropped")
    retention_every_s: float = Field(60.0, gt=0)

    @model_validator(mode="after")
    def _tls_whole(self) -> "MonitorSettings":
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("--tls-cert and --tls-key go together: give both (HTTPS) or neither (HTTP)")
        return self

    def bus_credential(self) -> Credential:
        return process_credential(self.credential, self.nats, "monitor", "monitor")

    @property
    def db_path(self) -> Path:
        return self.data_dir / "monitor.duckdb"

    @property
    def address_file(self) -> Path:
        return self.data_dir / "monitor.json"


def parse_args(argv: list[str] | None = None) -> MonitorSettings:
    parser = argparse.ArgumentParser(prog="python -m computeall.monitor", description="computeall monitor")
    add_bus_arguments(parser)
    parser.add_argument("--local-key-file", type=Path, default=None, help="the local user's API key file, to register")
    parser.add_argument("--data-dir", required=True, type=Path, help="holds monitor.duckdb and monitor.json")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (see monitor.json)")
    parser.add_argument("--tls-cert", type=Path, default=None, help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--tls-key", type=Path, default=None, help="the certificate's private key (PEM, mode 0600)")
    parser.add_argument("--prefix", default=None, help="subject prefix (default: $COMPUTEALL_PREFIX or ca)")
    parser.add_argument("--web-dir", type=Path, default=DEFAULT_WEB_DIR, help="the built dashboard")
    parser.add_argument("--heartbeat-timeout", type=float, default=HEARTBEAT_TIMEOUT_S, dest="heartbeat_timeout_s")
    parser.add_argument("--raw-telemetry", type=float, default=900.0, dest="raw_telemetry_s",
                        help="seconds of raw telemetry to keep before folding it into buckets")
    parser.add_argument("--telemetry-bucket", type=float, default=60.0, dest="telemetry_bucket_s")
    parser.add_argument("--telemetry-keep", type=float, default=30 * 86400.0, dest="telemetry_keep_s")
    parser.add_argument("--retention-every", type=float, default=60.0, dest="retention_every_s")
    try:
        return MonitorSettings(**vars(parser.parse_args(argv)))
    except ValidationError as exc:
        parser.error("; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors()))
