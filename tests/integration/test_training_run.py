"""`computeall run`, as a user runs it: the same bits on 1 and on 3 PNodes, and the loss falls.

Both runs give every PNode the threads of one of three processes (`--processes-on-machine 3`): a
reduction split over another number of threads sums in another order, so only equal thread counts
promise equal bits."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from .cluster import stdlib_corpus

REPO = Path(__file__).resolve().parents[2]
NETWORK = REPO / "examples" / "networks" / "micro-gpt.yaml"
COMPUTEALL = Path(sys.executable).parent / "computeall"


def run(tmp_path: Path, pnodes: int, data: list[str]) -> list[dict]:
    metrics = tmp_path / f"m{pnodes}.jsonl"
    result = subprocess.run(
        [str(COMPUTEALL), "run", str(NETWORK), "--data", *data, "--steps", "20", "--pnodes", str(pnodes), "--stages", str(pnodes),
         "--processes-on-machine", "3", "--seed", "1", "--grad-clip", "0.5", "--metrics-out", str(metrics), "--no-progress",
         "--tensorboard", str(tmp_path / f"board{pnodes}"), "--data-dir", str(tmp_path / f"cluster{pnodes}")],
        capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "completed 20 steps" in result.stdout
    return [json.loads(line) for line in metrics.read_text().splitlines()]


def scalars(run_folder: Path) -> dict:
    """A TensorBoard run's scalars by tag, read back by TensorBoard's own reader."""
    accumulator = EventAccumulator(str(run_folder))
    accumulator.Reload()
    return {tag: accumulator.Scalars(tag) for tag in accumulator.Tags()["scalars"]}


def test_same_bits_on_one_and_three_pnodes_and_the_loss_falls(tmp_path):
    # the 3-PNode run reads a copy outside the dataset service's data roots: it is uploaded, with the same result
    copy = tmp_path / "corpus"
    copy.mkdir()
    for name in stdlib_corpus():
        shutil.copy(name, copy)
    one, three = run(tmp_path, 1, stdlib_corpus()), run(tmp_path, 3, [str(copy)])
    assert not list((tmp_path / "cluster1" / "dataset" / "uploads").iterdir()), "the stdlib is read where it is"
    uploaded = sorted(p.name for p in (tmp_path / "cluster3" / "dataset" / "uploads").glob("*/*/*"))  # user/digest/name
    assert uploaded == sorted(p.name for p in copy.iterdir())
    assert [r["step"] for r in one] == list(range(20)) == [r["step"] for r in three]
    for a, b in zip(one, three):
        assert a["loss"] == b["loss"], (a, b)
        assert a["tokens"] == b["tokens"] == 8 * 64
        assert {"ts", "step_time_s", "lr", "grad_norm", "clipped", "compute_s_by_pnode"} <= set(a)
        assert a["grad_norm"] == b["grad_norm"] and a["clipped"] == b["clipped"]
        assert len(a["compute_s_by_pnode"]) == 1 and len(b["compute_s_by_pnode"]) == 3
    assert all(a["ts"] < b["ts"] for a, b in zip(one, one[1:])), "each line says when its step was recorded"
    assert any(r["clipped"] for r in one), "--grad-clip 0.5 acts on some steps"
    board = scalars(next((tmp_path / "board1").iterdir()))  # written live, one run folder per session
    assert [s.step for s in board["train/loss"]] == list(range(1, 21)), "x: steps completed"
    assert [s.value for s in board["train/loss"]] == [float(np.float32(r["loss"])) for r in one]
    assert [s.value for s in board["train/lr"]] == [float(np.float32(r["lr"])) for r in one]
    first, last = one[0]["loss"], sum(r["loss"] for r in one[-5:]) / 5
    assert last < first - 0.3, (first, last)
