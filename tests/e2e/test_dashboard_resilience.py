"""The dashboard's empty and error states, and its recovery after the monitor restarts: a
monitor on a fixed port fed with real events (no training system needed)."""

from __future__ import annotations

import socket

import pytest

import declared
from integration.monitor_harness import MonitorProcess, event_items, publish, session_events
from computeall.cli.nats_server import EmbeddedNats
from computeall.protocol.events import EventEnvelope, StepCompleted

from .browser import ARTIFACTS, CHROMIUM_ARGS, UI_TIMEOUT_MS, chromium_path, ensure_dashboard_built

playwright_api = declared.module("playwright.async_api")

pytestmark = pytest.mark.timeout(120)

SID = "resilient"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def steps(first: int, n: int) -> list[EventEnvelope]:
    return [EventEnvelope(session_id=SID, actor="orchestrator",
                          payload=StepCompleted(step=i, loss=5.0 / (1 + i), tokens=1024, step_time_s=0.05, lr=1e-3))
            for i in range(first, first + n)]


async def points(page) -> int:
    return int(await page.get_attribute('[data-chart="Train loss"]', "data-points") or 0)


async def test_empty_state_and_recovery_after_a_monitor_restart(tmp_path):
    executable = chromium_path()
    ensure_dashboard_built()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with EmbeddedNats(tmp_path / "nats") as server:
        port = free_port()
        monitor = MonitorProcess(server, tmp_path / "monitor", "--port", str(port)).start()
        try:
            key = monitor.local_key
            async with playwright_api.async_playwright() as p:
                browser = await p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
                page = await browser.new_page(viewport={"width": 1400, "height": 900})
                page.set_default_timeout(UI_TIMEOUT_MS)
                await page.add_init_script(f"localStorage.setItem('computeall.apiKey', '{key}')")

                # no sessions yet: a message that says how to start one
                await page.goto(monitor.url)
                await page.get_by_text("No sessions yet").wait_for()
                await page.screenshot(path=str(ARTIFACTS / "sessions-empty.png"))

                # a session page opened before the monitor has the session (the link `computeall
                # train` prints) fills in once the session is projected
                await page.goto(f"{monitor.url}/#/sessions/{SID}")
                await page.get_by_text("Session not found").wait_for()
                await publish(server, event_items(session_events(SID, "local", 20)))
                await page.wait_for_function("() => Number(document.querySelector('[data-chart=\"Train loss\"]')?.dataset.points) >= 20")

                # the monitor goes away: the page says so instead of going blank
                assert monitor.stop() == 0
                await page.get_by_text("Monitor unreachable").wait_for()
                await page.screenshot(path=str(ARTIFACTS / "monitor-unreachable.png"))

                # steps completed while it was down, then it comes back on the same address
                await publish(server, event_items(steps(20, 30)))
                monitor.start()
                await page.get_by_text("Monitor unreachable").wait_for(state="hidden")
                await page.wait_for_function("() => Number(document.querySelector('[data-chart=\"Train loss\"]')?.dataset.points) >= 50")
                # and live updates flow again over the re-established websocket
                await publish(server, event_items(steps(50, 5)))
                await page.wait_for_function("() => Number(document.querySelector('[data-chart=\"Train loss\"]')?.dataset.points) >= 55")
                await browser.close()
        finally:
            if monitor.process:
                monitor.stop()
