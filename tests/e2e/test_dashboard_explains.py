"""The dashboard tells the truth and explains itself, in real headless Chromium: a real monitor
process on a real nats-server, fed the events of a session's life built with the protocol's models
(no training needed, so the story can hold every interruption at once).

A session that trained 40 of 60 steps over two PNodes, was paused and resumed, lost a PNode (its
step aborted, the network reallocated, everyone rolled back) and had a PNode quarantined: its page
shows its overview (network, parameters, data, batch, optimizer, precision, wire, replicas), steps as
done / planned, every chart with both axes labelled and one unit per axis, and each interruption
marked on the charts with a tooltip. A failed session shows its reason first and no empty charts.
Each PNode card says its role and why; the topology's labels read at the zoom it opens with; an
unknown path is a 404, not a traceback.
"""

from __future__ import annotations

import json
import re
import socket

import pytest

import declared
from computeall.cli.nats_server import EmbeddedNats
from computeall.network import Graph, load_network
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.events import (
    Allocated, EdgeTraffic, EventEnvelope, PNodeJoined, PNodeLost, PNodeQuarantined, Reallocated, RolledBack,
    SessionCreated, SessionFailed, SessionPaused, SessionResumed, SessionStarted, StepAborted, StepCompleted,
    VNodePlacement,
)
from computeall.protocol.subjects import Subjects
from integration.monitor_harness import MonitorProcess, event_items, publish

from .browser import ARTIFACTS, CHROMIUM_ARGS, REPO, UI_TIMEOUT_MS, chromium_path, ensure_dashboard_built

playwright_api = declared.module("playwright.async_api")

pytestmark = pytest.mark.timeout(180)

NETWORK = (REPO / "examples" / "networks" / "micro-gpt.yaml").read_text()
TRAINED, BROKEN = "explained", "broken"
PLANNED, DONE = 60, 40
FAILURE = "no PNode can host embed: it needs 3.0 GiB and the largest PNode offers 1.0 GiB"
# where each interruption of the story happens (the step training went on with)
MARKS = {"resumed": 10, "aborted": 20, "reallocated": 20, "rolled back": 20, "quarantined": 18}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def placed(stages: list[str]) -> dict:
    """The fields of an (re)allocation of micro-gpt cut into contiguous stages, one per PNode, as the orchestrator records it."""
    graph = Graph(load_network(NETWORK))
    per_stage = -(-len(graph.order) // len(stages))
    where = {v: stages[i // per_stage] for i, v in enumerate(graph.order)}
    placements = [VNodePlacement(vnode=v, op=graph.vnodes[v].op, pnode=where[v], params=graph.param_count(v),
                                 precision=graph.vnodes[v].precision) for v in graph.order]
    edges = [EdgeTraffic(src=e.src, dst=e.dst, bytes_per_step=graph.edge_bytes_per_step(e, 8))
             for e in graph.edges if e.src in where and where[e.src] != where[e.dst]]
    return dict(placements=placements, edges=edges, pnodes=sorted(stages),
                bytes_across_per_step=sum(e.bytes_per_step for e in edges))


def step(i: int, pnodes: list[str]) -> StepCompleted:
    # 512 tokens in 0.25 s of wall time, the first PNode busier; step times near a second's quarter
    return StepCompleted(step=i, loss=6.0 / (1 + 0.1 * i), tokens=512, step_time_s=0.25 + 0.01 * (i % 3), lr=3e-3,
                         compute_s=0.3, wait_s=0.0, grad_norm=1.0, compute_s_by_pnode={p: 0.05 * (k + 1) for k, p in enumerate(pnodes)})


def story() -> list[tuple[str, bytes]]:
    s = Subjects()
    config = SessionConfig(network_yaml=NETWORK, data=DataConfig(files=["corpus.txt"]), steps=PLANNED, batch_size=8,
                           micro_batches=2, checkpoint_every=5)
    first, second = ["pnode-0", "pnode-1"], ["pnode-0", "pnode-2"]

    def joined(pid: str) -> tuple[str, bytes]:
        env = EventEnvelope(actor="orchestrator", payload=PNodeJoined(pnode=pid, host="lab", os_pid=1, device="cpu",
                                                                       memory_bytes=4 << 30))
        return s.pnode_evt(pid, "PNodeJoined"), env.model_dump_json().encode()

    trained = [
        SessionCreated(config=config, owner="local"), SessionStarted(), Allocated(**placed(first)),
        *(step(i, first) for i in range(10)), SessionPaused(step=10), SessionResumed(),
        *(step(i, first) for i in range(10, 20)),
        PNodeLost(pnode="pnode-1", step=20, silent_s=5.0), StepAborted(step=20, reason="pnode-1 lost"),
        Reallocated(**placed(second), reason="lost pnode-1", moves={}), RolledBack(to_step=15, from_step=20),
        *(step(i, second) for i in range(20, DONE)),
        PNodeQuarantined(pnode="pnode-1", step=18, reason="recomputing b1.mlp at step 18 gave other results"),
    ]
    broken = [SessionCreated(config=config.model_copy(update={"steps": 20}), owner="local"), SessionStarted(),
              SessionFailed(reason=FAILURE)]
    envelopes = [EventEnvelope(session_id=sid, actor="orchestrator", payload=p)
                 for sid, payloads in ((TRAINED, trained), (BROKEN, broken)) for p in payloads]
    return [*map(joined, ["pnode-0", "pnode-1", "pnode-2"]), *event_items(envelopes), joined("pnode-3")]


async def axis_texts(chart) -> tuple[list[str], list[str]]:
    """A rendered chart's axis labels (x, y), and the y axis's tick texts as drawn on its canvas."""
    labels = [await chart.get_attribute("data-x-label"), await chart.get_attribute("data-y-label")]
    return labels, json.loads(await chart.get_attribute("data-y-ticks") or "[]")


def unit(tick: str) -> str:
    return re.sub(r"^-?[\d.]+(e-?\d+)?\s?", "", tick)


async def test_the_dashboard_explains_a_session_and_its_pnodes(tmp_path):
    executable = chromium_path()
    ensure_dashboard_built()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with EmbeddedNats(tmp_path / "nats") as server:
        monitor = MonitorProcess(server, tmp_path / "monitor", "--port", str(free_port())).start()
        try:
            await publish(server, story())
            async with playwright_api.async_playwright() as p:
                browser = await p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
                page = await browser.new_page(viewport={"width": 1400, "height": 1000})
                page.set_default_timeout(UI_TIMEOUT_MS)
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                await page.add_init_script(f"localStorage.setItem('computeall.apiKey', '{monitor.local_key}')")
                try:
                    await unknown_paths_are_404(page, monitor)
                    await steps_read_done_of_planned(page, monitor)
                    await a_session_explains_itself(page, monitor)
                    await a_failed_session_shows_its_reason_first(page, monitor)
                    await pnodes_say_their_role_and_why(page, monitor)
                    await topology_labels_read_at_the_default_zoom(page, monitor)
                    assert not errors, errors
                finally:
                    await page.screenshot(path=str(ARTIFACTS / "explains-last.png"), full_page=True)
                    await browser.close()
        finally:
            if monitor.process:
                monitor.stop()
    assert "Traceback" not in monitor.log(), monitor.log()[-3000:]


async def unknown_paths_are_404(page, monitor) -> None:
    for path in ("/favicon.ico", "/api/nonexistent"):
        response = await page.request.get(monitor.url + path)
        assert response.status == 404, (path, response.status)
        assert "Not found" in await response.text()
    assert (await page.request.get(monitor.url + "/favicon.svg")).status == 200


async def steps_read_done_of_planned(page, monitor) -> None:
    await page.goto(monitor.url)
    row = page.locator(f'[data-session="{TRAINED}"] [data-field="step"]')
    await page.wait_for_function(
        f"() => document.querySelector('[data-session=\"{TRAINED}\"] [data-field=\"step\"]')?.innerText.trim() === '{DONE} / {PLANNED}'")
    assert (await row.inner_text()).strip() == f"{DONE} / {PLANNED}"  # `computeall session list` says 40/60 too
    assert (await page.locator(f'[data-session="{BROKEN}"] [data-field="step"]').inner_text()).strip() == "0 / 20"
    await page.screenshot(path=str(ARTIFACTS / "explains-sessions.png"), full_page=True)


async def a_session_explains_itself(page, monitor) -> None:
    await page.goto(f"{monitor.url}/#/sessions/{TRAINED}")
    overview = page.locator("[data-overview]")
    await overview.wait_for()
    field = lambda name: overview.locator(f'[data-overview-field="{name}"]').inner_text()  # noqa: E731
    assert (await field("network")).startswith("micro-gpt: 132k parameters in 15 VNodes")
    assert await field("data") == "corpus.txt (trains on train, validates on val)"
    assert await field("batch") == "8 sequences per step in 2 micro-batches of 4: 512 tokens per step"
    assert (await field("optimizer")).startswith("AdamW, betas 0.9, 0.95, weight decay 0.1")
    assert await field("precision") == "fp32; loss scaling auto"
    assert await field("wire") == "fp32" and await field("replicas") == "1"
    assert (await page.locator('.facts [data-field="step"]').inner_text()).strip() == f"{DONE} / {PLANNED}"

    # every chart: both axes labelled, the y axis's ticks in one unit
    charts = page.locator("[data-chart]")
    await page.wait_for_selector('[data-chart="Train loss"][data-rendered="yes"]')
    titles = await charts.evaluate_all("els => els.map(e => e.dataset.chart)")
    assert {"Train loss", "Step time", "Tokens per second", "Tokens per second per PNode", "Busy share per PNode"} <= set(titles)
    for title in titles:
        chart = page.locator(f'[data-chart="{title}"]')
        await chart.scroll_into_view_if_needed()
        await page.wait_for_selector(f'[data-chart="{title}"][data-rendered="yes"]')
        if await chart.get_attribute("data-points") == "0":
            continue  # an empty chart says so instead (validation: none in this story)
        labels, ticks = await axis_texts(chart)
        assert all(label and label.strip() for label in labels), (title, labels)
        assert ticks and len({unit(t) for t in ticks}) == 1, (title, ticks)
    labels, ticks = await axis_texts(page.locator('[data-chart="Step time"]'))
    assert labels == ["step", "time per step"] and {unit(t) for t in ticks} == {"ms"}, ticks
    labels, _ = await axis_texts(page.locator('[data-chart="Tokens per second per PNode"]'))
    assert labels[1] == "tokens/s (wall time)"  # the same unit as the session's tokens per second

    # the interruptions, on every step chart, each with its tooltip, and in the legend
    loss = page.locator('[data-chart="Train loss"]')
    await loss.scroll_into_view_if_needed()
    marks = await loss.locator("[data-marker]").evaluate_all(
        "els => els.map(e => [e.dataset.marker, Number(e.dataset.step), e.title])")
    assert sorted((kind, at) for kind, at, _ in marks) == sorted(MARKS.items()), marks
    titles_by_kind = {kind: title for kind, _, title in marks}
    assert titles_by_kind["rolled back"] == "step 20: rolled back to the checkpoint after 15 steps: steps 15 to 19 run again"
    assert "lost pnode-1" in titles_by_kind["reallocated"] and "b1.mlp" in titles_by_kind["quarantined"]
    assert await page.locator('[data-chart="Step time"] [data-marker]').count() == len(MARKS)
    legend = await page.locator("[data-marker-legend] [data-legend-kind]").evaluate_all("els => els.map(e => e.dataset.legendKind)")
    assert sorted(legend) == sorted(MARKS)
    await page.screenshot(path=str(ARTIFACTS / "explains-session.png"), full_page=True)


async def a_failed_session_shows_its_reason_first(page, monitor) -> None:
    await page.goto(f"{monitor.url}/#/sessions/{BROKEN}")
    failure = page.locator("[data-failure]")
    await failure.wait_for()
    assert FAILURE in await failure.inner_text() and "before its first step" in await failure.inner_text()
    await page.locator("[data-overview]").wait_for()
    above = (await failure.bounding_box())["y"] < (await page.locator("[data-overview]").bounding_box())["y"]
    assert above, "the reason comes before the overview"
    assert await page.locator("[data-chart]").count() == 0  # no page of empty charts
    await page.screenshot(path=str(ARTIFACTS / "explains-failed.png"), full_page=True)


async def pnodes_say_their_role_and_why(page, monitor) -> None:
    await page.goto(f"{monitor.url}/#/pnodes")
    role = lambda pid: page.locator(f'[data-pnode="{pid}"] [data-role-session="{TRAINED}"]')  # noqa: E731
    for pid in ("pnode-0", "pnode-2", "pnode-1", "pnode-3"):
        await role(pid).wait_for()
    assert await role("pnode-0").locator('[data-field="role"]').inner_text() == "stage 1 of 2"
    second = await role("pnode-2").inner_text()
    assert second.startswith("stage 2 of 2 in session") and "placed again after: lost pnode-1" in second, second
    assert await role("pnode-3").get_attribute("data-role") == "idle"
    assert "joined after session explained was placed" in await role("pnode-3").inner_text()
    assert "quarantined: session explained was placed on pnode-0, pnode-2 without it" in await role("pnode-1").inner_text()
    await page.screenshot(path=str(ARTIFACTS / "explains-pnodes.png"), full_page=True)


async def topology_labels_read_at_the_default_zoom(page, monitor) -> None:
    await page.goto(f"{monitor.url}/#/sessions/{TRAINED}/topology")
    await page.wait_for_selector("[data-topology-graph] canvas")
    await page.wait_for_function("() => document.querySelector('[data-topology-graph]')?._cyreg?.cy?.nodes().length === 15")
    fonts = await page.evaluate(
        """() => { const cy = document.querySelector('[data-topology-graph]')._cyreg.cy;
                   return cy.nodes().map(n => parseFloat(n.style('font-size')) * cy.zoom()); }""")
    assert min(fonts) >= 12, f"labels measure {min(fonts):.1f} px on the screen"
    # the whole network is in view at that zoom, nothing off screen
    inside = await page.evaluate(
        """() => { const cy = document.querySelector('[data-topology-graph]')._cyreg.cy; const e = cy.extent();
                   return cy.nodes().every(n => { const p = n.position();
                     return p.x >= e.x1 && p.x <= e.x2 && p.y >= e.y1 && p.y <= e.y2; }); }""")
    assert inside
    assert await page.locator('[data-host="pnode-2"] [data-field="role"]').inner_text() == "· stage 2 of 2"
    await page.screenshot(path=str(ARTIFACTS / "explains-topology.png"), full_page=True)
