"""The WAN lab for tests: `bench` (not part of the distribution) importable from the repository
root, and a test module skipped with the reason when this machine cannot build a lab (not root,
or network namespaces refused).

    from .wan import REPO, require_lab
    require_lab()
    from bench.wanlab import WanLab  # after the check: importing the lab needs nothing, using it does
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.wanlab import LabUnavailable  # noqa: E402
from bench.wanlab.netns import check_available  # noqa: E402


def require_lab() -> None:
    try:
        check_available()
    except LabUnavailable as e:
        pytest.skip(f"WAN lab unavailable: {e}", allow_module_level=True)
