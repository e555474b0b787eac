"""Dashboard benchmark in headless Chromium, against a real monitor and nats-server.

1. Time to chart: a session of 100,000 steps (real StepCompleted events in CA_LOG, projected by
   the monitor); from navigation to the session page until the loss chart is drawn with its
   points, in a fresh page each time (median of --runs), against the same for an empty page (the
   login form: the browser, the app's boot and nothing else), measured in turn.
2. Heap under live updates: the session page stays open while steps keep arriving (--rate per
   second) for --minutes; the JS heap after a forced GC is sampled every 10 s. It must level
   off (the page re-queries a downsampled series instead of keeping every live step): the heap at
   the end against the heap halfway.

    python -m bench.dashboard [--quick] [--json PATH] [--minutes 10] [--rate 20] [--runs 5]
"""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.async_api import async_playwright

from computeall.cli.nats_server import EmbeddedNats
from computeall.protocol import bus
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.eventlog import ensure_streams
from computeall.protocol.events import EventEnvelope, SessionCreated, SessionStarted, StepCompleted
from computeall.protocol.subjects import Subjects

from .common import REPO, Bench, at_most

SESSION = "bench-dashboard"
STEPS = 100_000
HEAP_SAMPLE_S = 10.0
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run",
]
CHART = '[data-chart="Train loss"][data-rendered="yes"]'


def step_event(i: int) -> EventEnvelope:
    loss = 4.0 / (1 + i / 1000) + (0.3 if i % 997 == 0 else 0.0)
    return EventEnvelope(session_id=SESSION, actor="orchestrator", payload=StepCompleted(
        step=i, loss=loss, tokens=4096, step_time_s=0.05 + (i % 13) * 1e-3, lr=1e-3, loss_scale=1.0))


async def publish_history(server: EmbeddedNats) -> int:
    """The session's creation and STEPS steps; returns the last stream sequence."""
    config = SessionConfig(network_yaml="name: bench\n", data=DataConfig(files=["a"]), steps=10 * STEPS)
    envs = [EventEnvelope(session_id=SESSION, actor="orchestrator", payload=SessionCreated(config=config, owner="local")),
            EventEnvelope(session_id=SESSION, actor="orchestrator", payload=SessionStarted())]
    envs += [step_event(i) for i in range(STEPS)]
    nc = await bus.connect(server.credential("orchestrator"), name="bench-dashboard-history")
    try:
        js = nc.jetstream()
        s = Subjects()
        await ensure_streams(js, s)
        futures = [await js.publish_async(s.session_evt(SESSION, e.type), e.model_dump_json().encode()) for e in envs]
        await js.publish_async_completed()
        return futures[-1].result().seq
    finally:
        await nc.close()


async def publish_live(server: EmbeddedNats, first: int, rate: float, stop: asyncio.Event) -> int:
    """StepCompleted at `rate` per second from step `first` until `stop`; returns steps sent."""
    nc = await bus.connect(server.credential("orchestrator"), name="bench-dashboard-live")
    js, s, i = nc.jetstream(), Subjects(), first
    try:
        while not stop.is_set():
            await js.publish(s.session_evt(SESSION, "StepCompleted"), step_event(i).model_dump_json().encode())
            i += 1
            await asyncio.sleep(1 / rate)
    finally:
        await nc.close()
    return i - first


def start_monitor(server: EmbeddedNats, data_dir: Path) -> tuple[subprocess.Popen, str, str]:
    data_dir.mkdir(parents=True)
    monitor = subprocess.Popen(
        [sys.executable, "-m", "computeall.monitor", "--credential", str(server.credential_file("monitor")),
         "--local-key-file", str(server.local_api_key_file()), "--data-dir", str(data_dir),
         "--web-dir", str(REPO / "web" / "dist")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    address = data_dir / "monitor.json"
    while not address.exists():
        if monitor.poll() is not None:
            raise RuntimeError("the monitor did not start")
        time.sleep(0.05)
    return monitor, json.loads(address.read_text())["url"], server.security.local_api_key()


def wait_caught_up(url: str, key: str, seq: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while True:
        body = httpx.post(f"{url}/graphql", json={"query": "{ monitor { positions } }"},
                          headers={"Authorization": f"Bearer {key}"}, timeout=10).json()
        if body["data"]["monitor"]["positions"].get("CA_LOG", 0) >= seq:
            return
        if time.monotonic() > deadline:
            raise RuntimeError("the monitor did not catch up")
        time.sleep(0.2)


async def time_to_render(browser, url: str, key: str, route: str, ready: str) -> float:
    """Seconds from navigation start to `route` of the dashboard (logged in) until the JS expression
    `ready` holds, checked every animation frame, in a new page."""
    context = await browser.new_context(viewport={"width": 1400, "height": 1000})
    await context.add_init_script(f"localStorage.setItem('computeall.apiKey', {json.dumps(key)})")
    page = await context.new_page()
    try:
        await page.goto(f"{url}/{route}")
        handle = await page.wait_for_function(f"() => ({ready}) ? performance.now() : null", polling="raf",
                                              timeout=30_000)
        return await handle.json_value() / 1000
    finally:
        await context.close()


async def time_to_empty_page(browser, url: str, key: str) -> float:
    """Seconds from navigation start to the login form drawn: the anchor of every render time."""
    return await time_to_render(browser, url, key, "#/login", "document.querySelector('input')")


async def time_to_chart(browser, url: str, key: str) -> float:
    """Seconds from navigation start to the loss chart drawn with its points, in a new page."""
    chart = f"document.querySelector('{CHART}')"
    return await time_to_render(browser, url, key, f"#/sessions/{SESSION}",
                                f"{chart} && Number({chart}.dataset.points) > 0 && {chart}.querySelector('canvas')")


async def heap_under_live_updates(browser, url: str, key: str, server: EmbeddedNats, minutes: float, rate: float) -> dict:
    context = await browser.new_context(viewport={"width": 1400, "height": 1000})
    await context.add_init_script(f"localStorage.setItem('computeall.apiKey', {json.dumps(key)})")
    page = await context.new_page()
    await page.goto(f"{url}/#/sessions/{SESSION}")
    await page.wait_for_selector(CHART)
    cdp = await context.new_cdp_session(page)

    async def heap() -> float:
        await cdp.send("HeapProfiler.collectGarbage")
        return (await cdp.send("Runtime.getHeapUsage"))["usedSize"] / 2**20

    stop = asyncio.Event()
    publisher = asyncio.create_task(publish_live(server, STEPS, rate, stop))
    samples = [(0.0, round(await heap(), 2))]
    start = time.monotonic()
    while (elapsed := time.monotonic() - start) < minutes * 60:
        await asyncio.sleep(min(HEAP_SAMPLE_S, minutes * 60 - elapsed))
        samples.append((round(time.monotonic() - start, 1), round(await heap(), 2)))
        print(f"  {samples[-1][0]:6.0f} s  heap {samples[-1][1]:.1f} MiB", flush=True)
    stop.set()
    sent = await publisher
    points = int(await page.get_attribute(CHART, "data-points") or 0)
    await context.close()
    heaps = [h for _, h in samples]
    print(f"  {sent} live steps sent, {points} points charted at the end")
    return {"heap_mib_halfway": heaps[len(heaps) // 2], "heap_mib_end": heaps[-1]}


async def run(bench: Bench, args) -> None:
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        raise SystemExit("Chromium is not installed: make browser")
    if not (REPO / "web" / "dist" / "index.html").exists():
        raise SystemExit("the dashboard is not built: make web")
    with tempfile.TemporaryDirectory() as tmp, EmbeddedNats(Path(tmp) / "nats") as server:
        t = time.perf_counter()
        last = await publish_history(server)
        print(f"published {STEPS:,} steps in {time.perf_counter() - t:.1f} s")
        monitor, url, key = start_monitor(server, Path(tmp) / "monitor")
        try:
            t = time.perf_counter()
            wait_caught_up(url, key, last)
            print(f"monitor projected them in {time.perf_counter() - t:.1f} s")
            async with async_playwright() as p:
                browser = await p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
                await time_to_empty_page(browser, url, key)  # warm-up: the HTTP cache, the app's chunks
                await time_to_chart(browser, url, key)  # and DuckDB's first read
                charts, empties = [], []
                for _ in range(args.runs):  # in turn, so a busy moment hits both
                    charts.append(await time_to_chart(browser, url, key))
                    empties.append(await time_to_empty_page(browser, url, key))
                bench.row(f"session page of {STEPS:,} steps, loss chart drawn (median of {args.runs})", "s",
                          statistics.median(charts), "an empty page (the login form)", statistics.median(empties),
                          at_most(CHART_TARGET))
                print(f"heap under live updates, {args.minutes} min at {args.rate} steps/s:")
                heap = await heap_under_live_updates(browser, url, key, server, args.minutes, args.rate)
                await browser.close()
        finally:
            monitor.terminate()
            monitor.wait(15)
    bench.row(f"JS heap after {args.minutes:g} min of live steps at {args.rate:g}/s", "MiB", heap["heap_mib_end"],
              "the heap halfway", heap["heap_mib_halfway"], at_most(1.1))


CHART_TARGET = 4.0  # a chart of 100,000 steps within four empty-page loads


def main() -> int:
    bench = Bench("dashboard", __doc__, quick_help="a 20 s heap measure and 3 time-to-chart runs")
    bench.parser.add_argument("--minutes", type=float, default=1.0, help="live-update period for the heap measure (10 for the full one)")
    bench.parser.add_argument("--rate", type=float, default=20.0, help="live steps per second")
    bench.parser.add_argument("--runs", type=int, default=5, help="time-to-chart measurements")
    args = bench.parse()
    if args.quick:
        args.minutes, args.runs = min(args.minutes, 1 / 3), min(args.runs, 3)
    asyncio.run(run(bench, args))
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
