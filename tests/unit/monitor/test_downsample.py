"""Downsampling keeps the minimum and maximum of every bucket."""

from __future__ import annotations

import random

import pytest

from computeall.monitor import downsample
from computeall.monitor.db import Database
from computeall.monitor.projector import STEP_COLUMNS


@pytest.fixture
def db(tmp_path):
    database = Database(tmp_path / "m.duckdb", readers=1)
    yield database
    database.close()


def fill(db: Database, losses: list[float]) -> None:
    rows = []
    for i, loss in enumerate(losses):
        given = {"session_id": "s", "step": i, "ts": float(i), "loss": loss, "tokens": 10,
                 "step_time_s": 0.1 + (i % 3), "lr": 1e-3, "loss_scale": 1.0}
        rows.append(tuple(given.get(column, 0) for column in STEP_COLUMNS))  # every other metric 0
    db.transaction(lambda con: db.insert(con, "steps", STEP_COLUMNS, rows))


def test_every_bucket_keeps_its_min_and_max(db):
    rng = random.Random(0)
    losses = [rng.uniform(0, 10) for _ in range(10_000)]
    fill(db, losses)
    points = downsample.steps(db.con, "s", None, None, 200, "LOSS")
    assert len(points["step"]) <= 200
    kept = set(points["step"])
    buckets = 100
    for b in range(buckets):
        lo, hi = b * 100, (b + 1) * 100
        chunk = losses[lo:hi]
        assert lo + chunk.index(min(chunk)) in kept and lo + chunk.index(max(chunk)) in kept
    assert points["step"] == sorted(kept)


def test_small_ranges_come_back_whole_and_ranges_bound(db):
    fill(db, [1.0] * 50)
    assert downsample.steps(db.con, "s", 10, 14, 1000, "LOSS")["step"] == [10, 11, 12, 13, 14]
    assert len(downsample.steps(db.con, "s", None, None, 1000, "LOSS")["loss"]) == 50
    assert downsample.steps(db.con, "other", None, None, 1000, "LOSS")["step"] == []


def test_other_metrics_keep_their_own_extremes(db):
    fill(db, [1.0] * 3000)
    points = downsample.steps(db.con, "s", None, None, 10, "STEP_TIME")
    assert {round(t, 1) for t in points["step_time_s"]} == {0.1, 2.1}
