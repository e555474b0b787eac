"""The torch pipeline baseline trains the same numbers as the plain loop, over a delayed, shaped lab link."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.wanlab import LabUnavailable, WanLab  # noqa: E402
from bench.wanlab.netns import check_available  # noqa: E402

try:
    check_available()
except LabUnavailable as e:
    pytest.skip(f"WAN lab unavailable: {e}", allow_module_level=True)

from bench.wanlab.torch_peers import pipeline, plain  # noqa: E402


@pytest.mark.slow
def test_1f1b_over_a_city_link_matches_the_plain_loop() -> None:
    reference = plain(steps=2)["losses"]
    with WanLab("city", nodes=2, peers=True) as lab:
        first, last = pipeline(lab, "1f1b", steps=2, timeout=240)
    assert first["losses"] == [] and len(last["losses"]) == 2
    assert last["losses"] == pytest.approx(reference, rel=1e-5)  # tied-weight all-reduce kept the copies equal
