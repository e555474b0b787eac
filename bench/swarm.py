"""The orchestrator with many PNodes: simulated PNodes (`computeall pnode --simulate`) on a real cluster.

For each size N (32, 64, 128, 256 PNodes; --quick: 32 and 64), with a network of about N VNodes:

  - allocate: the orchestrator's own off-loop allocation (`NetworkJobs.allocate`, a forked child)
    of the network over N PNodes against the same allocation inline, and the longest the event
    loop waited meanwhile against the allocation (at most a tenth of it).
  - heartbeats: the orchestrator's CPU time over a window with N PNodes heartbeating and no
    session against the window's length (one core's time): at most 5%; and before any PNode joined.
  - kill: a session trains; the swarm process (8 PNodes) hosting the most VNodes is killed -9 (with
    --churn-minutes M: one every 30 s for M minutes); the seconds from the kill to the first step
    recorded after the rollback against the heartbeat timeout (the silence that declares it lost;
    then reallocation, plans, checkpoint restore, the step).
  - monitor lag: messages of CA_LOG and CA_TEL not yet committed by the monitor, sampled every
    second while the session runs; its trend (least squares, messages per minute) against its
    median (at least 100): the lag must not grow by that much every minute.
  - render: seconds from navigation to the PNodes page (N tiles and a page of cards) and to the
    session's topology (every VNode drawn) in headless Chromium, while the session trains, before
    the first kill and after the last, against an empty page's (the login form) measured in turn.

    python -m bench.swarm [--quick] [--json PATH] [--sizes 32,64] [--churn-minutes 10]
"""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from playwright.async_api import TimeoutError as PlaywrightTimeout
from playwright.async_api import async_playwright

from computeall.cli.default_corpus import stdlib_files
from computeall.cli.embedded import running_cluster
from computeall.cli.follow import start_session
from computeall.cli.session_view import session_events
from computeall.cli.swarm import micro_gpt, swarm_names, swarm_services
from computeall.network import Graph, load_network
from computeall.orchestrator.allocator import PNodeCapacity
from computeall.orchestrator.errors import SessionError
from computeall.orchestrator.network_jobs import NetworkJobs
from computeall.orchestrator.replication import allocate_replicas
from computeall.protocol import bus
from computeall.protocol.commands import CommandEnvelope, StopSession
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.events import RolledBack, StepCompleted
from computeall.protocol.session_state import fold
from computeall.protocol.subjects import LOG_STREAM, TEL_STREAM, Subjects
from computeall.protocol.telemetry import HEARTBEAT_TIMEOUT_S

from .common import REPO, Bench, at_most
from .dashboard import CHROMIUM_ARGS, time_to_empty_page, time_to_render
from .offloop import longest_stall
MEMORY, FLOPS = 1 << 30, 1e12  # what each simulated PNode advertises (and the nominal link)
PER_PROCESS = 8
HEARTBEAT_WINDOW_S = 10.0
ALLOCATION_CAP_S = 60.0
CHURN_EVERY_S = 30.0
RENDER_RUNS = 3


def network(pnodes: int) -> str:
    return micro_gpt(max(2, (pnodes - 3) // 6))


def session_config(pnodes: int) -> SessionConfig:
    return SessionConfig(network_yaml=network(pnodes), data=DataConfig(files=stdlib_files(300_000)), steps=10_000,
                         seed=1, micro_batches=4, checkpoint_every=5, keep_checkpoints=3, min_pnodes=pnodes,
                         pipeline={"stages": pnodes}, rebalance="on-failure")


def allocation_as_a_service(pnodes: int) -> dict:
    """`allocation` in a process whose main module is no script, as the orchestrator's (`python -m`):
    multiprocessing's forkserver children re-run a script's main module each (CPython never preloads
    it), so from this script every job would pay for importing the bench (Chromium's driver too)."""
    code = f"import asyncio, json; from bench import swarm; print(json.dumps(asyncio.run(swarm.allocation({pnodes}))))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])


async def allocation(pnodes: int) -> dict:
    """The session's allocation over `pnodes` PNodes as the simulated ones advertise themselves. None for
    allocate_s when it overran ALLOCATION_CAP_S (the session part is then skipped: the orchestrator
    would spend as long on each placement)."""
    cfg = session_config(pnodes)
    graph = Graph(load_network(cfg.network_yaml))
    capacities = [PNodeCapacity(name, MEMORY, flops_per_s=FLOPS) for name in swarm_names(pnodes)]
    placement = (capacities, cfg.replicas, cfg.batch_size, cfg.micro_batches, cfg.pipeline.stages)
    jobs = NetworkJobs(allocate_timeout_s=ALLOCATION_CAP_S)
    await jobs.offloop.warm()
    seconds = []

    async def off_loop():
        t0 = time.perf_counter()
        try:
            await jobs.allocate(graph, *placement)
            seconds.append(time.perf_counter() - t0)
        except SessionError:
            seconds.append(None)

    stall = await longest_stall(off_loop)
    row = {"vnodes": len(graph.vnodes), "allocate_s": seconds[0], "loop_stall_s": stall}
    if seconds[0] is None:
        return {**row, "note": f"allocation overran {ALLOCATION_CAP_S:.0f} s"}
    t0 = time.perf_counter()
    allocate_replicas(graph, *placement)
    inline = time.perf_counter() - t0
    return {**row, "inline_s": inline}


def cpu_share(pid: int, window_s: float) -> float:
    process = psutil.Process(pid)
    before = sum(process.cpu_times()[:2])
    time.sleep(window_s)
    return (sum(process.cpu_times()[:2]) - before) / window_s


async def monitor_lag(js) -> int:
    """Messages of the two streams the monitor has not committed yet."""
    behind = 0
    for stream in (LOG_STREAM, TEL_STREAM):
        last = (await js.stream_info(stream)).state.last_seq
        floor = (await js.consumer_info(stream, f"monitor_{stream}")).ack_floor.stream_seq
        behind += max(0, last - floor)
    return behind


async def render_s(supervisor, sid: str, pnodes: int, vnodes: int) -> dict:
    """Seconds from navigation to the PNodes page (every PNode a tile, the first page of cards) and to
    the session's topology (every VNode in the graph, drawn) in headless Chromium, as the e2e tests
    run it; the median of RENDER_RUNS fresh pages after a warm-up of each, and of as many empty pages
    (the login form) loaded in turn with them."""
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        raise SystemExit("Chromium is not installed: make browser")
    url = await wait_until(lambda: _true(supervisor.monitor_url), 30, "the monitor's address")
    key = supervisor.credentials.local_api_key_file().read_text().strip()
    graph = "document.querySelector('[data-topology-graph]')"
    pages = {
        "pnodes_page": ("#/pnodes", f"document.querySelectorAll('.tile').length >= {pnodes} "
                                    "&& document.querySelector('[data-pnode]')"),
        "topology": (f"#/sessions/{sid}/topology", f"{graph} && {graph}._cyreg && {graph}.querySelector('canvas') "
                                                  f"&& {graph}._cyreg.cy.nodes().length === {vnodes}"),
    }
    out = {}
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)

        async def seconds(route: str, ready: str) -> float:
            try:
                return await time_to_render(browser, url, key, route, ready)
            except PlaywrightTimeout:  # not within time_to_render's 30 s: recorded, the run goes on
                return math.inf

        try:
            await time_to_empty_page(browser, url, key)  # warm-up: the HTTP cache, the app's chunks
            empties = []
            for name, (route, ready) in pages.items():
                await seconds(route, ready)  # warm-up: DuckDB's first read
                times = []
                for _ in range(RENDER_RUNS):  # in turn with the empty page, so a busy moment hits both
                    times.append(await seconds(route, ready))
                    empties.append(await time_to_empty_page(browser, url, key))
                out[name] = statistics.median(times)
        finally:
            await browser.close()
    return {**out, "empty_page": statistics.median(empties)}


async def wait_until(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not (value := await condition()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f}s")
        await asyncio.sleep(0.2)
    return value


async def one_size(pnodes: int, workdir: Path, churn_s: float = 0.0) -> dict:
    """One size's row; with `churn_s`, a swarm process hosting VNodes is killed every CHURN_EVERY_S
    for that long (instead of once), each kill's detection and recovery timed."""
    row = {"pnodes": pnodes, **await asyncio.to_thread(allocation_as_a_service, pnodes)}
    async with running_cluster(workdir, pnodes=0, with_monitor=True) as (client, supervisor):
        orchestrator = supervisor.services["orchestrator"].process.pid
        row["orchestrator_idle_share"] = await asyncio.to_thread(cpu_share, orchestrator, HEARTBEAT_WINDOW_S)
        processes = max(1, pnodes // PER_PROCESS)
        supervisor.start(swarm_services(supervisor.credentials, pnodes, processes, memory="1GiB", flops=FLOPS))
        t0 = time.monotonic()
        # listens as the monitor does: heartbeats, and the monitor consumers' positions
        watcher = await bus.connect(supervisor.credentials.credential("monitor", "bench-swarm"), name="bench-swarm")
        seen: set[str] = set()

        async def on_beat(msg) -> None:
            seen.add(msg.subject.rsplit(".", 1)[-1])

        await watcher.subscribe(Subjects().heartbeat_all(), cb=on_beat)
        await wait_until(lambda: _true(len(seen) >= pnodes), 300, f"{pnodes} simulated PNodes joining")
        row["join_s"] = time.monotonic() - t0
        await asyncio.sleep(2 * 5.0)  # PNodeJoined recorded, the monitor caught up: then the quiet window
        share = await asyncio.to_thread(cpu_share, orchestrator, HEARTBEAT_WINDOW_S)
        row["orchestrator_heartbeat_share"] = share
        row["heartbeat_share_above_idle"] = share - row["orchestrator_idle_share"]
        if row["allocate_s"] is None:
            await watcher.close()
            return row  # no session: each placement would overrun as the allocation did

        sid, _ = await start_session(client, session_config(pnodes))
        js = watcher.jetstream()
        lags: list[int] = []

        async def sample_lag():
            while True:
                lags.append(await monitor_lag(js))
                await asyncio.sleep(1.0)

        sampler = asyncio.create_task(sample_lag())
        try:
            await wait_until(lambda: _steps_done(client, sid, 6), 900, "6 steps")
            row["render_s"] = await render_s(supervisor, sid, pnodes, row["vnodes"])
            recoveries: list[float] = []
            started = time.monotonic()
            while True:
                kill_at = time.monotonic()
                recoveries.append(await _kill_and_recover(client, supervisor, sid, pnodes, processes, len(recoveries)))
                if time.monotonic() - started + CHURN_EVERY_S > churn_s:
                    break
                await asyncio.sleep(max(0.0, kill_at + CHURN_EVERY_S - time.monotonic()))
            row["kill_to_step_s"] = statistics.median(recoveries)
            row["kills"] = {"count": len(recoveries), "recovered": len(recoveries), "max_s": max(recoveries)}
            row["killed_pnodes"] = PER_PROCESS
            row["render_after_kills_s"] = await render_s(supervisor, sid, pnodes, row["vnodes"])
            await asyncio.sleep(5.0)
        finally:
            sampler.cancel()
            await client.publish_command(CommandEnvelope(actor=client.user, session_id=sid, payload=StopSession()))
            await watcher.close()
        slope = statistics.linear_regression(range(len(lags)), lags).slope if len(lags) > 2 else 0.0  # per sample (1 s)
        row["monitor_lag_messages"] = {"median": statistics.median(lags), "max": max(lags), "per_minute": 60 * slope}
    return row


async def _kill_and_recover(client, supervisor, sid: str, pnodes: int, processes: int, done: int) -> float:
    """Kill -9 the swarm process whose PNodes host the most VNodes; seconds to the first step after its rollback."""
    hosting = await _hosting(client, sid)
    victim = max(range(processes), key=lambda i: len(hosting & set(swarm_names(pnodes)[i::processes])))
    killed = time.time()
    supervisor.services[f"swarm-{victim}"].process.kill()
    first = await wait_until(lambda: _first_step_after_rollback(client, sid, done), 900, f"a step after kill {done + 1}")
    return first - killed


async def _true(value: bool) -> bool:
    return value


async def _steps_done(client, sid: str, n: int) -> bool:
    return sum(isinstance(e.payload, StepCompleted) for _, e in await session_events(client, sid)) >= n


async def _hosting(client, sid: str) -> set[str]:
    return set(fold(sid, await session_events(client, sid)).allocation.values())


async def _first_step_after_rollback(client, sid: str, earlier: int) -> float | None:
    """When the first step after the session's rollback number `earlier` + 1 was recorded."""
    events = [e for _, e in await session_events(client, sid)]
    rolled = [e.ts for e in events if isinstance(e.payload, RolledBack)]
    if len(rolled) <= earlier:
        return None
    after = [e.ts for e in events if isinstance(e.payload, StepCompleted) and e.ts > rolled[earlier]]
    return after[0] if after else None


def report(bench: Bench, row: dict) -> None:
    n = f"{row['pnodes']} simulated PNodes, {row['vnodes']} VNodes"
    if row["allocate_s"] is None:
        print(f"{n}: {row['note']}; no session")
    else:
        bench.row(f"{n}: allocation off the loop", "s", row["allocate_s"], "the same allocation inline", row["inline_s"])
        bench.row(f"{n}: the event loop's longest wait meanwhile", "s", row["loop_stall_s"], "the allocation",
                  row["allocate_s"], at_most(0.1))
    window = f"a {HEARTBEAT_WINDOW_S:g} s window (one core)"
    bench.row(f"{n}: the orchestrator's CPU with them heartbeating", "CPU s", row["orchestrator_heartbeat_share"] * HEARTBEAT_WINDOW_S,
              window, HEARTBEAT_WINDOW_S, at_most(0.05))
    bench.row(f"{row['pnodes']} PNodes' size, before any PNode joined: the orchestrator's CPU", "CPU s",
              row["orchestrator_idle_share"] * HEARTBEAT_WINDOW_S, window, HEARTBEAT_WINDOW_S)
    if "kill_to_step_s" not in row:
        return
    kills = row["kills"]
    bench.row(f"{n}: kill -9 of {row['killed_pnodes']} PNodes to the first step after the rollback "
              f"(median of {kills['count']}, {kills['recovered']} recovered)", "s", row["kill_to_step_s"],
              f"the heartbeat timeout ({HEARTBEAT_TIMEOUT_S:g} s)", HEARTBEAT_TIMEOUT_S)
    lag = row["monitor_lag_messages"]
    bench.row(f"{n}: the monitor's lag, its trend", "messages/min", max(0.0, lag["per_minute"]),
              "its median (at least 100)", max(100.0, lag["median"]), at_most(1.0))
    for when, key in (("while training", "render_s"), ("after the kills", "render_after_kills_s")):
        render = row[key]
        for page in ("pnodes_page", "topology"):
            bench.row(f"{n}: {page.replace('_', ' ')} drawn, {when}", "s", render[page],
                      "an empty page (the login form)", render["empty_page"])


async def measure(bench: Bench, sizes: list[int], churn_s: float) -> None:
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix=f"swarm-{n}-") as tmp:
            report(bench, await one_size(n, Path(tmp), churn_s=churn_s))


def main() -> int:
    bench = Bench("swarm", __doc__, quick_help="32 and 64 PNodes")
    bench.parser.add_argument("--sizes", default=None, help="comma-separated PNode counts")
    bench.parser.add_argument("--churn-minutes", type=float, default=0.0,
                              help="kill a PNode-hosting swarm process every 30 s for this long (each size)")
    args = bench.parse()
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else ([32, 64] if args.quick else [32, 64, 128, 256])
    asyncio.run(measure(bench, sizes, 60.0 * args.churn_minutes))
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
