"""Helpers of the end-to-end dashboard tests (no tests here): Debian's Chromium driven by
Playwright, the built dashboard, and the local user's API key."""

from __future__ import annotations

import subprocess
from pathlib import Path

from computeall.cli.supervisor import Supervisor

import declared

REPO = Path(__file__).resolve().parents[2]
WEB = REPO / "web"
ARTIFACTS = REPO / "test-artifacts" / "e2e"
# how long a page may take to show what a test waits for: a cold Chromium on this shared machine
# once took over 20 s to draw a session page
UI_TIMEOUT_MS = 30_000
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run",
]


def chromium_path() -> str:
    """The system Chromium (Playwright's own download is not used: machines without internet cannot
    fetch it); missing, the run fails and says how to install it."""
    return declared.program("chromium", "`make browser` (apt-get install chromium chromium-driver)", "chromium-browser")


def ensure_dashboard_built() -> None:
    """`make web` does this; a test run straight from pytest builds it too rather than skip, and
    builds again when a source is newer than the build (a stale build would test old pages)."""
    built = WEB / "dist" / "index.html"
    sources = [p for p in (WEB / "src").rglob("*") if p.is_file()] + [WEB / "index.html", WEB / "package.json"]
    if built.exists() and max(p.stat().st_mtime for p in sources if p.exists()) <= built.stat().st_mtime:
        return
    if not (WEB / "node_modules").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=WEB, check=True, capture_output=True)
    subprocess.run(["npm", "run", "build"], cwd=WEB, check=True, capture_output=True)


async def logged_in_page(browser, url: str, key: str):
    """A new page of `browser` (a Playwright Browser) on the dashboard at `url`, logged in with `key`."""
    page = await browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(UI_TIMEOUT_MS)
    await page.goto(url)
    await page.fill('input[name="apiKey"]', key)
    await page.click('button[type="submit"]')
    return page


def default_key(supervisor: Supervisor) -> str:
    """The local user's key, as `computeall up` prints it: from its file in the data dir."""
    return supervisor.credentials.local_api_key_file().read_text().strip()
