"""Grad norm, clipping, each PNode's tokens per second and update ratios: projected and read back."""

from __future__ import annotations

import pytest

from computeall.monitor import downsample
from computeall.monitor.named_series import PNODE_THROUGHPUT, UPDATE_RATIOS, named_series
from computeall.protocol.events import StepCompleted, UpdateRatios

from .projected import apply


def step(i: int, grad_norm: float | None, clipped: bool, compute: dict[str, float]) -> StepCompleted:
    return StepCompleted(step=i, loss=3.0, tokens=1000, step_time_s=1.0, lr=1e-3, grad_norm=grad_norm, clipped=clipped,
                         compute_s_by_pnode=compute)


def test_steps_keep_grad_norm_and_clipped_and_each_pnode_its_throughput(db):
    apply(db, [
        step(0, None, False, {"p0": 0.5, "p1": 0.25}),  # a skipped step: no norm
        step(1, 2.5, True, {"p0": 0.5, "p1": 0.2}),
        step(1, 2.0, True, {"p0": 0.4, "p1": 0.2}),  # re-run after a rollback: replaces step 1
        step(2, 0.5, False, {"p0": 0.5, "p2": 0.1}),  # p2 replaced p1
    ])
    series = downsample.steps(db.con, "s", None, None, 1000, "GRAD_NORM")
    assert series["grad_norm"] == [None, 2.0, 0.5] and series["clipped"] == [False, True, False]
    # tokens per second of the step's wall time (1000 tokens in 1 s), whatever each PNode's compute time
    lines = {line["name"]: line for line in named_series(db.con, PNODE_THROUGHPUT, "s", None, None, 1000)}
    assert lines["p0"] == {"name": "p0", "step": [0, 1, 2], "value": [1000.0, 1000.0, 1000.0]}
    assert lines["p1"]["step"] == [0, 1] and lines["p1"]["value"] == [1000.0, 1000.0]
    assert lines["p2"] == {"name": "p2", "step": [2], "value": [1000.0]}


def test_update_ratios_one_line_per_group_thinned_at_one_stride(db):
    apply(db, [UpdateRatios(step=s, ratios={"b0": 1e-3 * (s + 1), "embed": 1e-4}) for s in range(0, 100, 10)])
    lines = named_series(db.con, UPDATE_RATIOS, "s", None, None, 1000)
    assert [line["name"] for line in lines] == ["b0", "embed"]
    assert lines[0]["step"] == list(range(0, 100, 10)) and lines[0]["value"][2] == pytest.approx(21e-3)
    thin = named_series(db.con, UPDATE_RATIOS, "s", None, None, 4)
    assert [line["step"] for line in thin] == [[0, 30, 60, 90]] * 2
    assert named_series(db.con, UPDATE_RATIOS, "s", 20, 40, 1000)[0]["step"] == [20, 30, 40]
    assert named_series(db.con, UPDATE_RATIOS, "other", None, None, 1000) == []
