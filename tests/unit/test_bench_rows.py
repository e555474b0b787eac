"""The benchmarks' shared row, its targets, the step time they quote, and the page run_all writes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # `bench` is no package of the distribution

from bench import run_all  # noqa: E402
from bench.common import Bench, at_least, at_most, exactly, read_rows  # noqa: E402
from bench.sessions import step_walls  # noqa: E402
from computeall.protocol.events import EventEnvelope, SessionStarted, StepCompleted  # noqa: E402


def bench(tmp_path: Path, monkeypatch) -> Bench:
    b = Bench("demo", "a demo")
    monkeypatch.setattr(sys, "argv", ["demo", "--json", str(tmp_path / "demo.json")])
    b.parse()
    return b


def test_a_row_is_its_value_over_its_anchor_and_says_whether_its_target_holds(tmp_path, monkeypatch):
    b = bench(tmp_path, monkeypatch)
    fast = b.row("ours", "tokens/s", 90.0, "plain torch", 100.0, at_least(0.9))
    slow = b.row("ours, slower", "tokens/s", 80.0, "plain torch", 100.0, at_least(0.9))
    small = b.row("memory", "bytes", 50.0, "without", 100.0, at_most(0.6))
    same = b.row("tokens", "equal", 32, "generated", 32, exactly(1.0))
    free = b.row("reported", "s", 3.0, "anchor", 2.0)
    assert (fast.ratio, fast.target, fast.holds) == (0.9, ">= 0.9", True)
    assert (slow.ratio, slow.holds) == (0.8, False)
    assert (small.holds, same.holds, free.target, free.holds) == (True, True, None, None)
    assert b.finish() == 1, "a missed target fails the bench"
    assert read_rows(tmp_path / "demo.json") == b.rows


def test_a_bench_whose_targets_hold_exits_0(tmp_path, monkeypatch):
    b = bench(tmp_path, monkeypatch)
    b.row("ours", "s", 1.0, "theirs", 2.0, at_most(1.0))
    assert b.finish() == 0


def test_nothing_over_nothing_is_one_and_something_over_nothing_misses(tmp_path, monkeypatch):
    b = bench(tmp_path, monkeypatch)
    assert b.row("never caught, as predicted", "steps", 0, "prediction", 0, exactly(1.0)).holds
    assert b.row("caught, predicted never", "steps", 3, "prediction", 0, exactly(1.0)).holds is False


def test_a_step_is_the_wall_time_between_recorded_steps():
    def recorded(ts: float, payload) -> tuple[int, EventEnvelope]:
        return 0, EventEnvelope(session_id="s", actor="orchestrator", ts=ts, payload=payload)

    def step(n: int, ts: float, reported: float = 0.1):
        return recorded(ts, StepCompleted(step=n, loss=1.0, tokens=8, step_time_s=reported, lr=1e-3))

    events = [recorded(9.0, SessionStarted()), step(0, 10.0), step(1, 10.5), recorded(10.7, SessionStarted()), step(2, 11.25)]
    assert step_walls(events) == [0.5, 0.75]  # not the 0.1 s each step reports of itself


def test_the_page_lists_every_row_and_what_failed(tmp_path, monkeypatch):
    b = bench(tmp_path, monkeypatch)
    b.row("ours", "tokens/s", 80.0, "plain torch", 100.0, at_least(0.9))
    page = run_all.page([run_all.Outcome("demo", 60.0, b.rows, None), run_all.Outcome("broken", 5.0, [], "exited 2")],
                        quick=True)
    assert "| demo | ours | 80 tokens/s | plain torch | 100 | 0.800 | >= 0.9 | **no** |" in page
    assert "| broken | 0.1 min | exited 2 |" in page and "| demo | 1.0 min | 1 target(s) missed |" in page
    assert "cores" in page and "--quick" in page


@pytest.mark.parametrize("name", run_all.benchmarks())
def test_every_benchmark_is_a_module_with_the_shared_flags(name):
    source = (REPO / "bench" / f"{name}.py").read_text()
    assert f'Bench("{name}"' in source, f"bench/{name}.py does not make its rows with bench.common.Bench"
    assert "sys.path" not in source and "tests." not in source
