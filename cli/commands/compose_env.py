"""`computeall compose-env > .env`: the credentials of the docker compose deployment.

docker-compose.yml names every identity's public key and credential as a variable; this prints
them, creating the identities on first use in the data dir (so the host's CLI then connects as the
local user or the operator with `--data-dir`). Keep the file private: it holds the services' keys.
With `--nats-cluster 3` it picks the compose file's `cluster` profile (three clustered nats-servers)
instead of `single`, and gives the services, and the host's CLI, every server's URL. `--nats-port` and
`--monitor-port` publish on other host ports than 4222 and 8080, where those are taken.
"""

from __future__ import annotations

import argparse

from ..cluster_file import data_dir
from ..security.deployment import Security
from ..security.compose import CLIENT_PORT, MONITOR_PORT, compose_env


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compose-env", help="print the .env with the credentials docker-compose.yml needs")
    p.add_argument("--data-dir", default=None, help="where the identities are kept (default: $COMPUTEALL_DATA_DIR or .computeall)")
    p.add_argument("--nats-cluster", type=int, choices=(1, 3), default=1,
                   help="nats-servers on the bus: 1 (profile `single`) or 3 clustered (profile `cluster`)")
    p.add_argument("--nats-port", type=int, default=CLIENT_PORT, metavar="PORT",
                   help=f"the host port of the nats-server's client port (the cluster's: PORT, PORT+1, PORT+2; default {CLIENT_PORT})")
    p.add_argument("--monitor-port", type=int, default=MONITOR_PORT, metavar="PORT",
                   help=f"the host port of the monitor's HTTPS (default {MONITOR_PORT})")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    security = Security(data_dir(args.data_dir) / "security")
    print(compose_env(security, args.nats_cluster, args.nats_port, args.monitor_port), end="")
    return 0
