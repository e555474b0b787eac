"""`computeall up`: start NATS (when none is reachable) and every service; keep them running.

Ctrl-C or SIGTERM stops everything cleanly. With `--train NETWORK` it also creates a
session and shows its progress (what `make demo` does). With a leaf invite token (`--leaf-file PATH`,
`--leaf -` for stdin, or `$COMPUTEALL_LEAF_TOKEN`) it runs a remote site instead: a leaf nats-server
linked to the hub and the site's PNodes (`cli/leaf_site.py`).

`--public --nats-cluster 3` runs this machine's server of a bus that spans three machines and waits for
the other two (`cli/bus_machine.py`); on each of them a server invite (`--join-bus-file PATH`,
`--join-bus -`, or `$COMPUTEALL_BUS_TOKEN`) runs its server, its authority, a standby orchestrator, a
dataset service and `--pnodes N` PNodes (`_joined_services`).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path
from urllib.parse import urlsplit

from computeall.protocol.credentials import Credential
from computeall.protocol.fair_share import add_limit_arguments, limit_argv, limits_from_args
from computeall.protocol.invites import Invite, InviteError
from computeall.protocol.secret_args import BUS, LEAF, SecretArgError
from computeall.protocol.session_state import SessionState, fold
from computeall.protocol.session_status import SessionStatus

from ..client import Client, connect
from ..data_upload import with_sent_data
from ..cluster_file import ClusterInfo, data_dir, forget_running, read, record_running, running
from ..embedded import wait_for_services
from ..errors import UserError
from ..follow import follow_session, start_session
from ..session_view import session_events
from ..bus_machine import SERVERS, MachineServer, host_server_name, this_server
from ..leaf_site import LeafServer, site_pnodes
from ..nats_cluster import NatsCluster
from ..nats_server import env_url, port_free, url_reachable
from ..security.authority import Authority
from ..security.bus_join import JoinRefused, ask_to_join, install
from ..security.deployment import LOCAL_USER, Security
from ..security.leafnodes import LEAF_PORT
from ..supervisor import ServiceSpec, Supervisor, add_processes_on_machine, default_services, pnode_services
from ..tensorboard_log import add_tensorboard_argument
from .run import add_training_args, session_config

PUBLIC_PORT = 4222


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("up", help="start the whole system on this machine and keep it running")
    p.add_argument("--pnodes", type=int, default=None,
                   help="PNode processes to start here (default 3; with --leaf, every PNode the invite names)")
    add_processes_on_machine(p)
    p.add_argument("--data-dir", default=None, help="default: $COMPUTEALL_DATA_DIR or .computeall")
    p.add_argument("--nats", default=None, help="use this NATS server instead of starting one")
    reach = p.add_mutually_exclusive_group()
    reach.add_argument("--public", action="store_const", const=f"0.0.0.0:{PUBLIC_PORT}", dest="listen",
                       help=f"let other machines join: NATS listens on every address, port {PUBLIC_PORT}, with TLS")
    reach.add_argument("--listen", metavar="HOST:PORT", default=None,
                       help="let other machines join through this address (TLS); default: 127.0.0.1 only")
    LEAF.add_to(reach, "run a remote site: a leaf nats-server linked to the hub, and the site's PNodes, with the "
                       "token of `computeall invite leaf` on the hub")
    p.add_argument("--leaf-listen", metavar="HOST:PORT", default=None,
                   help=f"accept remote sites' leaf servers here (TLS; default with --public: 0.0.0.0:{LEAF_PORT})")
    p.add_argument("--nats-cluster", type=int, default=1, metavar="N",
                   help="run N nats-servers clustered over routes, the event log and buckets at min(N, 3) replicas "
                        "(3: any one server may die); a data dir started with 1 moves to 3 (docs/operations.md). "
                        f"With --public or --listen: this machine's server of a bus spanning {SERVERS} machines, "
                        "which waits for the servers `computeall invite server` invites")
    BUS.add_to(p, "run one of the servers of a bus spanning machines, with the token of `computeall invite server` "
                  "(and a standby orchestrator, a dataset service and --pnodes N PNodes)")
    p.add_argument("--server-name", default=None, metavar="NAME",
                   help="this machine's server in a bus spanning machines (default: its host name; a joining "
                        "machine's is its invite's)")
    p.add_argument("--route-listen", metavar="HOST:PORT", default=None,
                   help="where the other servers of a bus spanning machines reach this one (TLS; default: the "
                        "listen host, port 6222)")
    p.add_argument("--advertise", metavar="HOST", default=None,
                   help="the address the other servers dial (default: this machine's first address)")
    p.add_argument("--monitor-port", type=int, default=0,
                   help="dashboard/GraphQL port (default: the one of the last run from this data dir when it is free, "
                        "else a free one)")
    p.add_argument("--train", metavar="NETWORK", default=None, help="also create a session for this network YAML")
    add_tensorboard_argument(p)
    p.add_argument("--data-root", action="append", default=[], metavar="DIR",
                   help="let the dataset service read files under DIR as they are (repeatable; others are uploaded)")
    add_training_args(p)
    add_limit_arguments(p, with_defaults=False)
    p.set_defaults(func=lambda args: asyncio.run(up(args)))


async def up(args: argparse.Namespace) -> int:
    if LEAF.given(args.leaf):
        return await _site(args)
    joining = BUS.given(args.join_bus)
    spanning = joining or (args.nats_cluster > 1 and args.listen is not None)
    args.pnodes = (0 if joining else 3) if args.pnodes is None else args.pnodes
    try:
        limits = limits_from_args(args)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    directory = data_dir(args.data_dir)
    existing = read(directory)
    if running(existing):
        raise UserError(f"computeall is already running from {directory} (NATS {existing.nats}); stop it first")
    if joining and (args.nats or args.train or args.nats_cluster != 1):
        raise UserError(f"a server invite ({BUS.ways()}) runs one of the servers of the bus it names: leave out "
                        "--nats, --train and --nats-cluster")
    config = None
    if args.train:
        args.network = args.train
        config = session_config(args, min_pnodes=max(1, args.pnodes))

    nats_server = None
    url = args.nats or env_url()
    if url and not url_reachable(url):
        raise UserError(f"NATS at {url} is not reachable; leave out --nats/NATS_URL to start one here")
    leaf_listen = args.leaf_listen or (f"0.0.0.0:{LEAF_PORT}" if args.listen == f"0.0.0.0:{PUBLIC_PORT}" else None)
    if url:  # someone else's server: its own configuration says who may connect
        supervisor = Supervisor(directory, url)
        local_user = Credential(role="user", name=LOCAL_USER).at(url)
    else:
        try:
            if spanning:
                nats_server = await _machine_server(args, directory, leaf_listen)
            else:
                nats_server = NatsCluster(directory, args.nats_cluster, listen=args.listen, leaf_listen=leaf_listen).start()
        except ValueError as exc:
            raise UserError(str(exc)) from None
        url = nats_server.url
        supervisor = Supervisor(directory, url, nats_server)
        supervisor.public_urls = nats_server.public_urls()
        supervisor.public_leaf_urls = nats_server.public_leaf_urls()
        local_user = nats_server.credential("user")

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(Authority(nats_server).run())] if nats_server else []
    try:
        if spanning:
            supervisor.announce()  # `computeall invite server` reads the addresses from it
            if not await _wait_for_servers(nats_server, stop):
                return 0
        if joining:
            services = _joined_services(nats_server.name, args, limit_argv(limits))
        else:
            services = default_services(args.pnodes, monitor_port=_dashboard_port(args.monitor_port, existing),
                                        data_roots=args.data_root, processes_on_machine=args.processes_on_machine,
                                        orchestrator_args=limit_argv(limits))
        if nats_server is None:  # no authority here to follow placement: the server's own configuration grants buckets
            services = [s.with_arg("--storage-grants", "every") if s.kind == "orchestrator" else s for s in services]
        supervisor.start(services)
        tasks.append(asyncio.create_task(supervisor.watch()))
        async with connect(local_user, reconnect=True) as client:
            await wait_for_services(client)
            supervisor.announce()
            record_running(directory)  # commands in other directories find this deployment
            key = nats_server.security.local_api_key() if nats_server else None
            if any(s.kind == "monitor" for s in services):
                await _wait_for_monitor(supervisor, stop)
            print(f"computeall is up ({args.pnodes} PNodes); Ctrl-C stops it")
            print(f"  NATS       {url}" + (f" ({args.nats_cluster} servers, clustered)" if nats_server and args.nats_cluster > 1 else ""))
            if supervisor.public_urls:
                print(f"  joinable   {', '.join(supervisor.public_urls)}   (`computeall invite pnode` makes a token)")
            if supervisor.public_leaf_urls:
                print(f"  sites      {', '.join(supervisor.public_leaf_urls)}   (`computeall invite leaf` makes a token)")
            if supervisor.monitor_url or any(s.kind == "monitor" for s in services):
                print(f"  dashboard  {supervisor.monitor_url or '(the monitor did not start; see logs)'}")
            if key:
                print(f"  API key    {key}   (user 'local'; paste it into the dashboard)")
            print(f"  logs       {directory / 'logs'}")
            resumed = await _running_sessions(client)
            for state in resumed:
                print(f"  resumes    session {state.id} at step {state.checkpoint_step}/{state.config.steps} "
                      f"(its newest checkpoint; {state.next_step} steps were recorded)")
            sys.stdout.flush()
            if config:
                await _train(client, config, stop, args.tensorboard, resumed)
            await stop.wait()
    finally:
        for task in tasks:
            task.cancel()
        print("stopping: running sessions checkpoint first (at most about a minute)...", file=sys.stderr)
        forget_running(directory)
        supervisor.stop()
        if nats_server:
            nats_server.stop()
    return 0


async def _machine_server(args: argparse.Namespace, directory: Path, leaf_listen: str | None) -> MachineServer:
    """This machine's server of a bus spanning machines, started: the first machine's, one that joined
    before (started again), or one joining now with its invite (after the kit is in its data dir)."""
    if args.nats_cluster not in (1, SERVERS) or (args.nats_cluster == 1 and not BUS.given(args.join_bus)):
        raise ValueError(f"a bus spanning machines runs {SERVERS} servers, one per machine: --nats-cluster {SERVERS}")
    security = Security(directory / "security")
    listen = args.listen or f"0.0.0.0:{PUBLIC_PORT}"
    name = this_server(security)
    invite = None
    if BUS.given(args.join_bus) and name is None:
        try:
            invite = Invite.from_token(BUS.read(args.join_bus), expect="server")
        except (InviteError, SecretArgError) as exc:
            raise UserError(str(exc)) from None
        name = invite.name
    server = MachineServer(directory, name or args.server_name or host_server_name(), listen, leaf_listen,
                           args.route_listen, args.advertise, security)
    if invite is not None:
        try:
            kit = await ask_to_join(invite, server.record(), security.subjects)
        except JoinRefused as exc:
            raise UserError(f"could not join the bus at {', '.join(invite.servers)}: {exc}") from None
        install(kit, security)
    await asyncio.to_thread(server.start)
    return server


async def _wait_for_servers(server: MachineServer, stop: asyncio.Event) -> bool:
    """Until the bus has its servers (False: stopped before); says what to do while some were never invited."""
    known = len(server.roster.servers.read().servers)
    print(f"nats-server {server.name} is up at {', '.join(server.public_urls())}; waiting for the bus's {SERVERS} "
          f"servers ({known} known)")
    if known < SERVERS:
        print("  on this machine: computeall invite server --name NAME --json   (a token per other machine)")
        print("  on each other:   computeall up --join-bus-file TOKEN_FILE [--pnodes N]")
    sys.stdout.flush()
    await asyncio.to_thread(server.wait_for_servers, SERVERS, None, stop.is_set)
    return not stop.is_set()


def _joined_services(server: str, args: argparse.Namespace, orchestrator_args: list[str]) -> list[ServiceSpec]:
    """What a machine that joined the bus runs beside its server: a standby orchestrator (it drives what
    an orchestrator that died drove, and takes commands once no active one is left), a dataset service,
    and its PNodes, named after its server (`<server>-0`, ...) as a site's are."""
    roots = [arg for root in args.data_root for arg in ("--data-root", str(Path(root).resolve()))]
    return [ServiceSpec(f"orchestrator-{server}", "orchestrator", ["--standby", *orchestrator_args]),
            ServiceSpec(f"dataset-{server}", "dataset", roots),
            *pnode_services([f"{server}-{i}" for i in range(args.pnodes)], args.processes_on_machine)]


async def _site(args: argparse.Namespace) -> int:
    """A remote site: the leaf server, linked to the hub, and the site's PNodes on it, until stopped."""
    if args.nats or args.train or args.leaf_listen or args.nats_cluster != 1 or args.listen:
        raise UserError(f"a leaf token ({LEAF.ways()}) runs a remote site's leaf server and PNodes only: leave out "
                        "--nats, --train, --leaf-listen, --nats-cluster, --public and --listen")
    try:
        invite = Invite.from_token(LEAF.read(args.leaf), expect="leaf")
        names = site_pnodes(invite, args.pnodes)
    except (InviteError, SecretArgError, ValueError) as exc:
        raise UserError(str(exc)) from None
    directory = data_dir(args.data_dir)
    server = LeafServer(directory, invite)
    supervisor = Supervisor(directory, server.url, server)
    try:
        server.start().wait_linked()
        supervisor.start(pnode_services(names, args.processes_on_machine))
        supervisor.announce()
        print(f"site {invite.name} is up ({len(names)} PNodes: {', '.join(names)}); Ctrl-C stops it")
        print(f"  leaf server  {server.url}, linked to {', '.join(invite.servers)}")
        print(f"  logs         {directory / 'logs'}")
        sys.stdout.flush()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        watch = asyncio.create_task(supervisor.watch())
        await stop.wait()
        watch.cancel()
    except RuntimeError as exc:
        raise UserError(str(exc)) from None
    finally:
        print("stopping: running sessions checkpoint first (at most about a minute)...", file=sys.stderr)
        forget_running(directory)
        supervisor.stop()
        server.stop()
    return 0


async def _running_sessions(client: Client) -> list[SessionState]:
    """The local user's sessions that run (after a restart: those the orchestrator resumes)."""
    states = [fold(sid, await session_events(client, sid)) for sid in await client.session_ids()]
    return [s for s in states if s.status == SessionStatus.RUNNING]


async def _train(client: Client, config, stop: asyncio.Event, tensorboard: Path | None,
                 running: list[SessionState]) -> None:
    """`--train`: a session of the network, unless one of it already runs (a second `make demo` goes on
    with the first one's session instead of starting another beside it)."""
    same = next((s for s in running if s.config.network_yaml == config.network_yaml and s.config.steps == config.steps), None)
    if same is not None:
        sid, command_id = same.id, None
        print(f"  training   session {same.id} again (it runs this network already); "
              f"`computeall session stop {same.id}` ends it, then `--train` starts a new one")
    else:
        config = await with_sent_data(client, config)
        sid, command_id = await start_session(client, config)
    follow = asyncio.create_task(follow_session(client, sid, config.steps, command_id=command_id, tensorboard=tensorboard))
    stopped = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({follow, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if follow in done:
        print(follow.result().message)
        print("still running; Ctrl-C stops it")
    else:
        follow.cancel()


def _dashboard_port(asked: int, before: ClusterInfo | None) -> int:
    """The port asked for; else the dashboard's port of the last run from this data dir, so that an open
    tab keeps working across a restart, when it is still free; else any free one (0)."""
    if asked or before is None or before.monitor is None:
        return asked
    port = urlsplit(before.monitor).port
    return port if port and port_free(port) else 0


async def _wait_for_monitor(supervisor: Supervisor, stop: asyncio.Event, wait_s: float = 15.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while supervisor.monitor_url is None and loop.time() < deadline and not stop.is_set():
        await asyncio.sleep(0.2)

