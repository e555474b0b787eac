"""The PNodes page with 256 simulated PNodes (`computeall pnode --simulate`, in 8 processes) in real
headless Chromium: every PNode is a tile of the overview with the counts by state, one page of cards
at a time, the name filter finds one, the pages turn; a killed process's 32 PNodes turn lost.
How long the page takes to show them is measured in `bench/swarm.py`, not asserted here."""

from __future__ import annotations

import pytest

from computeall.cli.swarm import swarm_names, swarm_services

import declared
from integration.cluster import running_cluster, wait_for_pnodes
from .browser import ARTIFACTS, CHROMIUM_ARGS, chromium_path, default_key, ensure_dashboard_built, logged_in_page
from .test_dashboard import wait_for_monitor

playwright_api = declared.module("playwright.async_api")

pytestmark = pytest.mark.timeout(240)

PNODES, PROCESSES, PAGE_SIZE = 256, 8, 24


async def test_pnodes_page_with_256_pnodes(tmp_path):
    executable = chromium_path()
    ensure_dashboard_built()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    async with running_cluster(tmp_path, pnodes=0, with_monitor=True) as (client, supervisor):
        supervisor.start(swarm_services(supervisor.credentials, PNODES, PROCESSES))
        url = await wait_for_monitor(supervisor)
        await wait_for_pnodes(supervisor, swarm_names(PNODES), timeout=120)
        key = default_key(supervisor)
        async with playwright_api.async_playwright() as p:
            browser = await p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
            try:
                page = await logged_in_page(browser, url, key)
                await page.click('[data-nav="pnodes"]')
                await page.wait_for_selector(f'[data-pnodes="{PNODES}"]')
                await page.wait_for_selector(f'[data-count="live"]:text("{PNODES} live")')
                assert await page.locator(".tile.live").count() == PNODES
                assert await page.locator("[data-pnode]").count() == PAGE_SIZE, "one page of cards, not 256"
                assert "page 1 of 11" in await page.locator('[data-testid="pnode-page"]').inner_text()
                await page.screenshot(path=str(ARTIFACTS / "pnodes-256.png"), full_page=True)

                await page.get_by_role("button", name="next ›").click()
                await page.wait_for_selector('[data-pnode="sim-024"]')
                await page.fill('input[type="search"]', "sim-255")
                await page.wait_for_selector('[data-pnode="sim-255"]')
                assert await page.locator("[data-pnode]").count() == 1

                supervisor.services.pop("swarm-3").process.kill()  # its 32 PNodes fall silent, not restarted
                await page.fill('input[type="search"]', "")
                lost = PNODES // PROCESSES
                await page.wait_for_selector(f'[data-count="lost"]:text("{lost} lost")', timeout=60_000)
                await page.select_option('select[aria-label="filter PNodes by state"]', "lost")
                await page.wait_for_selector('[data-pnode="sim-003"][data-state="lost"]')
                assert await page.locator("[data-pnode]").count() == PAGE_SIZE
                await page.screenshot(path=str(ARTIFACTS / "pnodes-256-lost.png"), full_page=True)
            finally:
                await browser.close()
