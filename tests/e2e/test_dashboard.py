"""The dashboard in real headless Chromium against a real embedded system that is training.

One test walks the whole path a user takes (the system takes a while to start, so it starts
once): a wrong key is refused, the right key logs in, the running session is listed, its loss
chart gains points while it trains beside the gradient norm, each PNode's tokens per second and
the update ratios, the text its model writes appears by step, newest first, the topology shows a
VNode's memory, where each PNode's time goes and the links' measured bandwidth, the PNodes view
lists both PNodes with what they measured, a second session with two data-parallel replicas shows
the bytes they send each other and each replica's topology, and pausing from the UI changes the
first session's state. Screenshots of every page go
to test-artifacts/e2e/.
"""

from __future__ import annotations

import asyncio

import pytest

from computeall.cli.follow import start_session
from computeall.protocol.config import DataConfig, LrSchedule, SessionConfig, VerifyConfig
from computeall.protocol.sampling import SamplingConfig

import declared
from integration.cluster import running_cluster, stdlib_corpus, wait_for_pnodes
from integration.sessions import spread
from .browser import ARTIFACTS, CHROMIUM_ARGS, REPO, UI_TIMEOUT_MS, chromium_path, default_key, ensure_dashboard_built

playwright_api = declared.module("playwright.async_api")

pytestmark = pytest.mark.timeout(180)

NETWORK = REPO / "examples" / "networks" / "micro-gpt.yaml"
PNODES = ["pnode-0", "pnode-1"]
# long enough to still be training when the test pauses it; the cluster is torn down after
STEPS = 20_000
SAMPLE_PROMPT = "def "
REPLICATED_STEPS = 6


def session_config() -> SessionConfig:
    return SessionConfig(
        network_yaml=NETWORK.read_text(), data=DataConfig(files=stdlib_corpus()), steps=STEPS, batch_size=4,
        lr=LrSchedule(peak=3e-3, warmup_steps=10, min_lr=3e-4), min_pnodes=len(PNODES), pipeline=spread(),
        validate_every=100,
        sample_every=10, sample_prompts=[SAMPLE_PROMPT], sampling=SamplingConfig(max_new_tokens=16, temperature=0.8, seed=1),
        verify=VerifyConfig(rate=0.2),
    )


def replicated_config() -> SessionConfig:
    """A short session of two replicas, one on each PNode, beside the first (a PNode hosts both)."""
    return SessionConfig(
        network_yaml=NETWORK.read_text(), data=DataConfig(files=stdlib_corpus()), steps=REPLICATED_STEPS,
        batch_size=4, micro_batches=2, replicas=2, min_pnodes=len(PNODES),
    )


async def wait_for_monitor(supervisor, timeout: float = 30.0) -> str:
    deadline = asyncio.get_running_loop().time() + timeout
    while supervisor.monitor_url is None:
        assert asyncio.get_running_loop().time() < deadline, "the monitor did not start"
        await asyncio.sleep(0.2)
    return supervisor.monitor_url


async def chart_points(page, title: str) -> int:
    return int(await page.get_attribute(f'[data-chart="{title}"]', "data-points") or 0)


async def wait_for(predicate, timeout: float, what: str):
    deadline = asyncio.get_running_loop().time() + timeout
    while not (value := await predicate()):
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.25)
    return value


async def test_dashboard_end_to_end(tmp_path):
    executable = chromium_path()
    ensure_dashboard_built()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    async with running_cluster(tmp_path, pnodes=len(PNODES), with_monitor=True) as (client, supervisor):
        url = await wait_for_monitor(supervisor)
        await wait_for_pnodes(supervisor, PNODES)
        key = default_key(supervisor)
        sid, _ = await start_session(client, session_config())
        replicated, _ = await start_session(client, replicated_config())

        async with playwright_api.async_playwright() as p:
            browser = await p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
            page = await browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(UI_TIMEOUT_MS)
            errors: list[str] = []  # an exception in the page (a chart that throws draws nothing)
            page.on("pageerror", lambda e: errors.append(str(e)))
            try:
                await run_user_path(page, url, key, sid, replicated)
                assert not errors, errors
            finally:
                await page.screenshot(path=str(ARTIFACTS / "last.png"), full_page=True)
                await browser.close()


async def run_user_path(page, url: str, key: str, sid: str, replicated: str) -> None:
    # a wrong key is refused with a message, not a blank page
    await page.goto(url)
    await page.fill('input[name="apiKey"]', "ca_not-a-key")
    await page.click('button[type="submit"]')
    error = page.locator('[data-notice="error"]')
    await error.wait_for()
    assert "not valid" in await error.inner_text()
    await page.screenshot(path=str(ARTIFACTS / "login-wrong-key.png"))

    # the right key shows the user's session in the list
    await page.fill('input[name="apiKey"]', key)
    await page.click('button[type="submit"]')
    row = page.locator(f'[data-session="{sid}"]')
    await row.wait_for()
    await page.screenshot(path=str(ARTIFACTS / "sessions.png"), full_page=True)

    # the session page: the loss chart gains points while the session trains
    await row.locator("a").click()
    await page.wait_for_selector('[data-chart="Train loss"][data-rendered="yes"]')
    first = await wait_for(lambda: chart_points(page, "Train loss"), 120, "the first steps on the loss chart")
    await wait_for(lambda: _more(page, first + 3), 60, "the loss chart to gain points")
    # beside the loss: every step's gradient norm, each PNode's tokens per second, the blocks' update ratios
    assert await chart_points(page, "Gradient norm") >= first
    throughput = page.locator('[data-chart="Tokens per second per PNode"]:not([data-points="0"])')
    await throughput.wait_for()
    assert await throughput.get_attribute("data-series") == str(len(PNODES))
    # in the session's unit: a pipeline's every stage handles every token of the step, per second of its wall time
    per_pnode, steps = await session_figures(page, sid)
    for line in per_pnode:
        # the two fields are read one after the other while the session trains: a step recorded in between
        # is in the later one only
        compared = [(step, value) for step, value in zip(line["step"], line["value"]) if step <= steps["step"][-1]]
        assert compared, (line["name"], line["step"], steps["step"])
        for step, value in compared:
            at = steps["step"].index(step)
            assert value == pytest.approx(steps["tokens"][at] / steps["stepTimeS"][at]), (line["name"], step)
    ratios = page.locator('[data-chart="Update / weight ratio"]:not([data-points="0"])')
    await ratios.wait_for()
    assert await ratios.get_attribute("data-series") == "4"  # embed, b0, b1, norm_f
    await page.screenshot(path=str(ARTIFACTS / "session.png"), full_page=True)

    # dragging across the chart zooms: the range is asked of the server again, in full detail
    over = await page.locator('[data-chart="Train loss"] .u-over').bounding_box()
    y = over["y"] + over["height"] / 2
    await page.mouse.move(over["x"] + 5, y)
    await page.mouse.down()
    await page.mouse.move(over["x"] + over["width"] * 0.6, y, steps=5)
    await page.mouse.up()
    await page.locator("[data-zoom]").wait_for()
    await page.screenshot(path=str(ARTIFACTS / "session-zoomed.png"), full_page=True)
    await page.get_by_role("button", name="Reset zoom").click()
    await page.locator("[data-zoom]").wait_for(state="detached")

    # what the model writes appears by step as it trains, newest first, each text after its prompt
    sections = page.locator("[data-samples] [data-sample-step]")
    await wait_for(lambda: _at_least(sections, 2), 120, "two steps of samples on the session page")
    shown = [int(await sections.nth(i).get_attribute("data-sample-step")) for i in range(await sections.count())]
    assert shown == sorted(shown, reverse=True) and shown[0] % 10 == 0, shown
    text = await sections.first.locator("[data-sample]").first.inner_text()
    assert text.startswith(SAMPLE_PROMPT) and len(text) > len(SAMPLE_PROMPT), text
    await page.locator("[data-samples]").screenshot(path=str(ARTIFACTS / "session-samples.png"))

    # the topology: click a VNode in the graph and read its memory
    await page.click('[data-nav="topology"]')
    await page.wait_for_selector("[data-topology-graph] canvas")
    box = await page.locator("[data-topology-graph]").bounding_box()
    position = await page.evaluate(
        """() => document.querySelector('[data-topology-graph]')._cyreg.cy.getElementById('b0.attn').renderedPosition()"""
    )
    await page.mouse.click(box["x"] + position["x"], box["y"] + position["y"])
    panel = page.locator('[data-vnode-panel][data-vnode="b0.attn"]')
    await panel.wait_for()
    assert await panel.locator('[data-field="precision"]').inner_text() == "fp32"
    memory = await panel.locator('[data-table="vnode-memory"]').inner_text()
    assert "weights" in memory and "KiB" in memory, memory
    # where the time goes: each PNode's shares of its last steps, the links between them with the
    # bandwidth the PNodes measured, and that bandwidth on the edges that cross (the page polls)
    for name in PNODES:
        await page.wait_for_selector(f'[data-host="{name}"] [data-share="compute"]', timeout=60_000)
    shares = {k: float(await page.get_attribute(f'[data-host="{PNODES[0]}"] [data-share="{k}"]', "data-value"))
              for k in ("compute", "send", "wait")}
    assert 0 < shares["compute"] <= 1 and 0 <= shares["wait"] < 1 and shares["send"] >= 0, shares
    link = page.locator(f'[data-link="{PNODES[0]}->{PNODES[1]}"]')
    await link.wait_for()
    assert "bit/s" in await link.locator('[data-field="bandwidth"]').inner_text()
    labels = await page.evaluate(
        """() => document.querySelector('[data-topology-graph]')._cyreg.cy.edges('[?cross]').map(e => e.data('label'))"""
    )
    assert labels and all("/step · " in label and "bit/s" in label for label in labels), labels
    # the crossing edges' bytes before and after compression
    columns = await page.locator('[data-table="edges"] thead').inner_text()
    assert "fp32 bytes per step" in columns and "compression" in columns, columns
    await page.screenshot(path=str(ARTIFACTS / "topology.png"), full_page=True)

    # the replicated session: the bytes replicas send each other per step, and each replica is a
    # whole copy of the network on its own PNode
    await page.click('[data-nav="sessions"]')
    await page.locator(f'[data-session="{replicated}"] a').click()
    await page.wait_for_selector('[data-session-status][data-status="completed"]', timeout=120_000)
    assert await page.locator('[data-field="replicas"]').inner_text() == "2"
    await wait_for(lambda: chart_points(page, "Gradient reduction"), 30, "the replicas' sums on their chart")
    await page.screenshot(path=str(ARTIFACTS / "session-replicas.png"), full_page=True)
    await page.click('[data-nav="topology"]')
    await page.wait_for_selector("[data-topology-graph] canvas")
    box = await page.locator("[data-topology-graph]").bounding_box()
    hosts = {}
    for replica in ("0", "1"):
        await page.click(f'[data-replicas] [data-replica="{replica}"]')
        await page.wait_for_selector(f'[data-replica="{replica}"].active')
        position = await page.evaluate(
            """() => document.querySelector('[data-topology-graph]')._cyreg.cy.getElementById('b0.attn').renderedPosition()"""
        )
        await page.mouse.click(box["x"] + position["x"], box["y"] + position["y"])
        hosts[replica] = await panel.locator('[data-field="pnode"]').inner_text()
    assert sorted(hosts.values()) == PNODES, hosts
    await page.screenshot(path=str(ARTIFACTS / "topology-replica-1.png"), full_page=True)

    # the PNodes view: both PNodes live, each with the VNodes it hosts
    await page.click('[data-nav="pnodes"]')
    for name in PNODES:
        await page.wait_for_selector(f'[data-pnode="{name}"][data-state="live"]')
    hosted = await page.locator("[data-pnode] .hosted code").count()
    assert hosted >= 2, "the PNodes should list the VNodes they host"
    for name in PNODES:  # what each measured of itself, its time shares; its results recomputed by the other agree
        card = page.locator(f'[data-pnode="{name}"]')
        assert "bit/s" in await card.locator('[data-field="throughput"]').inner_text()
        await card.locator('[data-share="wait"]').wait_for()
        await card.locator('[data-field="checks-passed"]').wait_for()
        assert await card.locator('[data-field="checks-failed"]').inner_text() == "0"
    await page.screenshot(path=str(ARTIFACTS / "pnodes.png"), full_page=True)

    # pause from the UI: the status follows the session's real state
    await page.click('[data-nav="sessions"]')
    await page.locator(f'[data-session="{sid}"] a').click()
    status = page.locator("[data-session-status]")
    await page.wait_for_selector('[data-session-status][data-status="running"]')
    await page.click('[data-command="pause"]')
    await page.wait_for_selector('[data-session-status][data-status="paused"]', timeout=60_000)
    await page.screenshot(path=str(ARTIFACTS / "session-paused.png"), full_page=True)
    assert await status.inner_text() == "paused"


async def session_figures(page, sid: str) -> tuple[list[dict], dict]:
    """Each PNode's tokens/s and the session's steps, asked of the monitor as the page asks it (its key)."""
    query = ("query($id: ID!) { session(id: $id) { pnodeThroughput { name step value } "
             "steps(maxPoints: 1000) { step tokens stepTimeS } } }")  # a young session: every step
    body = await page.evaluate(
        """async ([query, id]) => (await fetch("graphql", { method: "POST", body: JSON.stringify({ query, variables: { id } }),
             headers: { "Content-Type": "application/json", Authorization: `Bearer ${localStorage.getItem("computeall.apiKey")}` } })).json()""",
        [query, sid])
    assert not body.get("errors"), body
    session = body["data"]["session"]
    return session["pnodeThroughput"], session["steps"]


async def _at_least(locator, n: int) -> bool:
    return await locator.count() >= n


async def _more(page, n: int) -> bool:
    return await chart_points(page, "Train loss") >= n
