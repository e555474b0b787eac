"""The torch pipeline baseline trains the same numbers as the plain loop, over a delayed, shaped lab link."""

from __future__ import annotations

import pytest

from .wan import require_lab

require_lab()

from bench.wanlab import WanLab  # noqa: E402
from bench.wanlab.torch_peers import pipeline, plain  # noqa: E402

pytestmark = pytest.mark.machines  # conftest: one at a time


@pytest.mark.slow
def test_1f1b_over_a_city_link_matches_the_plain_loop() -> None:
    reference = plain(steps=2)["losses"]
    with WanLab("city", nodes=2, peers=True) as lab:
        first, last = pipeline(lab, "1f1b", steps=2, timeout=240)
    assert first["losses"] == [] and len(last["losses"]) == 2
    assert last["losses"] == pytest.approx(reference, rel=1e-5)  # tied-weight all-reduce kept the copies equal
