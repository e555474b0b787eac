"""The dashboard's own unit tests (vitest: smoothing, formatting, step series), run by pytest so
that `make test` covers them."""

from __future__ import annotations

import subprocess

import pytest

import declared

from .browser import WEB

pytestmark = pytest.mark.timeout(180)


def test_vitest_suite_passes():
    declared.program("npm", "Node.js 20 with npm (the dashboard is built with it)")
    if not (WEB / "node_modules").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=WEB, check=True, capture_output=True, timeout=170)
    result = subprocess.run(["npx", "vitest", "run"], cwd=WEB, capture_output=True, text=True, timeout=170)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
